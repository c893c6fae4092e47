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
// ctx: the graph being compiled (whether the GEMV's serpentine order and fast weights pay,
// choose_gemv_modes).
std::unique_ptr<Kernel> make_gemm_f32_nk_kernel(int64_t M, int64_t K, int64_t N, const float* w_nk, bool has_bias,
                                                const kernels::Activation& act, ThreadPool* pool, int chunks,
                                                const std::string& label, const OpContext& ctx);

}  // namespace jiffy
