// Entry points of ops/linalg.cpp that other ops reuse.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/activation.h"
#include "ops/op.h"

namespace jiffy {

class ThreadPool;

// The float32 Gemm kernel for Y[M, N] = act(A[M, K] . W^T + bias) with a constant W given as
// N rows of K floats (packed here: the GEMV layout when M = 1, packed-B GEMM otherwise), split
// across `pool` in `chunks` parts as Gemm does. Inputs at run: in[0] = A (M x K row-major),
// in[2] = bias (N floats) when has_bias; in[1] is not read. describe() is `label` + the Gemm's.
// serpentine: keep the GEMV's serpentine order where its size asks for it (serpentine_pays).
std::unique_ptr<Kernel> make_gemm_f32_nk_kernel(int64_t M, int64_t K, int64_t N, const float* w_nk, bool has_bias,
                                                const kernels::Activation& act, ThreadPool* pool, int chunks,
                                                const std::string& label, bool serpentine);
// Whether the serpentine GEMV order (kernels/gemm.h) pays for a GEMV of own_bytes of weights in
// the graph being compiled: the rest of the graph's constants total at most 256 KiB.
bool serpentine_pays(const OpContext& ctx, int64_t own_bytes);

}  // namespace jiffy
