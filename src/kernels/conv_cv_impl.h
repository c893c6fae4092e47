// The channel-vector conv (conv_cv.h), compiled per ISA: included right after kernels/conv_impl.h
// in the same translation unit, whose vector helpers (V, VI, VL, NR, MR, ld, st, bc, ld_n, st_n,
// act_v, epi_row) it uses. Exports conv_cv_group_<JIFFY_CONV_SUFFIX>.
#include "kernels/conv_cv.h"

namespace jiffy::kernels {
namespace {

// The lanes of p whose bit is set in `bits` (low VL bits); the other lanes are zero and are not
// read (masked loads never fault on them).
inline V ld_bits(const float* p, uint32_t bits) {
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
    return (V)_mm512_maskz_loadu_ps(__mmask16(bits), p);
#elif JIFFY_CONV_VL == 8 && defined(__AVX2__)
    const __m256i lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i m = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(int(bits)), lane), lane);
    return (V)_mm256_maskload_ps(p, m);
#else
    float t[VL] = {};
    for (int j = 0; j < VL; ++j)
        if (bits >> j & 1u) t[j] = p[j];
    return ld(t);
#endif
}

// yt[i * ldy + n] = b[n] + sum_k rows[k][p0 + i] * w[k * NV * VL + n] for i < mr, n < NV * VL.
// pa (may be null): pa + ps * k prefetched into L2 at k step k (pf_read).
template <int mr, int NV>
void cv_ukr(int64_t K, const float* const* rows, int64_t p0, const float* __restrict w,
            const float* b, float* yt, int64_t ldy, const float* pa, int64_t ps) {
    V c0[mr], c1[mr];
    const V b0 = ld(b), b1 = NV == 2 ? ld(b + VL) : V{};
#pragma GCC unroll 16
    for (int i = 0; i < mr; ++i) c0[i] = b0, c1[i] = b1;
    for (int64_t k = 0; k < K; ++k) {
        const float* __restrict r = rows[k] + p0;
        const V w0 = ld(w + k * NV * VL);
        if (pa) pf_read(pa + ps * k);
        if constexpr (NV == 2) {
            const V w1 = ld(w + k * NV * VL + VL);
#pragma GCC unroll 16
            for (int i = 0; i < mr; ++i) {
                const V av = bc(r[i]);
                c0[i] += av * w0;
                c1[i] += av * w1;
            }
        } else {
#pragma GCC unroll 16
            for (int i = 0; i < mr; ++i) c0[i] += bc(r[i]) * w0;
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; ++i) {
        st(yt + i * ldy, c0[i]);
        if constexpr (NV == 2) st(yt + i * ldy + VL, c1[i]);
    }
}

using CvUkrFn = void (*)(int64_t, const float* const*, int64_t, const float*, const float*, float*,
                         int64_t, const float*, int64_t);
template <int NV, int... I>
constexpr auto make_cv_table(std::integer_sequence<int, I...>) {
    return std::array<CvUkrFn, sizeof...(I)>{&cv_ukr<I + 1, NV>...};
}
constexpr auto kCvUkr1 = make_cv_table<1>(std::make_integer_sequence<int, MR>{});
constexpr auto kCvUkr2 = make_cv_table<2>(std::make_integer_sequence<int, MR>{});

void cv_group(const ConvCvArgs& a, const float* x, const float* wp, const float* bias,
              const float* res, float* y, float* scratch, const ConvEpi& e) {
    const Conv2DGeom& g = a.g;
    const int64_t K = a.K, P = a.P, M = g.M, Mp = a.Mp, khw = g.kh * g.kw, HW = g.H * g.W;
    // Scratch: K row pointers (2 floats each), the bias padded to Mp, Yt (P x Mp), copied rows.
    const float** rows = reinterpret_cast<const float**>(scratch);
    float* bp = scratch + 2 * K;
    float* yt = bp + Mp;
    float* cp = yt + P * Mp;
    for (int64_t m = 0; m < Mp; ++m) bp[m] = bias && m < M ? bias[m] : 0.0f;
    constexpr uint32_t lanes = VL == 32 ? ~0u : (1u << VL) - 1;
    for (int64_t c = 0; c < g.C; ++c) {
        const float* xc = x + c * HW;
        for (int64_t t = 0; t < khw; ++t) {
            const float* s = xc + a.tap_d[t];
            if (a.tap_slot[t] < 0) {
                rows[c * khw + t] = s;
                continue;
            }
            float* d = cp + (c * a.ncopy + a.tap_slot[t]) * a.Pr;
            const uint64_t bits = a.tap_bits[t];
            for (int64_t p = 0; p < P; p += VL) st(d + p, ld_bits(s + p, uint32_t(bits >> p) & lanes));
            rows[c * khw + t] = d;
        }
    }
    const int64_t nb = (P + MR - 1) / MR;
    for (int64_t n0 = 0; n0 < Mp; n0 += NR) {
        const bool two = Mp - n0 >= NR;
        const float* wn = wp + n0 * K;
        // The packed weights (up to 2 MiB) are read once per run, from L3 or DRAM in a model,
        // where the first block of each panel would wait on them: every block prefetches its share
        // of the next panel (ps floats per k step: every line when nb >= 2) into L2 while the
        // blocks re-read this one from there. Past the last panel nothing (prefetches never fault
        // anyway, so the rounded-up share may run a little past the array).
        const int64_t nwx = std::min<int64_t>(NR, Mp - n0 - NR), ps = (nwx + nb - 1) / nb;
        for (int64_t blk = 0; blk < nb; ++blk) {
            const int64_t r0 = blk * P / nb, r1 = (blk + 1) * P / nb, mr = r1 - r0;
            const float* pa = nwx > 0 ? wn + NR * K + blk * ps * K : nullptr;
            (two ? kCvUkr2 : kCvUkr1)[size_t(mr - 1)](K, rows, r0, wn, bp + n0, yt + r0 * Mp + n0, Mp,
                                                      pa, ps);
        }
    }
    // Out to Y: VL x VL blocks transposed in registers, residual and activation (bias is in Yt).
    trans_out_fn(e.act)(yt, Mp, P, 0, M, nullptr, res, y, e, 0, P);
}

}  // namespace

void JIFFY_CONV_CAT(conv_cv_group_, JIFFY_CONV_SUFFIX)(const ConvCvArgs& a, const float* x,
                                                       const float* wp, const float* bias,
                                                       const float* res, float* y, float* scratch,
                                                       const ConvEpi& e) {
    cv_group(a, x, wp, bias, res, y, scratch, e);
}

}  // namespace jiffy::kernels
