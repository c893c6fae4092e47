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
    if (a.kind == ActKind::kNone) {
        if (x != y)
            for (int64_t i = 0; i < n; ++i) y[i] = x[i];
        return;
    }
    act_dispatch(a.kind, [&](auto k) { apply_k<decltype(k)::value>(a, x, y, n); });
}

}  // namespace jiffy::kernels
