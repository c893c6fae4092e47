// Activation array function, AVX2 + FMA (8 floats per step, scalar tail through a buffer).
#include "kernels/activation.h"

namespace jiffy::kernels {

namespace {
template <ActKind K>
void apply_k(const Activation& a, const float* x, float* y, int64_t n) {
    Activation c = a;
    c.kind = K;  // folds act_v256's switch
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        _mm256_storeu_ps(y + i, act_v256(c, v0));
        _mm256_storeu_ps(y + i + 8, act_v256(c, v1));
    }
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, act_v256(c, _mm256_loadu_ps(x + i)));
    if (i < n) {
        alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t j = i; j < n; ++j) buf[j - i] = x[j];
        _mm256_store_ps(buf, act_v256(c, _mm256_load_ps(buf)));
        for (int64_t j = i; j < n; ++j) y[j] = buf[j - i];
    }
}
}  // namespace

void act_apply_avx2(const Activation& a, const float* x, float* y, int64_t n) {
    act_dispatch(a.kind, [&](auto k) { apply_k<decltype(k)::value>(a, x, y, n); });
}

}  // namespace jiffy::kernels
