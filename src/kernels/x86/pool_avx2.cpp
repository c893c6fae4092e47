// Pool rows compiled for AVX2 (the loops in kernels/pool_impl.h, auto-vectorized).
#include <algorithm>
#include <cmath>
#include <immintrin.h>

#include "kernels/pool.h"

namespace jiffy::kernels {
namespace {
#include "kernels/pool_impl.h"
}  // namespace

void pool2d_avx2(const Pool2d& p, const float* x, float* y, int64_t planes, float* scratch) {
    pool2d_run(p, x, y, planes, scratch);
}

void pool_nhwc_avx2(const PoolNhwc& p, const float* x, float* y, int64_t r0, int64_t r1) {
    pool_nhwc_run(p, x, y, r0, r1);
}

void global_avg_nhwc_avx2(const float* x, float* y, int64_t n, int64_t size, int64_t C) {
    global_avg_nhwc_run(x, y, n, size, C);
}

// Up to 8 planes (n of them; the rest read as zero): plane j's 8 partial sums in v[j], then
// 8 -> 4 vectors by adding 128-bit halves of plane pairs (lane k of u[i]: plane 2i + k), two
// in-lane unpack/shuffle rounds leave plane 2j + k's sum at element 4k + j, one permute fixes it.
static void global_avg_group8(const float* x, float* y, int64_t n, int64_t size, __m256 inv) {
    __m256 v[8];
    const int64_t full = size / 8 * 8, rem = size - full;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(rem)), lane);
    for (int64_t j = 0; j < 8; ++j) {
        if (j >= n) {
            v[j] = _mm256_setzero_ps();
            continue;
        }
        const float* p = x + j * size;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 16 <= full; i += 16) {
            a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
            a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
        }
        if (i < full) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
        if (rem) a1 = _mm256_add_ps(a1, _mm256_maskload_ps(p + full, tail));
        v[j] = _mm256_add_ps(a0, a1);
    }
    __m256 u[4];
    for (int i = 0; i < 4; ++i)
        u[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
    const __m256 x0 = _mm256_add_ps(_mm256_unpacklo_ps(u[0], u[1]), _mm256_unpackhi_ps(u[0], u[1]));
    const __m256 x1 = _mm256_add_ps(_mm256_unpacklo_ps(u[2], u[3]), _mm256_unpackhi_ps(u[2], u[3]));
    const __m256 z = _mm256_add_ps(_mm256_shuffle_ps(x0, x1, 0x44), _mm256_shuffle_ps(x0, x1, 0xEE));
    const __m256 r = _mm256_mul_ps(_mm256_permutevar8x32_ps(z, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)), inv);
    if (n >= 8) {
        _mm256_storeu_ps(y, r);
    } else {
        _mm256_maskstore_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), lane), r);
    }
}

void global_avg_avx2(const float* x, float* y, int64_t planes, int64_t size) {
    const __m256 inv = _mm256_set1_ps(1.0f / float(size));
    for (int64_t q = 0; q < planes; q += 8)
        global_avg_group8(x + q * size, y + q, std::min<int64_t>(8, planes - q), size, inv);
}

}  // namespace jiffy::kernels
