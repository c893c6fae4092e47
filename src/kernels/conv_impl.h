// The conv kernels, written once over GCC/Clang vector extensions of VL floats and compiled per
// ISA: the includer defines JIFFY_CONV_VL (16 AVX-512, 8 AVX2, 4 portable), JIFFY_CONV_SUFFIX
// (the suffix of the exported entry points) and compiles with the ISA's -m flags. Everything
// except the three entry points has internal linkage, so the per-ISA copies never mix.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/activation.h"
#include "kernels/conv.h"
#include "kernels/prefetch.h"

#if (JIFFY_CONV_VL == 16 && defined(__AVX512F__)) || (JIFFY_CONV_VL == 8 && defined(__AVX2__))
#include <immintrin.h>
#endif
#if JIFFY_CONV_VL == 4 && defined(__ARM_NEON)
#include "kernels/arm/activation_neon.h"
#endif

#define JIFFY_CONV_CAT2(a, b) a##b
#define JIFFY_CONV_CAT(a, b) JIFFY_CONV_CAT2(a, b)

namespace jiffy::kernels {
namespace {

constexpr int VL = JIFFY_CONV_VL;
constexpr int NR = 2 * VL;
constexpr int MR = VL == 16 ? 12 : 6;
typedef float V __attribute__((vector_size(VL * sizeof(float))));
typedef int VI __attribute__((vector_size(VL * sizeof(int))));

inline V ld(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}
inline void st(float* p, V v) { std::memcpy(p, &v, sizeof(v)); }
inline V bc(float a) {  // broadcast (V{} + a would add 0: not an identity for a = -0)
    V v = {a};
    return __builtin_shuffle(v, VI{});
}
// The first 0 < n <= VL lanes of a vector: masked loads/stores where the ISA has them (a vector
// stored to a buffer and re-read narrower would stall on store forwarding); lanes past n load
// as zero and are never written.
inline V ld_n(const float* p, int64_t n) {
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
    return (V)_mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p);
#elif JIFFY_CONV_VL == 8 && defined(__AVX2__)
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return (V)_mm256_maskload_ps(p, m);
#else
    float t[VL] = {};
    for (int64_t j = 0; j < n; ++j) t[j] = p[j];
    return ld(t);
#endif
}
inline void st_n(float* p, V v, int64_t n) {
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
    _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1), (__m512)v);
#elif JIFFY_CONV_VL == 8 && defined(__AVX2__)
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(p, m, (__m256)v);
#else
    float t[VL];
    st(t, v);
    for (int64_t j = 0; j < n; ++j) p[j] = t[j];
#endif
}

// a > b ? a : b and a < b ? a : b per lane (b where either is NaN): x86's MAXPS / MINPS are
// defined as exactly that, one instruction on the FP add pipes, where GCC writes the vector
// extension's select as a compare into a mask and a blend (Zen 4: on the FMA pipes: the ReLU of
// a K = 16 1x1's 24 accumulators cost ~10% of its FMA cycles).
inline V vmax(V a, V b) {
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
    return (V)_mm512_max_ps((__m512)a, (__m512)b);
#elif JIFFY_CONV_VL == 8 && defined(__AVX2__)
    return (V)_mm256_max_ps((__m256)a, (__m256)b);
#else
    return a > b ? a : b;
#endif
}
inline V vmin(V a, V b) {
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
    return (V)_mm512_min_ps((__m512)a, (__m512)b);
#elif JIFFY_CONV_VL == 8 && defined(__AVX2__)
    return (V)_mm256_min_ps((__m256)a, (__m256)b);
#else
    return a < b ? a : b;
#endif
}

// x * Sigmoid(x): activation.h's vector form of this translation unit's ISA (the same values as
// act_apply's SiLU, bit for bit), per lane through act_scalar where there is none.
inline V silu_vec(V v) {
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
    return (V)silu_v512((__m512)v);
#elif JIFFY_CONV_VL == 8 && defined(__AVX2__)
    return (V)silu_v256((__m256)v);
#elif JIFFY_CONV_VL == 4 && defined(__ARM_NEON)
    return (V)silu_v128((float32x4_t)v);
#else
    Activation a;
    a.kind = ActKind::kSilu;
    V r;
    for (int i = 0; i < VL; ++i) r[i] = act_scalar(a, v[i]);
    return r;
#endif
}

template <ConvAct A>
inline V act_raw_v(V v, const ConvEpi& e) {
    if constexpr (A == ConvAct::kRelu) return vmax(v, V{});
    else if constexpr (A == ConvAct::kLeakyRelu) return v < V{} ? v * e.alpha : v;
    else if constexpr (A == ConvAct::kClip) return vmin(vmax(v, bc(e.alpha)), bc(e.beta));
    else if constexpr (A == ConvAct::kHardSigmoid)
        return vmin(vmax(v * e.alpha + e.beta, V{}), bc(1.0f));
    else if constexpr (A == ConvAct::kHardSwish)
        return v * vmin(vmax(v * (1.0f / 6.0f) + 0.5f, V{}), bc(1.0f));
    else if constexpr (A == ConvAct::kSilu) return silu_vec(v);
    else return v;
}

// std::max(v, lo) then std::min(., hi) per lane (the reference's order; NaN stays NaN).
inline V clamp_v(V v, const ConvEpi& e) {
    const V lo = bc(e.lo), hi = bc(e.hi);
    return vmin(hi, vmax(lo, v));  // lo > v ? lo : v, then hi < . ? hi : .
}

// v * scale + shift as one fused multiply-add per lane (the scalar reference's std::fma).
inline V affine_v(V v, const ConvEpi& e) {
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
    return (V)_mm512_fmadd_ps((__m512)v, _mm512_set1_ps(e.scale), _mm512_set1_ps(e.shift));
#elif JIFFY_CONV_VL == 8 && defined(__AVX2__) && defined(__FMA__)
    return (V)_mm256_fmadd_ps((__m256)v, _mm256_set1_ps(e.scale), _mm256_set1_ps(e.shift));
#elif JIFFY_CONV_VL == 4 && defined(__ARM_NEON)
    return (V)vfmaq_n_f32(vdupq_n_f32(e.shift), (float32x4_t)v, e.scale);
#else
    V r;
    for (int i = 0; i < VL; ++i) r[i] = std::fma(v[i], e.scale, e.shift);
    return r;
#endif
}

// The activation A, then the clamp and the affine where asked (kNone, and the deferred kinds,
// whose activation runs later through deferred_rows, pass through untouched).
template <ConvAct A>
inline V act_v(V v, const ConvEpi& e) {
    if constexpr (A == ConvAct::kNone || deferred_act_kind(A)) {
        return v;
    } else {
        v = act_raw_v<A>(v, e);
        if (e.clamp) v = clamp_v(v, e);
        return e.affine ? affine_v(v, e) : v;
    }
}

// f(std::integral_constant<ConvAct, A>{}) with A the instantiation a kernel uses for `act`: the
// activations applied on the registers as themselves (SiLU too), kNone for none and for Sigmoid /
// Tanh (left to deferred_act). The one switch of every kernel family's activation dispatch.
template <typename F>
inline decltype(auto) with_act(ConvAct act, F&& f) {
    switch (act) {
        case ConvAct::kRelu: return f(std::integral_constant<ConvAct, ConvAct::kRelu>{});
        case ConvAct::kLeakyRelu: return f(std::integral_constant<ConvAct, ConvAct::kLeakyRelu>{});
        case ConvAct::kClip: return f(std::integral_constant<ConvAct, ConvAct::kClip>{});
        case ConvAct::kHardSigmoid: return f(std::integral_constant<ConvAct, ConvAct::kHardSigmoid>{});
        case ConvAct::kHardSwish: return f(std::integral_constant<ConvAct, ConvAct::kHardSwish>{});
        case ConvAct::kSilu: return f(std::integral_constant<ConvAct, ConvAct::kSilu>{});
        default: return f(std::integral_constant<ConvAct, ConvAct::kNone>{});
    }
}

// Sigmoid / Tanh (then the clamp and the affine where asked) over n floats in place: the vector
// forms of kernels/activation.h (~1e-7 relative) of this translation unit's ISA.
inline void deferred_rows(float* y, int64_t n, const ConvEpi& e) {
    Activation a;
    a.kind = e.act == ConvAct::kSigmoid ? ActKind::kSigmoid : ActKind::kTanh;
#if JIFFY_CONV_VL == 16
    act_apply_avx512(a, y, y, n);
#elif JIFFY_CONV_VL == 8
    act_apply_avx2(a, y, y, n);
#elif defined(__ARM_NEON)
    act_apply_neon(a, y, y, n);
#else
    act_apply_scalar(a, y, y, n);
#endif
    if (!e.clamp && !e.affine) return;
    const auto post = [&e](V v) {
        if (e.clamp) v = clamp_v(v, e);
        return e.affine ? affine_v(v, e) : v;
    };
    int64_t i = 0;
    for (; i + VL <= n; i += VL) st(y + i, post(ld(y + i)));
    if (i < n) st_n(y + i, post(ld_n(y + i, n - i)), n - i);
}

// y[i] = act(y[i] (+ r[i])) over n values.
template <ConvAct A>
void epi_row_t(float* y, const float* r, int64_t n, const ConvEpi& e) {
    int64_t i = 0;
    if constexpr (deferred_act_kind(A)) {
        if (r) epi_row_t<ConvAct::kNone>(y, r, n, e);
        deferred_rows(y, n, e);
    } else {
        if (r)
            for (; i + VL <= n; i += VL) st(y + i, act_v<A>(ld(y + i) + ld(r + i), e));
        else
            for (; i + VL <= n; i += VL) st(y + i, act_v<A>(ld(y + i), e));
        if (i < n) {  // the tail through one vector
            V v = ld_n(y + i, n - i);
            if (r) v += ld_n(r + i, n - i);
            st_n(y + i, act_v<A>(v, e), n - i);
        }
    }
}

void epi_row(float* y, const float* r, int64_t n, const ConvEpi& e) {
    switch (e.act) {
        case ConvAct::kNone:
            if (r) epi_row_t<ConvAct::kNone>(y, r, n, e);
            break;
        case ConvAct::kRelu: epi_row_t<ConvAct::kRelu>(y, r, n, e); break;
        case ConvAct::kLeakyRelu: epi_row_t<ConvAct::kLeakyRelu>(y, r, n, e); break;
        case ConvAct::kClip: epi_row_t<ConvAct::kClip>(y, r, n, e); break;
        case ConvAct::kHardSigmoid: epi_row_t<ConvAct::kHardSigmoid>(y, r, n, e); break;
        case ConvAct::kHardSwish: epi_row_t<ConvAct::kHardSwish>(y, r, n, e); break;
        case ConvAct::kSigmoid: epi_row_t<ConvAct::kSigmoid>(y, r, n, e); break;
        case ConvAct::kTanh: epi_row_t<ConvAct::kTanh>(y, r, n, e); break;
        case ConvAct::kSilu: epi_row_t<ConvAct::kSilu>(y, r, n, e); break;
    }
}

// The Sigmoid / Tanh that kernels instantiated with A = kNone leave to one pass over their
// output (n contiguous floats, already biased and residual-added); nothing for the other
// activations, which ran in the kernel.
template <ConvAct A>
inline void deferred_act(float* y, int64_t n, const ConvEpi& e) {
    if constexpr (A == ConvAct::kNone)
        if (deferred_act_kind(e.act)) deferred_rows(y, n, e);
}

// ------------------------------------------------------------------------- GEMM microkernel

// Columns [0, nv) of a row pair (c0: the first VL, c1: the next VL). Full blocks (PART false)
// use plain vector loads/stores; partial ones masked loads/stores (nothing past nv is touched).
template <bool PART>
inline void ld_pair(const float* p, int64_t nv, V& v0, V& v1) {
    if constexpr (PART) {
        const int64_t n0 = std::min<int64_t>(nv, VL);
        v0 = ld_n(p, n0);
        v1 = ld_n(p + VL, nv - n0);
    } else {
        (void)nv;
        v0 = ld(p);
        v1 = ld(p + VL);
    }
}
template <bool PART>
inline void st_pair(float* p, int64_t nv, V v0, V v1) {
    if constexpr (PART) {
        const int64_t n0 = std::min<int64_t>(nv, VL);
        st_n(p, v0, n0);
        if (nv > VL) st_n(p + VL, v1, nv - VL);
    } else {
        (void)nv;
        st(p, v0);
        st(p + VL, v1);
    }
}

template <int mr, ConvAct A, bool PART>
inline void store_block(V (&c0)[mr], V (&c1)[mr], float* C, int64_t ldc, const float* R,
                        const ConvEpi& e, int64_t nv) {
#pragma GCC unroll 16
    for (int i = 0; i < mr; ++i) {
        V v0 = c0[i], v1 = c1[i];
        if (R) {
            V r0, r1;
            ld_pair<PART>(R + i * ldc, nv, r0, r1);
            v0 += r0;
            v1 += r1;
        }
        st_pair<PART>(C + i * ldc, nv, act_v<A>(v0, e), act_v<A>(v1, e));
    }
}

// Software prefetches (cache misses the hardware prefetchers do not hide: weights streamed from
// DRAM once per layer, output lines whose first write would otherwise wait for their read-for-
// ownership, residual rows of another plane each that would stall the epilogue on L3): pa (may
// be null) one line per k step, pa + 16 * k, into L2; pc (may be null) the mr rows pc + i * ldc
// (their first NR columns) for writing; pr (may be null) the mr rows pr + i * ldc for reading.
inline __attribute__((always_inline)) void pf_read(const float* p) { __builtin_prefetch(p, 0, 2); }
// pf_write: kernels/prefetch.h.
template <int mr>
inline __attribute__((always_inline)) void pf_row(float* pc, int64_t ldc, int64_t i) {
    pf_write(pc + i * ldc);
    if constexpr (NR * sizeof(float) > 64) pf_write(pc + i * ldc + 16);
}
template <int mr>
inline __attribute__((always_inline)) void pf_rrow(const float* pr, int64_t ldc, int64_t i) {
    __builtin_prefetch(pr + i * ldc, 0, 3);
    if constexpr (NR * sizeof(float) > 64) __builtin_prefetch(pr + i * ldc + 16, 0, 3);
}

// C[mr x nv] (=|+=) a[kc x mr] . b[kc x NR]; `first`: start from the bias (per row, may be null)
// instead of C; `last`: add R (may be null) and apply the activation. C, R: NR columns, or the
// first nv < NR with PART (masked).
// IND: B row k is b + offs[k] (implicit GEMM over the image) instead of b + k * NR (packed).
// MSK (AVX-512 only; with IND): B row k is loaded under the lane mask tm[t] (low VL bits: the
// first vector, high: the second), t running from t0 through 0..khw-1 cyclically with k; with
// KT > 0 (= khw), t0 == 0 and kc a multiple of KT, unrolled by KT with the masks in registers.
// HALF (packed, with PART: nv <= VL): only the first vector of columns is loaded and multiplied
// (a panel's tail of a few pixels costs half a full one).
template <int mr, bool IND = false, bool PART = false, bool MSK = false, int KT = 0, bool HALF = false>
void ukr(int64_t kc, const float* __restrict a, const float* __restrict b, float* C, int64_t ldc,
         bool first, const float* bias, bool last, const float* R, const ConvEpi& e,
         const int64_t* offs = nullptr, int64_t nv = NR, const uint32_t* tm = nullptr,
         int64_t t0 = 0, int64_t khw = 1, const float* pa = nullptr, float* pc = nullptr,
         const float* pr = nullptr) {
    V c0[mr], c1[mr];
#pragma GCC unroll 16
    for (int i = 0; i < mr; ++i) {
        if (first) {
            c0[i] = c1[i] = bias ? bc(bias[i]) : V{};
        } else {
            ld_pair<PART>(C + i * ldc, nv, c0[i], c1[i]);
        }
    }
    auto step = [&](int64_t k, V b0, V b1) __attribute__((always_inline)) {
#pragma GCC unroll 16
        for (int i = 0; i < mr; ++i) {
            const V av = bc(a[k * mr + i]);
            c0[i] += av * b0;
            if constexpr (!HALF) c1[i] += av * b1;
        }
    };
    if constexpr (MSK) {
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
        if constexpr (KT > 0) {  // kc % KT == 0, t0 == 0: the KT tap masks stay in registers
            __mmask16 m0[KT], m1[KT];
            for (int u = 0; u < KT; ++u) m0[u] = __mmask16(tm[u]), m1[u] = __mmask16(tm[u] >> 16);
            for (int64_t k = 0; k < kc; k += KT)
#pragma GCC unroll 4
                for (int u = 0; u < KT; ++u) {
                    const float* bk = b + offs[k + u];
                    step(k + u, (V)_mm512_maskz_loadu_ps(m0[u], bk),
                         (V)_mm512_maskz_loadu_ps(m1[u], bk + VL));
                }
        } else {
            int64_t t = t0;
            for (int64_t k = 0; k < kc; ++k) {
                const float* bk = b + offs[k];
                const uint32_t m = tm[t];
                step(k, (V)_mm512_maskz_loadu_ps(__mmask16(m), bk),
                     (V)_mm512_maskz_loadu_ps(__mmask16(m >> 16), bk + VL));
                if (++t == khw) t = 0;
            }
        }
#else
        (void)tm, (void)t0, (void)khw, (void)step;
#endif
    } else {
        auto body = [&](int64_t k) __attribute__((always_inline)) {
            const float* bk = IND ? b + offs[k] : b + k * NR;
            if constexpr (HALF)
                step(k, ld(bk), V{});
            else
                step(k, ld(bk), ld(bk + VL));
        };
        // The prefetches' tests kept out of the main loop: the output rows in the first mr
        // steps, the next block's weights (pa) in a loop of their own.
        int64_t k = 0;
        if (pc || pr)
            for (; k < std::min<int64_t>(kc, mr); ++k) {
                if (pa) pf_read(pa + 16 * k);
                if (pc) pf_row<mr>(pc, ldc, k);
                if (pr) pf_rrow<mr>(pr, ldc, k);
                body(k);
            }
        if (pa)
            for (; k < kc; ++k) {
                pf_read(pa + 16 * k);
                body(k);
            }
        else
            for (; k < kc; ++k) body(k);
    }
    if (pc)
        for (int64_t i = kc; i < mr; ++i) pf_row<mr>(pc, ldc, i);
    if (pr)
        for (int64_t i = kc; i < mr; ++i) pf_rrow<mr>(pr, ldc, i);
    if (!last) {
        store_block<mr, ConvAct::kNone, PART>(c0, c1, C, ldc, nullptr, e, nv);
        return;
    }
    switch (e.act) {
        case ConvAct::kRelu: store_block<mr, ConvAct::kRelu, PART>(c0, c1, C, ldc, R, e, nv); break;
        case ConvAct::kLeakyRelu:
            store_block<mr, ConvAct::kLeakyRelu, PART>(c0, c1, C, ldc, R, e, nv);
            break;
        case ConvAct::kClip: store_block<mr, ConvAct::kClip, PART>(c0, c1, C, ldc, R, e, nv); break;
        case ConvAct::kHardSigmoid:
            store_block<mr, ConvAct::kHardSigmoid, PART>(c0, c1, C, ldc, R, e, nv);
            break;
        case ConvAct::kHardSwish:
            store_block<mr, ConvAct::kHardSwish, PART>(c0, c1, C, ldc, R, e, nv);
            break;
        case ConvAct::kNone: store_block<mr, ConvAct::kNone, PART>(c0, c1, C, ldc, R, e, nv); break;
        case ConvAct::kSilu: store_block<mr, ConvAct::kSilu, PART>(c0, c1, C, ldc, R, e, nv); break;
        case ConvAct::kSigmoid:
        case ConvAct::kTanh:
            store_block<mr, ConvAct::kNone, PART>(c0, c1, C, ldc, R, e, nv);
            for (int i = 0; i < mr; ++i) deferred_rows(C + i * ldc, nv, e);
            break;
    }
}

// Block with nv <= NR valid columns: full blocks plain, partial ones masked (one vector of
// columns when nv <= VL).
template <int mr>
void ukr_nv(int64_t kc, const float* a, const float* b, float* C, int64_t ldc, int64_t nv,
            bool first, const float* bias, bool last, const float* R, const ConvEpi& e,
            const float* pa, float* pc, const float* pr) {
    if (nv == NR)
        ukr<mr>(kc, a, b, C, ldc, first, bias, last, R, e, nullptr, NR, nullptr, 0, 1, pa, pc, pr);
    else if (nv <= VL)
        ukr<mr, false, true, false, 0, true>(kc, a, b, C, ldc, first, bias, last, R, e, nullptr, nv,
                                             nullptr, 0, 1, pa, pc, pr);
    else
        ukr<mr, false, true>(kc, a, b, C, ldc, first, bias, last, R, e, nullptr, nv, nullptr, 0, 1,
                             pa, pc, pr);
}

using UkrFn = void (*)(int64_t, const float*, const float*, float*, int64_t, int64_t, bool,
                       const float*, bool, const float*, const ConvEpi&, const float*, float*,
                       const float*);

template <int... I>
constexpr auto make_ukr_table(std::integer_sequence<int, I...>) {
    return std::array<UkrFn, sizeof...(I)>{&ukr_nv<I + 1>...};
}
constexpr auto kUkr = make_ukr_table(std::make_integer_sequence<int, MR>{});

template <int mr>
void ukr_ind(int64_t kc, const float* a, const float* b, float* C, int64_t ldc, bool first,
             const float* bias, bool last, const float* R, const ConvEpi& e, const int64_t* offs,
             const float* pa, float* pc, const float* pr) {
    ukr<mr, true>(kc, a, b, C, ldc, first, bias, last, R, e, offs, NR, nullptr, 0, 1, pa, pc, pr);
}

using UkrIndFn = void (*)(int64_t, const float*, const float*, float*, int64_t, bool, const float*,
                          bool, const float*, const ConvEpi&, const int64_t*, const float*, float*,
                          const float*);
template <int... I>
constexpr auto make_ukr_ind_table(std::integer_sequence<int, I...>) {
    return std::array<UkrIndFn, sizeof...(I)>{&ukr_ind<I + 1>...};
}
constexpr auto kUkrInd = make_ukr_ind_table(std::make_integer_sequence<int, MR>{});

#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
template <int mr, int KT>
void ukr_msk(int64_t kc, const float* a, const float* b, float* C, int64_t ldc, int64_t nv,
             bool first, const float* bias, bool last, const float* R, const ConvEpi& e,
             const int64_t* offs, const uint32_t* tm, int64_t t0, int64_t khw) {
    if (nv == NR)
        ukr<mr, true, false, true, KT>(kc, a, b, C, ldc, first, bias, last, R, e, offs, nv, tm, t0, khw);
    else
        ukr<mr, true, true, true, KT>(kc, a, b, C, ldc, first, bias, last, R, e, offs, nv, tm, t0, khw);
}
using UkrMskFn = void (*)(int64_t, const float*, const float*, float*, int64_t, int64_t, bool,
                          const float*, bool, const float*, const ConvEpi&, const int64_t*,
                          const uint32_t*, int64_t, int64_t);
template <int KT, int... I>
constexpr auto make_ukr_msk_table(std::integer_sequence<int, I...>) {
    return std::array<UkrMskFn, sizeof...(I)>{&ukr_msk<I + 1, KT>...};
}
constexpr auto kUkrMsk = make_ukr_msk_table<0>(std::make_integer_sequence<int, MR>{});
constexpr auto kUkrMsk3 = make_ukr_msk_table<3>(std::make_integer_sequence<int, MR>{});

// Masked implicit GEMM (ConvGemmArgs::masked): output pixel p reads x[p + offs[k]] for B row k,
// under per-panel lane masks (tap inside the image, p < P); Y is written in place.
void masked_group(const ConvGemmArgs& a, const float* x, const float* wp, const float* bias,
                  const float* res, float* y, float* scratch, const ConvEpi& e) {
    const Conv2DGeom& g = a.g;
    const int64_t K = a.K, M = g.M, P = a.P, W = g.W, khw = g.kh * g.kw;
    const int64_t nb = (M + MR - 1) / MR;
    uint32_t* tm = reinterpret_cast<uint32_t*>(scratch);  // khw masks per panel of the tile
    auto range = [](int64_t lo, int64_t hi) -> uint32_t {  // lanes [lo, hi) of 0..NR-1
        lo = std::clamp<int64_t>(lo, 0, NR);
        hi = std::clamp<int64_t>(hi, 0, NR);
        return hi <= lo ? 0u : uint32_t(((uint64_t(1) << hi) - 1) & ~((uint64_t(1) << lo) - 1));
    };
    // A pixel split (run_pixels): output pixels [pb, pe), NR-aligned, so no panel crosses pe.
    const int64_t qb = a.range_begin(), qe = a.range_end(P);
    for (int64_t q0 = qb; q0 < qe; q0 += a.tile) {
        const int64_t nq = std::min(a.tile, qe - q0);
        for (int64_t j = 0; j * NR < nq; ++j) {
            const int64_t q = q0 + j * NR, s = q % W;
            for (int64_t ky = 0; ky < g.kh; ++ky) {
                // Output rows whose tap row ky is inside the image, and pixels < P.
                const int64_t r0 = std::clamp<int64_t>(g.ph - ky * g.dh, 0, g.OH);
                const int64_t r1 = std::clamp<int64_t>(g.H + g.ph - ky * g.dh, 0, g.OH);
                const uint32_t vm = range(r0 * W - q, r1 * W - q);
                for (int64_t kx = 0; kx < g.kw; ++kx)
                    tm[j * khw + ky * g.kw + kx] = vm & a.hmask[kx * W + s];
            }
        }
        for (int64_t k0 = 0; k0 < K; k0 += a.kc) {
            const int64_t kc = std::min(a.kc, K - k0);
            const bool first = k0 == 0, last = k0 + kc == K;
            const bool unroll3 = khw == 3 && k0 % 3 == 0 && kc % 3 == 0;
            for (int64_t j = 0; j * NR < nq; ++j) {
                const int64_t q = q0 + j * NR, nv = std::min<int64_t>(NR, nq - j * NR);
                for (int64_t blk = a.blocks_begin(); blk < a.blocks_end(nb); ++blk) {
                    const int64_t r0 = blk * M / nb, r1 = (blk + 1) * M / nb, mr = r1 - r0;
                    (unroll3 ? kUkrMsk3 : kUkrMsk)[size_t(mr - 1)](kc, wp + r0 * K + k0 * mr, x + q, y + r0 * P + q, P, nv,
                                            first, bias ? bias + r0 : nullptr, last,
                                            res ? res + r0 * P + q : nullptr, e, a.offs + k0,
                                            tm + j * khw, k0 % khw, khw);
                }
            }
        }
    }
}
#endif

// ------------------------------------------------------------------------- im2col into panels

// Copies 0 < n < VL floats with overlapping vectors of 8 or 4 floats (a scalar loop here would
// become a call to memmove).
template <int W>
inline void copy_w(float* d, const float* s) {
    typedef float VW __attribute__((vector_size(W * sizeof(float))));
    VW v;
    std::memcpy(&v, s, sizeof(v));
    std::memcpy(d, &v, sizeof(v));
}
inline void copy_short(float* __restrict d, const float* __restrict s, int64_t n) {
    if (VL > 8 && n >= 8) {
        copy_w<8>(d, s);
        copy_w<8>(d + n - 8, s + n - 8);
    } else if (VL > 4 && n >= 4) {
        copy_w<4>(d, s);
        copy_w<4>(d + n - 4, s + n - 4);
    } else {
        if (n > 0) d[0] = s[0];
        if (n > 1) d[1] = s[1];
        if (n > 2) d[2] = s[2];
    }
}

// Copies n floats (d and s do not overlap).
inline void copy_n(float* __restrict d, const float* __restrict s, int64_t n) {
    if (n == NR) {
        st(d, ld(s));
        st(d + VL, ld(s + VL));
        return;
    }
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        st(d + i, ld(s + i));
        asm("" : "+r"(i));  // keeps GCC from turning the loop into a call to memmove
    }
    if (i == n) return;
    if (n >= VL)
        st(d + n - VL, ld(s + n - VL));
    else
        copy_short(d, s, n);
}

// d[o] = s[2 * o] for o < n (n > 0): two vector loads and a shuffle per VL outputs; the last
// (partial) vector reads and writes only the elements it needs (masked).
inline void copy_s2(float* __restrict d, const float* __restrict s, int64_t n) {
    VI m;
    for (int i = 0; i < VL; ++i) m[i] = 2 * i;
    int64_t o = 0;
    for (; o + VL < n; o += VL) st(d + o, __builtin_shuffle(ld(s + 2 * o), ld(s + 2 * o + VL), m));
    const int64_t t = n - o, span = 2 * t - 1;
    const V lo = ld_n(s + 2 * o, std::min<int64_t>(span, VL));
    const V hi = span > VL ? ld_n(s + 2 * o + VL, span - VL) : V{};
    st_n(d + o, __builtin_shuffle(lo, hi, m), t);
}

// d[o] = s[o * sw] for o < n (n > 0): copy_n, copy_s2, else one float at a time.
inline __attribute__((always_inline)) void copy_strided(float* __restrict d, const float* __restrict s,
                                                        int64_t n, int64_t sw) {
    if (sw == 1)
        copy_n(d, s, n);
    else if (sw == 2)
        copy_s2(d, s, n);
    else
        for (int64_t o = 0; o < n; ++o) d[o] = s[o * sw];
}

// Zeroes n >= 0 floats with vector stores (no call to memset for the few-float runs here).
inline void zero_n(float* d, int64_t n) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        st(d + i, V{});
        asm("" : "+r"(i));  // no memset call either (GCC recognizes the loop)
    }
    if (i < n) st_n(d + i, V{}, n - i);
}

// Copies one group's C planes into the zero-padded HP x WP image xp (only its rows [py0, py1):
// a pixel-range run reads no others).
void pad_image(const ConvGemmArgs& a, const float* x, float* xp, int64_t py0, int64_t py1) {
    const Conv2DGeom& g = a.g;
    const int64_t HP = a.HP, WP = a.WP;
    const int64_t x0 = g.pw, x1 = std::min(WP, g.pw + g.W);  // destination columns with data
    for (int64_t c = 0; c < g.C; ++c) {
        float* pc = xp + c * a.PS;
        // zero_n, not memset: a call per few-float border run (16 rows x 2 borders x 512
        // channels) was ~7% of the perf samples of ResNet-50's 3x3 s2 512 -> 512 on 14 -> 7.
        zero_n(pc + HP * WP, a.PS - HP * WP);
        for (int64_t py = py0; py < py1; ++py) {
            float* row = pc + py * WP;
            const int64_t iy = py - g.ph;
            if (iy < 0 || iy >= g.H || x1 <= x0) {
                zero_n(row, WP);
                continue;
            }
            zero_n(row, x0);
            copy_n(row + x0, x + (c * g.H + iy) * g.W, x1 - x0);
            zero_n(row + x1, WP - x1);
        }
    }
}

// Copies one group's C planes into the stride-1 planes of the split mode (ConvGemmArgs::split):
// plane (c, r, kx) row i, column j = x[c][i * sh + rph[r] - ph][j * sw + kx * dw - pw], zero
// outside the image; the slack after each plane and channel is zeroed too. Each input row is
// read once per tap column; with sw == 2 and dw == 1, tap column kx >= 2 is tap column kx - 2
// shifted by one (a copy of the row just written, plus its last element). Stem of MobileNetV2
// (3 x 224 x 224 into 18 planes of 113 x 112): 50 -> ~20 us against per-tap strided copies
// with memset calls for the borders.
// Plane rows [i0, i0 + HQ) only (tiled planes, ConvGemmArgs::srows), as rows 0.. of xp.
void split_image(const ConvGemmArgs& a, const float* x, float* xp, int64_t i0, int64_t HQ) {
    const Conv2DGeom& g = a.g;
    const int64_t OW = g.OW, kw = g.kw, planes = a.nry * kw, PQ = a.PQ;
    const bool shift2 = g.sw == 2 && g.dw == 1;
    for (int64_t c = 0; c < g.C; ++c) {
        const float* xc = x + c * g.H * g.W;
        float* pc = xp + c * a.PS;
        zero_n(pc + planes * PQ, a.PS - planes * PQ);
        for (int64_t r = 0; r < a.nry; ++r) {
            float* pr = pc + r * kw * PQ;
            for (int64_t kx = 0; kx < kw; ++kx) zero_n(pr + kx * PQ + HQ * OW, PQ - HQ * OW);
            for (int64_t i = 0; i < HQ; ++i) {
                const int64_t iy = (i0 + i) * g.sh + a.rph[r] - g.ph;
                if (iy < 0 || iy >= g.H) {
                    for (int64_t kx = 0; kx < kw; ++kx) zero_n(pr + kx * PQ + i * OW, OW);
                    continue;
                }
                const float* xr = xc + iy * g.W;
                for (int64_t kx = 0; kx < kw; ++kx) {
                    float* d = pr + kx * PQ + i * OW;
                    const int64_t cx = kx * g.dw - g.pw;  // input column of output column 0
                    if (shift2 && kx >= 2 && OW > 1) {
                        copy_n(d, d - 2 * PQ + 1, OW - 1);
                        const int64_t ix = 2 * (OW - 1) + cx;
                        d[OW - 1] = ix >= 0 && ix < g.W ? xr[ix] : 0.0f;
                        continue;
                    }
                    // Output columns [j0, j1) read inside the row: input column j * sw + cx.
                    const int64_t j0 = std::min(OW, cx >= 0 ? 0 : (g.sw - 1 - cx) / g.sw);
                    const int64_t j1 =
                        std::max(j0, g.W - 1 - cx >= 0 ? std::min(OW, (g.W - 1 - cx) / g.sw + 1) : 0);
                    zero_n(d, j0);
                    const float* __restrict s = xr + j0 * g.sw + cx;
                    if (j1 > j0) copy_strided(d + j0, s, j1 - j0, g.sw);
                    zero_n(d + j1, OW - j1);
                }
            }
        }
    }
}

// Writes the im2col of output pixels [p0, p0 + np) as ceil(np / NR) panels of K x NR floats.
// x is an HP x WP image per channel in which every tap of every output pixel is in bounds.
void pack_tile(const ConvGemmArgs& a, const float* x, int64_t p0, int64_t np, float* dst) {
    const Conv2DGeom& g = a.g;
    const int64_t K = a.K, HW = a.PS, khw = g.kh * g.kw, WP = a.WP;
    for (int64_t j = 0; j * NR < np; ++j) {
        float* d = dst + j * K * NR;
        const int64_t ps = p0 + j * NR, cnt = std::min<int64_t>(NR, np - j * NR);
        if (a.pointwise) {
            for (int64_t c = 0; c < K; ++c) copy_n(d + c * NR, x + c * HW + ps, cnt);
        } else {
            // Runs of pixels within one output row.
            for (int64_t l = 0; l < cnt;) {
                const int64_t p = ps + l, oy = p / g.OW, ox0 = p - oy * g.OW;
                const int64_t run = std::min(cnt - l, g.OW - ox0);
                for (int64_t c = 0; c < g.C; ++c)
                    for (int64_t ky = 0; ky < g.kh; ++ky) {
                        const float* row = x + c * HW + (oy * g.sh + ky * g.dh) * WP + ox0 * g.sw;
                        float* dk = d + (c * khw + ky * g.kw) * NR + l;
                        for (int64_t kx = 0; kx < g.kw; ++kx, dk += NR) {
                            copy_strided(dk, row + kx * g.dw, run, g.sw);
                        }
                    }
                l += run;
            }
        }
        if (cnt < NR)
            for (int64_t k = 0; k < K; ++k)
                for (int64_t l = cnt; l < NR; ++l) d[k * NR + l] = 0.0f;
    }
}

// The most cache lines of input implicit_group prefetches per tile of split planes (256 KiB).
constexpr int64_t kSplitPrefetchLines = 4096;

// Stride-1 convs as an implicit GEMM over the (padded) image: with q = oy * WP + ox on the padded
// grid, col[k, q] = xp[q + offs[k]], offs[k] = c * HP * WP + ky * dh * WP + kx * dw, so each B row
// is read straight from the image (no im2col). Positions with ox >= OW are computed and dropped:
// when WP != OW the tile goes to a buffer and its valid columns are copied out (with the
// epilogue); the last panels, whose reads would pass the end of the image, are packed.
void implicit_group(const ConvGemmArgs& a, const float* x, const float* wp, const float* bias,
                    const float* res, float* y, float* scratch, const ConvEpi& e) {
    const Conv2DGeom& g = a.g;
    const int64_t K = a.K, M = a.g.M, WP = a.WP, OW = g.OW, P = a.P;
    const int64_t nb = (M + MR - 1) / MR;
    const int64_t bb = a.blocks_begin(), be = a.blocks_end(nb);  // a channel split's row blocks
    const int64_t Q = (g.OH - 1) * WP + OW;     // positions on the padded grid
    const bool direct = WP == OW;               // q == p: write Y in place
    float* buf = scratch;                       // M x tile (buffered mode)
    float* panel = scratch + M * a.ldbuf;       // K x NR packed tail panel
    const float* xin = x;
    float* xs = panel + K * NR;  // the padded image or the split planes
    // A pixel split of the buffered (padded) grid, output rows [oy0, oy1) (ConvGemm::pixel_align:
    // whole rows): positions [oy0 * WP, oy1 * WP), and only the padded rows they read (up to the
    // last panel's NR positions past the range) copied.
    int64_t qbeg = a.range_begin(), qend = a.range_end(Q);
    int64_t py0 = 0, py1 = a.HP;
    if (!direct && !a.split && a.pe > 0) {
        const int64_t oy0 = a.pb / OW, oy1 = std::min(g.OH, (a.pe + OW - 1) / OW);
        qbeg = oy0 * WP;
        qend = std::min(Q, oy1 * WP);
        py0 = oy0;  // stride 1: position q reads padded rows from q / WP on
        py1 = std::min(a.HP, (qend + NR - 2 + a.offs_max - (g.C - 1) * a.PS) / WP + 1);
    }
    if (a.split && a.srows == 0) {
        split_image(a, x, xs, 0, a.HQ);
        x = xs;
    } else if (a.split) {
        x = xs;  // tiled planes: filled per tile below
    } else if (a.pad_copy) {
        pad_image(a, x, xs, py0, py1);
        x = xs;
    }
    // B row k of position q is x[q - qb + offs[k]] (qb: the first position of a tile of split
    // planes, else 0); the panel at q is direct iff q - qb + NR <= limit.
    const int64_t span = g.C * a.PS, limit = span - a.offs_max;
    const ConvEpi none{};
    // A pixel split, output pixels [pb, pe): run_pixels sets pe only for the modes
    // ConvGemm::pixel_align allows here (tiled split planes, whole tiles; an unpadded 1x1 read
    // in place; both with q == p) and the buffered grid by whole output rows (above).
    for (int64_t q0 = qbeg; q0 < qend; q0 += a.tile) {
        const int64_t nq = std::min(a.tile, qend - q0);
        int64_t qb = 0;
        // Tiled split planes: the input rows of the next tile (per channel one contiguous run of
        // lines, at most kSplitPrefetchLines in all), prefetched into L2, spread over this tile's
        // panels. The image usually comes from DRAM (a model's input): the MobileNetV3 stem
        // (3 -> 16 3x3 s2 on 224) in the model 240-289 -> 196-221 us, MobileNetV2's (3 -> 32)
        // 390-428 -> 354-383 us (4 interleaved profile runs each, Zen 4): the hardware
        // prefetchers do not run ahead of split_image's bursts.
        const float* nx = nullptr;
        int64_t nx_lines = 0, nx_per_c = 0;
        if (a.srows) {
            const int64_t oy0 = q0 / OW;
            split_image(a, xin, xs, oy0, std::min(a.HQ - oy0, a.srows + a.HQ - g.OH));
            qb = q0;
            const int64_t ny0 = oy0 + a.srows;
            if (ny0 < g.OH) {
                const int64_t iy0 = std::max<int64_t>(0, ny0 * g.sh - g.ph);
                const int64_t iy1 = std::min(g.H, (std::min(g.OH, ny0 + a.srows) - 1) * g.sh - g.ph +
                                                      (g.kh - 1) * g.dh + 1);
                nx_per_c = ((iy1 - iy0) * g.W + 15) / 16;
                if (iy1 > iy0 && g.C * nx_per_c <= kSplitPrefetchLines) {
                    nx = xin + iy0 * g.W;
                    nx_lines = g.C * nx_per_c;
                }
            }
        }
        const int64_t npan = (nq + NR - 1) / NR;
        float* C = direct ? y + q0 : buf;
        const int64_t ldc = direct ? P : a.ldbuf;
        for (int64_t k0 = 0; k0 < K; k0 += a.kc) {
            const int64_t kc = std::min(a.kc, K - k0);
            const bool first = k0 == 0, last = k0 + kc == K;
            for (int64_t j = 0; j * NR < nq; ++j) {
                const int64_t q = q0 + j * NR;
                const int64_t nv = direct ? std::min<int64_t>(NR, nq - j * NR) : NR;
                if (nx && first) {
                    // Lines [l, le) of this panel: line l is channel l / nx_per_c's line
                    // l % nx_per_c (one division per panel: one per line cost as much as the
                    // panel's FMAs on the 3-channel stems).
                    const int64_t l0 = j * nx_lines / npan, le = (j + 1) * nx_lines / npan;
                    int64_t c = l0 / nx_per_c, o = l0 - c * nx_per_c;
                    const float* pl = nx + c * g.H * g.W + o * 16;
                    for (int64_t l = l0; l < le; ++l) {
                        __builtin_prefetch(pl, 0, 2);
                        pl += 16;
                        if (++o == nx_per_c) o = 0, pl += g.H * g.W - nx_per_c * 16;
                    }
                }
                // Partial panels in direct mode are packed too: the indirect kernel stores NR.
                const bool packed = q - qb + NR > limit || nv < NR;
                if (packed) {
                    // Pack this K chunk of the panel (positions past the image read as zero).
                    for (int64_t k = 0; k < kc; ++k) {
                        const int64_t o = a.offs[k0 + k] + q - qb;
                        const int64_t avail = std::clamp<int64_t>(span - o, 0, NR);
                        for (int64_t l = 0; l < NR; ++l) panel[k * NR + l] = l < avail ? x[o + l] : 0.0f;
                    }
                }
                for (int64_t blk = bb; blk < be; ++blk) {
                    const int64_t r0 = blk * M / nb, r1 = (blk + 1) * M / nb, mr = r1 - r0;
                    float* Cb = C + r0 * ldc + j * NR;
                    const float* bb = bias ? bias + r0 : nullptr;
                    const float* Rb = direct && res ? res + r0 * P + q : nullptr;
                    // Buffered: the activation still runs in the kernel unless a residual
                    // has to be added first (in the copy-out).
                    const ConvEpi& eb = direct || !res ? e : none;
                    // Prefetch: the next block's weights on the tile's first panel, the next
                    // panel's output rows on the first K chunk (direct mode: Y itself).
                    const float* pa = j == 0 && blk + 1 < be && (q0 == 0 || M * K > 131072)
                                          ? wp + r1 * K + k0 * ((blk + 2) * M / nb - r1)
                                          : nullptr;
                    float* pc = direct && first && q + NR < Q ? Cb + NR : nullptr;
                    const float* pr = Rb && last && q + NR < Q ? Rb + NR : nullptr;
                    if (packed)
                        kUkr[size_t(mr - 1)](kc, wp + r0 * K + k0 * mr, panel, Cb, ldc, nv, first,
                                             bb, last, Rb, eb, pa, pc, pr);
                    else
                        kUkrInd[size_t(mr - 1)](kc, wp + r0 * K + k0 * mr, x + q - qb, Cb, ldc, first,
                                                bb, last, Rb, eb, a.offs + k0, pa, pc, pr);
                }
            }
        }
        if (direct) continue;
        // Copy the valid columns of the tile out to Y, applying the epilogue.
        const bool epi = res != nullptr;
        for (int64_t oy = q0 / WP; oy * WP < q0 + nq && oy < g.OH; ++oy) {
            const int64_t lo = std::max<int64_t>(0, q0 - oy * WP);
            const int64_t hi = std::min<int64_t>(OW, q0 + nq - oy * WP);
            if (hi <= lo) continue;
            for (int64_t m = bb * M / nb; m < be * M / nb; ++m) {
                float* yd = y + m * P + oy * OW + lo;
                copy_n(yd, buf + m * a.ldbuf + oy * WP + lo - q0, hi - lo);
                if (epi) epi_row(yd, res ? res + m * P + oy * OW + lo : nullptr, hi - lo, e);
            }
        }
    }
}

// r[i] <- column i of the VL x VL block whose rows are r: log2(VL) rounds interleaving row i with
// row i + VL / 2 (the perfect shuffle; after log2(VL) rounds each row holds one column).
inline __attribute__((always_inline)) void transpose_block(V (&r)[VL]) {
    VI lo_m, hi_m;
    for (int i = 0; i < VL / 2; ++i) {
        lo_m[2 * i] = i;
        lo_m[2 * i + 1] = i + VL;
        hi_m[2 * i] = i + VL / 2;
        hi_m[2 * i + 1] = i + VL / 2 + VL;
    }
#pragma GCC unroll 4
    for (int round = 1; round < VL; round *= 2) {
        V o[VL];
#pragma GCC unroll 16
        for (int i = 0; i < VL / 2; ++i) {
            o[2 * i] = __builtin_shuffle(r[i], r[i + VL / 2], lo_m);
            o[2 * i + 1] = __builtin_shuffle(r[i], r[i + VL / 2], hi_m);
        }
#pragma GCC unroll 16
        for (int i = 0; i < VL; ++i) r[i] = o[i];
    }
}

// Y rows [m0, m1), pixels [pa, pb) of P = Yt[pa .. pb, m0 .. m1)^T (+ bias, may be null) (+ res), then the activation A, from the P x Mp Yt (also the channel-vector conv's
// output stage, conv_cv_impl.h): VL x VL blocks transposed in registers (transpose_block).
// Sigmoid / Tanh (A = kNone) run per row afterwards. Each output is computed alike whatever the
// range (the Winograd tile split writes its pixel rows as they complete).
template <ConvAct A>
void trans_out(const float* yt, int64_t Mp, int64_t P, int64_t m0, int64_t m1, const float* bias,
               const float* res, float* y, const ConvEpi& e, int64_t pa, int64_t pb) {
    for (int64_t p0 = pa; p0 < pb; p0 += VL) {
        const int64_t np = std::min<int64_t>(VL, pb - p0);
        for (int64_t c0 = m0; c0 < m1; c0 += VL) {  // c0 + VL <= Mp: the loads stay in Yt
            V r[VL];
            for (int i = 0; i < VL; ++i) r[i] = i < np ? ld(yt + (p0 + i) * Mp + c0) : V{};
            transpose_block(r);
            const int64_t nm = std::min<int64_t>(VL, m1 - c0);
            for (int64_t j = 0; j < nm; ++j) {
                V v = bias ? r[j] + bc(bias[c0 + j]) : r[j];
                float* yr = y + (c0 + j) * P + p0;
                const float* rr = res ? res + (c0 + j) * P + p0 : nullptr;
                if (np == VL) {
                    if (rr) v += ld(rr);
                    st(yr, act_v<A>(v, e));
                } else {
                    if (rr) v += ld_n(rr, np);
                    st_n(yr, act_v<A>(v, e), np);
                }
            }
        }
    }
    if (pa == 0 && pb == P) {
        deferred_act<A>(y + m0 * P, (m1 - m0) * P, e);
    } else {
        for (int64_t c = m0; c < m1; ++c) deferred_act<A>(y + c * P + pa, pb - pa, e);
    }
}

using TransOutFn = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, const float*,
                            const float*, float*, const ConvEpi&, int64_t, int64_t);
TransOutFn trans_out_fn(ConvAct act) {
    return with_act(act, [](auto a) -> TransOutFn { return trans_out<decltype(a)::value>; });
}

// Transposed mode (ConvGemmArgs::trans): Yt[P, Mpad] = col^T . Wt, pixels as the microkernel's
// rows (balanced blocks of <= MR), output channels on its NR-wide axis. On the last K chunk each
// NR-channel panel, just computed and still in L1, goes out to Y (trans_out: transposed, bias,
// residual, activation), its output lines prefetched for writing before the panel's GEMM: one
// pass over Y instead of a transposition pass and an epilogue pass over L2-resident Yt and Y.
void trans_group(const ConvGemmArgs& a, const float* x, const float* wp, const float* bias,
                 const float* res, float* y, float* scratch, const ConvEpi& e) {
    const Conv2DGeom& g = a.g;
    const int64_t K = a.K, P = a.P, M = g.M, Mp = a.Mpad, khw = g.kh * g.kw;
    float* ap = scratch;             // P x kc: the pixel rows of one K chunk
    float* yt = scratch + P * a.kc;  // P x Mp
    if (a.pad_copy) {
        float* xp = yt + P * Mp;
        const int64_t oy0 = a.range_begin() / g.OW, oy1 = (a.range_end(P) - 1) / g.OW;
        pad_image(a, x, xp, oy0 * g.sh, std::min(a.HP, oy1 * g.sh + (g.kh - 1) * g.dh + 1));
        x = xp;
    }
    const TransOutFn out = trans_out_fn(e.act);
    // A pixel split (run_pixels): pixels [pb, pe) only, in balanced blocks of their own (each
    // output's sums do not depend on how the pixels are grouped into blocks).
    const int64_t pb = a.range_begin(), pe = a.range_end(P), np = pe - pb;
    const int64_t nb = (np + MR - 1) / MR;
    // A channel split: the NR-wide panels [cb, ce) only.
    const int64_t nbeg = a.blocks_begin() * NR, nend = std::min(Mp, a.blocks_end(Mp / NR) * NR);
    const ConvEpi none{};
    for (int64_t k0 = 0; k0 < K; k0 += a.kc) {
        const int64_t kc = std::min(a.kc, K - k0);
        // Block rows [r0, r1) at ap + r0 * kc as kc x mr, gathered in runs along output rows.
        for (int64_t blk = 0; blk < nb; ++blk) {
            const int64_t r0 = pb + blk * np / nb, r1 = pb + (blk + 1) * np / nb, mr = r1 - r0;
            float* d = ap + r0 * kc;
            for (int64_t l = 0; l < mr;) {
                const int64_t p = r0 + l, oy = p / g.OW, ox0 = p - oy * g.OW;
                const int64_t run = std::min(mr - l, g.OW - ox0);
                const float* base = x + oy * g.sh * a.WP + ox0 * g.sw;
                // Tap (c, ky, kx) of k0 decoded once, then stepped (no divisions per k:
                // ResNet-50's 3x3 s2 512 -> 512 on 14 -> 7, K = 4608, ~8% faster hot).
                int64_t c = k0 / khw, ky = (k0 - c * khw) / g.kw, kx = k0 - c * khw - ky * g.kw;
                const float* sc = base + c * a.PS + ky * g.dh * a.WP;
                for (int64_t k = 0; k < kc; ++k) {
                    copy_strided(d + k * mr + l, sc + kx * g.dw, run, g.sw);
                    if (++kx == g.kw) {
                        kx = 0;
                        sc += g.dh * a.WP;
                        if (++ky == g.kh) {
                            ky = 0;
                            sc += a.PS - g.kh * g.dh * a.WP;
                        }
                    }
                }
                l += run;
            }
        }
        const bool first = k0 == 0, last = k0 + kc == K;
        for (int64_t n0 = nbeg; n0 < nend; n0 += NR) {
            const float* bp = wp + n0 * K + k0 * NR;
            const int64_t n1 = std::min(n0 + NR, M);
            if (last && np == P)  // Y rows [n0, n1) are contiguous
                for (float* q = y + n0 * P; q < y + n1 * P; q += 16) pf_write(q);
            else if (last)
                for (int64_t m = n0; m < n1; ++m)
                    for (float* q = y + m * P + pb; q < y + m * P + pe; q += 16) pf_write(q);
            for (int64_t blk = 0; blk < nb; ++blk) {
                const int64_t r0 = pb + blk * np / nb, r1 = pb + (blk + 1) * np / nb, mr = r1 - r0;
                // The weights are streamed once (from DRAM when large): the first two blocks
                // prefetch the next panel's K chunk (2 * kc lines), one line per k step each.
                const float* pa = blk < 2 && n0 + NR < nend ? bp + NR * K + blk * 16 * kc : nullptr;
                kUkr[size_t(mr - 1)](kc, ap + r0 * kc, bp, yt + r0 * Mp + n0, Mp, NR, first,
                                     nullptr, false, nullptr, none, pa, nullptr, nullptr);
            }
            if (last && n0 < M) out(yt, Mp, P, n0, n1, bias, res, y, e, pb, pe);
        }
    }
}

void gemm_group(const ConvGemmArgs& a, const float* x, const float* wp, const float* bias,
                const float* res, float* y, float* scratch, const ConvEpi& e) {
    if (a.trans) return trans_group(a, x, wp, bias, res, y, scratch, e);
    if (a.implicit) return implicit_group(a, x, wp, bias, res, y, scratch, e);
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
    if (a.masked) return masked_group(a, x, wp, bias, res, y, scratch, e);
#endif
    const Conv2DGeom& g = a.g;
    const int64_t K = a.K, P = a.P, M = g.M;
    const int64_t nb = (M + MR - 1) / MR;
    // Output pixels [pb, pe) (ConvGemmArgs::pe; the sums do not depend on the range).
    const int64_t pb = a.range_begin(), pe = a.range_end(P);
    if (a.pad_copy) {
        float* xp = scratch + K * a.tile;
        const int64_t oy0 = pb / g.OW, oy1 = (pe - 1) / g.OW;
        pad_image(a, x, xp, oy0 * g.sh, std::min(a.HP, oy1 * g.sh + (g.kh - 1) * g.dh + 1));
        x = xp;
    }
    for (int64_t p0 = pb; p0 < pe; p0 += a.tile) {
        const int64_t np = std::min(a.tile, pe - p0);
        pack_tile(a, x, p0, np, scratch);
        for (int64_t k0 = 0; k0 < K; k0 += a.kc) {
            const int64_t kc = std::min(a.kc, K - k0);
            const bool first = k0 == 0, last = k0 + kc == K;
            for (int64_t j = 0; j * NR < np; ++j) {
                const float* bp = scratch + j * K * NR + k0 * NR;
                const int64_t nv = std::min<int64_t>(NR, np - j * NR);
                const int64_t col = p0 + j * NR;
                for (int64_t blk = a.blocks_begin(); blk < a.blocks_end(nb); ++blk) {
                    const int64_t r0 = blk * M / nb, r1 = (blk + 1) * M / nb, mr = r1 - r0;
                    // Prefetch: the next block's weights on the tile's first panel, the next
                    // panel's output rows on the first K chunk.
                    const float* pa = j == 0 && blk + 1 < a.blocks_end(nb) && (p0 == pb || M * K > 131072)
                                          ? wp + r1 * K + k0 * ((blk + 2) * M / nb - r1)
                                          : nullptr;
                    float* pc = first && col + NR < pe ? y + r0 * P + col + NR : nullptr;
                    const float* pr = res && last && col + NR < pe ? res + r0 * P + col + NR : nullptr;
                    kUkr[size_t(mr - 1)](kc, wp + r0 * K + k0 * mr, bp, y + r0 * P + col, P, nv,
                                         first, bias ? bias + r0 : nullptr, last,
                                         res ? res + r0 * P + col : nullptr, e, pa, pc, pr);
                }
            }
        }
    }
}

// ------------------------------------------------------------------------- depthwise
//
// Direct: every tap of an output strip (VL output columns of one row) is read straight from the
// input channel, a unit-stride vector load (stride 1) or two loads and an even-lane shuffle
// (stride 2). Strips whose reads would leave the row (the padded borders, the last strip) load
// under a lane mask (lanes outside the row read as zero and are never touched); rows above or
// below the image read a zeroed scratch row. No copies, so no per-plane overhead beyond the
// strips themselves.

// Lanes [lo, hi) of a vector (clamped to [0, VL]) and a load under it.
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
typedef __mmask16 LaneMask;
inline LaneMask lane_mask(int64_t lo, int64_t hi) {
    lo = std::clamp<int64_t>(lo, 0, VL);
    hi = std::clamp<int64_t>(hi, 0, VL);
    return hi <= lo ? __mmask16(0) : __mmask16(((1u << hi) - 1) & ~((1u << lo) - 1));
}
inline V ld_m(const float* p, LaneMask m) { return (V)_mm512_maskz_loadu_ps(m, p); }
#elif JIFFY_CONV_VL == 8 && defined(__AVX2__)
typedef __m256i LaneMask;
inline LaneMask lane_mask(int64_t lo, int64_t hi) {
    lo = std::clamp<int64_t>(lo, 0, VL);
    hi = std::clamp<int64_t>(hi, 0, VL);
    const __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(lo)), i),
                               _mm256_cmpgt_epi32(_mm256_set1_epi32(int(hi)), i));
}
inline V ld_m(const float* p, LaneMask m) { return (V)_mm256_maskload_ps(p, m); }
#else
struct LaneMask {
    int64_t lo, hi;
};
inline LaneMask lane_mask(int64_t lo, int64_t hi) {
    return {std::clamp<int64_t>(lo, 0, VL), std::clamp<int64_t>(hi, 0, VL)};
}
inline V ld_m(const float* p, LaneMask m) {
    float t[VL] = {};
    for (int64_t l = m.lo; l < m.hi; ++l) t[l] = p[l];
    return ld(t);
}
#endif

// An empty asm that makes v live in a register: keeps GCC from folding its load into each FMA
// that uses it (one load per use instead of one per strip).
inline __attribute__((always_inline)) void keep_in_reg(V& v) {
#if defined(__x86_64__)
    asm("" : "+v"(v));
#elif defined(__aarch64__)
    asm("" : "+w"(v));
#else
    (void)v;
#endif
}

inline V even_lanes(V a, V b) {
    VI m;
    for (int i = 0; i < VL; ++i) m[i] = 2 * i;
    return __builtin_shuffle(a, b, m);
}
inline V odd_lanes(V a, V b) {
    VI m;
    for (int i = 0; i < VL; ++i) m[i] = 2 * i + 1;
    return __builtin_shuffle(a, b, m);
}

// The epilogue of one output strip (residual, activation) and its store: VL columns, or the
// first n < VL of them (masked).
template <ConvAct A>
inline __attribute__((always_inline)) void dw_store(float* y, const float* r, V v, int64_t n,
                                                    const ConvEpi& e) {
    if (n >= VL) {
        if (r) v += ld(r);
        st(y, act_v<A>(v, e));
    } else {
        if (r) v += ld_n(r, n);
        st_n(y, act_v<A>(v, e), n);
    }
}

// The tap vectors of one input row for one strip: row is the input row already offset to the
// strip's first tap column (ox * ST - pw). Stride 1: one (masked) load per tap column; stride 2:
// per pair of tap columns two loads and an even / odd lane shuffle. MASK: loads under lm (stride
// 1: one mask per tap column; stride 2: two per tap-column pair).
template <int KW, int ST, bool MASK>
inline __attribute__((always_inline)) void dw_taps(const float* row, const LaneMask* lm, V (&t)[KW]) {
    if constexpr (ST == 1) {
#pragma GCC unroll 8
        for (int kx = 0; kx < KW; ++kx) t[kx] = MASK ? ld_m(row + kx, lm[kx]) : ld(row + kx);
    } else {
#pragma GCC unroll 8
        for (int kx = 0; kx < KW; kx += 2) {
            const V lo = MASK ? ld_m(row + kx, lm[kx]) : ld(row + kx);
            const V hi = MASK ? ld_m(row + kx + VL, lm[kx + 1]) : ld(row + kx + VL);
            t[kx] = even_lanes(lo, hi);
            if (kx + 1 < KW) t[kx + 1] = odd_lanes(lo, hi);
        }
    }
}

// A tile of NS strips (VL output columns each, from column ox on) x RR output rows, stride ST
// both ways, dilation 1, KH x KW taps: rp[j] is input row j of the block ((RR - 1) * ST + KH
// rows), already offset by -pw columns. Each input row's tap vectors are loaded once per strip
// and feed every output row they touch; the NS * RR sums are independent chains (the FMA
// latency hides behind the others). MASK: strip s loads under lm + s * (its masks per strip).
// Every output sums its taps in (ky, kx) order after the bias, whatever NS, RR and MASK (the
// same bits as the flat mode and as one thread).
template <int KH, int KW, int ST, int RR, int NS, bool MASK>
inline __attribute__((always_inline)) void dw_tile(const float* const* rp, int64_t ox, const V (&wv)[KH * KW],
                                                   V b, const LaneMask* lm, V (&acc)[NS][RR]) {
    constexpr int SPAN = (RR - 1) * ST + KH, KM = ST == 1 ? KW : KW + 1;
#pragma GCC unroll 2
    for (int s = 0; s < NS; ++s)
#pragma GCC unroll 8
        for (int i = 0; i < RR; ++i) acc[s][i] = b;
#pragma GCC unroll 16
    for (int j = 0; j < SPAN; ++j) {
#pragma GCC unroll 2
        for (int s = 0; s < NS; ++s) {
            V t[KW];
            dw_taps<KW, ST, MASK>(rp[j] + (ox + s * VL) * ST, MASK ? lm + s * KM : nullptr, t);
#pragma GCC unroll 8
            for (int kx = 0; kx < KW; ++kx) {
                if constexpr (!MASK) keep_in_reg(t[kx]);
#pragma GCC unroll 8
                for (int i = 0; i < RR; ++i) {
                    const int ky = j - i * ST;
                    if (ky >= 0 && ky < KH) acc[s][i] += wv[ky * KW + kx] * t[kx];
                }
            }
        }
    }
}

// Lanes 1.. of a, then lane 0 of b (one valignd on AVX-512).
inline V shift_in1(V a, V b) {
    VI m;
    for (int i = 0; i < VL; ++i) m[i] = i + 1;
    return __builtin_shuffle(a, b, m);
}

// dw_tile for 3x3 stride 2 with NS adjacent masked strips (lm: 4 masks per strip): tap 2 of
// strip s is tap 0 of the same row one lane on, its last lane tap 0's first lane of strip
// s + 1 (both read the same input columns under the same masks), so strips but the last take
// it with one lane shift instead of two loads and a shuffle. Same sums in the same order.
template <int RR, int NS>
inline __attribute__((always_inline)) void dw_tile_s2(const float* const* rp, int64_t ox, const V (&wv)[9], V b,
                                                      const LaneMask* lm, V (&acc)[NS][RR]) {
    constexpr int SPAN = 2 * RR + 1;
#pragma GCC unroll 4
    for (int s = 0; s < NS; ++s)
#pragma GCC unroll 8
        for (int i = 0; i < RR; ++i) acc[s][i] = b;
#pragma GCC unroll 16
    for (int j = 0; j < SPAN; ++j) {
        V t0[NS], t1[NS];
#pragma GCC unroll 4
        for (int s = 0; s < NS; ++s) {
            const float* row = rp[j] + (ox + s * VL) * 2;
            const V lo = ld_m(row, lm[s * 4]), hi = ld_m(row + VL, lm[s * 4 + 1]);
            t0[s] = even_lanes(lo, hi);
            t1[s] = odd_lanes(lo, hi);
        }
#pragma GCC unroll 4
        for (int s = 0; s < NS; ++s) {
            V t[3];
            t[0] = t0[s];
            t[1] = t1[s];
            if (s + 1 < NS) {
                t[2] = shift_in1(t0[s], t0[s + 1]);
            } else {
                const float* row = rp[j] + (ox + s * VL) * 2 + 2;
                t[2] = even_lanes(ld_m(row, lm[s * 4 + 2]), ld_m(row + VL, lm[s * 4 + 3]));
            }
#pragma GCC unroll 3
            for (int kx = 0; kx < 3; ++kx)
#pragma GCC unroll 8
                for (int i = 0; i < RR; ++i) {
                    const int ky = j - i * 2;
                    if (ky >= 0 && ky < 3) acc[s][i] += wv[ky * 3 + kx] * t[kx];
                }
        }
    }
}

// The strips of an output row (the same for every row of a call): [k0, k1) read inside the row
// (plain loads); the others (the padded borders, a last partial strip) load under lane masks,
// precomputed for the first kMaxBorder of them.
template <int KW, int ST>
struct DwStrips {
    static constexpr int kMasks = ST == 1 ? KW : KW + 1;
    static constexpr int kMaxBorder = 6;
    int64_t k0 = 0, k1 = 0, nstrips = 0;
    int nborder = 0;
    int64_t border[kMaxBorder] = {};  // strip index of each border strip
    LaneMask masks[kMaxBorder][kMasks];
    // Every strip's masks (all lanes inside the row for the interior ones) where nstrips <= kMaxAll.
    static constexpr int kMaxAll = int(kConvDwS2MaxStrips);
    LaneMask all[kMaxAll][kMasks];

    static void masks_of(int64_t ox, int64_t W, int64_t pw, LaneMask* lm) {
        const int64_t base = ox * ST - pw;  // input column of lane 0, tap 0
        if constexpr (ST == 1) {
            for (int kx = 0; kx < KW; ++kx) lm[kx] = lane_mask(-base - kx, W - base - kx);
        } else {
            for (int kx = 0; kx < KW; kx += 2) {
                lm[kx] = lane_mask(-base - kx, W - base - kx);
                lm[kx + 1] = lane_mask(-base - kx - VL, W - base - kx - VL);
            }
        }
    }

    DwStrips(int64_t W, int64_t pw, int64_t OW) {
        // Strips reading inside the row: ox in [ox_lo, ox_hi) (the last tap pair of stride 2 reads 2 VL).
        constexpr int64_t reach = ST == 1 ? KW - 1 + VL : ((KW - 1) & ~1) + 2 * VL;
        const int64_t ox_lo = (pw + ST - 1) / ST, ox_hi = W + pw >= reach ? (W + pw - reach) / ST + 1 : 0;
        nstrips = (OW + VL - 1) / VL;
        k0 = (ox_lo + VL - 1) / VL;
        k1 = std::max(k0, std::min(OW / VL, ox_hi > 0 ? (ox_hi - 1) / VL + 1 : 0));
        for (int64_t k = 0; k < nstrips && nborder < kMaxBorder; ++k) {
            if (k >= k0 && k < k1) continue;
            border[nborder] = k;
            masks_of(k * VL, W, pw, masks[nborder]);
            ++nborder;
        }
        for (int64_t k = 0; k < std::min<int64_t>(nstrips, kMaxAll); ++k) masks_of(k * VL, W, pw, all[k]);
    }
};

// RR output rows over all their strips (see dw_tile): interior strips NS at a time, then the
// border strips masked; y, r: the first row's output / residual.
template <int KH, int KW, int ST, int RR, int NS, ConvAct A, bool UNI = false, bool SHIFT = false>
inline __attribute__((always_inline)) void dw_rows(const float* const* rp, const V (&wv)[KH * KW], V b, float* y,
                                                   const float* r, const DwStrips<KW, ST>& st, int64_t W,
                                                   int64_t pw, int64_t OW, const ConvEpi& e) {
    auto store = [&](int64_t ox, const V* acc, int64_t n) {
#pragma GCC unroll 8
        for (int i = 0; i < RR; ++i)
            dw_store<A>(y + i * OW + ox, r ? r + i * OW + ox : nullptr, acc[i], n, e);
    };
    // UNI (nstrips <= kMaxAll): every strip masked, NS at a time, interior and border alike (a
    // masked load costs a plain one on AVX-512; the border strips then share the tiles' chains).
    if constexpr (UNI) {
        int64_t k = 0;
        for (; k + NS <= st.nstrips; k += NS) {
            V acc[NS][RR];
            if constexpr (KH == 3 && KW == 3 && ST == 2 && SHIFT)
                dw_tile_s2<RR, NS>(rp, k * VL, wv, b, st.all[k], acc);
            else
                dw_tile<KH, KW, ST, RR, NS, true>(rp, k * VL, wv, b, st.all[k], acc);
#pragma GCC unroll 4
            for (int s = 0; s < NS; ++s) store((k + s) * VL, acc[s], OW - (k + s) * VL);
        }
        if constexpr (NS > 2 && KH == 3 && KW == 3 && ST == 2 && SHIFT) {
            if (k + 2 <= st.nstrips) {
                V acc[2][RR];
                dw_tile_s2<RR, 2>(rp, k * VL, wv, b, st.all[k], acc);
                store(k * VL, acc[0], OW - k * VL);
                store((k + 1) * VL, acc[1], OW - (k + 1) * VL);
                k += 2;
            }
        }
        for (; k < st.nstrips; ++k) {
            V acc[1][RR];
            dw_tile<KH, KW, ST, RR, 1, true>(rp, k * VL, wv, b, st.all[k], acc);
            store(k * VL, acc[0], OW - k * VL);
        }
        return;
    }
    int64_t k = st.k0;
    if constexpr (NS > 1) {
        for (; k + NS <= st.k1; k += NS) {
            V acc[NS][RR];
            dw_tile<KH, KW, ST, RR, NS, false>(rp, k * VL, wv, b, nullptr, acc);
#pragma GCC unroll 2
            for (int s = 0; s < NS; ++s) store((k + s) * VL, acc[s], VL);
        }
    }
    for (; k < st.k1; ++k) {
        V acc[1][RR];
        dw_tile<KH, KW, ST, RR, 1, false>(rp, k * VL, wv, b, nullptr, acc);
        store(k * VL, acc[0], VL);
    }
    for (int i = 0; i < st.nborder; ++i) {
        const int64_t ox = st.border[i] * VL;
        V acc[1][RR];
        dw_tile<KH, KW, ST, RR, 1, true>(rp, ox, wv, b, st.masks[i], acc);
        store(ox, acc[0], OW - ox);
    }
    // Border strips past the table (pads of more than a few vectors): masks computed here.
    if (st.nborder == DwStrips<KW, ST>::kMaxBorder) {
        for (int64_t kk = st.border[st.nborder - 1] + 1; kk < st.nstrips; ++kk) {
            if (kk >= st.k0 && kk < st.k1) continue;
            LaneMask lm[DwStrips<KW, ST>::kMasks];
            DwStrips<KW, ST>::masks_of(kk * VL, W, pw, lm);
            V acc[1][RR];
            dw_tile<KH, KW, ST, RR, 1, true>(rp, kk * VL, wv, b, lm, acc);
            store(kk * VL, acc[0], OW - kk * VL);
        }
    }
}

// The column sweep (AVX-512): NS strips from output column ox down all output rows of a channel.
// Input rows are visited once each, top to bottom; each row's tap vectors feed every output row
// that uses it, held in S = ceil(KH / ST) rotating slots of sums (output r in slot r % S), so an
// input vector is loaded once per strip instead of once per block of rows, and the masks of a
// border strip (MASK: lm, the store keeps the first n lanes) are set once per sweep. Rows are
// processed S * ST at a time, unrolled, so the slots and tap rows are compile-time constants:
// output r0 + m gets tap row ky = q - m * ST of input row r0 * ST - ph + q. Each output sums its
// taps in (ky, kx) order after the bias (the same bits as the row blocks and the flat mode).
// Input rows outside the image read the zeroed row; outputs outside [0, OH) are not stored.
template <int KH, int KW, int ST, int NS, bool MASK, ConvAct A>
inline __attribute__((always_inline)) void dw_sweep(const float* xc, const float* zero, const Conv2DGeom& g,
                                                    int64_t ox, const V (&wv)[KH * KW], V b, const LaneMask* lm,
                                                    int64_t n, float* yc, const float* rc, const ConvEpi& e,
                                                    int64_t oy0, int64_t oy1) {
    constexpr int S = (KH + ST - 1) / ST, Q = S * ST;
    const int64_t H = g.H, W = g.W, OW = g.OW, col = ox * ST - g.pw;
    V acc[S][NS];
#pragma GCC unroll 8
    for (int m = 0; m < S; ++m)
#pragma GCC unroll 4
        for (int s = 0; s < NS; ++s) acc[m][s] = b;
    // Output rows [oy0, oy1): start at the multiple of S at or below oy0 (slots stay r % S;
    // outputs below oy0 are summed there but not stored), stop after oy1 - 1's last input row.
    const int64_t last = (oy1 - 1) * ST + KH - 1;  // the last input row read, from -ph
    for (int64_t r0 = oy0 - oy0 % S; r0 * ST <= last; r0 += S) {
        const int64_t iy0 = r0 * ST - g.ph;
#pragma GCC unroll 16
        for (int q = 0; q < Q; ++q) {
            const int64_t iy = iy0 + q;
            const float* row = (iy < 0 || iy >= H ? zero : xc + iy * W) + col;
#pragma GCC unroll 4
            for (int s = 0; s < NS; ++s) {
                V t[KW];
                dw_taps<KW, ST, MASK>(row + s * VL * ST, lm, t);
#pragma GCC unroll 8
                for (int m = -(S - 1); m < S; ++m) {
                    const int ky = q - m * ST;
                    if (ky < 0 || ky >= KH) continue;
                    V& a = acc[(m + S) % S][s];
                    if (ky == 0) a = b;
#pragma GCC unroll 8
                    for (int kx = 0; kx < KW; ++kx) a += wv[ky * KW + kx] * t[kx];
                }
            }
#pragma GCC unroll 8
            for (int m = -(S - 1); m < S; ++m) {
                if (q - m * ST != KH - 1) continue;
                const int64_t r = r0 + m;
                if (r < oy0 || r >= oy1) continue;
#pragma GCC unroll 4
                for (int s = 0; s < NS; ++s) {
                    const int64_t o = r * OW + ox + s * VL;
                    dw_store<A>(yc + o, rc ? rc + o : nullptr, acc[(m + S) % S][s], MASK ? n : VL, e);
                }
            }
        }
    }
}

// One channel by column sweeps: interior strips NS at a time, then the border strips masked.
template <int KH, int KW, int ST, int NS, ConvAct A>
void dw_channel_sweep(const float* xc, const float* zero, const Conv2DGeom& g, const DwStrips<KW, ST>& st,
                      const V (&wv)[KH * KW], V b, float* yc, const float* rc, const ConvEpi& e, int64_t oy0,
                      int64_t oy1) {
    int64_t k = st.k0;
    for (; k + NS <= st.k1; k += NS)
        dw_sweep<KH, KW, ST, NS, false, A>(xc, zero, g, k * VL, wv, b, nullptr, VL, yc, rc, e, oy0, oy1);
    for (; k < st.k1; ++k) dw_sweep<KH, KW, ST, 1, false, A>(xc, zero, g, k * VL, wv, b, nullptr, VL, yc, rc, e, oy0, oy1);
    for (int64_t kk = 0; kk < st.nstrips; ++kk) {
        if (kk >= st.k0 && kk < st.k1) continue;
        LaneMask lm[DwStrips<KW, ST>::kMasks];
        DwStrips<KW, ST>::masks_of(kk * VL, g.W, g.pw, lm);
        dw_sweep<KH, KW, ST, 1, true, A>(xc, zero, g, kk * VL, wv, b, lm, std::min<int64_t>(VL, g.OW - kk * VL), yc, rc, e,
                                         oy0, oy1);
    }
}

// One output row of any geometry (runtime kernel size, strides, dilations): taps read with masked
// loads (stride 1), two masked loads and a shuffle (stride 2) or lane by lane; tap rows outside
// the image are skipped.
template <ConvAct A>
void dw_row_any(const Conv2DGeom& g, const float* xc, int64_t oy, const float* w, V b, float* y,
                const float* r, const ConvEpi& e) {
    const int64_t W = g.W, kw = g.kw, sw = g.sw, OW = g.OW;
    for (int64_t ox = 0; ox < OW; ox += VL) {
        V acc = b;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
            const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
            if (iy < 0 || iy >= g.H) continue;
            const float* row = xc + iy * W;
            for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t base = ox * sw - g.pw + kx * g.dw;  // input column of lane 0
                V v;
                if (sw == 1) {
                    v = ld_m(row + base, lane_mask(-base, W - base));
                } else if (sw == 2) {
                    v = even_lanes(ld_m(row + base, lane_mask(-base, W - base)),
                                   ld_m(row + base + VL, lane_mask(-base - VL, W - base - VL)));
                } else {
                    float t[VL];
                    for (int64_t l = 0; l < VL; ++l) {
                        const int64_t ix = base + l * sw;
                        t[l] = ix >= 0 && ix < W ? row[ix] : 0.0f;
                    }
                    v = ld(t);
                }
                acc += bc(w[ky * kw + kx]) * v;
            }
        }
        dw_store<A>(y + ox, r ? r + ox : nullptr, acc, OW - ox, e);
    }
}

// All channels. KH > 0: that kernel size and stride ST both ways, dilation 1, output rows in
// blocks of RR (the last rows in blocks of 2 and 1), NS interior strips at a time; KH == 0: any
// geometry, row by row.
template <int KH, int KW, int ST, int RR, int NS, bool SWEEP, ConvAct A, bool UNI = false, bool SHIFT = false>
void dw_channels(const Conv2DGeom& g, const float* x, const float* w, const float* bias,
                 const float* res, float* y, const ConvEpi& e_in, float* zero, int64_t oy0, int64_t oy1) {
    const int64_t H = g.H, W = g.W, OH = g.OH, OW = g.OW, HW = H * W, P = OH * OW;
    const int64_t khw = g.kh * g.kw;
    const ConvEpi e = e_in;  // a local copy: its fields stay in registers across the stores
    if constexpr (KH > 0) {
        std::memset(zero, 0, size_t(W + 2 * g.kw * g.dw + 64) * sizeof(float));  // the rows part
        const DwStrips<KW, ST> st(W, g.pw, OW);
        for (int64_t c = 0; c < g.C; ++c) {
            const float* xc = x + c * HW;
            const V b = bc(bias ? bias[c] : 0.0f);
            float* yc = y + c * P;
            const float* rc = res ? res + c * P : nullptr;
            const float* wc = w + c * khw;
            V wv[KH * KW];  // local (never aliased by the stores): stays in registers where they suffice
#pragma GCC unroll 32
            for (int i = 0; i < KH * KW; ++i) wv[i] = bc(wc[i]);
            constexpr int SPAN = (RR - 1) * ST + KH;
            const float* rp[SPAN];
            auto rows = [&](int64_t oy, int span) {
                for (int j = 0; j < span; ++j) {
                    const int64_t iy = oy * ST - g.ph + j;
                    rp[j] = (iy < 0 || iy >= H ? zero : xc + iy * W) - g.pw;
                }
            };
            if constexpr (SWEEP) {
                dw_channel_sweep<KH, KW, ST, NS, A>(xc, zero, g, st, wv, b, yc, rc, e, oy0, oy1);
                deferred_act<A>(yc + oy0 * OW, (oy1 - oy0) * OW, e);
                continue;
            }
            int64_t oy = oy0;
            for (; oy + RR <= oy1; oy += RR) {
                rows(oy, SPAN);
                dw_rows<KH, KW, ST, RR, NS, A, UNI, SHIFT>(rp, wv, b, yc + oy * OW, rc ? rc + oy * OW : nullptr, st, W, g.pw, OW, e);
            }
            if constexpr (RR > 2) {
                if (oy + 2 <= oy1) {
                    rows(oy, ST + KH);
                    dw_rows<KH, KW, ST, 2, NS, A, UNI, SHIFT>(rp, wv, b, yc + oy * OW, rc ? rc + oy * OW : nullptr, st, W, g.pw, OW, e);
                    oy += 2;
                }
            }
            for (; oy < oy1; ++oy) {
                rows(oy, KH);
                dw_rows<KH, KW, ST, 1, NS, A, UNI, SHIFT>(rp, wv, b, yc + oy * OW, rc ? rc + oy * OW : nullptr, st, W, g.pw, OW, e);
            }
            deferred_act<A>(yc + oy0 * OW, (oy1 - oy0) * OW, e);
        }
    } else {
        (void)zero;
        for (int64_t c = 0; c < g.C; ++c) {
            const float* xc = x + c * HW;
            const V b = bc(bias ? bias[c] : 0.0f);
            float* yc = y + c * P;
            const float* rc = res ? res + c * P : nullptr;
            const float* wc = w + c * khw;
            for (int64_t oy = oy0; oy < oy1; ++oy)
                dw_row_any<A>(g, xc, oy, wc, b, yc + oy * OW, rc ? rc + oy * OW : nullptr, e);
            deferred_act<A>(yc + oy0 * OW, (oy1 - oy0) * OW, e);
        }
    }
}

#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
// ------------------------------------------------------------- depthwise, small planes (flat)
//
// ConvDwMode::kFlat (conv.h): output pixel q = oy * OW + ox of a channel is lane q % VL of
// vector q / VL; tap t reads src[q + off[t]] under the lane mask m[v * T + t]. Stride 1: src is
// the channel itself and off[t] = (ky - ph) * W + kx - pw (OW == W, so the offset is the same for
// every pixel; taps leaving the row or the image are masked). Stride 2: src holds the channel's 4
// parity planes (dw_phases) and tap t reads plane ((ky - ph) & 1, (kx - pw) & 1) at
// (oy + dy, ox + dx), dy = floor((ky - ph) / 2), again one offset per tap. Taps sum in (ky, kx)
// order after the bias, as in the rows mode (so both give the same bits).

typedef uint16_t MaskWord __attribute__((may_alias));

inline int64_t floor_div2(int64_t a) { return a >= 0 ? a / 2 : -((1 - a) / 2); }

// The lane masks of every (vector, tap) of the plane: bit l of m[v * K * K + ky * K + kx] is set
// when output pixel v * VL + l exists and its tap (ky, kx) reads inside the image.
template <int K, int ST>
void dw_flat_masks(const Conv2DGeom& g, MaskWord* m) {
    const int64_t P = g.OH * g.OW, nv = (P + VL - 1) / VL;
    VI iota;
    for (int i = 0; i < VL; ++i) iota[i] = i;
    const VI zero = VI{}, H = zero + int(g.H), W = zero + int(g.W), OW = zero + int(g.OW);
    for (int64_t v = 0; v < nv; ++v) {
        const VI q = iota + int(v * VL);
        // q / OW exactly in float (q < 2^14: the quotient is never rounded up to the next integer)
        const VI oy = __builtin_convertvector(__builtin_convertvector(q, V) / float(g.OW), VI);
        const VI ox = q - oy * OW;
        const VI in = q < (zero + int(P));
        for (int ky = 0; ky < K; ++ky) {
            const VI iy = oy * ST + int(ky - g.ph);
            const VI rv = in & (iy >= zero) & (iy < H);
            for (int kx = 0; kx < K; ++kx) {
                const VI ix = ox * ST + int(kx - g.pw);
                const VI ok = rv & (ix >= zero) & (ix < W);
                m[v * K * K + ky * K + kx] = MaskWord(_mm512_test_epi32_mask((__m512i)ok, (__m512i)ok));
            }
        }
    }
}

// Stride 2: the 4 parity planes of channel xc, PP floats apart, each OH x OW: plane py * 2 + px
// holds x[2a + py][2b + px] at a * OW + b (only the pixels that exist are written; the rest is
// never read unmasked). Needs (H + 1) / 2 <= OH and (W + 1) / 2 <= OW.
inline void dw_phases(const Conv2DGeom& g, const float* xc, float* ph, int64_t PP) {
    const int64_t H = g.H, W = g.W, OW = g.OW;
    for (int64_t iy = 0; iy < H; ++iy) {
        const float* row = xc + iy * W;
        float* pe = ph + (iy & 1) * 2 * PP + (iy >> 1) * OW;
        float* po = pe + PP;
        for (int64_t j = 0; j < W; j += 2 * VL) {
            const int64_t n = std::min<int64_t>(W - j, 2 * VL);
            const V lo = ld_m(row + j, lane_mask(0, n));
            const V hi = n > VL ? ld_m(row + j + VL, lane_mask(0, n - VL)) : V{};
            st_n(pe + j / 2, even_lanes(lo, hi), (n + 1) / 2);
            if (n >= 2) st_n(po + j / 2, odd_lanes(lo, hi), n / 2);
        }
    }
}

// CH channels computed together (they share the lane masks): per channel h the K row pointers
// rp[h][ky] (tap row ky's source at pixel 0; stride 2: in the even-column planes), the tap
// weights wv[h], the bias b[h], the output y[h] and the residual r[h] (local arrays of the
// caller, so the weights stay in registers).
template <int K, int CH>
struct FlatArgs {
    const float* const (&rp)[CH][K];
    const V (&wv)[CH][K * K];
    const V (&b)[CH];
    float* const (&y)[CH];
    const float* const (&r)[CH];
};

// NB vectors from output pixel q0 of CH channels (m: the first vector's masks, nleft output
// pixels from q0 on). Every tap is a load at a constant displacement from its row pointer:
// stride 1, kx; stride 2, the column parity's plane (kPlane apart) and half the column offset
// (PAR: pw % 2; pw / 2 is in rp).
template <int K, int ST, int PAR, int CH, int NB, ConvAct A>
inline __attribute__((always_inline)) void dw_flat_block(const FlatArgs<K, CH>& f, int64_t q0,
                                                         const MaskWord* m, int64_t nleft, const ConvEpi& e) {
    constexpr int T = K * K;
    constexpr int64_t kPlane = conv_dw_flat_plane_floats();
    V acc[CH][NB];
#pragma GCC unroll 2
    for (int h = 0; h < CH; ++h)
#pragma GCC unroll 8
        for (int i = 0; i < NB; ++i) acc[h][i] = f.b[h];
#pragma GCC unroll 8
    for (int ky = 0; ky < K; ++ky) {
#pragma GCC unroll 8
        for (int kx = 0; kx < K; ++kx) {
            const int64_t disp = q0 + (ST == 1 ? kx : ((kx - PAR) & 1) * kPlane + ((kx - PAR) >> 1));
#pragma GCC unroll 8
            for (int i = 0; i < NB; ++i) {
                const __mmask16 mk = _load_mask16((__mmask16*)(m + i * T + ky * K + kx));
#pragma GCC unroll 2
                for (int h = 0; h < CH; ++h)
                    acc[h][i] += f.wv[h][ky * K + kx] * ld_m(f.rp[h][ky] + disp + i * VL, mk);
            }
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < CH; ++h)
#pragma GCC unroll 8
        for (int i = 0; i < NB; ++i)
            dw_store<A>(f.y[h] + q0 + i * VL, f.r[h] ? f.r[h] + q0 + i * VL : nullptr, acc[h][i],
                        nleft - i * VL, e);
}

// The whole plane of CH channels: blocks of NB vectors (4; 5x5: 3, so the 25 weights, the sums
// and a load fit the 32 registers), then the last ones.
template <int K, int ST, int PAR, int CH, ConvAct A>
inline __attribute__((always_inline)) void dw_flat_plane(const FlatArgs<K, CH>& f, const MaskWord* m,
                                                         int64_t P, const ConvEpi& e) {
    constexpr int T = K * K, NB = K == 3 ? 4 : 2;
    const int64_t nv = (P + VL - 1) / VL;
    int64_t v = 0;
    for (; v + NB <= nv; v += NB) dw_flat_block<K, ST, PAR, CH, NB, A>(f, v * VL, m + v * T, P - v * VL, e);
    switch (nv - v) {
        case 1: dw_flat_block<K, ST, PAR, CH, 1, A>(f, v * VL, m + v * T, P - v * VL, e); break;
        case 2: dw_flat_block<K, ST, PAR, CH, 2, A>(f, v * VL, m + v * T, P - v * VL, e); break;
        case 3: dw_flat_block<K, ST, PAR, CH, 3, A>(f, v * VL, m + v * T, P - v * VL, e); break;
        default: break;
    }
}

// CH channels from channel pointers: fills the caller's arrays and runs the plane.
template <int K, int ST, int PAR, int CH, ConvAct A>
inline __attribute__((always_inline)) void dw_flat_channels(const float* const* src, const int64_t* roff,
                                                            const float* w, const float* bias, float* y,
                                                            const float* res, int64_t P, const MaskWord* m,
                                                            const ConvEpi& e) {
    constexpr int T = K * K;
    const float* rp[CH][K];
    V wv[CH][T];
    V b[CH];
    float* yy[CH];
    const float* rr[CH];
#pragma GCC unroll 2
    for (int h = 0; h < CH; ++h) {
#pragma GCC unroll 8
        for (int ky = 0; ky < K; ++ky) rp[h][ky] = src[h] + roff[ky];
#pragma GCC unroll 32
        for (int t = 0; t < T; ++t) wv[h][t] = bc(w[h * T + t]);
        b[h] = bc(bias ? bias[h] : 0.0f);
        yy[h] = y + h * P;
        rr[h] = res ? res + h * P : nullptr;
    }
    dw_flat_plane<K, ST, PAR, CH, A>(FlatArgs<K, CH>{rp, wv, b, yy, rr}, m, P, e);
}

template <int K, int ST, int PAR, ConvAct A>
void dw_flat(const Conv2DGeom& g, const float* x, const float* w, const float* bias, const float* res,
             float* y, const ConvEpi& e, float* scratch) {
    constexpr int T = K * K;
    constexpr int64_t kPlane = conv_dw_flat_plane_floats();
    const int64_t P = g.OH * g.OW, HW = g.H * g.W;
    MaskWord* m = reinterpret_cast<MaskWord*>(scratch);
    float* phase = scratch + conv_dw_flat_mask_floats(P);
    dw_flat_masks<K, ST>(g, m);
    // Row offsets of the taps from the channel (stride 1) or from the parity planes (stride 2).
    int64_t roff[K];
    for (int ky = 0; ky < K; ++ky) {
        const int64_t ry = ky - g.ph;
        if constexpr (ST == 1) {
            roff[ky] = ry * g.W - g.pw;
        } else {
            const int64_t dy = floor_div2(ry);
            roff[ky] = (ry - 2 * dy) * 2 * kPlane + dy * g.OW - (g.pw - PAR) / 2;
        }
    }
    auto b_at = [&](int64_t c) { return bias ? bias + c : nullptr; };
    auto r_at = [&](int64_t c) { return res ? res + c * P : nullptr; };
    int64_t c = 0;
    if constexpr (ST == 1 && K == 3) {  // pairs of channels (18 weights and 8 sums in registers)
        for (; c + 2 <= g.C; c += 2) {
            const float* src[2] = {x + c * HW, x + (c + 1) * HW};
            dw_flat_channels<K, ST, PAR, 2, A>(src, roff, w + c * T, b_at(c), y + c * P, r_at(c), P, m, e);
        }
    }
    // Stride 2: channel c + 1 is split while channel c is computed (two sets of planes), so the
    // split's stores have retired before the taps load them.
    if constexpr (ST == 2) dw_phases(g, x, phase, kPlane);
    for (; c < g.C; ++c) {
        const float* src = x + c * HW;
        if constexpr (ST == 2) {
            if (c + 1 < g.C) dw_phases(g, src + HW, phase + ((c + 1) & 1) * 4 * kPlane, kPlane);
            src = phase + (c & 1) * 4 * kPlane;
        }
        dw_flat_channels<K, ST, PAR, 1, A>(&src, roff, w + c * T, b_at(c), y + c * P, r_at(c), P, m, e);
    }
    deferred_act<A>(y, g.C * P, e);
}
#endif

template <ConvAct A>
void dw_act(const Conv2DGeom& g, const float* x, const float* w, const float* bias, const float* res, float* y,
            const ConvEpi& e, float* scratch, ConvDwMode mode, int64_t oy0, int64_t oy1) {
    const bool square = g.kh == g.kw && g.sh == g.sw && g.dh == 1 && g.dw == 1;
    const int64_t k = square ? g.kh : 0, s = g.sh;
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
    if (mode == ConvDwMode::kFlat) {  // conv_dw_mode allows it for this shape
        const bool odd = g.pw % 2 != 0;
        if (k == 3 && s == 1) return dw_flat<3, 1, 0, A>(g, x, w, bias, res, y, e, scratch);
        if (k == 3 && s == 2 && odd) return dw_flat<3, 2, 1, A>(g, x, w, bias, res, y, e, scratch);
        if (k == 3 && s == 2) return dw_flat<3, 2, 0, A>(g, x, w, bias, res, y, e, scratch);
        if (k == 5 && s == 1) return dw_flat<5, 1, 0, A>(g, x, w, bias, res, y, e, scratch);
        if (k == 5 && s == 2 && odd) return dw_flat<5, 2, 1, A>(g, x, w, bias, res, y, e, scratch);
        if (k == 5 && s == 2) return dw_flat<5, 2, 0, A>(g, x, w, bias, res, y, e, scratch);
    }
#else
    (void)mode;
#endif
    // AVX-512: column sweeps, two interior strips at a time for 3x3 stride 1 (measured ~1.2x over
    // one on 56x56 / 112x112; stride 2, whose shuffles share the FMA pipes, no better with two).
    // Other ISAs: blocks of rows, one strip at a time (16 registers).
    constexpr bool SW = VL == 16;
    constexpr int NS3 = VL == 16 ? 2 : 1;
    if (k == 3 && s == 1) return dw_channels<3, 3, 1, 4, NS3, SW, A>(g, x, w, bias, res, y, e, scratch, oy0, oy1);
    // AVX-512, 3x3 stride 2 (conv_dw_s2_strips: planes > 2048 pixels or rows of > 16 outputs,
    // rows of <= 256 outputs):
    // every strip masked, three adjacent strips per tile of 3 rows (9 independent sums; the
    // border strips no longer run alone) and tap 2 as tap 0 shifted a lane (dw_tile_s2). Kernel
    // alone (CPU us, Zen 4, 4-row tiles): 64 x 112 -> 56 ~93 against ~147, 32 x 140 -> 70 ~75
    // against ~117, 144 x 56 -> 28 ~52 against ~56; on 28 -> 14 and 14 -> 7 the column sweep
    // stays faster (192 x 28: 18 against 21, 576 x 14: 30 against 37). 3 rows, not 4: the 4 x 3
    // tile's 12 sums, 9 weights and tap vectors outgrew the 32 registers (GCC spilled sums and
    // weights to the stack inside the tile); in the models (JIFFY_PROFILE, rounds alternating
    // 4 / 3 rows, medians) face detector 32 x 120 x 160 ~67 -> ~62 us, 32 x 60 x 80 ~19.7 ->
    // ~17.2 us, line detector step 4 ~448 -> ~351 us, MobileNetV2 / V3 unchanged.
    if constexpr (VL == 16) {
        if (k == 3 && s == 2 && conv_dw_s2_strips(g))
            return dw_channels<3, 3, 2, 3, 3, false, A, true, true>(g, x, w, bias, res, y, e, scratch, oy0, oy1);
    }
    // Stride 2 on planes far past L1 (MobileNetV2's 112x112 input, cold from the previous op):
    // row blocks, whose row-major reads the prefetchers follow (~290 against ~320 us in the model).
    if (k == 3 && s == 2 && g.H * g.W > 8192) return dw_channels<3, 3, 2, 4, 1, false, A>(g, x, w, bias, res, y, e, scratch, oy0, oy1);
    if (k == 3 && s == 2) return dw_channels<3, 3, 2, 4, 1, SW, A>(g, x, w, bias, res, y, e, scratch, oy0, oy1);
    if (k == 5 && s == 1) return dw_channels<5, 5, 1, 4, 1, SW, A>(g, x, w, bias, res, y, e, scratch, oy0, oy1);
    if (k == 5 && s == 2) return dw_channels<5, 5, 2, 2, 1, SW, A>(g, x, w, bias, res, y, e, scratch, oy0, oy1);
    dw_channels<0, 0, 0, 1, 1, false, A>(g, x, w, bias, res, y, e, scratch, oy0, oy1);
}

void depthwise(const Conv2DGeom& g, const float* x, const float* w, const float* bias,
               const float* res, float* y, const ConvEpi& e, float* scratch, ConvDwMode m, int64_t r0, int64_t r1) {
    with_act(e.act, [&](auto a) { dw_act<decltype(a)::value>(g, x, w, bias, res, y, e, scratch, m, r0, r1); });
}

}  // namespace

// JIFFY_CONV_NO_ENTRY_POINTS: another kernel family (winograd_impl.h) reuses the internals.
#ifndef JIFFY_CONV_NO_ENTRY_POINTS
void JIFFY_CONV_CAT(conv_gemm_group_, JIFFY_CONV_SUFFIX)(const ConvGemmArgs& a, const float* x,
                                                         const float* wp, const float* bias,
                                                         const float* res, float* y,
                                                         float* scratch, const ConvEpi& e) {
    gemm_group(a, x, wp, bias, res, y, scratch, e);
}

void JIFFY_CONV_CAT(conv_dw_, JIFFY_CONV_SUFFIX)(const Conv2DGeom& g, const float* x,
                                                 const float* w, const float* bias,
                                                 const float* res, float* y, const ConvEpi& e,
                                                 float* scratch, ConvDwMode mode, int64_t oy0, int64_t oy1) {
    depthwise(g, x, w, bias, res, y, e, scratch, mode, oy0, oy1);
}

void JIFFY_CONV_CAT(conv_epi_, JIFFY_CONV_SUFFIX)(float* y, const float* r, int64_t n,
                                                  const ConvEpi& e) {
    epi_row(y, r, n, e);
}

// Phase split / merge rows (kernels::phase_split, phase_merge). AVX-512, dilation 2-8: 16 j at a
// time, the dl vectors of x the phases' 16 values come from (or go to) sorted by masked lane
// permutes (dl per vector; tables built at compile time), the rest one float at a time.
namespace {
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
template <int DL>
struct PhaseTab {
    // split: lane l of phase b's vector is x's float l DL + b: vector (l DL + b) / 16, lane
    // (l DL + b) % 16 (permutexvar reads the index's low 4 bits). merge: lane l of output vector k
    // is float 16 k + l of the row's 16 DL: phase (16 k + l) % DL, lane (16 k + l) / DL.
    int32_t sidx[DL][16] = {}, midx[DL][16] = {};
    uint16_t smask[DL][DL] = {}, mmask[DL][DL] = {};  // [b][k] split, [k][b] merge
    constexpr PhaseTab() {
        for (int b = 0; b < DL; ++b)
            for (int l = 0; l < 16; ++l) {
                const int e = l * DL + b;
                sidx[b][l] = e % 16;
                smask[b][e / 16] = uint16_t(smask[b][e / 16] | (1u << l));
            }
        for (int k = 0; k < DL; ++k)
            for (int l = 0; l < 16; ++l) {
                const int x = 16 * k + l;
                midx[k][l] = x / DL;
                mmask[k][x % DL] = uint16_t(mmask[k][x % DL] | (1u << l));
            }
    }
};
template <int DL>
inline constexpr PhaseTab<DL> kPhaseTab{};

// SPLIT: x's row (DL vectors of 16 j, 16 DL floats) to the DL phases' rows (16 j each, sw apart);
// else the reverse. In either direction DL vectors in, DL vectors out: output vector o gathers its
// lanes from the inputs under the masks of row o of the direction's tables.
template <int DL, bool SPLIT>
int64_t phase_row_dl(const float* __restrict s, int64_t ws, float* __restrict d, int64_t sw) {
    constexpr const PhaseTab<DL>& t = kPhaseTab<DL>;
    const int32_t(&idx)[DL][16] = SPLIT ? t.sidx : t.midx;
    const uint16_t(&mask)[DL][DL] = SPLIT ? t.smask : t.mmask;
    int64_t j = 0;
    for (; j + 16 <= ws; j += 16) {
        __m512 v[DL];
#pragma GCC unroll 8
        for (int i = 0; i < DL; ++i) v[i] = _mm512_loadu_ps(SPLIT ? s + j * DL + 16 * i : s + i * sw + j);
#pragma GCC unroll 8
        for (int o = 0; o < DL; ++o) {
            const __m512i ix = _mm512_loadu_si512(idx[o]);
            __m512 r = _mm512_setzero_ps();
#pragma GCC unroll 8
            for (int i = 0; i < DL; ++i)
                if (mask[o][i]) r = _mm512_mask_permutexvar_ps(r, mask[o][i], ix, v[i]);
            _mm512_storeu_ps(SPLIT ? d + o * sw + j : d + j * DL + 16 * o, r);
        }
    }
    return j;
}
template <bool SPLIT>
int64_t phase_row_v(const float* s, int64_t dl, int64_t ws, float* d, int64_t sw) {
    switch (dl) {
#define JIFFY_PHASE_CASE(n) \
    case n: return phase_row_dl<n, SPLIT>(s, ws, d, sw);
        JIFFY_PHASE_CASE(2)
        JIFFY_PHASE_CASE(3)
        JIFFY_PHASE_CASE(4)
        JIFFY_PHASE_CASE(5)
        JIFFY_PHASE_CASE(6)
        JIFFY_PHASE_CASE(7)
        JIFFY_PHASE_CASE(8)
#undef JIFFY_PHASE_CASE
        default: return 0;
    }
}
#else
template <bool SPLIT>
int64_t phase_row_v(const float*, int64_t, int64_t, float*, int64_t) {
    return 0;
}
#endif

// SPLIT: the mosaic m from x (channels [c0, c1)); else x from m.
template <bool SPLIT>
void phase_planes(const PhaseMosaic& p, const float* from, float* to, int64_t c0, int64_t c1) {
    const int64_t dl = p.dl, ws = p.W / dl;
    for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = 0; r < p.H; ++r) {
            const int64_t xr = (c * p.H + r) * p.W, mr = c * p.MP + (r % dl * p.sh + r / dl) * p.MW;
            const float* __restrict s = from + (SPLIT ? xr : mr);
            float* __restrict d = to + (SPLIT ? mr : xr);
            for (int64_t j = phase_row_v<SPLIT>(s, dl, ws, d, p.sw); j < ws; ++j)
                for (int64_t b = 0; b < dl; ++b) {
                    if (SPLIT) d[b * p.sw + j] = s[j * dl + b];
                    else d[j * dl + b] = s[b * p.sw + j];
                }
        }
}
}  // namespace

void JIFFY_CONV_CAT(phase_planes_, JIFFY_CONV_SUFFIX)(const PhaseMosaic& p, bool split, const float* from, float* to,
                                                       int64_t c0, int64_t c1) {
    if (split) phase_planes<true>(p, from, to, c0, c1);
    else phase_planes<false>(p, from, to, c0, c1);
}

void JIFFY_CONV_CAT(conv_subsample_, JIFFY_CONV_SUFFIX)(const float* x, int64_t H, int64_t W, int64_t sh,
                                                        int64_t sw, int64_t OH, int64_t OW, float* y,
                                                        int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
        for (int64_t i = 0; i < OH; ++i) {
            copy_strided(y + (c * OH + i) * OW, x + (c * H + i * sh) * W, OW, sw);
        }
}
#endif

}  // namespace jiffy::kernels
