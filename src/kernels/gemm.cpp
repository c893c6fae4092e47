#include "kernels/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace jiffy::kernels {

void sgemm_avx512(int64_t, const float*, int64_t, const PackedB&, const float*, float*, int64_t, Act);
void sgemm_avx2(int64_t, const float*, int64_t, const PackedB&, const float*, float*, int64_t, Act);

static int nr_for(Isa isa) { return isa == Isa::kAvx512 ? 32 : 16; }

PackedB pack_b(const float* B, int64_t K, int64_t N, int64_t ldb, bool trans_b, Isa isa) {
    PackedB p;
    p.K = K;
    p.N = N;
    p.NR = nr_for(isa);
    int64_t panels = (N + p.NR - 1) / p.NR;
    size_t bytes = size_t(std::max<int64_t>(1, panels * K * p.NR)) * sizeof(float);
    bytes = (bytes + 63) / 64 * 64;
    float* d = static_cast<float*>(std::aligned_alloc(64, bytes));
    std::memset(d, 0, bytes);
    p.data = std::shared_ptr<float>(d, [](float* q) { std::free(q); });
    for (int64_t pn = 0; pn < panels; ++pn)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < p.NR; ++j) {
                int64_t n = pn * p.NR + j;
                if (n < N) d[(pn * K + k) * p.NR + j] = trans_b ? B[n * ldb + k] : B[k * ldb + n];
            }
    return p;
}

static void sgemm_scalar(int64_t M, const float* A, int64_t lda, const PackedB& B, const float* bias, float* C,
                         int64_t ldc, Act act) {
    const int64_t K = B.K, N = B.N, NR = B.NR;
    float acc[16];
    for (int64_t m = 0; m < M; ++m)
        for (int64_t pn = 0; pn * NR < N; ++pn) {
            const float* bp = B.panel(pn);
            for (int64_t j = 0; j < NR; ++j) acc[j] = 0;
            for (int64_t k = 0; k < K; ++k) {
                float a = A[m * lda + k];
                for (int64_t j = 0; j < NR; ++j) acc[j] += a * bp[k * NR + j];
            }
            for (int64_t j = 0; j < NR && pn * NR + j < N; ++j) {
                int64_t n = pn * NR + j;
                float v = acc[j] + (bias ? bias[n] : 0.0f);
                C[m * ldc + n] = act == Act::kRelu ? std::max(v, 0.0f) : v;
            }
        }
}

SgemmFn sgemm_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return sgemm_avx512;
    if (isa == Isa::kAvx2) return sgemm_avx2;
#endif
    return sgemm_scalar;
}

void sgemm_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                     bool trans_b, const float* bias, float* C, int64_t ldc, Act act) {
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double s = bias ? bias[n] : 0.0;
            for (int64_t k = 0; k < K; ++k) s += double(A[m * lda + k]) * (trans_b ? B[n * ldb + k] : B[k * ldb + n]);
            float v = float(s);
            C[m * ldc + n] = act == Act::kRelu ? std::max(v, 0.0f) : v;
        }
}

}  // namespace jiffy::kernels
