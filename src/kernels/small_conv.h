// Convolutions with few output pixels (P = OH * OW <= kMaxPixels, one group), e.g. the strided
// 1-D STFT / encoder convs of Silero VAD (P = 1..8) and melspectrogram (P = 5): the GEMM-based
// conv (conv.h) puts the pixels on the microkernel's 32-wide column axis, so it runs with most
// lanes empty. Here the product is transposed:
//   Yt[P, M] = col[P, K] . Wt[K, M]   (K = C * kh * kw)
// with col gathered through an index table built at prepare (-1 = padding), Wt packed once as the
// packed-B GEMM's B (gemm.h: M on the vector axis), then Yt transposed into the NCHW output and
// the conv epilogue (residual, activation) applied.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/conv.h"
#include "kernels/gemm.h"

namespace jiffy::kernels {

class SmallConv {
public:
    static constexpr int64_t kMaxPixels = 16;
    // True when the geometry (one group of g.C -> g.M channels) suits this kernel.
    static bool suits(const Conv2DGeom& g);

    SmallConv() = default;
    // W is M x K row-major (the ONNX layout of one group).
    SmallConv(Isa isa, const Conv2DGeom& g, const float* W);

    size_t scratch_floats() const { return size_t(P_ * K_ + P_ * g_.M); }
    // One image: x is C x H x W, y is M x OH x OW; bias (M) and res (like y) may be null.
    void run(const float* x, const float* bias, const float* res, float* y, float* scratch,
             const ConvEpi& epi) const;

private:
    Isa isa_ = Isa::kScalar;
    Conv2DGeom g_;
    int64_t K_ = 0, P_ = 0;
    std::vector<int32_t> idx_;  // P x K offsets into x, -1 for padding
    // When every row of col is a contiguous, unpadded stretch of x at a fixed stride (a 1-D
    // conv over one channel, e.g. an STFT frame), the GEMM reads A straight from x: rows at
    // x + a_first_ + p * a_stride_ (no gather).
    bool direct_a_ = false;
    int64_t a_first_ = 0, a_stride_ = 0;
    PackedB wt_;
    SgemmFn gemm_ = nullptr;
};

}  // namespace jiffy::kernels
