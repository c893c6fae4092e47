// Row-wise normalizations over contiguous float rows (the Softmax / LayerNormalization fast paths
// of the transformer layers):
//   softmax_rows_for(isa)(x, y, rows, n, s)      y = exp(s*x - max(s*x)) / sum, per row (s > 0:
//                                                the fused attention scale; 1 for plain Softmax)
//   layernorm_rows_for(isa)(x, y, rows, n, scale, bias, eps, res)
//       t = x (+ res when res is not null: the fused residual Add, t is stored in y first),
//       y = (t - mean) / sqrt(var + eps) * scale + bias (bias may be null)
// float accumulation with 8-16 independent partial sums, two passes for the variance (mean first),
// the exp of activation.h.
//   instnorm_planes_for(isa)(x, y, batch, channels, n, scale, bias, eps)
//       InstanceNormalization over batch x channels planes of n floats: per plane mean and
//       variance (16 float partial sums folded into doubles, kernels/instnorm_impl.h), then
//       y = (x - mean) * scale[c] / sqrt(var + eps) + bias[c]. x may equal y. Scalar forms (the portable path and the tests' ISA baseline) in
// norm.cpp, AVX2 / AVX-512 in x86/norm_*.cpp. x and res may equal y.
#pragma once
#include <cstdint>

#include "kernels/cpu.h"

namespace jiffy::kernels {

using SoftmaxRowsFn = void (*)(const float* x, float* y, int64_t rows, int64_t n, float scale);
using LayerNormRowsFn = void (*)(const float* x, float* y, int64_t rows, int64_t n, const float* scale,
                                 const float* bias, float eps, const float* res);
using InstNormPlanesFn = void (*)(const float* x, float* y, int64_t batch, int64_t channels, int64_t n,
                                  const float* scale, const float* bias, float eps);
InstNormPlanesFn instnorm_planes_for(Isa isa);
void instnorm_planes_scalar(const float*, float*, int64_t, int64_t, int64_t, const float*, const float*, float);
void instnorm_planes_avx2(const float*, float*, int64_t, int64_t, int64_t, const float*, const float*, float);
void instnorm_planes_avx512(const float*, float*, int64_t, int64_t, int64_t, const float*, const float*, float);
SoftmaxRowsFn softmax_rows_for(Isa isa);
LayerNormRowsFn layernorm_rows_for(Isa isa);

void softmax_rows_scalar(const float*, float*, int64_t, int64_t, float);
void softmax_rows_avx2(const float*, float*, int64_t, int64_t, float);
void softmax_rows_avx512(const float*, float*, int64_t, int64_t, float);
void layernorm_rows_scalar(const float*, float*, int64_t, int64_t, const float*, const float*, float, const float*);
void layernorm_rows_avx2(const float*, float*, int64_t, int64_t, const float*, const float*, float, const float*);
void layernorm_rows_avx512(const float*, float*, int64_t, int64_t, const float*, const float*, float, const float*);

}  // namespace jiffy::kernels
