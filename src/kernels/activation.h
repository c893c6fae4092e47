// Activations shared by the fused epilogues (Gemm / MatMul / Conv) and the elementwise ops.
//
//   ActKind + Activation{kind, alpha, beta}   what to apply (alpha/beta: LeakyRelu alpha; Clip
//                                             min=alpha, max=beta; HardSigmoid alpha, beta)
//   parse_activation("Relu", a, b, &act)      from the graph's `_fused_act` / `_fused_alpha` /
//                                             `_fused_beta` attributes (false if unknown)
//   act_scalar(act, x)                        scalar reference (the oracle in tests)
//   act_apply_for(isa)(act, x, y, n)          y[i] = act(x[i]) over an array (x may equal y),
//                                             AVX-512 / AVX2 / scalar; choose the function at
//                                             prepare time and store it in the kernel
//   act_v512(act, v) / act_v256(act, v)       inline vector forms for per-ISA translation units
//                                             (defined only when compiled with -mavx512f /
//                                             -mavx2 -mfma): use them in a microkernel epilogue
//                                             on registers still holding the accumulators.
//   exp_v512 / sigmoid_v512 / tanh_v512 (and _v256)
//                                             fast float exp / sigmoid / tanh, ~1e-7..1e-6
//                                             relative error, correct for +-inf, NaN, overflow
//                                             and underflow (denormal results included for exp).
//   exp_nonpos_v512                           exp of z <= 0 to ~4e-7 relative, 13 uops (Sigmoid
//                                             and SiLU on AVX-512 build on it).
//   erf_v512 (and _v256)                      erf to ~4e-7 absolute (Abramowitz-Stegun 7.1.26
//                                             for |x| >= 0.5, its Taylor series below).
//   gelu_v512                                 x Phi(x) from 32 quintic pieces of Phi (table
//                                             lookups in registers, 18 uops); gelu_v256 from
//                                             erf's parts without cancellation for x < 0.
//   log_v512 / expm1_v512 / softplus_v512 / mish_v512 (and _v256)
//                                             Cephes logf (~1 ulp; denormals, 0, < 0, inf, NaN as
//                                             std::log), expm1 (Taylor below |x| = 0.5), softplus
//                                             and mish without overflow (see each function).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "kernels/cpu.h"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace jiffy::kernels {

enum class ActKind : int {
    kNone = 0,
    kRelu,
    kLeakyRelu,
    kClip,
    kHardSigmoid,
    kHardSwish,
    kSigmoid,
    kTanh,
    kExp,  // not a fused activation; the elementwise Exp op uses the same machinery
    // The elementwise Erf and Gelu ops (approximate = "none": 0.5 x (1 + erf(x / sqrt 2));
    // kGeluTanh: approximate = "tanh"); Gelu / GeluTanh also fuse into MatMul and Gemm.
    kErf,
    kGelu,
    kGeluTanh,
    // The elementwise Log, Sqrt, Elu (alpha), Selu (alpha, beta = gamma), Softplus and Mish ops.
    kLog,
    kSqrt,
    kElu,
    kSelu,
    kSoftplus,
    kMish,
    kAbs,
    kNeg,
    kFloor,
    kCeil,
    kRound,  // ONNX Round: halves to even (nearbyint in the default rounding mode)
    // x * Sigmoid(x) (SiLU / Swish: PyTorch exports it as Mul(x, Sigmoid(x))), a fused activation.
    kSilu,
};

// Calls f(std::integral_constant<ActKind, K>{}) for the run-time kind k: the one switch over
// every kind, shared by the per-ISA array functions (each instantiates its loop per kind).
template <typename F>
inline void act_dispatch(ActKind k, F&& f) {
    switch (k) {
        case ActKind::kNone: return f(std::integral_constant<ActKind, ActKind::kNone>{});
        case ActKind::kRelu: return f(std::integral_constant<ActKind, ActKind::kRelu>{});
        case ActKind::kLeakyRelu: return f(std::integral_constant<ActKind, ActKind::kLeakyRelu>{});
        case ActKind::kClip: return f(std::integral_constant<ActKind, ActKind::kClip>{});
        case ActKind::kHardSigmoid: return f(std::integral_constant<ActKind, ActKind::kHardSigmoid>{});
        case ActKind::kHardSwish: return f(std::integral_constant<ActKind, ActKind::kHardSwish>{});
        case ActKind::kSigmoid: return f(std::integral_constant<ActKind, ActKind::kSigmoid>{});
        case ActKind::kTanh: return f(std::integral_constant<ActKind, ActKind::kTanh>{});
        case ActKind::kExp: return f(std::integral_constant<ActKind, ActKind::kExp>{});
        case ActKind::kErf: return f(std::integral_constant<ActKind, ActKind::kErf>{});
        case ActKind::kGelu: return f(std::integral_constant<ActKind, ActKind::kGelu>{});
        case ActKind::kGeluTanh: return f(std::integral_constant<ActKind, ActKind::kGeluTanh>{});
        case ActKind::kLog: return f(std::integral_constant<ActKind, ActKind::kLog>{});
        case ActKind::kSqrt: return f(std::integral_constant<ActKind, ActKind::kSqrt>{});
        case ActKind::kElu: return f(std::integral_constant<ActKind, ActKind::kElu>{});
        case ActKind::kSelu: return f(std::integral_constant<ActKind, ActKind::kSelu>{});
        case ActKind::kSoftplus: return f(std::integral_constant<ActKind, ActKind::kSoftplus>{});
        case ActKind::kMish: return f(std::integral_constant<ActKind, ActKind::kMish>{});
        case ActKind::kAbs: return f(std::integral_constant<ActKind, ActKind::kAbs>{});
        case ActKind::kNeg: return f(std::integral_constant<ActKind, ActKind::kNeg>{});
        case ActKind::kFloor: return f(std::integral_constant<ActKind, ActKind::kFloor>{});
        case ActKind::kCeil: return f(std::integral_constant<ActKind, ActKind::kCeil>{});
        case ActKind::kRound: return f(std::integral_constant<ActKind, ActKind::kRound>{});
        case ActKind::kSilu: return f(std::integral_constant<ActKind, ActKind::kSilu>{});
    }
}

// Lower-case name for kernel descriptions ("log", "softplus", ...).
inline const char* act_name(ActKind k) {
    static constexpr const char* kNames[] = {"none", "relu", "leaky_relu", "clip", "hard_sigmoid", "hard_swish",
                                             "sigmoid", "tanh", "exp", "erf", "gelu", "gelu_tanh", "log", "sqrt",
                                             "elu", "selu", "softplus", "mish", "abs", "neg", "floor", "ceil", "round",
                                             "silu"};
    static_assert(sizeof(kNames) / sizeof(kNames[0]) == size_t(ActKind::kSilu) + 1);
    return kNames[int(k)];
}

struct Activation {
    ActKind kind = ActKind::kNone;
    float alpha = 0.0f, beta = 0.0f;
};

// Name as the graph pass writes it in `_fused_act` (ONNX op names). Fills defaults for alpha and
// beta when the caller passes NaN (LeakyRelu 0.01; HardSigmoid 0.2, 0.5; Clip -inf, +inf).
inline bool parse_activation(std::string_view name, float alpha, float beta, Activation* out) {
    Activation a;
    if (name == "Relu") a.kind = ActKind::kRelu;
    else if (name == "LeakyRelu") a.kind = ActKind::kLeakyRelu, a.alpha = std::isnan(alpha) ? 0.01f : alpha;
    else if (name == "Clip")
        a.kind = ActKind::kClip, a.alpha = std::isnan(alpha) ? -INFINITY : alpha,
        a.beta = std::isnan(beta) ? INFINITY : beta;
    else if (name == "HardSigmoid")
        a.kind = ActKind::kHardSigmoid, a.alpha = std::isnan(alpha) ? 0.2f : alpha,
        a.beta = std::isnan(beta) ? 0.5f : beta;
    else if (name == "HardSwish") a.kind = ActKind::kHardSwish;
    else if (name == "Sigmoid") a.kind = ActKind::kSigmoid;
    else if (name == "Tanh") a.kind = ActKind::kTanh;
    else if (name == "Silu") a.kind = ActKind::kSilu;
    else if (name == "Gelu") a.kind = ActKind::kGelu;
    else if (name == "GeluTanh") a.kind = ActKind::kGeluTanh;
    else return false;
    *out = a;
    return true;
}

// log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)) (NaN stays NaN).
template <typename T>
inline T softplus_t(T x) {
    return (x > T(0) ? x : T(0)) + std::log1p(std::exp(-std::fabs(x)));
}

// Scalar reference, the same formulas as the elementwise ops, in T (float, double; integer types
// go through double).
template <typename T>
inline T act_scalar_t(const Activation& a, T x) {
    if constexpr (!std::is_floating_point_v<T>) {
        return a.kind == ActKind::kNone ? x : T(act_scalar_t<double>(a, double(x)));
    } else {
        const T al = T(a.alpha), be = T(a.beta);
        switch (a.kind) {
            case ActKind::kNone: return x;
            case ActKind::kRelu: return x > T(0) ? x : T(0);
            case ActKind::kLeakyRelu: return x >= T(0) ? x : al * x;
            case ActKind::kClip: return x < al ? al : (x > be ? be : x);
            case ActKind::kHardSigmoid: return std::fmax(T(0), std::fmin(T(1), al * x + be));
            case ActKind::kHardSwish: return x * std::fmax(T(0), std::fmin(T(1), x / T(6) + T(0.5)));
            case ActKind::kSigmoid:
                return x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
            case ActKind::kTanh: return std::tanh(x);
            case ActKind::kExp: return std::exp(x);
            case ActKind::kErf: return std::erf(x);
            case ActKind::kGelu: return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
            case ActKind::kGeluTanh:
                return T(0.5) * x * (T(1) + std::tanh(T(0.7978845608028654) * (x + T(0.044715) * x * x * x)));
            case ActKind::kLog: return std::log(x);
            case ActKind::kSqrt: return std::sqrt(x);
            case ActKind::kElu: return x >= T(0) ? x : al * std::expm1(x);
            case ActKind::kSelu: return x > T(0) ? be * x : be * (al * std::expm1(x));
            case ActKind::kSoftplus: return softplus_t(x);
            case ActKind::kMish: return x * std::tanh(softplus_t(x));
            case ActKind::kAbs: return std::fabs(x);
            case ActKind::kNeg: return -x;
            case ActKind::kFloor: return std::floor(x);
            case ActKind::kCeil: return std::ceil(x);
            case ActKind::kRound: return std::nearbyint(x);
            case ActKind::kSilu:
                return x * (x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x)));
        }
        return x;
    }
}
inline float act_scalar(const Activation& a, float x) { return act_scalar_t<float>(a, x); }

// y[i] = act(x[i]) for i < n; x == y allowed.
using ActApplyFn = void (*)(const Activation& a, const float* x, float* y, int64_t n);
ActApplyFn act_apply_for(Isa isa);

// Per-ISA array forms (defined in src/kernels/x86/activation_*.cpp; x86 only).
void act_apply_scalar(const Activation& a, const float* x, float* y, int64_t n);
void act_apply_avx2(const Activation& a, const float* x, float* y, int64_t n);
void act_apply_avx512(const Activation& a, const float* x, float* y, int64_t n);
// NEON (src/kernels/arm/activation_neon.cpp; aarch64 only). Vector forms: kernels/arm/activation_neon.h.
void act_apply_neon(const Activation& a, const float* x, float* y, int64_t n);

// ------------------------------------------------------------------ vector forms
// Cephes-style: exp(x) = 2^n * p(r), r = x - n ln2 (two-part ln2), degree-6 polynomial; the
// 2^n scale is applied in two halves so results down to the denormal range stay exact.
#define JIFFY_EXP_CONSTS                                                \
    constexpr float kExpHi = 88.7228394f, kExpLo = -103.972084f;        \
    constexpr float kLog2e = 1.44269504088896341f;                      \
    constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;    \
    constexpr float kP0 = 1.9875691500E-4f, kP1 = 1.3981999507E-3f;     \
    constexpr float kP2 = 8.3334519073E-3f, kP3 = 4.1665795894E-2f;     \
    constexpr float kP4 = 1.6666665459E-1f, kP5 = 5.0000001201E-1f;
// tanh for |x| < 0.625: x + x^3 P(x^2) (Cephes tanhf); else 1 - 2 / (exp(2|x|) + 1).
#define JIFFY_TANH_CONSTS                                               \
    constexpr float kT0 = -5.70498872745E-3f, kT1 = 2.06390887954E-2f;  \
    constexpr float kT2 = -5.37397155531E-2f, kT3 = 1.33314422036E-1f;  \
    constexpr float kT4 = -3.33332819422E-1f;

// erf: for |x| >= 0.5, 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-x^2), t = 1 / (1 + p |x|)
// (Abramowitz and Stegun 7.1.26, 1.5e-7 absolute); below, x (c0 + c1 x^2 + ... + c5 x^10) (the
// Taylor series, 2 / sqrt(pi) (-1)^n / (n! (2n + 1))). ~4e-7 absolute in float.
#define JIFFY_ERF_CONSTS                                                        \
    constexpr float kEp = 0.3275911f, kEa1 = 0.254829592f, kEa2 = -0.284496736f; \
    constexpr float kEa3 = 1.421413741f, kEa4 = -1.453152027f, kEa5 = 1.061405429f; \
    constexpr float kEc0 = 1.1283791671f, kEc1 = -0.3761263890f, kEc2 = 0.1128379167f; \
    constexpr float kEc3 = -0.0268661706f, kEc4 = 0.0052239776f, kEc5 = -0.0008548327f;

// log (Cephes logf): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log x = e ln2 + (m - 1) + (m - 1)^3
// P(m - 1) - (m - 1)^2 / 2, ln2 in two parts; ~1 ulp.
#define JIFFY_LOG_CONSTS                                                        \
    constexpr float kSqrtHalf = 0.707106781186547524f;                          \
    constexpr float kLnHi = 0.693359375f, kLnLo = -2.12194440e-4f;              \
    constexpr float kL0 = 7.0376836292E-2f, kL1 = -1.1514610310E-1f;            \
    constexpr float kL2 = 1.1676998740E-1f, kL3 = -1.2420140846E-1f;            \
    constexpr float kL4 = 1.4249322787E-1f, kL5 = -1.6668057665E-1f;            \
    constexpr float kL6 = 2.0000714765E-1f, kL7 = -2.4999993993E-1f;            \
    constexpr float kL8 = 3.3333331174E-1f;
// expm1 for |x| < 0.5: x + x^2 (1/2 + x/3! + ... + x^6/8!) (Taylor, < 2e-8 relative); else
// exp(x) - 1 (no cancellation worse than 2.5x there).
#define JIFFY_EXPM1_CONSTS                                                      \
    constexpr float kM2 = 0.5f, kM3 = 1.0f / 6, kM4 = 1.0f / 24, kM5 = 1.0f / 120; \
    constexpr float kM6 = 1.0f / 720, kM7 = 1.0f / 5040, kM8 = 1.0f / 40320;

// GCC 12 warns (falsely) that the intrinsics' internal _mm512_undefined_ps() values may be used
// uninitialized once these are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if defined(__AVX512F__)
inline __m512 exp_v512(__m512 x) {
    JIFFY_EXP_CONSTS
    // max/min keep NaN (the second operand is returned when either is NaN).
    x = _mm512_min_ps(_mm512_set1_ps(kExpHi + 1.0f), x);
    x = _mm512_max_ps(_mm512_set1_ps(kExpLo - 1.0f), x);
    __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT);
    __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(kLn2Hi), x);
    r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(kLn2Lo), r);
    __m512 p = _mm512_set1_ps(kP0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
    __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    // p * 2^fx in one instruction, rounded once: bit for bit the two-step 2^n1 * 2^n2 scaling of
    // the AVX2 form (checked on 7e8 inputs spread over every bit pattern), ~30% faster SiLU.
    return _mm512_scalef_ps(p, fx);
}
// exp(z) for z <= 0 (or NaN) where ~4e-7 relative is enough (Sigmoid, SiLU): exp_v512's 2^n *
// p(r), but r = z - n ln2 with one ln2 constant (n >= -150 here: 3e-7 at most), a degree-5
// minimax polynomial (1.7e-7 in float; Horner, no r^2 split), and n = round(z log2e) by the
// 1.5 * 2^23 shifter (one FMA and a subtraction instead of a multiply and a 2-uop roundscale):
// 13 vector uops against exp_v512's 16 (on Intel's two 512-bit ports SiLU is uop-bound: 6.1 ->
// 4.6 ns a vector with silu_v512's own savings). -104 and below give 0 (z = -inf too); NaN stays.
inline __m512 exp_nonpos_v512(__m512 z) {
    constexpr float kShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    z = _mm512_max_ps(_mm512_set1_ps(-104.0f), z);  // NaN: the second operand, z
    __m512 n = _mm512_fmadd_ps(z, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(kShift));
    n = _mm512_sub_ps(n, _mm512_set1_ps(kShift));
    const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e430p-1f), z);
    // Fitted here (Lawson's weighted least squares for the minimax relative error on
    // [-ln2 / 2, ln2 / 2], c0 fixed at 1): 9.1e-8 in exact arithmetic.
    __m512 p = _mm512_set1_ps(0x1.0fa834p-7f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.573a54p-5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.555a6ap-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.fffdc6p-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.fffff6p-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
// 1 / (1 + exp(-x)) as e / (1 + e) below 0 and 1 / (1 + e) above, e = exp(-|x|) (never overflows;
// -|x| as x with its sign bit set: one op).
inline __m512 sigmoid_v512(__m512 x) {
    const __m512 e = exp_nonpos_v512(_mm512_or_ps(x, _mm512_set1_ps(-0.0f)));
    const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 num = _mm512_mask_blend_ps(neg, _mm512_set1_ps(1.0f), e);
    return _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}
// x * Sigmoid(x) as (x e) / (1 + e) below 0 and x / (1 + e) above, e = exp(-|x|): far below 0 the
// product is e * x, not 0 (x = -89: -1.8e-37), like the scalar form. The masked multiply puts the
// numerator's choice and the product in one op.
inline __m512 silu_v512(__m512 x) {
    const __m512 e = exp_nonpos_v512(_mm512_or_ps(x, _mm512_set1_ps(-0.0f)));
    const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_div_ps(_mm512_mask_mul_ps(x, neg, x, e), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}
inline __m512 tanh_v512(__m512 x) {
    JIFFY_TANH_CONSTS
    const __m512 sign = _mm512_set1_ps(-0.0f);
    __m512 ax = _mm512_andnot_ps(sign, x);
    __m512 z = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(kT0);
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(kT1));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(kT2));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(kT3));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(kT4));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
    __m512 e = exp_v512(_mm512_add_ps(ax, ax));
    __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                               _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    big = _mm512_or_ps(big, _mm512_and_ps(sign, x));
    __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(is_small, big, small);
}
// erf parts: q = poly(t) exp(-x^2) (erf(|x|) = 1 - q for |x| >= 0.5) and s = the Taylor form
// (erf(x) for |x| < 0.5, odd in x).
// q = poly(t) exp(-x^2), erf(|x|) = 1 - q (Abramowitz-Stegun 7.1.26, 1.5e-7 absolute for every
// x). t = 1 / (1 + p |x|) by VRCP14PS and one Newton step (~1 ulp; a zmm division is ~16 cycles a
// vector on the Intel hosts), |x| capped at 16 where erf is 1 in float (infinities give t = 0,
// not NaN); exp(-x^2) by exp_nonpos_v512 (NaN stays NaN through both).
inline __m512 erf_q_v512(__m512 ax) {
    JIFFY_ERF_CONSTS
    const __m512 d = _mm512_fmadd_ps(_mm512_min_ps(ax, _mm512_set1_ps(16.0f)), _mm512_set1_ps(kEp), _mm512_set1_ps(1.0f));
    const __m512 r = _mm512_rcp14_ps(d);
    const __m512 t = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
    __m512 p = _mm512_set1_ps(kEa5);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kEa4));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kEa3));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kEa2));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kEa1));
    return _mm512_mul_ps(_mm512_mul_ps(p, t), exp_nonpos_v512(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), ax), ax)));
}
// erf parts: q (above) and s = the Taylor form (erf(x) for |x| < 0.5, odd in x: relative
// accuracy near 0, which 1 - q lacks).
inline void erf_parts_v512(__m512 x, __m512* q, __m512* s, __mmask16* small) {
    JIFFY_ERF_CONSTS
    const __m512 ax = _mm512_abs_ps(x);
    *q = erf_q_v512(ax);
    const __m512 x2 = _mm512_mul_ps(x, x);
    __m512 c = _mm512_set1_ps(kEc5);
    c = _mm512_fmadd_ps(c, x2, _mm512_set1_ps(kEc4));
    c = _mm512_fmadd_ps(c, x2, _mm512_set1_ps(kEc3));
    c = _mm512_fmadd_ps(c, x2, _mm512_set1_ps(kEc2));
    c = _mm512_fmadd_ps(c, x2, _mm512_set1_ps(kEc1));
    c = _mm512_fmadd_ps(c, x2, _mm512_set1_ps(kEc0));
    *s = _mm512_mul_ps(c, x);
    *small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.5f), _CMP_LT_OQ);
}
inline __m512 erf_v512(__m512 x) {
    __m512 q, s;
    __mmask16 small;
    erf_parts_v512(x, &q, &s, &small);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512 big = _mm512_or_ps(_mm512_sub_ps(_mm512_set1_ps(1.0f), q), _mm512_and_ps(sign, x));
    return _mm512_mask_blend_ps(small, big, s);
}
// GELU = x Phi(x), Phi (the normal CDF) from 32 quintic pieces over [-8, 8), each 0.5 wide:
// piece i = floor(2 x + 16), t = 2 x + 16 - i in [0, 1), Phi = sum_j kGeluPhi[j][i] t^j. Fitted
// (least squares relative to Phi on Chebyshev nodes, against mpmath's ncdf) by session 27:
// |Phi error| <= 2.4e-7 absolute, <= 1.3e-5 relative from x = -4 up (2.9e-4 on [-6, -4), where
// |GELU| < 2e-4: 4e-9 absolute). The six coefficients come from registers by one VPERMT2PS each:
// 18 uops a vector against 33 for the erf form (A-S 7.1.26's reciprocal and exp), which
// gelu_v256 keeps (AVX2 has no 32-entry permute). Above 8 Phi = 1 in float; below -8 the product
// is 0 (|x Phi(x)| < 5e-15 there; -inf gives NaN, as x (1 + erf) does); NaN stays NaN.
alignas(64) inline constexpr float kGeluPhi[6][32] = {
    {6.21147154e-16f, 3.18762418e-14f, 1.27896391e-12f, 4.01434892e-11f, 9.8634878e-10f, 1.89870306e-08f,
      2.86632286e-07f, 3.39757116e-06f, 3.16708938e-05f, 0.000232628488f, 0.00134989829f, 0.00620966917f,
      0.0227501374f, 0.0668071955f, 0.158655241f, 0.308537513f, 0.5f, 0.691462457f, 0.841344774f, 0.93319279f,
      0.977249861f, 0.993790329f, 0.998650074f, 0.999767363f, 0.99996835f, 0.999996603f, 0.999999702f, 1.0f, 1.0f,
      1.0f, 1.0f, 1.0f},
    {2.63998951e-15f, 1.25527952e-13f, 4.6636011e-12f, 1.35298536e-10f, 3.06352566e-09f, 5.41124265e-08f,
      7.45312093e-07f, 8.00190264e-06f, 6.69483125e-05f, 0.00043639724f, 0.0022158986f, 0.00876383204f,
      0.0269949883f, 0.0647589639f, 0.120986626f, 0.176033616f, 0.199470297f, 0.176031098f, 0.120984979f,
      0.0647594705f, 0.0269960463f, 0.00876423623f, 0.00221582246f, 0.000436265807f, 6.68883149e-05f,
      7.98581823e-06f, 7.42414102e-07f, 5.37426246e-08f, 3.02919467e-09f, 1.32939312e-10f, 4.51819094e-12f,
      3.73701348e-14f},
    {3.10521347e-15f, 1.64519291e-13f, 6.42125155e-12f, 1.87840188e-10f, 4.15766666e-09f, 7.00185225e-08f,
      9.00039595e-07f, 8.84408109e-06f, 6.64383697e-05f, 0.000381004473f, 0.00166225748f, 0.0054818131f,
      0.0135042891f, 0.0242826715f, 0.030230565f, 0.0219919607f, 9.80632285e-06f, -0.0219853353f, -0.0302414726f,
      -0.0242923666f, -0.0135044176f, -0.00547868107f, -0.00166076689f, -0.000380905549f, -6.65949628e-05f,
      -8.91797936e-06f, -9.17733985e-07f, -7.27463529e-08f, -4.4494719e-09f, -2.10259157e-10f, -7.5500205e-12f,
      2.51545665e-13f},
    {1.75076204e-14f, 6.29792876e-13f, 1.76125659e-11f, 3.83570592e-10f, 6.51407506e-09f, 8.63055618e-08f,
      8.91061518e-07f, 7.14405223e-06f, 4.41826924e-05f, 0.000208474172f, 0.00073740416f, 0.00189759501f,
      0.00334362127f, 0.00337981922f, 7.0161841e-05f, -0.00544524798f, -0.00835182983f, -0.00558285043f,
      -2.30477399e-05f, 0.003405642f, 0.00340357958f, 0.00192232104f, 0.000733695982f, 0.000200648457f,
      4.0406685e-05f, 6.08411483e-06f, 6.91519745e-07f, 5.97115459e-08f, 3.93498789e-09f, 1.98536798e-10f,
      7.38511162e-12f, -8.48400235e-13f},
    {-1.79998669e-14f, -5.23094588e-13f, -1.09708813e-11f, -1.58174293e-10f, -1.36354861e-09f, -2.25169328e-09f,
      1.11402855e-07f, 1.6738361e-06f, 1.31057668e-05f, 6.50410439e-05f, 0.000209391219f, 0.000410086213f,
      0.000345539185f, -0.000388129527f, -0.00139775814f, -0.00137759966f, 7.1469105e-05f, 0.00142166088f,
      0.00131180719f, 0.000318516104f, -0.000339383987f, -0.000382578379f, -0.00019848239f, -6.58396893e-05f,
      -1.5229547e-05f, -2.55099621e-06f, -3.15817118e-07f, -2.92632034e-08f, -2.04654782e-09f, -1.08627565e-10f,
      -4.09340183e-12f, 9.45505393e-13f},
    {2.59718699e-14f, 8.49530949e-13f, 2.1121483e-11f, 3.97416655e-10f, 5.6260383e-09f, 5.94353864e-08f,
      4.62966028e-07f, 2.60875322e-06f, 1.02803451e-05f, 2.63492129e-05f, 3.48176873e-05f, -1.28490447e-05f,
      -0.000131358451f, -0.000185276964f, -7.32717217e-06f, 0.000259719498f, 0.000262721849f, -2.28698286e-06f,
      -0.000184212171f, -0.000134195943f, -1.53567107e-05f, 3.44694563e-05f, 2.69997818e-05f, 1.07887581e-05f,
      2.80304357e-06f, 5.1005469e-07f, 6.72775613e-08f, 6.55814381e-09f, 4.7824561e-10f, 2.62903831e-11f,
      9.87006267e-13f, -3.59709549e-13f},
};
inline __m512 gelu_v512(__m512 x) {
    // u = 2 x + 16 clamped to [0, 32) (max first: NaN gives 0, a valid piece; x itself carries the
    // NaN into the product).
    const __m512 u = _mm512_min_ps(_mm512_max_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(2.0f), _mm512_set1_ps(16.0f)),
                                                 _mm512_setzero_ps()),
                                   _mm512_set1_ps(31.999998f));
    const __m512i i = _mm512_cvttps_epi32(u);
    const __m512 t = _mm512_sub_ps(u, _mm512_cvtepi32_ps(i));
    auto c = [&](int j) {
        return _mm512_permutex2var_ps(_mm512_load_ps(kGeluPhi[j]), i, _mm512_load_ps(kGeluPhi[j] + 16));
    };
    __m512 p = _mm512_fmadd_ps(c(5), t, c(4));
    p = _mm512_fmadd_ps(p, t, c(3));
    p = _mm512_fmadd_ps(p, t, c(2));
    p = _mm512_fmadd_ps(p, t, c(1));
    // Phi = 0 below -8 (x >= -8 or NaN keeps the piece): x Phi is then -0, or NaN for -inf.
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-8.0f), _CMP_NLT_UQ);
    p = _mm512_maskz_fmadd_ps(keep, p, t, c(0));
    return _mm512_mul_ps(x, p);
}
inline __m512 gelu_tanh_v512(__m512 x) {
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    const __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f), _mm512_fmadd_ps(x3, _mm512_set1_ps(0.044715f), x));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), tanh_v512(u)));
}
// log of x > 0 finite (denormals included): no special-value handling (log_v512 adds it).
inline __m512 log_core_v512(__m512 x) {
    JIFFY_LOG_CONSTS
    const __m512 one = _mm512_set1_ps(1.0f);
    // x = m 2^e, m in [0.5, 1); getmant / getexp are exact on denormals too.
    __m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_p5_1, _MM_MANT_SIGN_zero);
    __m512 e = _mm512_add_ps(_mm512_getexp_ps(x), one);
    const __mmask16 lo = _mm512_cmp_ps_mask(m, _mm512_set1_ps(kSqrtHalf), _CMP_LT_OQ);
    e = _mm512_mask_sub_ps(e, lo, e, one);
    m = _mm512_sub_ps(_mm512_mask_add_ps(m, lo, m, m), one);
    const __m512 z = _mm512_mul_ps(m, m);
    __m512 p = _mm512_set1_ps(kL0);
    p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(kL1));
    p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(kL2));
    p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(kL3));
    p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(kL4));
    p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(kL5));
    p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(kL6));
    p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(kL7));
    p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(kL8));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, m), z);
    y = _mm512_fmadd_ps(e, _mm512_set1_ps(kLnLo), y);
    y = _mm512_fnmadd_ps(_mm512_set1_ps(0.5f), z, y);
    return _mm512_fmadd_ps(e, _mm512_set1_ps(kLnHi), _mm512_add_ps(m, y));
}
// log x with std::log's special values: log(+-0) = -inf, log(x < 0) = NaN, log(inf) = inf.
inline __m512 log_v512(__m512 x) {
    __m512 r = log_core_v512(x);
    const __m512 zero = _mm512_setzero_ps();
    r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ), x);
    r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, zero, _CMP_EQ_OQ), _mm512_set1_ps(-INFINITY));
    r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), _mm512_set1_ps(NAN));
    return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}
inline __m512 expm1_v512(__m512 x) {
    JIFFY_EXPM1_CONSTS
    __m512 p = _mm512_set1_ps(kM8);
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(kM7));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(kM6));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(kM5));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(kM4));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(kM3));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(kM2));
    // x + x^2 p is +0 for x = -0: x's sign bit restores expm1(-0) = -0 (the sign always agrees).
    const __m512 small = _mm512_or_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, x), x, x), _mm512_and_ps(x, _mm512_set1_ps(-0.0f)));
    const __m512 big = _mm512_sub_ps(exp_v512(x), _mm512_set1_ps(1.0f));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(0.5f), _CMP_LT_OQ), big, small);
}
// max(x, 0) + log1p(u), u = exp(-|x|) in [0, 1]: log1p(u) = log(w) + (u - (w - 1)) / w with
// w = 1 + u (the correction restores what rounding w lost, so tiny u give u).
inline __m512 softplus_v512(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 u = exp_v512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
    const __m512 w = _mm512_add_ps(one, u);
    const __m512 l = _mm512_add_ps(log_core_v512(w), _mm512_div_ps(_mm512_sub_ps(u, _mm512_sub_ps(w, one)), w));
    return _mm512_add_ps(_mm512_max_ps(_mm512_setzero_ps(), x), l);  // max returns x when x is NaN
}
// x tanh(log(1 + e)) = x n / (n + 2) with e = exp(x), n = e (e + 2); x > 20 gives n / (n + 2) = 1
// in float, so the exponent is clamped there (no overflow).
inline __m512 mish_v512(__m512 x) {
    const __m512 e = exp_v512(_mm512_min_ps(_mm512_set1_ps(20.0f), x));  // min returns x when NaN
    const __m512 n = _mm512_mul_ps(e, _mm512_add_ps(e, _mm512_set1_ps(2.0f)));
    return _mm512_mul_ps(x, _mm512_div_ps(n, _mm512_add_ps(n, _mm512_set1_ps(2.0f))));
}
inline __m512 act_v512(const Activation& a, __m512 x) {
    switch (a.kind) {
        case ActKind::kNone: return x;
        case ActKind::kRelu: return _mm512_max_ps(x, _mm512_setzero_ps());
        case ActKind::kLeakyRelu: {
            __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
            return _mm512_mask_mul_ps(x, neg, x, _mm512_set1_ps(a.alpha));
        }
        case ActKind::kClip:  // x < lo ? lo : (x > hi ? hi : x); NaN passes through
            x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(a.alpha), _CMP_LT_OQ), x,
                                     _mm512_set1_ps(a.alpha));
            return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(a.beta), _CMP_GT_OQ), x,
                                        _mm512_set1_ps(a.beta));
        case ActKind::kHardSigmoid: {
            // mul + add, not fma: the same rounding as the scalar form (exact agreement near 0)
            __m512 v = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(a.alpha)), _mm512_set1_ps(a.beta));
            return _mm512_max_ps(_mm512_min_ps(v, _mm512_set1_ps(1.0f)), _mm512_setzero_ps());
        }
        case ActKind::kHardSwish: {
            __m512 v = _mm512_add_ps(_mm512_div_ps(x, _mm512_set1_ps(6.0f)), _mm512_set1_ps(0.5f));
            v = _mm512_max_ps(_mm512_min_ps(v, _mm512_set1_ps(1.0f)), _mm512_setzero_ps());
            return _mm512_mul_ps(x, v);
        }
        case ActKind::kSigmoid: return sigmoid_v512(x);
        case ActKind::kTanh: return tanh_v512(x);
        case ActKind::kExp: return exp_v512(x);
        case ActKind::kErf: return erf_v512(x);
        case ActKind::kGelu: return gelu_v512(x);
        case ActKind::kGeluTanh: return gelu_tanh_v512(x);
        case ActKind::kLog: return log_v512(x);
        case ActKind::kSqrt: return _mm512_sqrt_ps(x);
        case ActKind::kElu: {
            const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
            return _mm512_mask_mul_ps(x, neg, expm1_v512(x), _mm512_set1_ps(a.alpha));
        }
        case ActKind::kSelu: {
            const __m512 g = _mm512_set1_ps(a.beta);
            const __m512 neg = _mm512_mul_ps(g, _mm512_mul_ps(_mm512_set1_ps(a.alpha), expm1_v512(x)));
            return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), neg, _mm512_mul_ps(g, x));
        }
        case ActKind::kSoftplus: return softplus_v512(x);
        case ActKind::kMish: return mish_v512(x);
        case ActKind::kAbs: return _mm512_abs_ps(x);
        case ActKind::kNeg: return _mm512_xor_ps(x, _mm512_set1_ps(-0.0f));
        case ActKind::kFloor: return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        case ActKind::kCeil: return _mm512_roundscale_ps(x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
        case ActKind::kRound: return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        case ActKind::kSilu: return silu_v512(x);
    }
    return x;
}
#endif  // __AVX512F__

#if defined(__AVX2__) && defined(__FMA__)
// NONPOS: the caller knows x <= 0 or NaN (SiLU's exp(-|x|)); the upper clamp, a no-op there,
// is left out (the same values, bit for bit).
template <bool NONPOS = false>
inline __m256 exp_v256(__m256 x) {
    JIFFY_EXP_CONSTS
    if constexpr (!NONPOS) x = _mm256_min_ps(_mm256_set1_ps(kExpHi + 1.0f), x);
    x = _mm256_max_ps(_mm256_set1_ps(kExpLo - 1.0f), x);
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(kLn2Hi), x);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(kLn2Lo), r);
    __m256 p = _mm256_set1_ps(kP0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
    __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i n = _mm256_cvtps_epi32(fx);
    __m256i n1 = _mm256_srai_epi32(n, 1);
    __m256i n2 = _mm256_sub_epi32(n, n1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
inline __m256 sigmoid_v256(__m256 x) {
    __m256 e = exp_v256(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}
// x * Sigmoid(x) with Sigmoid's negative half as e / (1 + e), e = exp(-|x|), like the scalar form
// (the AVX-512 form's exp_nonpos_v512 has no AVX2 twin: this one keeps exp_v256's polynomial).
inline __m256 silu_v256(__m256 x) {
    const __m256 e = exp_v256<true>(_mm256_or_ps(x, _mm256_set1_ps(-0.0f)));
    const __m256 num = _mm256_blendv_ps(_mm256_set1_ps(1.0f), e, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_mul_ps(x, _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
}
inline __m256 tanh_v256(__m256 x) {
    JIFFY_TANH_CONSTS
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 ax = _mm256_andnot_ps(sign, x);
    __m256 z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(kT0);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(kT1));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(kT2));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(kT3));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(kT4));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    __m256 e = exp_v256(_mm256_add_ps(ax, ax));
    __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                               _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    big = _mm256_or_ps(big, _mm256_and_ps(sign, x));
    __m256 is_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ);
    return _mm256_blendv_ps(big, small, is_small);
}
inline void erf_parts_v256(__m256 x, __m256* q, __m256* s, __m256* small) {
    JIFFY_ERF_CONSTS
    const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(ax, _mm256_set1_ps(kEp), _mm256_set1_ps(1.0f)));
    __m256 p = _mm256_set1_ps(kEa5);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(kEa4));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(kEa3));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(kEa2));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(kEa1));
    *q = _mm256_mul_ps(_mm256_mul_ps(p, t), exp_v256(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(ax, ax))));
    const __m256 x2 = _mm256_mul_ps(x, x);
    __m256 c = _mm256_set1_ps(kEc5);
    c = _mm256_fmadd_ps(c, x2, _mm256_set1_ps(kEc4));
    c = _mm256_fmadd_ps(c, x2, _mm256_set1_ps(kEc3));
    c = _mm256_fmadd_ps(c, x2, _mm256_set1_ps(kEc2));
    c = _mm256_fmadd_ps(c, x2, _mm256_set1_ps(kEc1));
    c = _mm256_fmadd_ps(c, x2, _mm256_set1_ps(kEc0));
    *s = _mm256_mul_ps(c, x);
    *small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.5f), _CMP_LT_OQ);
}
inline __m256 erf_v256(__m256 x) {
    __m256 q, s, small;
    erf_parts_v256(x, &q, &s, &small);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 big = _mm256_or_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), q), _mm256_and_ps(sign, x));
    return _mm256_blendv_ps(big, s, small);
}
inline __m256 gelu_v256(__m256 x) {
    const __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.7071067811865476f));
    __m256 q, s, small;
    erf_parts_v256(z, &q, &s, &small);
    const __m256 neg = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ);
    __m256 one_plus = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(2.0f), q), q, neg);
    one_plus = _mm256_blendv_ps(one_plus, _mm256_add_ps(_mm256_set1_ps(1.0f), s), small);
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), one_plus);
}
inline __m256 gelu_tanh_v256(__m256 x) {
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_fmadd_ps(x3, _mm256_set1_ps(0.044715f), x));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), tanh_v256(u)));
}
inline __m256 log_core_v256(__m256 x) {
    JIFFY_LOG_CONSTS
    const __m256 one = _mm256_set1_ps(1.0f);
    // Denormals: scaled by 2^23 first (exponent corrected below).
    const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(1.17549435e-38f), _CMP_LT_OQ);
    const __m256 xs = _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(8388608.0f)), tiny);
    const __m256i bits = _mm256_castps_si256(xs);
    __m256 e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126)));
    e = _mm256_sub_ps(e, _mm256_and_ps(tiny, _mm256_set1_ps(23.0f)));
    __m256 m = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)),
                                                   _mm256_set1_epi32(0x3f000000)));  // [0.5, 1)
    const __m256 lo = _mm256_cmp_ps(m, _mm256_set1_ps(kSqrtHalf), _CMP_LT_OQ);
    e = _mm256_sub_ps(e, _mm256_and_ps(lo, one));
    m = _mm256_sub_ps(_mm256_add_ps(m, _mm256_and_ps(lo, m)), one);
    const __m256 z = _mm256_mul_ps(m, m);
    __m256 p = _mm256_set1_ps(kL0);
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(kL1));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(kL2));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(kL3));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(kL4));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(kL5));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(kL6));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(kL7));
    p = _mm256_fmadd_ps(p, m, _mm256_set1_ps(kL8));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, m), z);
    y = _mm256_fmadd_ps(e, _mm256_set1_ps(kLnLo), y);
    y = _mm256_fnmadd_ps(_mm256_set1_ps(0.5f), z, y);
    return _mm256_fmadd_ps(e, _mm256_set1_ps(kLnHi), _mm256_add_ps(m, y));
}
inline __m256 log_v256(__m256 x) {
    __m256 r = log_core_v256(x);
    const __m256 zero = _mm256_setzero_ps();
    r = _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, _mm256_set1_ps(INFINITY), _CMP_EQ_OQ));
    r = _mm256_blendv_ps(r, _mm256_set1_ps(-INFINITY), _mm256_cmp_ps(x, zero, _CMP_EQ_OQ));
    r = _mm256_blendv_ps(r, _mm256_set1_ps(NAN), _mm256_cmp_ps(x, zero, _CMP_LT_OQ));
    return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
inline __m256 expm1_v256(__m256 x) {
    JIFFY_EXPM1_CONSTS
    __m256 p = _mm256_set1_ps(kM8);
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(kM7));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(kM6));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(kM5));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(kM4));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(kM3));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(kM2));
    const __m256 small = _mm256_or_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, x), x, x), _mm256_and_ps(x, _mm256_set1_ps(-0.0f)));
    const __m256 big = _mm256_sub_ps(exp_v256(x), _mm256_set1_ps(1.0f));
    const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.5f), _CMP_LT_OQ));
}
inline __m256 softplus_v256(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    const __m256 u = exp_v256(_mm256_sub_ps(_mm256_setzero_ps(), ax));
    const __m256 w = _mm256_add_ps(one, u);
    const __m256 l = _mm256_add_ps(log_core_v256(w), _mm256_div_ps(_mm256_sub_ps(u, _mm256_sub_ps(w, one)), w));
    return _mm256_add_ps(_mm256_max_ps(_mm256_setzero_ps(), x), l);
}
inline __m256 mish_v256(__m256 x) {
    const __m256 e = exp_v256(_mm256_min_ps(_mm256_set1_ps(20.0f), x));
    const __m256 n = _mm256_mul_ps(e, _mm256_add_ps(e, _mm256_set1_ps(2.0f)));
    return _mm256_mul_ps(x, _mm256_div_ps(n, _mm256_add_ps(n, _mm256_set1_ps(2.0f))));
}
inline __m256 act_v256(const Activation& a, __m256 x) {
    switch (a.kind) {
        case ActKind::kNone: return x;
        case ActKind::kRelu: return _mm256_max_ps(x, _mm256_setzero_ps());
        case ActKind::kLeakyRelu: {
            __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
            return _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(a.alpha)), neg);
        }
        case ActKind::kClip: {
            __m256 lo = _mm256_set1_ps(a.alpha), hi = _mm256_set1_ps(a.beta);
            x = _mm256_blendv_ps(x, lo, _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
            return _mm256_blendv_ps(x, hi, _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
        }
        case ActKind::kHardSigmoid: {
            __m256 v = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(a.alpha)), _mm256_set1_ps(a.beta));
            return _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(1.0f)), _mm256_setzero_ps());
        }
        case ActKind::kHardSwish: {
            __m256 v = _mm256_add_ps(_mm256_div_ps(x, _mm256_set1_ps(6.0f)), _mm256_set1_ps(0.5f));
            v = _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(1.0f)), _mm256_setzero_ps());
            return _mm256_mul_ps(x, v);
        }
        case ActKind::kSigmoid: return sigmoid_v256(x);
        case ActKind::kTanh: return tanh_v256(x);
        case ActKind::kExp: return exp_v256(x);
        case ActKind::kErf: return erf_v256(x);
        case ActKind::kGelu: return gelu_v256(x);
        case ActKind::kGeluTanh: return gelu_tanh_v256(x);
        case ActKind::kLog: return log_v256(x);
        case ActKind::kSqrt: return _mm256_sqrt_ps(x);
        case ActKind::kElu: {
            const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
            return _mm256_blendv_ps(x, _mm256_mul_ps(expm1_v256(x), _mm256_set1_ps(a.alpha)), neg);
        }
        case ActKind::kSelu: {
            const __m256 g = _mm256_set1_ps(a.beta);
            const __m256 neg = _mm256_mul_ps(g, _mm256_mul_ps(_mm256_set1_ps(a.alpha), expm1_v256(x)));
            return _mm256_blendv_ps(neg, _mm256_mul_ps(g, x), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ));
        }
        case ActKind::kSoftplus: return softplus_v256(x);
        case ActKind::kMish: return mish_v256(x);
        case ActKind::kAbs: return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
        case ActKind::kNeg: return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f));
        case ActKind::kFloor: return _mm256_round_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        case ActKind::kCeil: return _mm256_round_ps(x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
        case ActKind::kRound: return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        case ActKind::kSilu: return silu_v256(x);
    }
    return x;
}
#endif  // __AVX2__ && __FMA__

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#undef JIFFY_EXP_CONSTS
#undef JIFFY_TANH_CONSTS
#undef JIFFY_ERF_CONSTS
#undef JIFFY_LOG_CONSTS
#undef JIFFY_EXPM1_CONSTS

}  // namespace jiffy::kernels
