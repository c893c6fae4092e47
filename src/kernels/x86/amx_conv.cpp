// AmxConv::run (kernels/amx.h): built with the AMX-TILE, AMX-BF16 and AVX512-BF16 flags, called
// only where amx_usable().
#include <immintrin.h>

#include <algorithm>

#include "kernels/amx.h"
#include "kernels/x86/amx_tiles.h"

namespace jiffy::kernels {

void conv_epi_avx512(float*, const float*, int64_t, const ConvEpi&);

namespace {

using namespace amx;

template <int PARTS, bool W_LO>
bool conv(const Conv2DGeom& g, int64_t K, int64_t Kp, int64_t Mp, int64_t ptile, bool pointwise, const float* x,
          const uint16_t* wp, const float* bias, const float* res, float* y, float* scratch, const ConvEpi& e,
          int64_t pb, int64_t pe, int64_t cb, int64_t ce) {
    const int64_t P = g.OH * g.OW, M = g.M, KB = Kp / 32, kbs = PARTS * kTile, HW = g.H * g.W, khw = g.kh * g.kw;
    if (pe < 0 || pe > P) pe = P;
    if (ce < 0 || ce > Mp / 32) ce = Mp / 32;
    if (pb >= pe || cb >= ce) return true;
    // Pixel blocks of the split input one cache line more than their K x 16 x PARTS halves
    // apart: whole multiples of 4 KiB would put every block's rows in the same L1 sets.
    const int64_t bs = KB * kbs + 32;
    uint16_t* bp = reinterpret_cast<uint16_t*>(scratch);
    float* acc = reinterpret_cast<float*>(
        (reinterpret_cast<uintptr_t>(scratch + ptile / 16 * bs / 2) + 63) & ~uintptr_t(63));
    const bool epi = res || e.act != ConvAct::kNone || e.clamp;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    bool config = false;
    for (int64_t t0 = pb; t0 < pe; t0 += ptile) {
        const int64_t t1 = std::min(t0 + ptile, pe), npair = (t1 - t0 + 31) / 32, nblk = 2 * npair;
        // The split input of pixels [t0, t0 + 32 npair): blocks of 16 pixels, lanes past P zero.
        __mmask32 bad = 0;
        if (pointwise) {
            // Along each input row (K rows outer, the pixel blocks inner: sequential reads).
            for (int64_t k = 0; k < Kp; k += 2) {
                const float* ra = k < K ? x + k * P : nullptr;
                const float* rb = k + 1 < K ? x + (k + 1) * P : nullptr;
                uint16_t* d = bp + (k >> 5) * kbs + (k & 31) * 16;
                for (int64_t blk = 0; blk < nblk; ++blk) {
                    const int64_t q0 = t0 + 16 * blk;
                    const __mmask16 vm = lanes(P - q0);
                    const __m512 a = ra ? _mm512_maskz_loadu_ps(vm, ra + q0) : _mm512_setzero_ps();
                    const __m512 b = rb ? _mm512_maskz_loadu_ps(vm, rb + q0) : _mm512_setzero_ps();
                    bad |= split_values<PARTS, true>(a, b, d + blk * bs);
                }
            }
        } else {
            // im2col on the fly: per tap, each lane's offset in a channel plane and whether it is
            // inside the image (the padding reads as zero).
            for (int64_t blk = 0; blk < nblk; ++blk) {
                const int64_t q0 = t0 + 16 * blk;
                const __mmask16 vm = lanes(P - q0);
                uint16_t* d = bp + blk * bs;
                const __m512i q = _mm512_add_epi32(_mm512_set1_epi32(int32_t(q0)), lane);
                const __m512i oy = _mm512_cvttps_epi32(_mm512_div_round_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(float(g.OW)),
                                                                           _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
                const __m512i ox = _mm512_sub_epi32(q, _mm512_mullo_epi32(oy, _mm512_set1_epi32(int32_t(g.OW))));
                const __m512i iy0 = _mm512_sub_epi32(_mm512_mullo_epi32(oy, _mm512_set1_epi32(int32_t(g.sh))),
                                                     _mm512_set1_epi32(int32_t(g.ph)));
                const __m512i ix0 = _mm512_sub_epi32(_mm512_mullo_epi32(ox, _mm512_set1_epi32(int32_t(g.sw))),
                                                     _mm512_set1_epi32(int32_t(g.pw)));
                __m512i offs[kAmxMaxTaps];
                __mmask16 in[kAmxMaxTaps];
                for (int64_t t = 0; t < khw; ++t) {
                    const int64_t ky = t / g.kw, kx = t - ky * g.kw;
                    const __m512i iy = _mm512_add_epi32(iy0, _mm512_set1_epi32(int32_t(ky * g.dh)));
                    const __m512i ix = _mm512_add_epi32(ix0, _mm512_set1_epi32(int32_t(kx * g.dw)));
                    __mmask16 ok = vm;
                    ok &= _mm512_cmpge_epi32_mask(iy, _mm512_setzero_si512());
                    ok &= _mm512_cmplt_epi32_mask(iy, _mm512_set1_epi32(int32_t(g.H)));
                    ok &= _mm512_cmpge_epi32_mask(ix, _mm512_setzero_si512());
                    ok &= _mm512_cmplt_epi32_mask(ix, _mm512_set1_epi32(int32_t(g.W)));
                    in[t] = ok;
                    offs[t] = _mm512_add_epi32(_mm512_mullo_epi32(iy, _mm512_set1_epi32(int32_t(g.W))), ix);
                }
                int64_t c = 0, t = 0;  // the tap of row k: channel c, tap t
                auto next = [&]() -> __m512 {
                    __m512 v = _mm512_setzero_ps();
                    if (c < g.C) v = _mm512_mask_i32gather_ps(v, in[t], offs[t], x + c * HW, 4);
                    if (++t == khw) {
                        t = 0;
                        ++c;
                    }
                    return v;
                };
                for (int64_t k = 0; k < Kp; k += 2) {
                    const __m512 a = next();
                    const __m512 b = next();
                    bad |= split_values<PARTS, true>(a, b, d + (k >> 5) * kbs + (k & 31) * 16);
                }
            }
        }
        if (bad) {
            if (config) _tile_release();
            return false;  // before any output of this call is written (ranges: see AmxConv::run)
        }
        if (!config) {
            load_tile_config();
            config = true;
        }
        for (int64_t mi = cb; mi < ce; ++mi) {
            const uint16_t* a0 = wp + 2 * mi * KB * kbs;
            const int64_t nr = std::min<int64_t>(32, M - 32 * mi);
            for (int64_t j = 0; j < npair; ++j) {
                const uint16_t* b0 = bp + 2 * j * bs;
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                tile_block<PARTS, PARTS, PARTS == 3, W_LO>(a0, a0 + KB * kbs, b0, b0 + bs, KB);
                const int64_t q = t0 + 32 * j;
                store_block(y + 32 * mi * P + q, P, nr, std::min<int64_t>(32, t1 - q), acc);
            }
            // Bias, residual and activation over this block's rows of the pixel tile.
            const int64_t n = t1 - t0;
            for (int64_t m = 32 * mi; m < 32 * mi + nr; ++m) {
                float* yr = y + m * P + t0;
                if (bias) {
                    const __m512 bv = _mm512_set1_ps(bias[m]);
                    for (int64_t i = 0; i < n; i += 16) {
                        const __mmask16 km = lanes(n - i);
                        _mm512_mask_storeu_ps(yr + i, km, _mm512_add_ps(_mm512_maskz_loadu_ps(km, yr + i), bv));
                    }
                }
                if (epi) conv_epi_avx512(yr, res ? res + m * P + t0 : nullptr, n, e);
            }
        }
    }
    if (config) _tile_release();
    return true;
}

}  // namespace

bool AmxConv::run(const float* x, const uint16_t* wp, const float* bias, const float* res, float* y, float* scratch,
                  const ConvEpi& e, int64_t pb, int64_t pe, int64_t cb, int64_t ce) const {
    if (parts_ == 2) return conv<2, true>(g_, K_, Kp_, Mp_, ptile_, pointwise_, x, wp, bias, res, y, scratch, e, pb, pe, cb, ce);
    return w_lo_ ? conv<3, true>(g_, K_, Kp_, Mp_, ptile_, pointwise_, x, wp, bias, res, y, scratch, e, pb, pe, cb, ce)
                 : conv<3, false>(g_, K_, Kp_, Mp_, ptile_, pointwise_, x, wp, bias, res, y, scratch, e, pb, pe, cb, ce);
}

}  // namespace jiffy::kernels
