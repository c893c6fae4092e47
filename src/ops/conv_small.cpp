#include "ops/conv_small.h"

#include <vector>

namespace jiffy {
namespace {

// NOT REENTRANT (like ConvFastKernel): the gather rows and the transposed result live in
// mutable scratch owned by the kernel.
class SmallConvKernel : public Kernel {
public:
    SmallConvKernel(kernels::Isa isa, const kernels::Conv2DGeom& g, const float* w, int64_t N, bool has_bias,
                    bool has_res, kernels::ConvEpi epi)
        : isa_(isa), conv_(isa, g, w), N_(N), in_img_(g.C * g.H * g.W), out_img_(g.M * g.OH * g.OW),
          has_bias_(has_bias), has_res_(has_res), epi_(epi) {
        scratch_.resize(conv_.scratch_floats());
    }

    Status run(const void* const* in, void* const* out) const override {
        const float* X = static_cast<const float*>(in[0]);
        const float* B = has_bias_ ? static_cast<const float*>(in[2]) : nullptr;
        const float* R = has_res_ ? static_cast<const float*>(in[3]) : nullptr;
        float* Y = static_cast<float*>(out[0]);
        for (int64_t n = 0; n < N_; ++n)
            conv_.run(X + n * in_img_, B, R ? R + n * out_img_ : nullptr, Y + n * out_img_, scratch_.data(), epi_);
        return {};
    }
    std::string describe() const override {
        return std::string("conv_small_gemm ") + kernels::isa_name(isa_);
    }

private:
    kernels::Isa isa_;
    kernels::SmallConv conv_;
    int64_t N_, in_img_, out_img_;
    bool has_bias_, has_res_;
    kernels::ConvEpi epi_;
    mutable std::vector<float> scratch_;
};

// NOT REENTRANT either: the row table, copied tap rows and the transposed result live in scratch.
class ChanVecConvKernel : public Kernel {
public:
    ChanVecConvKernel(kernels::Isa isa, const kernels::Conv2DGeom& g, const float* w, int64_t N, bool has_bias,
                      bool has_res, kernels::ConvEpi epi)
        : conv_(isa, g, w), N_(N), in_img_(g.C * g.H * g.W), out_img_(g.M * g.OH * g.OW), has_bias_(has_bias),
          has_res_(has_res), epi_(epi) {
        scratch_.resize(conv_.scratch_floats());
    }

    Status run(const void* const* in, void* const* out) const override {
        const float* X = static_cast<const float*>(in[0]);
        const float* B = has_bias_ ? static_cast<const float*>(in[2]) : nullptr;
        const float* R = has_res_ ? static_cast<const float*>(in[3]) : nullptr;
        float* Y = static_cast<float*>(out[0]);
        for (int64_t n = 0; n < N_; ++n)
            conv_.run(X + n * in_img_, B, R ? R + n * out_img_ : nullptr, Y + n * out_img_, scratch_.data(), epi_);
        return {};
    }
    std::string describe() const override { return conv_.describe(); }

private:
    kernels::ConvChanVec conv_;
    int64_t N_, in_img_, out_img_;
    bool has_bias_, has_res_;
    kernels::ConvEpi epi_;
    mutable std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<Kernel> make_small_conv_kernel(kernels::Isa isa, const kernels::Conv2DGeom& g, const float* w,
                                               int64_t N, bool has_bias, bool has_res, kernels::ConvEpi epi) {
    return std::make_unique<SmallConvKernel>(isa, g, w, N, has_bias, has_res, epi);
}

std::unique_ptr<Kernel> make_chanvec_conv_kernel(kernels::Isa isa, const kernels::Conv2DGeom& g, const float* w,
                                                 int64_t N, bool has_bias, bool has_res, kernels::ConvEpi epi) {
    return std::make_unique<ChanVecConvKernel>(isa, g, w, N, has_bias, has_res, epi);
}

}  // namespace jiffy
