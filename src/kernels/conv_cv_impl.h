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
template <int mr, int NV>
void cv_ukr(int64_t K, const float* const* rows, int64_t p0, const float* __restrict w,
            const float* b, float* yt, int64_t ldy) {
    V c0[mr], c1[mr];
    const V b0 = ld(b), b1 = NV == 2 ? ld(b + VL) : V{};
#pragma GCC unroll 16
    for (int i = 0; i < mr; ++i) c0[i] = b0, c1[i] = b1;
    for (int64_t k = 0; k < K; ++k) {
        const float* __restrict r = rows[k] + p0;
        const V w0 = ld(w + k * NV * VL);
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
                         int64_t);
template <int NV, int... I>
constexpr auto make_cv_table(std::integer_sequence<int, I...>) {
    return std::array<CvUkrFn, sizeof...(I)>{&cv_ukr<I + 1, NV>...};
}
constexpr auto kCvUkr1 = make_cv_table<1>(std::make_integer_sequence<int, MR>{});
constexpr auto kCvUkr2 = make_cv_table<2>(std::make_integer_sequence<int, MR>{});

// y[m, p] = act(yt[p, m] (+ res[m, p])) for m < M, p < P, in VL x VL blocks transposed in
// registers (log2(VL) rounds interleaving row i with row i + VL / 2). yt rows hold Mp >= M
// (a multiple of VL) floats.
template <ConvAct A>
void cv_transpose(const float* yt, int64_t Mp, int64_t P, int64_t M, const float* res, float* y,
                  const ConvEpi& e) {
    VI lo_m, hi_m;
    for (int i = 0; i < VL / 2; ++i) {
        lo_m[2 * i] = i;
        lo_m[2 * i + 1] = i + VL;
        hi_m[2 * i] = i + VL / 2;
        hi_m[2 * i + 1] = i + VL / 2 + VL;
    }
    for (int64_t p0 = 0; p0 < P; p0 += VL) {
        const int64_t np = std::min<int64_t>(VL, P - p0);
        for (int64_t m0 = 0; m0 < M; m0 += VL) {
            V r[VL];
            for (int i = 0; i < VL; ++i) r[i] = i < np ? ld(yt + (p0 + i) * Mp + m0) : V{};
            for (int round = 1; round < VL; round *= 2) {
                V o[VL];
                for (int i = 0; i < VL / 2; ++i) {
                    o[2 * i] = __builtin_shuffle(r[i], r[i + VL / 2], lo_m);
                    o[2 * i + 1] = __builtin_shuffle(r[i], r[i + VL / 2], hi_m);
                }
                for (int i = 0; i < VL; ++i) r[i] = o[i];
            }
            const int64_t nm = std::min<int64_t>(VL, M - m0);
            for (int64_t j = 0; j < nm; ++j) {
                float* yd = y + (m0 + j) * P + p0;
                const float* rd = res ? res + (m0 + j) * P + p0 : nullptr;
                if (np == VL) {
                    st(yd, act_v<A>(rd ? r[j] + ld(rd) : r[j], e));
                } else {
                    st_n(yd, act_v<A>(rd ? r[j] + ld_n(rd, np) : r[j], e), np);
                }
            }
        }
    }
}

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
        for (int64_t blk = 0; blk < nb; ++blk) {
            const int64_t r0 = blk * P / nb, r1 = (blk + 1) * P / nb, mr = r1 - r0;
            (two ? kCvUkr2 : kCvUkr1)[size_t(mr - 1)](K, rows, r0, wn, bp + n0, yt + r0 * Mp + n0, Mp);
        }
    }
    switch (e.act) {
        case ConvAct::kRelu: return cv_transpose<ConvAct::kRelu>(yt, Mp, P, M, res, y, e);
        case ConvAct::kLeakyRelu: return cv_transpose<ConvAct::kLeakyRelu>(yt, Mp, P, M, res, y, e);
        case ConvAct::kClip: return cv_transpose<ConvAct::kClip>(yt, Mp, P, M, res, y, e);
        case ConvAct::kHardSigmoid: return cv_transpose<ConvAct::kHardSigmoid>(yt, Mp, P, M, res, y, e);
        case ConvAct::kHardSwish: return cv_transpose<ConvAct::kHardSwish>(yt, Mp, P, M, res, y, e);
        case ConvAct::kNone: return cv_transpose<ConvAct::kNone>(yt, Mp, P, M, res, y, e);
        case ConvAct::kSigmoid:
        case ConvAct::kTanh:  // no vector form: transpose, then the epilogue per output row
            cv_transpose<ConvAct::kNone>(yt, Mp, P, M, nullptr, y, e);
            for (int64_t m = 0; m < M; ++m) epi_row(y + m * P, res ? res + m * P : nullptr, P, e);
            return;
    }
}

}  // namespace

void JIFFY_CONV_CAT(conv_cv_group_, JIFFY_CONV_SUFFIX)(const ConvCvArgs& a, const float* x,
                                                       const float* wp, const float* bias,
                                                       const float* res, float* y, float* scratch,
                                                       const ConvEpi& e) {
    cv_group(a, x, wp, bias, res, y, scratch, e);
}

}  // namespace jiffy::kernels
