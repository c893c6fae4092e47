// f32_gemv_narrow__avx512: see kernels/gemv_narrow.h.
#include <immintrin.h>

#include "kernels/gemv_narrow.h"

namespace jiffy::kernels {
namespace {

// Lane n of the result = the sum of the 16 lanes of acc[n] (n < 16): pairs of accumulators are
// interleaved and added four times (45 shuffles/adds instead of 16 horizontal reductions).
inline __m512 sum_lanes16(const __m512 acc[16]) {
    __m512 s1[8], s2[4];
    for (int i = 0; i < 8; ++i)  // per 128-bit lane: (x0+x2, y0+y2, x1+x3, y1+y3)
        s1[i] = _mm512_add_ps(_mm512_unpacklo_ps(acc[2 * i], acc[2 * i + 1]),
                              _mm512_unpackhi_ps(acc[2 * i], acc[2 * i + 1]));
    for (int i = 0; i < 4; ++i)  // per 128-bit lane: partial sums of acc[4i .. 4i + 3]
        s2[i] = _mm512_add_ps(_mm512_shuffle_ps(s1[2 * i], s1[2 * i + 1], 0x44),
                              _mm512_shuffle_ps(s1[2 * i], s1[2 * i + 1], 0xEE));
    const __m512 u0 = _mm512_add_ps(_mm512_shuffle_f32x4(s2[0], s2[1], 0x44), _mm512_shuffle_f32x4(s2[0], s2[1], 0xEE));
    const __m512 u1 = _mm512_add_ps(_mm512_shuffle_f32x4(s2[2], s2[3], 0x44), _mm512_shuffle_f32x4(s2[2], s2[3], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x88), _mm512_shuffle_f32x4(u0, u1, 0xDD));
}

// N outputs; with N <= 8, two accumulators per output (alternate 16-k blocks) keep >= 2N chains.
template <int N>
void narrow(const float* a, const PackedGemvNarrow& B, const float* bias, float* y, const Activation& act) {
    constexpr int S = N <= 8 ? 2 : 1;
    const int64_t K = B.K, Kp = B.Kp;
    const float* w = B.data.get();
    __m512 acc[S][16];
    for (int s = 0; s < S; ++s)
        for (int n = 0; n < 16; ++n) acc[s][n] = _mm512_setzero_ps();
    const int64_t full = K / 16 * 16;  // blocks of `a` read whole; the last partial one masked
    int64_t k = 0;
    for (; k + 16 * S <= full; k += 16 * S)
        for (int s = 0; s < S; ++s) {
            const __m512 av = _mm512_loadu_ps(a + k + 16 * s);
            for (int n = 0; n < N; ++n)
                acc[s][n] = _mm512_fmadd_ps(av, _mm512_load_ps(w + n * Kp + k + 16 * s), acc[s][n]);
        }
    for (; k < Kp; k += 16) {
        const int64_t left = K - k;
        const __mmask16 m = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
        const __m512 av = _mm512_maskz_loadu_ps(m, a + k);  // never reads past a[K - 1]
        for (int n = 0; n < N; ++n) acc[0][n] = _mm512_fmadd_ps(av, _mm512_load_ps(w + n * Kp + k), acc[0][n]);
    }
    if constexpr (S == 2)
        for (int n = 0; n < N; ++n) acc[0][n] = _mm512_add_ps(acc[0][n], acc[1][n]);
    const __mmask16 nm = __mmask16((1u << N) - 1);
    __m512 v = sum_lanes16(acc[0]);
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(nm, bias));
    _mm512_mask_storeu_ps(y, nm, act_v512(act, v));
}

}  // namespace

void sgemv_narrow_avx512(const float* a, const PackedGemvNarrow& B, const float* bias, float* y, const Activation& act) {
    switch (B.N) {
        case 1: return narrow<1>(a, B, bias, y, act);
        case 2: return narrow<2>(a, B, bias, y, act);
        case 3: return narrow<3>(a, B, bias, y, act);
        case 4: return narrow<4>(a, B, bias, y, act);
        case 5: return narrow<5>(a, B, bias, y, act);
        case 6: return narrow<6>(a, B, bias, y, act);
        case 7: return narrow<7>(a, B, bias, y, act);
        case 8: return narrow<8>(a, B, bias, y, act);
        case 9: return narrow<9>(a, B, bias, y, act);
        case 10: return narrow<10>(a, B, bias, y, act);
        case 11: return narrow<11>(a, B, bias, y, act);
        case 12: return narrow<12>(a, B, bias, y, act);
        case 13: return narrow<13>(a, B, bias, y, act);
        case 14: return narrow<14>(a, B, bias, y, act);
        case 15: return narrow<15>(a, B, bias, y, act);
        default: return narrow<16>(a, B, bias, y, act);
    }
}

}  // namespace jiffy::kernels
