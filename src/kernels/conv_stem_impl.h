// The direct stem conv (conv_stem.h), AVX-512 only: included right after kernels/conv_impl.h in
// its AVX-512 translation unit, whose helpers (V, ld, st, ld_n, st_n, lane_mask, act_v, with_act,
// deferred_act, pf_write) it uses. Exports conv_stem_avx512.
#include "kernels/conv_stem.h"

#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
namespace jiffy::kernels {
namespace {

// One output row's 16 * PV pixels [ox0, ox0 + 16 * PV) for MB output channels of one packed block
// (wb: C x 9 taps of 16 floats; bias: MB floats), stored to y (channel planes OH * OW apart), with
// residual (may be null) added and the activation A applied on the registers (act_v). MASK: the strip reads
// input columns outside [0, W) (as zero) or stores fewer than 16 * PV pixels. pf_in: prefetch the input rows
// after next. NHWC (MB == 8, no residual): y is channels-last (pixels g.M floats apart, y at the block's
// first channel); the 8 x 16 sums of each vector of pixels are transposed in registers into 16 pixel
// rows of 8 channels (store_8x16t in conv_nhwc_impl.h).
template <int MB, int PV, bool MASK, ConvAct A, bool NHWC = false>
inline __attribute__((always_inline)) void strip(const Conv2DGeom& g, const float* x, const float* wb,
                                                 const float* bias, const float* res, float* y, int64_t oy,
                                                 int64_t ox0, const ConvEpi& e, bool pf_in) {
    const int64_t W = g.W, H = g.H, plane = g.H * g.W, oplane = g.OH * g.OW;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i next = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
    LaneMask m0[PV], m1[PV];
    bool last_in[PV];  // input column base + 32 (kernel column 2 of lane 15) inside the row
    int64_t base[PV];  // input column of lane 0, kernel column 0
#pragma GCC unroll 4
    for (int p = 0; p < PV; ++p) {
        base[p] = 2 * (ox0 + 16 * p) - g.pw;
        m0[p] = m1[p] = 0xffff;
        last_in[p] = true;
        if (MASK) {
            m0[p] = lane_mask(-base[p], W - base[p]);  // lanes of the row's columns inside [0, W)
            m1[p] = lane_mask(-base[p] - 16, W - base[p] - 16);
            last_in[p] = base[p] + 32 >= 0 && base[p] + 32 < W;
        }
    }
    __m512 acc[MB][PV];
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m)
#pragma GCC unroll 4
        for (int p = 0; p < PV; ++p) acc[m][p] = _mm512_set1_ps(bias[m]);
    const int64_t iy0 = oy * 2 - g.ph;
    const int64_t ky0 = std::max<int64_t>(0, -iy0), ky1 = std::min<int64_t>(3, H - iy0);
    for (int64_t c = 0; c < g.C; ++c) {
        for (int64_t ky = ky0; ky < ky1; ++ky) {
            const float* row = x + c * plane + (iy0 + ky) * W;
            __m512 t[3][PV];
#pragma GCC unroll 4
            for (int p = 0; p < PV; ++p) {
                const float* r = row + base[p];
                __m512 v0, v1, tail;
                if (MASK) {
                    v0 = _mm512_maskz_loadu_ps(m0[p], r);
                    v1 = _mm512_maskz_loadu_ps(m1[p], r + 16);
                    tail = last_in[p] ? _mm512_set1_ps(r[32]) : _mm512_setzero_ps();
                } else {
                    v0 = _mm512_loadu_ps(r);
                    v1 = _mm512_loadu_ps(r + 16);
                    tail = _mm512_set1_ps(r[32]);
                }
                t[0][p] = _mm512_permutex2var_ps(v0, even, v1);  // columns base + 2i
                t[1][p] = _mm512_permutex2var_ps(v0, odd, v1);   // base + 2i + 1
                // base + 2i + 2: t0 shifted down one lane, column base + 32 on top
                t[2][p] = _mm512_permutex2var_ps(t[0][p], next, tail);
            }
            const float* w = wb + (c * 9 + ky * 3) * 16;
#pragma GCC unroll 3
            for (int kx = 0; kx < 3; ++kx)
#pragma GCC unroll 16
                for (int m = 0; m < MB; ++m) {
                    const __m512 wv = _mm512_set1_ps(w[kx * 16 + m]);
#pragma GCC unroll 4
                    for (int p = 0; p < PV; ++p) acc[m][p] = _mm512_fmadd_ps(wv, t[kx][p], acc[m][p]);
                }
        }
    }
    // The input lines of the row after next (the first channel block only: pf_in).
    auto prefetch_rows_after_next = [&]() __attribute__((always_inline)) {
        for (int64_t c = 0; c < g.C; ++c) {
            const float* r = x + c * plane + (iy0 + 5) * W + base[0];
#pragma GCC unroll 8
            for (int l = 0; l < 2 * PV; ++l) {
                _mm_prefetch(reinterpret_cast<const char*>(r + 16 * l), _MM_HINT_T0);
                _mm_prefetch(reinterpret_cast<const char*>(r + W + 16 * l), _MM_HINT_T0);
            }
        }
    };
    if constexpr (NHWC) {
        static_assert(MB == 8, "the NHWC store transposes 8 channels");
        float* yo = y + (oy * g.OW + ox0) * g.M;
        if (pf_in) {
            // The next row's output lines of these pixels (all channels), for writing; the input rows
            // after next.
            float* nx = yo + g.OW * g.M;
            const int64_t lines = std::min<int64_t>(16 * PV, g.OW - ox0) * g.M / 16;
            for (int64_t l = 0; l < lines; ++l) pf_write(nx + 16 * l);
            prefetch_rows_after_next();
        }
#pragma GCC unroll 4
        for (int p = 0; p < PV; ++p) {
            __m512 v[8];
#pragma GCC unroll 8
            for (int m = 0; m < 8; ++m) v[m] = (__m512)act_v<A>((V)acc[m][p], e);
            const int64_t n = MASK ? std::min<int64_t>(16, g.OW - ox0 - 16 * p) : 16;
            if (MASK && n <= 0) continue;
            store_8x16t(v, yo + 16 * p * g.M, g.M, n, 0xff);
        }
        return;
    }
    float* yo = y + oy * g.OW + ox0;
    const float* ro = res ? res + oy * g.OW + ox0 : nullptr;
    // DRAM-cold planes (MobileNets: the rest of the network's weights evict them between runs):
    // prefetch the output lines of the next row (for writing) and, in the first channel block,
    // the input lines of the row after next, ~10 strips ahead; without, the MobileNets' stems ran
    // at ~2x their hot time, slower than the GEMM path whose tiles prefetch the same way.
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m)
#pragma GCC unroll 4
        for (int p = 0; p < PV; ++p) pf_write(yo + m * oplane + g.OW + 16 * p);
    if (pf_in) prefetch_rows_after_next();
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m)
#pragma GCC unroll 4
        for (int p = 0; p < PV; ++p) {
            const int64_t o = m * oplane + 16 * p, n = std::min<int64_t>(16, g.OW - ox0 - 16 * p);
            V v = (V)acc[m][p];
            if (MASK && n < 16) {
                if (n <= 0) continue;
                if (res) v += ld_n(ro + o, n);
                st_n(yo + o, act_v<A>(v, e), n);
            } else {
                if (res) v += ld(ro + o);
                st(yo + o, act_v<A>(v, e));
            }
        }
}

// The pixel-broadcast form: P output pixels of row oy x MV vectors of 16 output channels in
// registers (output channels on the lanes). Per tap, MV weight vectors from the packed block (its
// C x 9 taps x 16 floats, wstride floats to the next block) and, per pixel, one broadcast input
// value (an FMA with a memory operand): no permutes, so the FMA ports do only FMAs; the strided
// input costs nothing, the broadcast addresses are just 2 floats apart. Sums in the same order as
// strip() (bias, then input channel, kernel row, kernel column). EDGE: the strip reads input
// columns outside [0, W) (zeros: the padding) or has np < P pixels (only np stored). Stores: NHWC, each
// pixel's MV vectors at y + p * M (mlast: the lanes of the last vector inside M); NCHW (MV == 1,
// P == 16), the 16 x 16 block transposed into 16 channel rows of 16 pixels (two store_8x16t).
template <int MV, int P, bool EDGE, ConvAct A, bool NHWC>
inline __attribute__((always_inline)) void bstrip(const Conv2DGeom& g, const float* x, const float* wb,
                                                  int64_t wstride, const float* bias, float* y, int64_t oy,
                                                  int64_t ox0, int64_t np, int64_t nch, __mmask16 mlast,
                                                  const ConvEpi& e) {
    const int64_t W = g.W, H = g.H;
    __m512 acc[MV][P];
#pragma GCC unroll 2
    for (int v = 0; v < MV; ++v) {
        const __m512 b = _mm512_loadu_ps(bias + 16 * v);
#pragma GCC unroll 28
        for (int p = 0; p < P; ++p) acc[v][p] = b;
    }
    const int64_t iy0 = oy * 2 - g.ph, c0 = 2 * ox0 - g.pw;
    const int64_t ky0 = std::max<int64_t>(0, -iy0), ky1 = std::min<int64_t>(3, H - iy0);
    // The input rows of the strip: in place, or (EDGE) their 2P + 1 columns copied with zeros
    // outside [0, W), so that the border strips run the same loop (a test per tap made them ~4x
    // slower than the others: one of 7-10 strips a row).
    // Copied 16 columns at a time by masked loads (zeros outside the row; masked-off lanes are
    // not read).
    constexpr int64_t BW = (2 * P + 2 + 15) / 16 * 16;
    alignas(64) float buf[EDGE ? 4 * 3 * BW : 1];
    const float* x0 = x + iy0 * W + c0;
    int64_t cstride = g.H * W, rstride = W;
    if constexpr (EDGE) {
        for (int64_t c = 0; c < g.C; ++c)
            for (int64_t ky = ky0; ky < ky1; ++ky) {
                const float* src = x + c * g.H * W + (iy0 + ky) * W + c0;
                float* dst = buf + (c * 3 + ky) * BW;
#pragma GCC unroll 4
                for (int64_t j = 0; j < BW; j += 16)
                    _mm512_store_ps(dst + j, _mm512_maskz_loadu_ps(lane_mask(-c0 - j, W - c0 - j), src + j));
            }
        x0 = buf, cstride = 3 * BW, rstride = BW;
    }
    for (int64_t c = 0; c < g.C; ++c)
        for (int64_t ky = ky0; ky < ky1; ++ky) {
            const float* row = x0 + c * cstride + ky * rstride;
            const float* w = wb + (c * 9 + ky * 3) * 16;
#pragma GCC unroll 3
            for (int kx = 0; kx < 3; ++kx) {
                __m512 wv[MV];
#pragma GCC unroll 2
                for (int v = 0; v < MV; ++v) wv[v] = _mm512_load_ps(w + v * wstride + kx * 16);
                // The row through an opaque pointer per kernel column: column kx = 2 of pixel p is
                // column 0 of pixel p + 1, and GCC, seeing it, kept those broadcasts in registers
                // across the columns and spilled the sums (1.2x slower than the loads it saved).
                const float* rk = row + kx;
                asm("" : "+r"(rk));
#pragma GCC unroll 28
                for (int p = 0; p < P; ++p) {
                    const __m512 xv = _mm512_set1_ps(rk[2 * p]);
#pragma GCC unroll 2
                    for (int v = 0; v < MV; ++v) acc[v][p] = _mm512_fmadd_ps(xv, wv[v], acc[v][p]);
                }
            }
        }
    if constexpr (NHWC) {
        const int64_t n = EDGE ? np : P;
#pragma GCC unroll 28
        for (int p = 0; p < P; ++p) {
            if (EDGE && p >= n) break;
#pragma GCC unroll 2
            for (int v = 0; v < MV; ++v) {
                const __m512 r = (__m512)act_v<A>((V)acc[v][p], e);
                if (v == MV - 1) _mm512_mask_storeu_ps(y + p * g.M + 16 * v, mlast, r);
                else _mm512_storeu_ps(y + p * g.M + 16 * v, r);
            }
        }
    } else {
        static_assert(MV == 1 && P == 16, "the NCHW store transposes 16 pixels x 16 channels");
        const int64_t oplane = g.OH * g.OW;
        const int64_t n = EDGE ? np : 16;
        __m512 lo[8], hi[8];
#pragma GCC unroll 8
        for (int p = 0; p < 8; ++p) {
            lo[p] = (__m512)act_v<A>((V)acc[0][p], e);
            hi[p] = (__m512)act_v<A>((V)acc[0][8 + p], e);
        }
        store_8x16t(lo, y, oplane, nch, __mmask8(n >= 8 ? 0xff : (1u << n) - 1));
        if (n > 8) store_8x16t(hi, y + 8, oplane, nch, __mmask8(n >= 16 ? 0xff : (1u << (n - 8)) - 1));
    }
}

// Output row oy by the pixel-broadcast form, strip by strip, each strip through every block of
// 16 * MV output channels. NHWC: strips of 24 / MV pixels; NCHW: 16. Per strip, in the first
// block, the input lines of the row after next (prefetched as strip() does: DRAM-cold planes).
template <int MV, ConvAct A, bool NHWC>
void brow(const Conv2DGeom& g, const float* x, const float* packed, float* y, int64_t oy, const ConvEpi& e,
          int64_t yrow0) {
    constexpr int P = NHWC ? 24 / MV : 16;
    const int64_t M = g.M, Mp = (M + 15) / 16 * 16, taps = g.C * 9, plane = g.H * g.W;
    const int64_t wstride = 16 * taps, oplane = g.OH * g.OW;
    const float* bias = packed + Mp * taps;
    const int64_t iy_pf = oy * 2 - g.ph + 5;
    for (int64_t ox0 = 0; ox0 < g.OW; ox0 += P) {
        const int64_t np = std::min<int64_t>(P, g.OW - ox0), base = 2 * ox0 - g.pw;
        const bool inside = base >= 0 && base + 2 * P < g.W && np == P;
        if (iy_pf + 1 < g.H && base >= 0)
            for (int64_t c = 0; c < g.C; ++c) {
                const float* r = x + c * plane + iy_pf * g.W + base;
#pragma GCC unroll 4
                for (int l = 0; l < 2 * P; l += 16) {
                    _mm_prefetch(reinterpret_cast<const char*>(r + l), _MM_HINT_T0);
                    _mm_prefetch(reinterpret_cast<const char*>(r + g.W + l), _MM_HINT_T0);
                }
            }
        for (int64_t m0 = 0; m0 < M; m0 += 16 * MV) {
            const float* wb = packed + m0 * taps;
            const int64_t nch = std::min<int64_t>(16, M - m0);  // NCHW (MV == 1): channels of this block
            const __mmask16 mlast = M - m0 >= 16 * MV ? __mmask16(0xffff) : __mmask16(0x00ff);
            float* yo = NHWC ? y + ((oy - yrow0) * g.OW + ox0) * M + m0 : y + m0 * oplane + oy * g.OW + ox0;
            if (inside)
                bstrip<MV, P, false, A, NHWC>(g, x, wb, wstride, bias + m0, yo, oy, ox0, np, nch, mlast, e);
            else
                bstrip<MV, P, true, A, NHWC>(g, x, wb, wstride, bias + m0, yo, oy, ox0, np, nch, mlast, e);
        }
    }
}

// One output row for 8 output channels, in strips of 8 channels x 32 pixels (16 x 16 measured
// slower, docs/benchmarks.md "Session 14").
template <ConvAct A>
void block_row(const Conv2DGeom& g, const float* x, const float* wb, const float* bias, const float* res,
               float* y, int64_t oy, const ConvEpi& e, bool pf_in) {
    // Strips of 32 pixels whose input columns are all inside the row run unmasked; the rest (the
    // borders, a last strip of <= 16) masked.
    constexpr int MB = 8, PV = 2;
    for (int64_t ox0 = 0; ox0 < g.OW; ox0 += 16 * PV) {
        const int64_t base = 2 * ox0 - g.pw;
        if (base >= 0 && base + 32 * PV < g.W && ox0 + 16 * PV <= g.OW)
            strip<MB, PV, false, A>(g, x, wb, bias, res, y, oy, ox0, e, pf_in);
        else
            strip<MB, PV, true, A>(g, x, wb, bias, res, y, oy, ox0, e, pf_in);
    }
}

// One channels-last output row, strip by strip, each strip through every block of 8 output
// channels before the next, so that each pixel's output line is completed while it is in L1
// (the blocks of a row one after the other wrote each line in 32-byte halves a row apart).
template <ConvAct A>
void row_nhwc(const Conv2DGeom& g, const float* x, const float* packed, float* y, int64_t oy, const ConvEpi& e) {
    constexpr int MB = 8, PV = 2;
    const int64_t M = g.M, Mp = (M + 15) / 16 * 16, taps = g.C * 9;
    const float* bias = packed + Mp * taps;
    for (int64_t ox0 = 0; ox0 < g.OW; ox0 += 16 * PV) {
        const int64_t base = 2 * ox0 - g.pw;
        const bool inside = base >= 0 && base + 32 * PV < g.W && ox0 + 16 * PV <= g.OW;
        for (int64_t m0 = 0; m0 < M; m0 += 8) {
            const float* wb = packed + m0 / 16 * 16 * taps + m0 % 16;
            if (inside)
                strip<MB, PV, false, A, true>(g, x, wb, bias + m0, nullptr, y + m0, oy, ox0, e, m0 == 0);
            else
                strip<MB, PV, true, A, true>(g, x, wb, bias + m0, nullptr, y + m0, oy, ox0, e, m0 == 0);
        }
    }
}

// Output rows [oy0, oy1), each through every block of 8 output channels; Sigmoid / Tanh (A =
// kNone, see with_act) over each row just written (still in L1). NHWC: y channels-last (no residual).
template <ConvAct A, bool NHWC>
void stem_rows(const Conv2DGeom& g, const float* x, const float* packed, const float* res, float* y,
               const ConvEpi& e, int64_t oy0, int64_t oy1, bool bcast, int64_t yrow0) {
    const int64_t M = g.M, Mp = (M + 15) / 16 * 16, taps = g.C * 9, oplane = g.OH * g.OW;
    const float* bias = packed + Mp * taps;
    for (int64_t oy = oy0; oy < oy1; ++oy) {
        if (bcast) {  // no residual here (ConvStem::run asks for this form only without one)
            if constexpr (NHWC) {
                if (M % 32 == 0) brow<2, A, true>(g, x, packed, y, oy, e, yrow0);
                else brow<1, A, true>(g, x, packed, y, oy, e, yrow0);
                deferred_act<A>(y + (oy - yrow0) * g.OW * M, g.OW * M, e);
            } else {
                brow<1, A, false>(g, x, packed, y, oy, e, 0);
                for (int64_t m = 0; m < M; ++m) deferred_act<A>(y + m * oplane + oy * g.OW, g.OW, e);
            }
            continue;
        }
        if constexpr (NHWC) {
            row_nhwc<A>(g, x, packed, y, oy, e);
            deferred_act<A>(y + oy * g.OW * M, g.OW * M, e);
            continue;
        }
        for (int64_t m0 = 0; m0 < M; m0 += 8)
            block_row<A>(g, x, packed + m0 / 16 * 16 * taps + m0 % 16, bias + m0, res ? res + m0 * oplane : nullptr,
                         y + m0 * oplane, oy, e, m0 == 0);
        for (int64_t m = 0; m < M; ++m) deferred_act<A>(y + m * oplane + oy * g.OW, g.OW, e);
    }
}

}  // namespace

void conv_stem_avx512(const Conv2DGeom& g, const float* x, const float* packed, const float* res, float* y,
                      const ConvEpi& e, int64_t oy0, int64_t oy1, bool nhwc, bool bcast, int64_t yrow0) {
    with_act(e.act, [&](auto a) {
        if (nhwc) stem_rows<decltype(a)::value, true>(g, x, packed, nullptr, y, e, oy0, oy1, bcast, yrow0);
        else stem_rows<decltype(a)::value, false>(g, x, packed, res, y, e, oy0, oy1, bcast, 0);
    });
}

}  // namespace jiffy::kernels
#endif
