// f32_gemm_8x32__avx512: MR=8 rows x NR=32 columns (two zmm) per microkernel call; 16 zmm
// accumulators, B streamed from one contiguous K x 32 panel, A broadcast from memory.
#include <immintrin.h>

#include <algorithm>

#include "kernels/gemm.h"

namespace jiffy::kernels {

namespace {

template <int MR>
inline void ukernel(int64_t K, const float* A, int64_t lda, const float* bp, const float* bias, float* C,
                    int64_t ldc, int64_t nvalid, Act act) {
    __m512 acc0[MR], acc1[MR];
    __mmask16 m0 = nvalid >= 16 ? __mmask16(0xffff) : __mmask16((1u << nvalid) - 1);
    __mmask16 m1 = nvalid >= 32 ? __mmask16(0xffff) : (nvalid <= 16 ? __mmask16(0) : __mmask16((1u << (nvalid - 16)) - 1));
    __m512 b0i = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 b1i = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    for (int m = 0; m < MR; ++m) {
        acc0[m] = b0i;
        acc1[m] = b1i;
    }
    for (int64_t k = 0; k < K; ++k) {
        __m512 b0 = _mm512_load_ps(bp + k * 32);
        __m512 b1 = _mm512_load_ps(bp + k * 32 + 16);
        for (int m = 0; m < MR; ++m) {
            __m512 a = _mm512_set1_ps(A[m * lda + k]);
            acc0[m] = _mm512_fmadd_ps(a, b0, acc0[m]);
            acc1[m] = _mm512_fmadd_ps(a, b1, acc1[m]);
        }
    }
    if (act == Act::kRelu) {
        __m512 z = _mm512_setzero_ps();
        for (int m = 0; m < MR; ++m) {
            acc0[m] = _mm512_max_ps(acc0[m], z);
            acc1[m] = _mm512_max_ps(acc1[m], z);
        }
    }
    for (int m = 0; m < MR; ++m) {
        _mm512_mask_storeu_ps(C + m * ldc, m0, acc0[m]);
        _mm512_mask_storeu_ps(C + m * ldc + 16, m1, acc1[m]);
    }
}

}  // namespace

void sgemm_avx512(int64_t M, const float* A, int64_t lda, const PackedB& B, const float* bias, float* C,
                  int64_t ldc, Act act) {
    const int64_t K = B.K, N = B.N;
    for (int64_t n0 = 0; n0 < N; n0 += 32) {
        const float* bp = B.panel(n0 / 32);
        const float* bb = bias ? bias + n0 : nullptr;
        int64_t nv = std::min<int64_t>(32, N - n0);
        int64_t m = 0;
        for (; m + 8 <= M; m += 8) ukernel<8>(K, A + m * lda, lda, bp, bb, C + m * ldc + n0, ldc, nv, act);
        switch (M - m) {
            case 7: ukernel<7>(K, A + m * lda, lda, bp, bb, C + m * ldc + n0, ldc, nv, act); break;
            case 6: ukernel<6>(K, A + m * lda, lda, bp, bb, C + m * ldc + n0, ldc, nv, act); break;
            case 5: ukernel<5>(K, A + m * lda, lda, bp, bb, C + m * ldc + n0, ldc, nv, act); break;
            case 4: ukernel<4>(K, A + m * lda, lda, bp, bb, C + m * ldc + n0, ldc, nv, act); break;
            case 3: ukernel<3>(K, A + m * lda, lda, bp, bb, C + m * ldc + n0, ldc, nv, act); break;
            case 2: ukernel<2>(K, A + m * lda, lda, bp, bb, C + m * ldc + n0, ldc, nv, act); break;
            case 1: ukernel<1>(K, A + m * lda, lda, bp, bb, C + m * ldc + n0, ldc, nv, act); break;
            default: break;
        }
    }
}

}  // namespace jiffy::kernels
