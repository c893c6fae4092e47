// Pool rows compiled for AVX512 (the loops in kernels/pool_impl.h, auto-vectorized).
#include <algorithm>
#include <cmath>
#include <immintrin.h>

#include "kernels/pool.h"

namespace jiffy::kernels {
namespace {
#include "kernels/pool_impl.h"
}  // namespace

void pool2d_avx512(const Pool2d& p, const float* x, float* y, int64_t planes, float* scratch) {
    pool2d_run(p, x, y, planes, scratch);
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
