// Activation array function, AVX-512 (16 floats per step, masked tail).
#include "kernels/activation.h"

namespace jiffy::kernels {

namespace {
template <ActKind K>
void apply_k(const Activation& a, const float* x, float* y, int64_t n) {
    Activation c = a;
    c.kind = K;  // folds act_v512's switch
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        _mm512_storeu_ps(y + i, act_v512(c, v0));
        _mm512_storeu_ps(y + i + 16, act_v512(c, v1));
    }
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, act_v512(c, _mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = __mmask16((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, act_v512(c, _mm512_maskz_loadu_ps(m, x + i)));
    }
}
}  // namespace

void act_apply_avx512(const Activation& a, const float* x, float* y, int64_t n) {
    act_dispatch(a.kind, [&](auto k) { apply_k<decltype(k)::value>(a, x, y, n); });
}

}  // namespace jiffy::kernels
