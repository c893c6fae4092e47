#include "kernels/small_conv.h"

namespace jiffy::kernels {

bool SmallConv::suits(const Conv2DGeom& g) {
    const int64_t P = g.OH * g.OW, K = g.C * g.kh * g.kw;
    return P >= 1 && P <= kMaxPixels && K >= 1 && g.M >= 1 && P * K <= (int64_t(1) << 20) &&
           g.C * g.H * g.W < (int64_t(1) << 31);
}

SmallConv::SmallConv(Isa isa, const Conv2DGeom& g, const float* W) : isa_(isa), g_(g) {
    K_ = g.C * g.kh * g.kw;
    P_ = g.OH * g.OW;
    idx_.resize(size_t(P_ * K_));
    for (int64_t oy = 0; oy < g.OH; ++oy)
        for (int64_t ox = 0; ox < g.OW; ++ox) {
            int32_t* row = idx_.data() + (oy * g.OW + ox) * K_;
            for (int64_t c = 0; c < g.C; ++c)
                for (int64_t ky = 0; ky < g.kh; ++ky)
                    for (int64_t kx = 0; kx < g.kw; ++kx) {
                        const int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
                        const bool in = iy >= 0 && iy < g.H && ix >= 0 && ix < g.W;
                        *row++ = in ? int32_t((c * g.H + iy) * g.W + ix) : -1;
                    }
        }
    direct_a_ = true;
    a_first_ = idx_[0];
    a_stride_ = P_ > 1 ? int64_t(idx_[size_t(K_)]) - a_first_ : K_;
    for (int64_t p = 0; p < P_ && direct_a_; ++p)
        for (int64_t k = 0; k < K_; ++k)
            if (idx_[size_t(p * K_ + k)] != a_first_ + p * a_stride_ + k) {
                direct_a_ = false;
                break;
            }
    direct_a_ = direct_a_ && a_first_ >= 0 && a_stride_ >= 0;
    wt_ = pack_b(W, K_, g.M, K_, /*trans_b=*/true, isa);
    gemm_ = sgemm_for(isa);
}

void SmallConv::run(const float* x, const float* bias, const float* res, float* y, float* scratch,
                    const ConvEpi& epi) const {
    const int64_t M = g_.M, P = P_, n = P_ * K_;
    const float* col = scratch;
    int64_t lda = K_;
    if (direct_a_) {
        col = x + a_first_;
        lda = a_stride_;
    } else {
        const int32_t* idx = idx_.data();
        for (int64_t i = 0; i < n; ++i) scratch[i] = idx[i] >= 0 ? x[idx[i]] : 0.0f;
    }
    const bool relu_in_gemm = epi.act == ConvAct::kRelu && !epi.clamp && !epi.affine && !res;
    // One pixel: Yt is y itself.
    float* yt = P == 1 ? y : scratch + n;
    gemm_(P, col, lda, wt_, bias, yt, M, relu_in_gemm ? Act::kRelu : Act::kNone);
    if (P > 1)
        for (int64_t m = 0; m < M; ++m)
            for (int64_t p = 0; p < P; ++p) y[m * P + p] = yt[p * M + m];
    if (!relu_in_gemm && (res || epi.act != ConvAct::kNone)) conv_epilogue(isa_, y, res, M * P, epi);
}

}  // namespace jiffy::kernels
