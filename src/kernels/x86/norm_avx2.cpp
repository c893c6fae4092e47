// Softmax / LayerNorm rows, AVX2: 8 floats per step, scalar tail.
#include <cmath>

#include "kernels/activation.h"
#include "kernels/norm.h"

namespace jiffy::kernels {

namespace {
inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
}  // namespace

void softmax_rows_avx2(const float* x, float* y, int64_t rows, int64_t n, float scale) {
    const __m256 sc = _mm256_set1_ps(scale);
    for (int64_t r = 0; r < rows; ++r, x += n, y += n) {
        __m256 mv = _mm256_set1_ps(-INFINITY);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
        float mx = hmax(mv);
        for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
        mx *= scale;
        const __m256 m = _mm256_set1_ps(mx);
        __m256 s0 = _mm256_setzero_ps();
        for (i = 0; i + 8 <= n; i += 8) {
            const __m256 e = exp_v256(_mm256_fmsub_ps(_mm256_loadu_ps(x + i), sc, m));
            _mm256_storeu_ps(y + i, e);
            s0 = _mm256_add_ps(s0, e);
        }
        float sum = hsum(s0);
        for (; i < n; ++i) sum += (y[i] = std::exp(x[i] * scale - mx));
        const float invs = 1.0f / sum;
        const __m256 inv = _mm256_set1_ps(invs);
        for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
        for (; i < n; ++i) y[i] *= invs;
    }
}

void layernorm_rows_avx2(const float* x0, float* y, int64_t rows, int64_t n, const float* scale,
                         const float* bias, float eps, const float* res) {
    for (int64_t r = 0; r < rows; ++r, x0 += n, y += n) {
        const float* x = x0;
        if (res) {  // y = x + res first (the fused residual Add), then normalize y in place
            int64_t j = 0;
            for (; j + 8 <= n; j += 8)
                _mm256_storeu_ps(y + j, _mm256_add_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(res + j)));
            for (; j < n; ++j) y[j] = x[j] + res[j];
            res += n;
            x = y;
        }
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
            s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + i + 8));
        }
        for (; i + 8 <= n; i += 8) s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
        float sum = hsum(_mm256_add_ps(s0, s1));
        for (; i < n; ++i) sum += x[i];
        const float mean = sum / float(n);
        const __m256 m = _mm256_set1_ps(mean);
        s0 = _mm256_setzero_ps();
        for (i = 0; i + 8 <= n; i += 8) {
            const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), m);
            s0 = _mm256_fmadd_ps(d, d, s0);
        }
        float sq = hsum(s0);
        for (; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
        const float invs = 1.0f / std::sqrt(sq / float(n) + eps);
        const __m256 inv = _mm256_set1_ps(invs);
        for (i = 0; i + 8 <= n; i += 8) {
            const __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), m), inv);
            const __m256 b = bias ? _mm256_loadu_ps(bias + i) : _mm256_setzero_ps();
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(d, _mm256_loadu_ps(scale + i), b));
        }
        for (; i < n; ++i) y[i] = (x[i] - mean) * invs * scale[i] + (bias ? bias[i] : 0.0f);
    }
}

namespace {
#include "kernels/instnorm_impl.h"
}  // namespace

void instnorm_planes_avx2(const float* x, float* y, int64_t batch, int64_t channels, int64_t n, const float* scale,
                          const float* bias, float eps) {
    instnorm_planes_impl(x, y, batch, channels, n, scale, bias, eps);
}

}  // namespace jiffy::kernels
