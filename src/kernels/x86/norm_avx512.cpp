// Softmax / LayerNorm rows, AVX-512: 16 floats per step, masked tail.
#include <cmath>

#include "kernels/activation.h"
#include "kernels/norm.h"

namespace jiffy::kernels {

namespace {
inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); }
}  // namespace

void softmax_rows_avx512(const float* x, float* y, int64_t rows, int64_t n, float scale) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t r = 0; r < rows; ++r, x += n, y += n) {
        __m512 mx = ninf;
        for (int64_t i = 0; i < n; i += 16) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, tail_mask(n - i), x + i));
        const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx) * scale);
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 32 <= n; i += 32) {
            const __m512 e0 = exp_v512(_mm512_fmsub_ps(_mm512_loadu_ps(x + i), sc, m));
            const __m512 e1 = exp_v512(_mm512_fmsub_ps(_mm512_loadu_ps(x + i + 16), sc, m));
            _mm512_storeu_ps(y + i, e0);
            _mm512_storeu_ps(y + i + 16, e1);
            s0 = _mm512_add_ps(s0, e0);
            s1 = _mm512_add_ps(s1, e1);
        }
        for (; i < n; i += 16) {
            const __mmask16 k = tail_mask(n - i);
            const __m512 e = exp_v512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, x + i), sc, m));
            _mm512_mask_storeu_ps(y + i, k, e);
            s0 = _mm512_mask_add_ps(s0, k, s0, e);
        }
        const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)));
        for (i = 0; i < n; i += 16) {
            const __mmask16 k = tail_mask(n - i);
            _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), inv));
        }
    }
}

void layernorm_rows_avx512(const float* x0, float* y, int64_t rows, int64_t n, const float* scale,
                           const float* bias, float eps, const float* res) {
    for (int64_t r = 0; r < rows; ++r, x0 += n, y += n) {
        const float* x = x0;
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
        int64_t i = 0;
        if (res) {  // y = x + res first (the fused residual Add), then normalize y in place
            for (; i < n; i += 16) {
                const __mmask16 k = tail_mask(n - i);
                const __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, res + i));
                _mm512_mask_storeu_ps(y + i, k, v);
                s0 = _mm512_add_ps(s0, v);
            }
            res += n;
            x = y;
        }
        for (; i + 32 <= n; i += 32) {
            s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
            s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + i + 16));
        }
        for (; i < n; i += 16) s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
        const float mean = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) / float(n);
        const __m512 m = _mm512_set1_ps(mean);
        s0 = _mm512_setzero_ps();
        s1 = _mm512_setzero_ps();
        for (i = 0; i + 32 <= n; i += 32) {
            const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + i), m);
            const __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), m);
            s0 = _mm512_fmadd_ps(d0, d0, s0);
            s1 = _mm512_fmadd_ps(d1, d1, s1);
        }
        for (; i < n; i += 16) {
            const __mmask16 k = tail_mask(n - i);
            const __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + i), m);
            s0 = _mm512_fmadd_ps(d, d, s0);
        }
        const float var = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) / float(n);
        const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(var + eps));
        for (i = 0; i < n; i += 16) {
            const __mmask16 k = tail_mask(n - i);
            const __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), m), inv);
            const __m512 b = bias ? _mm512_maskz_loadu_ps(k, bias + i) : _mm512_setzero_ps();
            _mm512_mask_storeu_ps(y + i, k, _mm512_fmadd_ps(d, _mm512_maskz_loadu_ps(k, scale + i), b));
        }
    }
}

}  // namespace jiffy::kernels
