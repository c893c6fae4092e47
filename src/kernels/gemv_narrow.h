// GEMV with few output columns (M = 1, N <= 16): y[N] = act(a[K] . B + bias). The weights are
// stored column by column (N rows of K floats, K padded to a multiple of 16 with zeros), so each
// output is one dot product over contiguous memory: a block of 16 k's is one vector load of `a`
// and N weight loads feeding N independent FMA chains, and one transpose-add tree turns the N
// accumulators into a vector of N sums for the bias and activation.
// Why (measured, docs/benchmarks.md): the column-panel GEMV (gemm.h) gives a 10-column layer one
// masked vector per k: 128 FMA + 256 loads for K = 128 over 16-float rows (60% padding read),
// where the dot form does 80 FMA + 88 loads over exactly N x K floats.
//   f32_gemv_narrow__avx512 (x86/gemv_narrow_avx512.cpp); other ISAs keep the panel GEMV.
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/activation.h"
#include "kernels/cpu.h"

namespace jiffy::kernels {

constexpr int64_t kGemvNarrowMaxN = 16;

struct PackedGemvNarrow {
    int64_t K = 0, N = 0, Kp = 0;  // Kp: K rounded up to 16 (the row stride)
    std::shared_ptr<float> data;   // N rows of Kp floats, 64-byte aligned
};

// B is K x N row-major (ldb = row stride) or, with trans_b, N x K row-major; scaled by `scale`.
// 1 <= N <= kGemvNarrowMaxN.
PackedGemvNarrow pack_gemv_narrow(const float* B, int64_t K, int64_t N, int64_t ldb, bool trans_b,
                                  float scale = 1.0f);
using SgemvNarrowFn = void (*)(const float* a, const PackedGemvNarrow& B, const float* bias, float* y,
                               const Activation& act);
// The ISA's kernel, or nullptr where the panel GEMV is kept (everything but AVX-512).
SgemvNarrowFn sgemv_narrow_for(Isa isa);
// Plain loop over the packed layout (the tests' oracle).
void sgemv_narrow_scalar(const float* a, const PackedGemvNarrow& B, const float* bias, float* y, const Activation& act);
void sgemv_narrow_avx512(const float* a, const PackedGemvNarrow& B, const float* bias, float* y,
                         const Activation& act);  // x86-64 only

}  // namespace jiffy::kernels
