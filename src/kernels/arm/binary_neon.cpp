// Binary rows with NEON intrinsics (8 floats per step, then 4, then the scalar form of
// kernels/binary_impl.h for the tail). FMAX / FMIN return NaN when either input is NaN, which is
// the Max / Min contract; the division is IEEE (FDIV), so inf and NaN follow the scalar form.
#include <arm_neon.h>

#include "kernels/binary.h"

namespace jiffy::kernels {
namespace {
#include "kernels/binary_impl.h"

template <BinOp OP>
inline float32x4_t bin_v(float32x4_t a, float32x4_t b) {
    if constexpr (OP == BinOp::kAdd) return vaddq_f32(a, b);
    if constexpr (OP == BinOp::kSub) return vsubq_f32(a, b);
    if constexpr (OP == BinOp::kMul) return vmulq_f32(a, b);
    if constexpr (OP == BinOp::kDiv) return vdivq_f32(a, b);
    if constexpr (OP == BinOp::kMax) return vmaxq_f32(a, b);
    if constexpr (OP == BinOp::kMin) return vminq_f32(a, b);
    if constexpr (OP == BinOp::kPRelu) return vbslq_f32(vcltq_f32(a, vdupq_n_f32(0.0f)), vmulq_f32(a, b), a);
}

template <BinOp OP>
void vv_neon(const float* __restrict a, const float* __restrict b, float* __restrict y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        vst1q_f32(y + i, bin_v<OP>(vld1q_f32(a + i), vld1q_f32(b + i)));
        vst1q_f32(y + i + 4, bin_v<OP>(vld1q_f32(a + i + 4), vld1q_f32(b + i + 4)));
    }
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, bin_v<OP>(vld1q_f32(a + i), vld1q_f32(b + i)));
    for (; i < n; ++i) y[i] = bin_op<OP>(a[i], b[i]);
}
template <BinOp OP>
void vs_neon(const float* __restrict a, float s, float* __restrict y, int64_t n) {
    const float32x4_t sv = vdupq_n_f32(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        vst1q_f32(y + i, bin_v<OP>(vld1q_f32(a + i), sv));
        vst1q_f32(y + i + 4, bin_v<OP>(vld1q_f32(a + i + 4), sv));
    }
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, bin_v<OP>(vld1q_f32(a + i), sv));
    for (; i < n; ++i) y[i] = bin_op<OP>(a[i], s);
}
template <BinOp OP>
void sv_neon(float s, const float* __restrict b, float* __restrict y, int64_t n) {
    const float32x4_t svec = vdupq_n_f32(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        vst1q_f32(y + i, bin_v<OP>(svec, vld1q_f32(b + i)));
        vst1q_f32(y + i + 4, bin_v<OP>(svec, vld1q_f32(b + i + 4)));
    }
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, bin_v<OP>(svec, vld1q_f32(b + i)));
    for (; i < n; ++i) y[i] = bin_op<OP>(s, b[i]);
}

template <BinOp OP>
BinaryRows rows_neon() {
    return BinaryRows{vv_neon<OP>, vs_neon<OP>, sv_neon<OP>};
}
}  // namespace

BinaryRows binary_rows_neon(BinOp op) {
    switch (op) {
        case BinOp::kAdd: return rows_neon<BinOp::kAdd>();
        case BinOp::kSub: return rows_neon<BinOp::kSub>();
        case BinOp::kMul: return rows_neon<BinOp::kMul>();
        case BinOp::kDiv: return rows_neon<BinOp::kDiv>();
        case BinOp::kMax: return rows_neon<BinOp::kMax>();
        case BinOp::kMin: return rows_neon<BinOp::kMin>();
        case BinOp::kPRelu: return rows_neon<BinOp::kPRelu>();
    }
    return rows_neon<BinOp::kAdd>();
}

}  // namespace jiffy::kernels
