// Softmax / LayerNorm rows, AVX-512: 16 floats per step, masked tail. Short rows (softmax n <= 64,
// LayerNorm n <= 256) are held in registers, several rows at a time: one load and one store per
// element, and the rows' reduction/exp latency chains overlap (attention's 32-wide score rows and
// 128-wide LayerNorm rows were bound by one row's dependency chain: 128 x 32 softmax 2.97 -> 1.82
// us, 32 x 128 LayerNorm 1.32 -> 1.11 us CPU time, docs/benchmarks.md "h-small"). Softmax's
// exponent s x - s max is <= 0 (up to the rounding of s max: exp there ~1, as it should be), so
// it takes exp_nonpos_v512 (13 uops, ~4e-7 relative) instead of exp_v512 (16): the uop-bound
// 8 x 64 x 64 attention softmax 8.4 -> 6.3 us.
#include <cmath>

#include "kernels/activation.h"
#include "kernels/norm.h"

namespace jiffy::kernels {

namespace {
inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); }

// R rows of n (16 (V - 1) < n <= 16 V) floats, all in registers.
template <int V, int R>
inline void softmax_regs(const float* x, float* y, int64_t n, float scale) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const __m512 sc = _mm512_set1_ps(scale);
    const __mmask16 lm = tail_mask(n - 16 * (V - 1));
    __m512 v[R][V], m[R], s[R];
    for (int r = 0; r < R; ++r) {
        for (int i = 0; i < V - 1; ++i) v[r][i] = _mm512_loadu_ps(x + r * n + 16 * i);
        v[r][V - 1] = _mm512_mask_loadu_ps(ninf, lm, x + r * n + 16 * (V - 1));
    }
    for (int r = 0; r < R; ++r) {
        __m512 mx = v[r][0];
        for (int i = 1; i < V; ++i) mx = _mm512_max_ps(mx, v[r][i]);
        m[r] = _mm512_set1_ps(_mm512_reduce_max_ps(mx) * scale);
    }
    for (int r = 0; r < R; ++r) {
        for (int i = 0; i < V; ++i) v[r][i] = exp_nonpos_v512(_mm512_fmsub_ps(v[r][i], sc, m[r]));
        v[r][V - 1] = _mm512_maskz_mov_ps(lm, v[r][V - 1]);
        s[r] = v[r][0];
        for (int i = 1; i < V; ++i) s[r] = _mm512_add_ps(s[r], v[r][i]);
    }
    for (int r = 0; r < R; ++r) {
        const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(s[r]));
        for (int i = 0; i < V - 1; ++i) _mm512_storeu_ps(y + r * n + 16 * i, _mm512_mul_ps(v[r][i], inv));
        _mm512_mask_storeu_ps(y + r * n + 16 * (V - 1), lm, _mm512_mul_ps(v[r][V - 1], inv));
    }
}

// Rows of n = 2, 4 or 8 floats, 16 / n rows per vector: the row max and sum are butterflies over
// lane groups (lane ^ 1, ^ 2, ^ 4), so every lane does useful work (one row per 16-lane vector
// used 2 of 16 lanes: the face detector's 4420 x 2 scores 38 -> ~4 us).
template <int N>
inline __m512 softmax_packed_vec(__m512 v, __m512 sc) {
    static_assert(N == 2 || N == 4 || N == 8);
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512 mx = v;
    for (int s = 1; s < N; s *= 2)
        mx = _mm512_max_ps(mx, _mm512_permutexvar_ps(_mm512_xor_si512(lane, _mm512_set1_epi32(s)), mx));
    const __m512 e = exp_nonpos_v512(_mm512_fmsub_ps(v, sc, _mm512_mul_ps(mx, sc)));
    __m512 sum = e;
    for (int s = 1; s < N; s *= 2)
        sum = _mm512_add_ps(sum, _mm512_permutexvar_ps(_mm512_xor_si512(lane, _mm512_set1_epi32(s)), sum));
    return _mm512_mul_ps(e, _mm512_div_ps(_mm512_set1_ps(1.0f), sum));
}

template <int N>
void softmax_packed(const float* x, float* y, int64_t rows, float scale) {
    const __m512 sc = _mm512_set1_ps(scale);
    const int64_t total = rows * N;
    int64_t i = 0;
    for (; i + 64 <= total; i += 64) {
        const __m512 v0 = softmax_packed_vec<N>(_mm512_loadu_ps(x + i), sc);
        const __m512 v1 = softmax_packed_vec<N>(_mm512_loadu_ps(x + i + 16), sc);
        const __m512 v2 = softmax_packed_vec<N>(_mm512_loadu_ps(x + i + 32), sc);
        const __m512 v3 = softmax_packed_vec<N>(_mm512_loadu_ps(x + i + 48), sc);
        _mm512_storeu_ps(y + i, v0);
        _mm512_storeu_ps(y + i + 16, v1);
        _mm512_storeu_ps(y + i + 32, v2);
        _mm512_storeu_ps(y + i + 48, v3);
    }
    for (; i < total; i += 16) {  // whole rows: total and i are multiples of N
        const __mmask16 k = tail_mask(total - i);
        _mm512_mask_storeu_ps(y + i, k, softmax_packed_vec<N>(_mm512_maskz_loadu_ps(k, x + i), sc));
    }
}

template <int V>
void softmax_short(const float* x, float* y, int64_t rows, int64_t n, float scale) {
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) softmax_regs<V, 4>(x + r * n, y + r * n, n, scale);
    for (; r < rows; ++r) softmax_regs<V, 1>(x + r * n, y + r * n, n, scale);
}

// R rows of n (16 (V - 1) < n <= 16 V) floats in registers; see layernorm_rows_avx512.
template <int V, int R>
inline void layernorm_regs(const float* x, float* y, int64_t n, const float* scale, const float* bias, float eps,
                           const float* res) {
    const __mmask16 lm = tail_mask(n - 16 * (V - 1));
    const __m512 z = _mm512_setzero_ps();
    __m512 v[R][V], m[R], inv[R];
    for (int r = 0; r < R; ++r)
        for (int i = 0; i < V; ++i) {
            const __mmask16 k = i == V - 1 ? lm : __mmask16(0xffff);
            v[r][i] = _mm512_maskz_loadu_ps(k, x + r * n + 16 * i);
            if (res) v[r][i] = _mm512_add_ps(v[r][i], _mm512_maskz_loadu_ps(k, res + r * n + 16 * i));
        }
    for (int r = 0; r < R; ++r) {
        __m512 s0 = v[r][0], s1 = V > 1 ? v[r][1] : z;
        for (int i = 2; i < V; i += 2) {
            s0 = _mm512_add_ps(s0, v[r][i]);
            if (i + 1 < V) s1 = _mm512_add_ps(s1, v[r][i + 1]);
        }
        m[r] = _mm512_set1_ps(_mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) / float(n));
    }
    for (int r = 0; r < R; ++r) {
        __m512 q0 = z, q1 = z;
        for (int i = 0; i < V; ++i) {
            v[r][i] = _mm512_sub_ps(v[r][i], m[r]);
            if (i == V - 1) v[r][i] = _mm512_maskz_mov_ps(lm, v[r][i]);
            if (i & 1)
                q1 = _mm512_fmadd_ps(v[r][i], v[r][i], q1);
            else
                q0 = _mm512_fmadd_ps(v[r][i], v[r][i], q0);
        }
        const float var = _mm512_reduce_add_ps(_mm512_add_ps(q0, q1)) / float(n);
        inv[r] = _mm512_set1_ps(1.0f / std::sqrt(var + eps));
    }
    for (int i = 0; i < V; ++i) {
        const __mmask16 k = i == V - 1 ? lm : __mmask16(0xffff);
        const __m512 sc = _mm512_maskz_loadu_ps(k, scale + 16 * i);
        const __m512 b = bias ? _mm512_maskz_loadu_ps(k, bias + 16 * i) : z;
        for (int r = 0; r < R; ++r)
            _mm512_mask_storeu_ps(y + r * n + 16 * i, k, _mm512_fmadd_ps(_mm512_mul_ps(v[r][i], inv[r]), sc, b));
    }
}

template <int V>
void layernorm_short(const float* x, float* y, int64_t rows, int64_t n, const float* scale, const float* bias,
                     float eps, const float* res) {
    constexpr int R = V <= 8 ? 2 : 1;
    int64_t r = 0;
    for (; r + R <= rows; r += R)
        layernorm_regs<V, R>(x + r * n, y + r * n, n, scale, bias, eps, res ? res + r * n : nullptr);
    for (; r < rows; ++r) layernorm_regs<V, 1>(x + r * n, y + r * n, n, scale, bias, eps, res ? res + r * n : nullptr);
}

}  // namespace

void softmax_rows_avx512(const float* x, float* y, int64_t rows, int64_t n, float scale) {
    if (rows >= 16 && (n == 2 || n == 4 || n == 8)) {
        if (n == 2) return softmax_packed<2>(x, y, rows, scale);
        if (n == 4) return softmax_packed<4>(x, y, rows, scale);
        return softmax_packed<8>(x, y, rows, scale);
    }
    switch ((n + 15) / 16) {
        case 1: return softmax_short<1>(x, y, rows, n, scale);
        case 2: return softmax_short<2>(x, y, rows, n, scale);
        case 3: return softmax_short<3>(x, y, rows, n, scale);
        case 4: return softmax_short<4>(x, y, rows, n, scale);
        default: break;
    }
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t r = 0; r < rows; ++r, x += n, y += n) {
        __m512 mx = ninf;
        for (int64_t i = 0; i < n; i += 16) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, tail_mask(n - i), x + i));
        const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx) * scale);
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 32 <= n; i += 32) {
            const __m512 e0 = exp_nonpos_v512(_mm512_fmsub_ps(_mm512_loadu_ps(x + i), sc, m));
            const __m512 e1 = exp_nonpos_v512(_mm512_fmsub_ps(_mm512_loadu_ps(x + i + 16), sc, m));
            _mm512_storeu_ps(y + i, e0);
            _mm512_storeu_ps(y + i + 16, e1);
            s0 = _mm512_add_ps(s0, e0);
            s1 = _mm512_add_ps(s1, e1);
        }
        for (; i < n; i += 16) {
            const __mmask16 k = tail_mask(n - i);
            const __m512 e = exp_nonpos_v512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, x + i), sc, m));
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
    switch ((n + 15) / 16) {
        case 1: return layernorm_short<1>(x0, y, rows, n, scale, bias, eps, res);
        case 2: return layernorm_short<2>(x0, y, rows, n, scale, bias, eps, res);
        case 3: return layernorm_short<3>(x0, y, rows, n, scale, bias, eps, res);
        case 4: return layernorm_short<4>(x0, y, rows, n, scale, bias, eps, res);
        case 5: return layernorm_short<5>(x0, y, rows, n, scale, bias, eps, res);
        case 6: return layernorm_short<6>(x0, y, rows, n, scale, bias, eps, res);
        case 7: return layernorm_short<7>(x0, y, rows, n, scale, bias, eps, res);
        case 8: return layernorm_short<8>(x0, y, rows, n, scale, bias, eps, res);
        case 9: return layernorm_short<9>(x0, y, rows, n, scale, bias, eps, res);
        case 10: return layernorm_short<10>(x0, y, rows, n, scale, bias, eps, res);
        case 11: return layernorm_short<11>(x0, y, rows, n, scale, bias, eps, res);
        case 12: return layernorm_short<12>(x0, y, rows, n, scale, bias, eps, res);
        case 13: return layernorm_short<13>(x0, y, rows, n, scale, bias, eps, res);
        case 14: return layernorm_short<14>(x0, y, rows, n, scale, bias, eps, res);
        case 15: return layernorm_short<15>(x0, y, rows, n, scale, bias, eps, res);
        case 16: return layernorm_short<16>(x0, y, rows, n, scale, bias, eps, res);
        default: break;
    }
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

namespace {
#include "kernels/instnorm_impl.h"
}  // namespace

void instnorm_planes_avx512(const float* x, float* y, int64_t batch, int64_t channels, int64_t n, const float* scale,
                          const float* bias, float eps) {
    instnorm_planes_impl(x, y, batch, channels, n, scale, bias, eps);
}

}  // namespace jiffy::kernels
