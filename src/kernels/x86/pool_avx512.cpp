// Pool rows compiled for AVX512 (the loops in kernels/pool_impl.h, auto-vectorized).
#include <algorithm>
#include <cmath>
#include <immintrin.h>

#include "kernels/pool.h"
#include "kernels/resize.h"

namespace jiffy::kernels {
namespace {
#include "kernels/pool_impl.h"
}  // namespace

void pool2d_avx512(const Pool2d& p, const float* x, float* y, int64_t planes, float* scratch) {
    pool2d_run(p, x, y, planes, scratch);
}

// pool_nhwc_run with each output pixel's channels in registers, up to 4 vectors at a time (the
// last one masked): no scalar tail for channel counts that are not a multiple of 16 (BlazeFace's
// 28 / 42, where the auto-vectorized loop spent most of its time in the tail). Per output row and
// channel block, the pixels of the row in one loop (masks and offsets set once per block).
template <bool MAX, int NV>
static void pool_nhwc_row(const PoolNhwc& p, const float* xr, float* y, int64_t nh, float inv_h, int64_t c0,
                          __mmask16 last) {
    const int64_t C = p.C, hs = p.dh * p.W * C, ws = p.dw * C;
    for (int64_t ow = 0; ow < p.OW; ++ow) {
        const float* x0 = xr + p.col_first[size_t(ow)] * C + c0;
        const int64_t nw = p.col_n[size_t(ow)];
        __m512 a[NV];
        for (int v = 0; v < NV; ++v) a[v] = _mm512_set1_ps(MAX ? -INFINITY : 0.0f);
        for (int64_t i = 0; i < nh; ++i)
            for (int64_t j = 0; j < nw; ++j) {
                const float* q = x0 + i * hs + j * ws;
                for (int v = 0; v < NV; ++v) {
                    const __m512 t = v == NV - 1 ? _mm512_maskz_loadu_ps(last, q + 16 * v) : _mm512_loadu_ps(q + 16 * v);
                    // max(t, a) keeps a where t is NaN (`v > best`): _mm512_max_ps returns its
                    // second operand when either is NaN.
                    a[v] = MAX ? _mm512_max_ps(t, a[v]) : _mm512_add_ps(a[v], t);
                }
            }
        float* yo = y + ow * C + c0;
        const __m512 sc = _mm512_set1_ps(MAX ? 1.0f : inv_h / p.col_div[size_t(ow)]);
        for (int v = 0; v < NV; ++v) {
            const __m512 r = MAX ? a[v] : _mm512_mul_ps(a[v], sc);
            if (v == NV - 1) _mm512_mask_storeu_ps(yo + 16 * v, last, r);
            else _mm512_storeu_ps(yo + 16 * v, r);
        }
    }
}

template <bool MAX>
static void pool_nhwc_rows(const PoolNhwc& p, const float* x, float* y, int64_t r0, int64_t r1) {
    const int64_t C = p.C, rs = p.W * C;
    y += r0 * p.OW * C;
    for (int64_t r = r0; r < r1; ++r, y += p.OW * C) {
        const int64_t oh = r % p.OH;
        const float* xr = x + (r / p.OH) * p.H * rs + p.row_first[size_t(oh)] * rs;
        const int64_t nh = p.row_n[size_t(oh)];
        const float inv_h = MAX ? 1.0f : 1.0f / p.row_div[size_t(oh)];
        for (int64_t c0 = 0; c0 < C; c0 += 64) {
            const int64_t nv = std::min<int64_t>(4, (C - c0 + 15) / 16);
            const int64_t rem = C - c0 - 16 * (nv - 1);
            const __mmask16 last = __mmask16(rem >= 16 ? 0xffff : (1u << rem) - 1);
            switch (nv) {
                case 1: pool_nhwc_row<MAX, 1>(p, xr, y, nh, inv_h, c0, last); break;
                case 2: pool_nhwc_row<MAX, 2>(p, xr, y, nh, inv_h, c0, last); break;
                case 3: pool_nhwc_row<MAX, 3>(p, xr, y, nh, inv_h, c0, last); break;
                default: pool_nhwc_row<MAX, 4>(p, xr, y, nh, inv_h, c0, last); break;
            }
        }
    }
}

void pool_nhwc_avx512(const PoolNhwc& p, const float* x, float* y, int64_t r0, int64_t r1) {
    if (p.max) pool_nhwc_rows<true>(p, x, y, r0, r1);
    else pool_nhwc_rows<false>(p, x, y, r0, r1);
}

void resize_cols2_avx512(const ResizeCols2& p, const float* v, float* y) {
    const int64_t OW = p.OW;
    const int32_t* base = p.base.data();
    const int32_t* idx = p.idx.data();
    const float* w = p.w.data();
    for (int64_t j0 = 0; j0 < OW; j0 += 16, ++base, idx += 32, w += 32) {
        const float* vb = v + *base;
        const __m512 lo = _mm512_loadu_ps(vb), hi = _mm512_loadu_ps(vb + 16);
        const __m512 a = _mm512_permutex2var_ps(lo, _mm512_loadu_si512(idx), hi);
        const __m512 b = _mm512_permutex2var_ps(lo, _mm512_loadu_si512(idx + 16), hi);
        // w0 * a + w1 * b rounded as ResizeKernel's baseline loop does: two products, one add (the
        // add as a builtin with its rounding given: GCC would contract `_mm512_add_ps` of a product
        // into an FMA, one rounding less).
        const __m512 r = _mm512_add_round_ps(_mm512_mul_ps(_mm512_loadu_ps(w), a), _mm512_mul_ps(_mm512_loadu_ps(w + 16), b),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (j0 + 16 <= OW) _mm512_storeu_ps(y + j0, r);
        else _mm512_mask_storeu_ps(y + j0, __mmask16((1u << (OW - j0)) - 1), r);
    }
}

void global_avg_nhwc_avx512(const float* x, float* y, int64_t n, int64_t size, int64_t C) {
    global_avg_nhwc_run(x, y, n, size, C);
}

// Up to 16 planes (n of them; the rest of the group reads as zero): plane j's 16 partial sums
// in v[j], then 16 -> 8 -> 4 vectors by adding 256- and 128-bit halves of plane pairs, two
// in-lane unpack/shuffle rounds leave plane 4j + k's sum at element 4k + j, and one permute puts
// it at element 4j + k.
static void global_avg_group16(const float* x, float* y, int64_t n, int64_t size, __m512 inv) {
    __m512 v[16];
    const int64_t full = size / 16 * 16;
    const __mmask16 tail = __mmask16((1u << (size - full)) - 1);
    for (int64_t j = 0; j < 16; ++j) {
        if (j >= n) {
            v[j] = _mm512_setzero_ps();
            continue;
        }
        const float* p = x + j * size;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 32 <= full; i += 32) {
            a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
            a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
        }
        if (i < full) a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
        if (tail) a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps(tail, p + full));
        v[j] = _mm512_add_ps(a0, a1);
    }
    __m512 w[8], u[4];
    for (int i = 0; i < 8; ++i)  // 256-bit halves: lanes 0-1 plane 2i, lanes 2-3 plane 2i + 1
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; ++i)  // 128-bit lane k: plane 4i + k
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xDD));
    const __m512 x0 = _mm512_add_ps(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
    const __m512 x1 = _mm512_add_ps(_mm512_unpacklo_ps(u[2], u[3]), _mm512_unpackhi_ps(u[2], u[3]));
    const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(x0, x1, 0x44), _mm512_shuffle_ps(x0, x1, 0xEE));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m512 r = _mm512_mul_ps(_mm512_permutexvar_ps(idx, z), inv);
    _mm512_mask_storeu_ps(y, __mmask16(n >= 16 ? 0xffff : (1u << n) - 1), r);
}

void global_avg_avx512(const float* x, float* y, int64_t planes, int64_t size) {
    const __m512 inv = _mm512_set1_ps(1.0f / float(size));
    for (int64_t q = 0; q < planes; q += 16)
        global_avg_group16(x + q * size, y + q, std::min<int64_t>(16, planes - q), size, inv);
}

}  // namespace jiffy::kernels
