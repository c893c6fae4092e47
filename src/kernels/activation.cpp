// Activation array functions: the scalar (portable) form and the per-ISA dispatch.
#include "kernels/activation.h"

namespace jiffy::kernels {

namespace {
template <ActKind K>
void apply_scalar_k(const Activation& a, const float* x, float* y, int64_t n) {
    Activation c = a;
    c.kind = K;  // a constant kind lets the compiler fold act_scalar's switch
    for (int64_t i = 0; i < n; ++i) y[i] = act_scalar(c, x[i]);
}
}  // namespace

void act_apply_scalar(const Activation& a, const float* x, float* y, int64_t n) {
    switch (a.kind) {
        case ActKind::kNone:
            if (x != y)
                for (int64_t i = 0; i < n; ++i) y[i] = x[i];
            return;
        case ActKind::kRelu: return apply_scalar_k<ActKind::kRelu>(a, x, y, n);
        case ActKind::kLeakyRelu: return apply_scalar_k<ActKind::kLeakyRelu>(a, x, y, n);
        case ActKind::kClip: return apply_scalar_k<ActKind::kClip>(a, x, y, n);
        case ActKind::kHardSigmoid: return apply_scalar_k<ActKind::kHardSigmoid>(a, x, y, n);
        case ActKind::kHardSwish: return apply_scalar_k<ActKind::kHardSwish>(a, x, y, n);
        case ActKind::kSigmoid: return apply_scalar_k<ActKind::kSigmoid>(a, x, y, n);
        case ActKind::kTanh: return apply_scalar_k<ActKind::kTanh>(a, x, y, n);
        case ActKind::kExp: return apply_scalar_k<ActKind::kExp>(a, x, y, n);
        case ActKind::kErf: return apply_scalar_k<ActKind::kErf>(a, x, y, n);
        case ActKind::kGelu: return apply_scalar_k<ActKind::kGelu>(a, x, y, n);
        case ActKind::kGeluTanh: return apply_scalar_k<ActKind::kGeluTanh>(a, x, y, n);
        case ActKind::kLog: return apply_scalar_k<ActKind::kLog>(a, x, y, n);
        case ActKind::kSqrt: return apply_scalar_k<ActKind::kSqrt>(a, x, y, n);
        case ActKind::kElu: return apply_scalar_k<ActKind::kElu>(a, x, y, n);
        case ActKind::kSelu: return apply_scalar_k<ActKind::kSelu>(a, x, y, n);
        case ActKind::kSoftplus: return apply_scalar_k<ActKind::kSoftplus>(a, x, y, n);
        case ActKind::kMish: return apply_scalar_k<ActKind::kMish>(a, x, y, n);
        case ActKind::kAbs: return apply_scalar_k<ActKind::kAbs>(a, x, y, n);
        case ActKind::kNeg: return apply_scalar_k<ActKind::kNeg>(a, x, y, n);
        case ActKind::kFloor: return apply_scalar_k<ActKind::kFloor>(a, x, y, n);
        case ActKind::kCeil: return apply_scalar_k<ActKind::kCeil>(a, x, y, n);
        case ActKind::kRound: return apply_scalar_k<ActKind::kRound>(a, x, y, n);
    }
}

ActApplyFn act_apply_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return act_apply_avx512;
    if (isa == Isa::kAvx2) return act_apply_avx2;
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return act_apply_neon;
#endif
    return act_apply_scalar;
}

}  // namespace jiffy::kernels
