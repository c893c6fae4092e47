// f32_gemm_4x16__neon: MR=4 rows x NR=16 columns (four q registers) per microkernel call, over
// pack_b's NR = 16 panels (the same packed layout as AVX2 and scalar). A is read unpacked: four
// consecutive k of each row are loaded as one register and each lane multiplies one B row
// (vfmaq_laneq_f32), so 4 A loads + 16 B loads feed 64 FMAs.
#include <arm_neon.h>

#include <algorithm>

#include "kernels/arm/activation_neon.h"
#include "kernels/gemm.h"

namespace jiffy::kernels {

namespace {

constexpr int kNR = 16;

template <int MR, int L>
inline __attribute__((always_inline)) void step_lane(float32x4_t (&acc)[MR][4], const float32x4_t (&a)[MR],
                                                     const float* b) {
    const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8), b3 = vld1q_f32(b + 12);
    for (int m = 0; m < MR; ++m) {
        acc[m][0] = vfmaq_laneq_f32(acc[m][0], b0, a[m], L);
        acc[m][1] = vfmaq_laneq_f32(acc[m][1], b1, a[m], L);
        acc[m][2] = vfmaq_laneq_f32(acc[m][2], b2, a[m], L);
        acc[m][3] = vfmaq_laneq_f32(acc[m][3], b3, a[m], L);
    }
}

template <int MR>
inline void ukernel(int64_t K, const float* A, int64_t lda, const float* bp, const float* bias, float* C,
                    int64_t ldc, int64_t nvalid, Act act) {
    float32x4_t acc[MR][4];
    float bias_buf[kNR] = {0};
    if (bias)
        for (int64_t j = 0; j < nvalid; ++j) bias_buf[j] = bias[j];
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < 4; ++v) acc[m][v] = vld1q_f32(bias_buf + 4 * v);
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) {
        float32x4_t a[MR];
        for (int m = 0; m < MR; ++m) a[m] = vld1q_f32(A + m * lda + k);
        const float* b = bp + k * kNR;
        step_lane<MR, 0>(acc, a, b);
        step_lane<MR, 1>(acc, a, b + kNR);
        step_lane<MR, 2>(acc, a, b + 2 * kNR);
        step_lane<MR, 3>(acc, a, b + 3 * kNR);
    }
    for (; k < K; ++k) {
        const float* b = bp + k * kNR;
        const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8), b3 = vld1q_f32(b + 12);
        for (int m = 0; m < MR; ++m) {
            const float32x4_t a = vld1q_dup_f32(A + m * lda + k);
            acc[m][0] = vfmaq_f32(acc[m][0], a, b0);
            acc[m][1] = vfmaq_f32(acc[m][1], a, b1);
            acc[m][2] = vfmaq_f32(acc[m][2], a, b2);
            acc[m][3] = vfmaq_f32(acc[m][3], a, b3);
        }
    }
    if (act == Act::kRelu) {
        // std::max(v, 0) of the reference: NaN stays NaN (FMAX), -0 and +0 compare equal.
        const float32x4_t z = vdupq_n_f32(0.0f);
        for (int m = 0; m < MR; ++m)
            for (int v = 0; v < 4; ++v) acc[m][v] = vmaxq_f32(acc[m][v], z);
    }
    for (int m = 0; m < MR; ++m) {
        float* c = C + m * ldc;
        if (nvalid == kNR) {
            for (int v = 0; v < 4; ++v) vst1q_f32(c + 4 * v, acc[m][v]);
        } else {
            float tmp[kNR];
            for (int v = 0; v < 4; ++v) vst1q_f32(tmp + 4 * v, acc[m][v]);
            for (int64_t j = 0; j < nvalid; ++j) c[j] = tmp[j];
        }
    }
}

}  // namespace

void sgemm_neon(int64_t M, const float* A, int64_t lda, const PackedB& B, const float* bias, float* C,
                int64_t ldc, Act act) {
    const int64_t K = B.K, N = B.N;
    for (int64_t n0 = 0; n0 < N; n0 += kNR) {
        const float* bp = B.panel(n0 / kNR);
        const float* bb = bias ? bias + n0 : nullptr;
        const int64_t nv = std::min<int64_t>(kNR, N - n0);
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

// ---------------------------------------------------------------- GEMV (M = 1)
// Over PackedGemv's row-major K x ldb layout: blocks of up to 8 q registers (32 columns) with U
// independent accumulator sets along K (more for narrow blocks), the full Activation applied on
// the registers. Reads stay within the first ceil(N / 4) * 4 <= ldb floats of each row.
namespace {

template <int V, int U>
inline void gemv_block(int64_t K, const float* a, const float* b, int64_t ldb, const float* bias, float* y,
                       int64_t nvalid, const Activation& act) {
    float32x4_t acc[U][V];
    for (int u = 0; u < U; ++u)
        for (int v = 0; v < V; ++v) acc[u][v] = vdupq_n_f32(0.0f);
    int64_t k = 0;
    for (; k + U <= K; k += U)
        for (int u = 0; u < U; ++u) {
            const float32x4_t av = vld1q_dup_f32(a + k + u);
            const float* br = b + (k + u) * ldb;
            for (int v = 0; v < V; ++v) acc[u][v] = vfmaq_f32(acc[u][v], av, vld1q_f32(br + 4 * v));
        }
    for (; k < K; ++k) {
        const float32x4_t av = vld1q_dup_f32(a + k);
        const float* br = b + k * ldb;
        for (int v = 0; v < V; ++v) acc[0][v] = vfmaq_f32(acc[0][v], av, vld1q_f32(br + 4 * v));
    }
    for (int v = 0; v < V; ++v) {
        float32x4_t s = acc[0][v];
        for (int u = 1; u < U; ++u) s = vaddq_f32(s, acc[u][v]);
        const int64_t left = nvalid - 4 * v;
        if (left >= 4) {
            if (bias) s = vaddq_f32(s, vld1q_f32(bias + 4 * v));
            vst1q_f32(y + 4 * v, act_v128(act, s));
        } else {
            float t[4] = {0, 0, 0, 0};
            if (bias)
                for (int64_t j = 0; j < left; ++j) t[j] = bias[4 * v + j];
            vst1q_f32(t, act_v128(act, vaddq_f32(s, vld1q_f32(t))));
            for (int64_t j = 0; j < left; ++j) y[4 * v + j] = t[j];
        }
    }
}

constexpr int64_t kGemvVL = 4;
constexpr int kGemvMainU = 2;
constexpr int kGemvTailU[7] = {8, 8, 4, 4, 2, 2, 2};
#include "kernels/gemv_driver_impl.h"

}  // namespace

void sgemv_neon(const float* a, const PackedGemv& B, const float* bias, float* y, const Activation& act,
                bool backward) {
    sgemv_cols_run(a, B, 0, B.N, bias, y, act, backward);
}

void sgemv_cols_neon(const float* a, const PackedGemv& B, int64_t c0, int64_t c1, const float* bias, float* y,
                      const Activation& act, bool backward) {
    sgemv_cols_run(a, B, c0, c1, bias, y, act, backward);
}

}  // namespace jiffy::kernels
