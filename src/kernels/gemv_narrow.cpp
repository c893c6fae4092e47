#include "kernels/gemv_narrow.h"

#include <cstdlib>
#include <cstring>

namespace jiffy::kernels {

PackedGemvNarrow pack_gemv_narrow(const float* B, int64_t K, int64_t N, int64_t ldb, bool trans_b, float scale) {
    PackedGemvNarrow p;
    p.K = K;
    p.N = N;
    p.Kp = (K + 15) / 16 * 16;
    const size_t bytes = size_t(std::max<int64_t>(1, N * p.Kp)) * sizeof(float);
    float* d = static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    std::memset(d, 0, bytes);
    p.data = std::shared_ptr<float>(d, [](float* q) { std::free(q); });
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) d[n * p.Kp + k] = scale * (trans_b ? B[n * ldb + k] : B[k * ldb + n]);
    return p;
}

void sgemv_narrow_scalar(const float* a, const PackedGemvNarrow& B, const float* bias, float* y, const Activation& act) {
    for (int64_t n = 0; n < B.N; ++n) {
        const float* w = B.data.get() + n * B.Kp;
        float s = 0.0f;
        for (int64_t k = 0; k < B.K; ++k) s += a[k] * w[k];
        y[n] = act_scalar(act, s + (bias ? bias[n] : 0.0f));
    }
}

SgemvNarrowFn sgemv_narrow_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return sgemv_narrow_avx512;
#endif
    (void)isa;
    return nullptr;
}

}  // namespace jiffy::kernels
