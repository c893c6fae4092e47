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
    if (a.kind == ActKind::kNone) {
        if (x != y)
            for (int64_t i = 0; i < n; ++i) y[i] = x[i];
        return;
    }
    act_dispatch(a.kind, [&](auto k) { apply_scalar_k<decltype(k)::value>(a, x, y, n); });
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
