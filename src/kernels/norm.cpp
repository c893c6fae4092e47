#include "kernels/norm.h"

#include <cmath>

namespace jiffy::kernels {

namespace {
#include "kernels/instnorm_impl.h"
}  // namespace

void instnorm_planes_scalar(const float* x, float* y, int64_t batch, int64_t channels, int64_t n, const float* scale,
                            const float* bias, float eps) {
    instnorm_planes_impl(x, y, batch, channels, n, scale, bias, eps);
}

void softmax_rows_scalar(const float* x, float* y, int64_t rows, int64_t n, float scale) {
    for (int64_t r = 0; r < rows; ++r, x += n, y += n) {
        float mx = x[0];
        for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
        mx *= scale;
        float s[4] = {0, 0, 0, 0};
        for (int64_t i = 0; i < n; ++i) {
            const float e = std::exp(x[i] * scale - mx);
            y[i] = e;
            s[i & 3] += e;
        }
        const float inv = 1.0f / ((s[0] + s[1]) + (s[2] + s[3]));
        for (int64_t i = 0; i < n; ++i) y[i] *= inv;
    }
}

void layernorm_rows_scalar(const float* x0, float* y, int64_t rows, int64_t n, const float* scale,
                           const float* bias, float eps, const float* res) {
    for (int64_t r = 0; r < rows; ++r, x0 += n, y += n) {
        const float* x = x0;
        if (res) {  // y = x + res first (the fused residual Add), then normalize y in place
            for (int64_t i = 0; i < n; ++i) y[i] = x[i] + res[i];
            res += n;
            x = y;
        }
        float s[4] = {0, 0, 0, 0};
        for (int64_t i = 0; i < n; ++i) s[i & 3] += x[i];
        const float mean = ((s[0] + s[1]) + (s[2] + s[3])) / float(n);
        float q[4] = {0, 0, 0, 0};
        for (int64_t i = 0; i < n; ++i) q[i & 3] += (x[i] - mean) * (x[i] - mean);
        const float inv = 1.0f / std::sqrt(((q[0] + q[1]) + (q[2] + q[3])) / float(n) + eps);
        for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * scale[i] + (bias ? bias[i] : 0.0f);
    }
}

SoftmaxRowsFn softmax_rows_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return softmax_rows_avx512;
    if (isa == Isa::kAvx2) return softmax_rows_avx2;
#endif
    return softmax_rows_scalar;
}

InstNormPlanesFn instnorm_planes_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return instnorm_planes_avx512;
    if (isa == Isa::kAvx2) return instnorm_planes_avx2;
#endif
    return instnorm_planes_scalar;
}

LayerNormRowsFn layernorm_rows_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return layernorm_rows_avx512;
    if (isa == Isa::kAvx2) return layernorm_rows_avx2;
#endif
    return layernorm_rows_scalar;
}

}  // namespace jiffy::kernels
