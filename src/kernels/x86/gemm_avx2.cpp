// f32_gemm_4x16__avx2: MR=4 rows x NR=16 columns (two ymm) per microkernel call.
#include <immintrin.h>

#include <algorithm>

#include "kernels/gemm.h"

namespace jiffy::kernels {

namespace {

template <int MR>
inline void ukernel(int64_t K, const float* A, int64_t lda, const float* bp, const float* bias, float* C,
                    int64_t ldc, int64_t nvalid, Act act) {
    __m256 acc0[MR], acc1[MR];
    alignas(32) float bias_buf[16] = {0};
    if (bias)
        for (int64_t j = 0; j < nvalid; ++j) bias_buf[j] = bias[j];
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
        acc0[m] = _mm256_load_ps(bias_buf);
        acc1[m] = _mm256_load_ps(bias_buf + 8);
    }
    for (int64_t k = 0; k < K; ++k) {
        __m256 b0 = _mm256_load_ps(bp + k * 16);
        __m256 b1 = _mm256_load_ps(bp + k * 16 + 8);
        #pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) {
            __m256 a = _mm256_broadcast_ss(A + m * lda + k);
            acc0[m] = _mm256_fmadd_ps(a, b0, acc0[m]);
            acc1[m] = _mm256_fmadd_ps(a, b1, acc1[m]);
        }
    }
    if (act == Act::kRelu) {
        __m256 z = _mm256_setzero_ps();
        #pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) {
            acc0[m] = _mm256_max_ps(acc0[m], z);
            acc1[m] = _mm256_max_ps(acc1[m], z);
        }
    }
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
        if (nvalid == 16) {
            _mm256_storeu_ps(C + m * ldc, acc0[m]);
            _mm256_storeu_ps(C + m * ldc + 8, acc1[m]);
        } else {
            alignas(32) float tmp[16];
            _mm256_store_ps(tmp, acc0[m]);
            _mm256_store_ps(tmp + 8, acc1[m]);
            for (int64_t j = 0; j < nvalid; ++j) C[m * ldc + j] = tmp[j];
        }
    }
}

}  // namespace

void sgemm_avx2(int64_t M, const float* A, int64_t lda, const PackedB& B, const float* bias, float* C,
                int64_t ldc, Act act) {
    const int64_t K = B.K, N = B.N;
    for (int64_t n0 = 0; n0 < N; n0 += 16) {
        const float* bp = B.panel(n0 / 16);
        const float* bb = bias ? bias + n0 : nullptr;
        int64_t nv = std::min<int64_t>(16, N - n0);
        int64_t m = 0;
        for (; m + 4 <= M; m += 4) ukernel<4>(K, A + m * lda, lda, bp, bb, C + m * ldc + n0, ldc, nv, act);
        switch (M - m) {
            case 3: ukernel<3>(K, A + m * lda, lda, bp, bb, C + m * ldc + n0, ldc, nv, act); break;
            case 2: ukernel<2>(K, A + m * lda, lda, bp, bb, C + m * ldc + n0, ldc, nv, act); break;
            case 1: ukernel<1>(K, A + m * lda, lda, bp, bb, C + m * ldc + n0, ldc, nv, act); break;
            default: break;
        }
    }
}

}  // namespace jiffy::kernels

// ---------------------------------------------------------------- GEMV (M = 1)
// As the AVX-512 one with 8-float vectors: blocks of up to 8 ymm columns (64 floats), U
// independent accumulator sets along K for narrow blocks.
namespace jiffy::kernels {
namespace {

template <int V, int U>
inline void gemv_block(int64_t K, const float* a, const float* b, int64_t ldb, const float* bias, float* y,
                       int64_t nvalid, const Activation& act) {
    __m256 acc[U][V];
    for (int u = 0; u < U; ++u)
        for (int v = 0; v < V; ++v) acc[u][v] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + U <= K; k += U)
        for (int u = 0; u < U; ++u) {
            const __m256 av = _mm256_broadcast_ss(a + k + u);
            const float* br = b + (k + u) * ldb;
            for (int v = 0; v < V; ++v) acc[u][v] = _mm256_fmadd_ps(av, _mm256_load_ps(br + 8 * v), acc[u][v]);
        }
    for (; k < K; ++k) {
        const __m256 av = _mm256_broadcast_ss(a + k);
        const float* br = b + k * ldb;
        for (int v = 0; v < V; ++v) acc[0][v] = _mm256_fmadd_ps(av, _mm256_load_ps(br + 8 * v), acc[0][v]);
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int v = 0; v < V; ++v) {
        __m256 s = acc[0][v];
        for (int u = 1; u < U; ++u) s = _mm256_add_ps(s, acc[u][v]);
        const int64_t left = nvalid - 8 * v;
        if (left >= 8) {
            if (bias) s = _mm256_add_ps(s, _mm256_loadu_ps(bias + 8 * v));
            _mm256_storeu_ps(y + 8 * v, act_v256(act, s));
        } else {
            const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(left)), lane);
            if (bias) s = _mm256_add_ps(s, _mm256_maskload_ps(bias + 8 * v, m));
            _mm256_maskstore_ps(y + 8 * v, m, act_v256(act, s));
        }
    }
}

constexpr int64_t kGemvVL = 8;
constexpr int kGemvMainU = 1;
constexpr int kGemvTailU[7] = {8, 4, 2, 2, 1, 1, 1};
#include "kernels/gemv_driver_impl.h"

}  // namespace

void sgemv_avx2(const float* a, const PackedGemv& B, const float* bias, float* y, const Activation& act,
                bool backward) {
    sgemv_cols_run(a, B, 0, B.N, bias, y, act, backward);
}

void sgemv_cols_avx2(const float* a, const PackedGemv& B, int64_t c0, int64_t c1, const float* bias, float* y,
                      const Activation& act, bool backward) {
    sgemv_cols_run(a, B, c0, c1, bias, y, act, backward);
}

}  // namespace jiffy::kernels
