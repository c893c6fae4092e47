// NEON (AArch64 Advanced SIMD) forms of the activations in kernels/activation.h, on 4-float
// registers, for the per-ISA translation units under src/kernels/arm/:
//   exp_v128 / sigmoid_v128 / tanh_v128   the same Cephes-style algorithms as exp_v512/_v256
//                                         (same constants, FMA steps, two-half 2^n scaling)
//   act_v128(act, v)                      the full Activation on a register, with the scalar
//                                         reference's NaN / signed-zero behaviour: Relu(NaN) = 0,
//                                         HardSigmoid(NaN) = 1 (fmin/fmax semantics), Clip and
//                                         LeakyRelu pass NaN through.
#pragma once
#if !defined(__aarch64__)
#error "kernels/arm/activation_neon.h is for AArch64 builds only"
#endif
#include <arm_neon.h>

#include "kernels/activation.h"

namespace jiffy::kernels {

inline float32x4_t exp_v128(float32x4_t x) {
    constexpr float kExpHi = 88.7228394f, kExpLo = -103.972084f;
    constexpr float kLog2e = 1.44269504088896341f;
    constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
    constexpr float kP0 = 1.9875691500E-4f, kP1 = 1.3981999507E-3f;
    constexpr float kP2 = 8.3334519073E-3f, kP3 = 4.1665795894E-2f;
    constexpr float kP4 = 1.6666665459E-1f, kP5 = 5.0000001201E-1f;
    // FMIN / FMAX return NaN when either input is NaN, so NaN stays NaN through the clamp.
    x = vminq_f32(vdupq_n_f32(kExpHi + 1.0f), x);
    x = vmaxq_f32(vdupq_n_f32(kExpLo - 1.0f), x);
    const float32x4_t fx = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(kLog2e)));  // ties to even
    float32x4_t r = vfmsq_f32(x, fx, vdupq_n_f32(kLn2Hi));                  // x - fx * ln2hi
    r = vfmsq_f32(r, fx, vdupq_n_f32(kLn2Lo));
    float32x4_t p = vdupq_n_f32(kP0);
    p = vfmaq_f32(vdupq_n_f32(kP1), p, r);
    p = vfmaq_f32(vdupq_n_f32(kP2), p, r);
    p = vfmaq_f32(vdupq_n_f32(kP3), p, r);
    p = vfmaq_f32(vdupq_n_f32(kP4), p, r);
    p = vfmaq_f32(vdupq_n_f32(kP5), p, r);
    const float32x4_t r2 = vmulq_f32(r, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, r2);
    // 2^n as 2^n1 * 2^n2 (n1 = n >> 1), both normal floats for n in [-151, 129]. fx is integral,
    // so the truncating convert is exact (NaN converts to 0; p is NaN then anyway).
    const int32x4_t n = vcvtq_s32_f32(fx);
    const int32x4_t n1 = vshrq_n_s32(n, 1);
    const int32x4_t n2 = vsubq_s32(n, n1);
    const int32x4_t bias = vdupq_n_s32(127);
    const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
    const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    return vmulq_f32(vmulq_f32(p, s1), s2);
}

inline float32x4_t sigmoid_v128(float32x4_t x) {
    // 1 / (1 + exp(-x)): exp(-x) overflows to inf for x << 0, giving 0 (the exact limit).
    const float32x4_t e = exp_v128(vnegq_f32(x));
    return vdivq_f32(vdupq_n_f32(1.0f), vaddq_f32(vdupq_n_f32(1.0f), e));
}

// x * Sigmoid(x), Sigmoid's negative half as e / (1 + e) with e = exp(-|x|) (as the scalar form).
inline float32x4_t silu_v128(float32x4_t x) {
    const float32x4_t e = exp_v128(vnegq_f32(vabsq_f32(x)));
    const float32x4_t num = vbslq_f32(vcltq_f32(x, vdupq_n_f32(0.0f)), e, vdupq_n_f32(1.0f));
    return vmulq_f32(x, vdivq_f32(num, vaddq_f32(vdupq_n_f32(1.0f), e)));
}

inline float32x4_t tanh_v128(float32x4_t x) {
    constexpr float kT0 = -5.70498872745E-3f, kT1 = 2.06390887954E-2f;
    constexpr float kT2 = -5.37397155531E-2f, kT3 = 1.33314422036E-1f;
    constexpr float kT4 = -3.33332819422E-1f;
    const float32x4_t ax = vabsq_f32(x);
    const float32x4_t z = vmulq_f32(x, x);
    float32x4_t p = vdupq_n_f32(kT0);
    p = vfmaq_f32(vdupq_n_f32(kT1), p, z);
    p = vfmaq_f32(vdupq_n_f32(kT2), p, z);
    p = vfmaq_f32(vdupq_n_f32(kT3), p, z);
    p = vfmaq_f32(vdupq_n_f32(kT4), p, z);
    const float32x4_t small = vfmaq_f32(x, vmulq_f32(p, z), x);  // x + (p z) x
    const float32x4_t e = exp_v128(vaddq_f32(ax, ax));
    float32x4_t big = vsubq_f32(vdupq_n_f32(1.0f), vdivq_f32(vdupq_n_f32(2.0f), vaddq_f32(e, vdupq_n_f32(1.0f))));
    // big >= 0: give it x's sign bit.
    big = vbslq_f32(vdupq_n_u32(0x80000000u), x, big);
    return vbslq_f32(vcltq_f32(ax, vdupq_n_f32(0.625f)), small, big);
}

// erf and GELU: the algorithm of erf_v512 / gelu_v512 (kernels/activation.h).
inline void erf_parts_v128(float32x4_t x, float32x4_t* q, float32x4_t* s, uint32x4_t* small) {
    constexpr float kEp = 0.3275911f, kEa1 = 0.254829592f, kEa2 = -0.284496736f;
    constexpr float kEa3 = 1.421413741f, kEa4 = -1.453152027f, kEa5 = 1.061405429f;
    constexpr float kEc0 = 1.1283791671f, kEc1 = -0.3761263890f, kEc2 = 0.1128379167f;
    constexpr float kEc3 = -0.0268661706f, kEc4 = 0.0052239776f, kEc5 = -0.0008548327f;
    const float32x4_t ax = vabsq_f32(x);
    const float32x4_t t = vdivq_f32(vdupq_n_f32(1.0f), vfmaq_f32(vdupq_n_f32(1.0f), ax, vdupq_n_f32(kEp)));
    float32x4_t p = vdupq_n_f32(kEa5);
    p = vfmaq_f32(vdupq_n_f32(kEa4), p, t);
    p = vfmaq_f32(vdupq_n_f32(kEa3), p, t);
    p = vfmaq_f32(vdupq_n_f32(kEa2), p, t);
    p = vfmaq_f32(vdupq_n_f32(kEa1), p, t);
    *q = vmulq_f32(vmulq_f32(p, t), exp_v128(vnegq_f32(vmulq_f32(ax, ax))));
    const float32x4_t x2 = vmulq_f32(x, x);
    float32x4_t c = vdupq_n_f32(kEc5);
    c = vfmaq_f32(vdupq_n_f32(kEc4), c, x2);
    c = vfmaq_f32(vdupq_n_f32(kEc3), c, x2);
    c = vfmaq_f32(vdupq_n_f32(kEc2), c, x2);
    c = vfmaq_f32(vdupq_n_f32(kEc1), c, x2);
    c = vfmaq_f32(vdupq_n_f32(kEc0), c, x2);
    *s = vmulq_f32(c, x);
    *small = vcltq_f32(ax, vdupq_n_f32(0.5f));
}
inline float32x4_t erf_v128(float32x4_t x) {
    float32x4_t q, s;
    uint32x4_t small;
    erf_parts_v128(x, &q, &s, &small);
    const float32x4_t big = vbslq_f32(vdupq_n_u32(0x80000000u), x, vsubq_f32(vdupq_n_f32(1.0f), q));
    return vbslq_f32(small, s, big);
}
inline float32x4_t gelu_v128(float32x4_t x) {
    const float32x4_t z = vmulq_f32(x, vdupq_n_f32(0.7071067811865476f));
    float32x4_t q, s;
    uint32x4_t small;
    erf_parts_v128(z, &q, &s, &small);
    float32x4_t one_plus = vbslq_f32(vcltq_f32(z, vdupq_n_f32(0.0f)), q, vsubq_f32(vdupq_n_f32(2.0f), q));
    one_plus = vbslq_f32(small, vaddq_f32(vdupq_n_f32(1.0f), s), one_plus);
    return vmulq_f32(vmulq_f32(vdupq_n_f32(0.5f), x), one_plus);
}
inline float32x4_t gelu_tanh_v128(float32x4_t x) {
    const float32x4_t x3 = vmulq_f32(vmulq_f32(x, x), x);
    const float32x4_t u = vmulq_f32(vdupq_n_f32(0.7978845608028654f), vfmaq_f32(x, x3, vdupq_n_f32(0.044715f)));
    return vmulq_f32(vmulq_f32(vdupq_n_f32(0.5f), x), vaddq_f32(vdupq_n_f32(1.0f), tanh_v128(u)));
}

// log / expm1 / softplus / mish: the algorithms of log_v256 / expm1_v256 / softplus_v256 /
// mish_v256 (kernels/activation.h; the constants are repeated here).
inline float32x4_t log_core_v128(float32x4_t x) {
    constexpr float kSqrtHalf = 0.707106781186547524f;
    constexpr float kLnHi = 0.693359375f, kLnLo = -2.12194440e-4f;
    constexpr float kL[9] = {7.0376836292E-2f, -1.1514610310E-1f, 1.1676998740E-1f, -1.2420140846E-1f,
                             1.4249322787E-1f, -1.6668057665E-1f, 2.0000714765E-1f, -2.4999993993E-1f,
                             3.3333331174E-1f};
    const float32x4_t one = vdupq_n_f32(1.0f);
    const uint32x4_t tiny = vcltq_f32(x, vdupq_n_f32(1.17549435e-38f));  // denormals: scale by 2^23
    const float32x4_t xs = vbslq_f32(tiny, vmulq_f32(x, vdupq_n_f32(8388608.0f)), x);
    const uint32x4_t bits = vreinterpretq_u32_f32(xs);
    float32x4_t e = vcvtq_f32_s32(vsubq_s32(vreinterpretq_s32_u32(vshrq_n_u32(bits, 23)), vdupq_n_s32(126)));
    e = vsubq_f32(e, vbslq_f32(tiny, vdupq_n_f32(23.0f), vdupq_n_f32(0.0f)));
    float32x4_t m = vreinterpretq_f32_u32(vorrq_u32(vandq_u32(bits, vdupq_n_u32(0x007fffffu)), vdupq_n_u32(0x3f000000u)));
    const uint32x4_t lo = vcltq_f32(m, vdupq_n_f32(kSqrtHalf));
    e = vsubq_f32(e, vbslq_f32(lo, one, vdupq_n_f32(0.0f)));
    m = vsubq_f32(vbslq_f32(lo, vaddq_f32(m, m), m), one);
    const float32x4_t z = vmulq_f32(m, m);
    float32x4_t p = vdupq_n_f32(kL[0]);
    for (int i = 1; i < 9; ++i) p = vfmaq_f32(vdupq_n_f32(kL[i]), p, m);
    float32x4_t y = vmulq_f32(vmulq_f32(p, m), z);
    y = vfmaq_f32(y, e, vdupq_n_f32(kLnLo));
    y = vfmsq_f32(y, vdupq_n_f32(0.5f), z);
    return vfmaq_f32(vaddq_f32(m, y), e, vdupq_n_f32(kLnHi));
}
inline float32x4_t log_v128(float32x4_t x) {
    const float32x4_t zero = vdupq_n_f32(0.0f);
    float32x4_t r = log_core_v128(x);
    r = vbslq_f32(vceqq_f32(x, vdupq_n_f32(INFINITY)), x, r);
    r = vbslq_f32(vceqq_f32(x, zero), vdupq_n_f32(-INFINITY), r);
    r = vbslq_f32(vcltq_f32(x, zero), vdupq_n_f32(NAN), r);
    return vbslq_f32(vceqq_f32(x, x), r, x);  // NaN in, NaN out
}
inline float32x4_t expm1_v128(float32x4_t x) {
    constexpr float kM[7] = {1.0f / 40320, 1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f};
    float32x4_t p = vdupq_n_f32(kM[0]);
    for (int i = 1; i < 7; ++i) p = vfmaq_f32(vdupq_n_f32(kM[i]), p, x);
    // x + x^2 p is +0 for x = -0: take x's sign bit (expm1(-0) = -0; the sign always agrees).
    const float32x4_t small = vbslq_f32(vdupq_n_u32(0x80000000u), x, vfmaq_f32(x, vmulq_f32(p, x), x));
    const float32x4_t big = vsubq_f32(exp_v128(x), vdupq_n_f32(1.0f));
    return vbslq_f32(vcltq_f32(vabsq_f32(x), vdupq_n_f32(0.5f)), small, big);
}
inline float32x4_t softplus_v128(float32x4_t x) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t u = exp_v128(vnegq_f32(vabsq_f32(x)));
    const float32x4_t w = vaddq_f32(one, u);
    const float32x4_t l = vaddq_f32(log_core_v128(w), vdivq_f32(vsubq_f32(u, vsubq_f32(w, one)), w));
    return vaddq_f32(vmaxq_f32(x, vdupq_n_f32(0.0f)), l);  // FMAX: NaN stays NaN
}
inline float32x4_t mish_v128(float32x4_t x) {
    const float32x4_t e = exp_v128(vminq_f32(x, vdupq_n_f32(20.0f)));  // FMIN: NaN stays NaN
    const float32x4_t n = vmulq_f32(e, vaddq_f32(e, vdupq_n_f32(2.0f)));
    return vmulq_f32(x, vdivq_f32(n, vaddq_f32(n, vdupq_n_f32(2.0f))));
}

// The kind is usually a compile-time constant in callers (a template over ActKind), so the
// switch folds away.
inline float32x4_t act_v128(const Activation& a, float32x4_t x) {
    const float32x4_t zero = vdupq_n_f32(0.0f);
    switch (a.kind) {
        case ActKind::kNone: return x;
        case ActKind::kRelu: return vbslq_f32(vcgtq_f32(x, zero), x, zero);  // x > 0 ? x : 0
        case ActKind::kLeakyRelu:                                            // x >= 0 ? x : al x
            return vbslq_f32(vcgeq_f32(x, zero), x, vmulq_f32(x, vdupq_n_f32(a.alpha)));
        case ActKind::kClip: {  // x < lo ? lo : (x > hi ? hi : x); NaN passes through
            const float32x4_t lo = vdupq_n_f32(a.alpha), hi = vdupq_n_f32(a.beta);
            x = vbslq_f32(vcltq_f32(x, lo), lo, x);
            return vbslq_f32(vcgtq_f32(x, hi), hi, x);
        }
        case ActKind::kHardSigmoid: {
            // mul + add, not fma: the scalar form's rounding. FMINNM / FMAXNM are fmin / fmax.
            const float32x4_t v = vaddq_f32(vmulq_f32(x, vdupq_n_f32(a.alpha)), vdupq_n_f32(a.beta));
            return vmaxnmq_f32(zero, vminnmq_f32(vdupq_n_f32(1.0f), v));
        }
        case ActKind::kHardSwish: {
            float32x4_t v = vaddq_f32(vdivq_f32(x, vdupq_n_f32(6.0f)), vdupq_n_f32(0.5f));
            v = vmaxnmq_f32(zero, vminnmq_f32(vdupq_n_f32(1.0f), v));
            return vmulq_f32(x, v);
        }
        case ActKind::kSigmoid: return sigmoid_v128(x);
        case ActKind::kTanh: return tanh_v128(x);
        case ActKind::kExp: return exp_v128(x);
        case ActKind::kErf: return erf_v128(x);
        case ActKind::kGelu: return gelu_v128(x);
        case ActKind::kGeluTanh: return gelu_tanh_v128(x);
        case ActKind::kLog: return log_v128(x);
        case ActKind::kSqrt: return vsqrtq_f32(x);
        case ActKind::kElu:  // x >= 0 ? x : al expm1(x)  (NaN: al expm1(NaN) = NaN)
            return vbslq_f32(vcgeq_f32(x, zero), x, vmulq_f32(expm1_v128(x), vdupq_n_f32(a.alpha)));
        case ActKind::kSelu: {
            const float32x4_t g = vdupq_n_f32(a.beta);
            const float32x4_t neg = vmulq_f32(g, vmulq_f32(vdupq_n_f32(a.alpha), expm1_v128(x)));
            return vbslq_f32(vcgtq_f32(x, zero), vmulq_f32(g, x), neg);
        }
        case ActKind::kSoftplus: return softplus_v128(x);
        case ActKind::kMish: return mish_v128(x);
        case ActKind::kAbs: return vabsq_f32(x);
        case ActKind::kNeg: return vnegq_f32(x);
        case ActKind::kFloor: return vrndmq_f32(x);
        case ActKind::kCeil: return vrndpq_f32(x);
        case ActKind::kRound: return vrndnq_f32(x);  // ties to even
        case ActKind::kSilu: return silu_v128(x);
    }
    return x;
}

}  // namespace jiffy::kernels
