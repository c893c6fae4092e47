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
    switch (a.kind) {
        case ActKind::kNone: return apply_k<ActKind::kNone>(a, x, y, n);
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
