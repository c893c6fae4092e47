// conv_one_channel_avx512 (kernels/conv.h): one input channel to M output channels, stride 1, no
// dilation. Built with the AVX-512 flags (CMakeLists.txt).
#include <immintrin.h>

#include <algorithm>

#include "kernels/conv.h"

namespace jiffy::kernels {

void conv_epi_avx512(float*, const float*, int64_t, const ConvEpi&);

namespace {

// Lanes [lo, hi) of 16.
inline __mmask16 lane_range(int64_t lo, int64_t hi) {
    lo = std::clamp<int64_t>(lo, 0, 16), hi = std::clamp<int64_t>(hi, 0, 16);
    if (hi <= lo) return 0;
    return __mmask16(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

// Output channels [m, m + MC) over the whole plane: per output row, per 32-pixel block (two
// vectors; each tap's lane masks, the image's columns, computed once per block column), 2 x MC
// accumulators started from the bias; per tap two input vectors and MC weight broadcasts feed
// 2 x MC FMAs. Taps summed in (ky, kx) order after the bias; the epilogue (and residual) per
// finished row while it is in L1 (the piecewise-linear ones alone on the registers).
// kw <= kOneChannelMaxKw, OW <= 32 x kOneChannelMaxBlocks (one_channel_conv_preferred).
template <int MC, int KW>  // KW: the kernel width, 0 = g.kw at run time
void channels(const Conv2DGeom& g, const float* x, const float* w, const float* bias, const float* res,
              float* y, const ConvEpi& epi, int64_t m) {
    const int64_t kw = KW ? KW : g.kw;
    const int64_t taps = g.kh * kw, P = g.OH * g.OW, nb = (g.OW + 31) / 32;
    // ReLU, LeakyReLU and Clip, then the clamp and the affine, on the registers (conv_impl.h's
    // act_v order); with a residual or another activation the epilogue runs per finished row (a
    // call per row and channel: the embedding model's 3x3 1 -> 24, LeakyReLU and a clamp, took 22
    // against 12 us for the GEMM form that way).
    const ConvAct act = epi.act;
    const bool on_regs =
        !res && (act == ConvAct::kRelu || act == ConvAct::kLeakyRelu || act == ConvAct::kClip);
    // The rest of the epilogue (a residual, another activation, or a clamp / affine without one of
    // those three) per finished row.
    const bool row_epi = !on_regs && (res || act != ConvAct::kNone || epi.clamp || epi.affine);
    const __m512 zero = _mm512_setzero_ps(), alpha = _mm512_set1_ps(epi.alpha),
                 beta = _mm512_set1_ps(epi.beta);
    const __m512 lo = _mm512_set1_ps(epi.lo), hi = _mm512_set1_ps(epi.hi);
    const __m512 scale = _mm512_set1_ps(epi.scale), shift = _mm512_set1_ps(epi.shift);
    const auto apply = [&](__m512 v) {
        if (act == ConvAct::kRelu)
            v = _mm512_max_ps(v, zero);
        else if (act == ConvAct::kLeakyRelu)
            v = _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, alpha);
        else
            v = _mm512_min_ps(_mm512_max_ps(v, alpha), beta);
        if (epi.clamp) v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
        return epi.affine ? _mm512_fmadd_ps(v, scale, shift) : v;
    };
    __mmask16 mask[kOneChannelMaxBlocks][2][kOneChannelMaxKw], out[kOneChannelMaxBlocks][2];
    for (int64_t b = 0; b < nb; ++b)
        for (int h = 0; h < 2; ++h) {
            const int64_t ox = 32 * b + 16 * h;
            for (int64_t kx = 0; kx < kw; ++kx)
                mask[b][h][kx] = lane_range(g.pw - ox - kx, g.W + g.pw - ox - kx);
            out[b][h] = lane_range(0, g.OW - ox);
        }
    for (int64_t oy = 0; oy < g.OH; ++oy) {
        const int64_t ky0 = std::max<int64_t>(0, g.ph - oy), ky1 = std::min<int64_t>(g.kh, g.H + g.ph - oy);
        float* yo = y + m * P + oy * g.OW;
        for (int64_t b = 0; b < nb; ++b) {
            const int64_t ox = 32 * b;
            __m512 a0[MC], a1[MC];
            for (int c = 0; c < MC; ++c)
                a0[c] = a1[c] = bias ? _mm512_set1_ps(bias[m + c]) : _mm512_setzero_ps();
            for (int64_t ky = ky0; ky < ky1; ++ky) {
                // Input column of lane 0 for tap kx: ox + kx - pw. Masked-off lanes are not read
                // (the address may lie outside the row).
                const float* row = x + (oy + ky - g.ph) * g.W + ox - g.pw;
                const float* wk = w + m * taps + ky * kw;
                for (int64_t kx = 0; kx < kw; ++kx) {
                    const __m512 v0 = _mm512_maskz_loadu_ps(mask[b][0][kx], row + kx);
                    const __m512 v1 = _mm512_maskz_loadu_ps(mask[b][1][kx], row + kx + 16);
                    for (int c = 0; c < MC; ++c) {
                        const __m512 wc = _mm512_set1_ps(wk[c * taps + kx]);
                        a0[c] = _mm512_fmadd_ps(v0, wc, a0[c]);
                        a1[c] = _mm512_fmadd_ps(v1, wc, a1[c]);
                    }
                }
            }
            if (on_regs)
                for (int c = 0; c < MC; ++c) {
                    a0[c] = apply(a0[c]);
                    a1[c] = apply(a1[c]);
                }
            // Whole vectors by plain stores.
            if (out[b][0] == 0xffff && out[b][1] == 0xffff) {
                for (int c = 0; c < MC; ++c) {
                    _mm512_storeu_ps(yo + c * P + ox, a0[c]);
                    _mm512_storeu_ps(yo + c * P + ox + 16, a1[c]);
                }
            } else {
                for (int c = 0; c < MC; ++c) {
                    _mm512_mask_storeu_ps(yo + c * P + ox, out[b][0], a0[c]);
                    _mm512_mask_storeu_ps(yo + c * P + ox + 16, out[b][1], a1[c]);
                }
            }
        }
        if (row_epi)
            for (int c = 0; c < MC; ++c)
                conv_epi_avx512(yo + c * P, res ? res + (m + c) * P + oy * g.OW : nullptr, g.OW, epi);
    }
}

}  // namespace

void conv_one_channel_avx512(const Conv2DGeom& g, const float* x, const float* w, const float* bias,
                             const float* res, float* y, const ConvEpi& epi, int64_t m0, int64_t m1) {
    int64_t m = m0;
    if (g.kw == 3) {
        for (; m + 8 <= m1; m += 8) channels<8, 3>(g, x, w, bias, res, y, epi, m);
        for (; m + 4 <= m1; m += 4) channels<4, 3>(g, x, w, bias, res, y, epi, m);
    }
    for (; m + 8 <= m1; m += 8) channels<8, 0>(g, x, w, bias, res, y, epi, m);
    for (; m + 4 <= m1; m += 4) channels<4, 0>(g, x, w, bias, res, y, epi, m);
    for (; m < m1; ++m) channels<1, 0>(g, x, w, bias, res, y, epi, m);
}

}  // namespace jiffy::kernels
