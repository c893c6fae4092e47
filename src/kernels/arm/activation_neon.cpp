// Activation array function, NEON (4 floats per register, 8 per step, scalar tail through a
// register-sized buffer so the tail gets the same arithmetic as the body).
#include "kernels/arm/activation_neon.h"

namespace jiffy::kernels {

namespace {
template <ActKind K>
void apply_k(const Activation& a, const float* x, float* y, int64_t n) {
    Activation c = a;
    c.kind = K;  // folds act_v128's switch
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t v0 = vld1q_f32(x + i), v1 = vld1q_f32(x + i + 4);
        vst1q_f32(y + i, act_v128(c, v0));
        vst1q_f32(y + i + 4, act_v128(c, v1));
    }
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, act_v128(c, vld1q_f32(x + i)));
    if (i < n) {
        float buf[4] = {0, 0, 0, 0};
        for (int64_t j = i; j < n; ++j) buf[j - i] = x[j];
        vst1q_f32(buf, act_v128(c, vld1q_f32(buf)));
        for (int64_t j = i; j < n; ++j) y[j] = buf[j - i];
    }
}
}  // namespace

void act_apply_neon(const Activation& a, const float* x, float* y, int64_t n) {
    switch (a.kind) {
        case ActKind::kNone:
            if (x != y)
                for (int64_t i = 0; i < n; ++i) y[i] = x[i];
            return;
        case ActKind::kRelu: return apply_k<ActKind::kRelu>(a, x, y, n);
        case ActKind::kLeakyRelu: return apply_k<ActKind::kLeakyRelu>(a, x, y, n);
        case ActKind::kClip: return apply_k<ActKind::kClip>(a, x, y, n);
        case ActKind::kHardSigmoid: return apply_k<ActKind::kHardSigmoid>(a, x, y, n);
        case ActKind::kHardSwish: return apply_k<ActKind::kHardSwish>(a, x, y, n);
        case ActKind::kSigmoid: return apply_k<ActKind::kSigmoid>(a, x, y, n);
        case ActKind::kTanh: return apply_k<ActKind::kTanh>(a, x, y, n);
        case ActKind::kExp: return apply_k<ActKind::kExp>(a, x, y, n);
        case ActKind::kErf: return apply_k<ActKind::kErf>(a, x, y, n);
        case ActKind::kGelu: return apply_k<ActKind::kGelu>(a, x, y, n);
        case ActKind::kGeluTanh: return apply_k<ActKind::kGeluTanh>(a, x, y, n);
        case ActKind::kLog: return apply_k<ActKind::kLog>(a, x, y, n);
        case ActKind::kSqrt: return apply_k<ActKind::kSqrt>(a, x, y, n);
        case ActKind::kElu: return apply_k<ActKind::kElu>(a, x, y, n);
        case ActKind::kSelu: return apply_k<ActKind::kSelu>(a, x, y, n);
        case ActKind::kSoftplus: return apply_k<ActKind::kSoftplus>(a, x, y, n);
        case ActKind::kMish: return apply_k<ActKind::kMish>(a, x, y, n);
        case ActKind::kAbs: return apply_k<ActKind::kAbs>(a, x, y, n);
        case ActKind::kNeg: return apply_k<ActKind::kNeg>(a, x, y, n);
        case ActKind::kFloor: return apply_k<ActKind::kFloor>(a, x, y, n);
        case ActKind::kCeil: return apply_k<ActKind::kCeil>(a, x, y, n);
        case ActKind::kRound: return apply_k<ActKind::kRound>(a, x, y, n);
    }
}

}  // namespace jiffy::kernels
