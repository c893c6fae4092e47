#include "ops/conv_small.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/env.h"
#include "kernels/conv.h"
#include "kernels/weight_alloc.h"

#include "runtime/threadpool.h"

namespace jiffy {
namespace {

// JIFFY_STEM_BCAST=0: the stem's permuted-row form (kernels/conv_stem.h) instead of the
// pixel-broadcast one, to compare them on a model.
bool stem_bcast() {
    static const bool on = !env_zero("JIFFY_STEM_BCAST");
    return on;
}

// f(x, r, y) for each of the N images: input, residual (null without one) and output.
template <typename F>
void per_image(int64_t N, int64_t in_img, int64_t out_img, const float* X, const float* R, float* Y, F&& f) {
    for (int64_t n = 0; n < N; ++n) f(X + n * in_img, R ? R + n * out_img : nullptr, Y + n * out_img);
}

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
        per_image(N_, in_img_, out_img_, X, R, Y, [&](const float* x, const float* r, float* y) {
            conv_.run(x, B, r, y, scratch_.data(), epi_);
        });
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
// With the intra-op pool, split by blocks of output channels (multiples of the microkernel's
// channel panel): each part is the same conv restricted to its channels, with its own packed
// weights and scratch, so every output is summed in the same order as on one thread.
class ChanVecConvKernel : public Kernel {
public:
    ChanVecConvKernel(kernels::Isa isa, const kernels::Conv2DGeom& g, const float* w, int64_t N, bool has_bias,
                      bool has_res, kernels::ConvEpi epi)
        : isa_(isa), g_(g), conv_(isa, g, w), N_(N), in_img_(g.C * g.H * g.W), out_img_(g.M * g.OH * g.OW),
          has_bias_(has_bias), has_res_(has_res), epi_(epi) {
        scratch_.resize(conv_.scratch_floats());
    }

    void set_parallel(ThreadPool* pool, int chunks, const float* w) {
        const int64_t panel = kernels::ConvChanVec::panel(isa_), K = g_.C * g_.kh * g_.kw, P = g_.OH * g_.OW;
        if (!pool || chunks < 2 || g_.M < 2 * panel) return;
        chunks = int(std::min<int64_t>(chunks, g_.M / panel));
        for (int t = 0; t < chunks; ++t) {
            int64_t c0, c1;
            chunk_range(g_.M, chunks, t, panel, &c0, &c1);
            if (c1 <= c0) continue;
            kernels::Conv2DGeom g = g_;
            g.M = c1 - c0;
            Part p{c0, kernels::ConvChanVec(isa_, g, w + c0 * K), {}};
            p.scratch.resize(p.conv.scratch_floats());
            parts_.push_back(std::move(p));
        }
        if (parts_.size() < 2) {
            parts_.clear();
            return;
        }
        pool_ = pool;
        plane_ = P;
    }

    Status run(const void* const* in, void* const* out) const override {
        const float* X = static_cast<const float*>(in[0]);
        const float* B = has_bias_ ? static_cast<const float*>(in[2]) : nullptr;
        const float* R = has_res_ ? static_cast<const float*>(in[3]) : nullptr;
        float* Y = static_cast<float*>(out[0]);
        per_image(N_, in_img_, out_img_, X, R, Y, [&](const float* x, const float* r, float* y) {
            if (!pool_) return conv_.run(x, B, r, y, scratch_.data(), epi_);
            pool_->parallel_for(int(parts_.size()), [&](int t) {
                const Part& p = parts_[size_t(t)];
                p.conv.run(x, B ? B + p.c0 : nullptr, r ? r + p.c0 * plane_ : nullptr, y + p.c0 * plane_,
                           p.scratch.data(), epi_);
            });
        });
        return {};
    }
    std::string describe() const override {
        return conv_.describe() + (pool_ ? " x" + std::to_string(parts_.size()) + " threads" : "");
    }

private:
    struct Part {
        int64_t c0;
        kernels::ConvChanVec conv;
        mutable std::vector<float> scratch;
    };
    kernels::Isa isa_;
    kernels::Conv2DGeom g_;
    kernels::ConvChanVec conv_;
    int64_t N_, in_img_, out_img_;
    bool has_bias_, has_res_;
    kernels::ConvEpi epi_;
    mutable std::vector<float> scratch_;
    ThreadPool* pool_ = nullptr;
    std::vector<Part> parts_;
    int64_t plane_ = 0;
};

// The direct stem conv (kernels/conv_stem.h). With the intra-op pool, split by output rows: each
// output is summed the same way whatever part computes it (bitwise equal to one thread).
class StemConvKernel : public Kernel {
public:
    StemConvKernel(kernels::Isa isa, const kernels::Conv2DGeom& g, const float* w, const float* b, int64_t N,
                   bool has_res, kernels::ConvEpi epi, bool nhwc)
        : isa_(isa), g_(g), conv_(isa, g, nhwc, stem_bcast()), N_(N), in_img_(g.C * g.H * g.W), out_img_(g.M * g.OH * g.OW),
          has_res_(has_res && !nhwc), nhwc_(nhwc), epi_(epi) {
        packed_ = kernels::alloc_weights(conv_.packed_floats());
        conv_.pack(w, b, packed_.get());
    }

    void set_parallel(ThreadPool* pool, int chunks) {
        chunks = int(std::min<int64_t>(chunks, g_.OH / 4));  // parts of >= 4 rows
        if (!pool || chunks < 2) return;
        for (int t = 0; t < chunks; ++t) {
            int64_t r0, r1;
            chunk_range(g_.OH, chunks, t, 1, &r0, &r1);
            if (r1 > r0) parts_.push_back({r0, r1});
        }
        if (parts_.size() >= 2) pool_ = pool;
        else parts_.clear();
    }

    Status run(const void* const* in, void* const* out) const override {
        const float* X = static_cast<const float*>(in[0]);
        const float* R = has_res_ ? static_cast<const float*>(in[3]) : nullptr;
        float* Y = static_cast<float*>(out[0]);
        per_image(N_, in_img_, out_img_, X, R, Y, [&](const float* x, const float* r, float* y) {
            if (!pool_) return conv_.run(x, packed_.get(), r, y, epi_, 0, g_.OH);
            pool_->parallel_for(int(parts_.size()), [&](int t) {
                conv_.run(x, packed_.get(), r, y, epi_, parts_[size_t(t)].first, parts_[size_t(t)].second);
            });
        });
        return {};
    }
    std::string describe() const override {
        return std::string("conv_stem 3x3s2 direct ") + (nhwc_ ? "nhwc-out " : "") + kernels::isa_name(isa_) +
               (pool_ ? " x" + std::to_string(parts_.size()) + " threads" : "");
    }

private:
    kernels::Isa isa_;
    kernels::Conv2DGeom g_;
    kernels::ConvStem conv_;
    int64_t N_, in_img_, out_img_;
    bool has_res_;
    bool nhwc_;  // Y channels-last (ConvNhwc with _x_nchw: the stem of a channels-last chain)
    kernels::ConvEpi epi_;
    std::shared_ptr<float> packed_;
    ThreadPool* pool_ = nullptr;
    std::vector<std::pair<int64_t, int64_t>> parts_;  // output rows [first, second)
};

// One input channel to M (a grayscale or spectrogram stem, stride 1): on AVX-512
// kernels::conv_one_channel_avx512 (8 output channels at a time, each input vector loaded once for
// them); elsewhere each output channel as the depthwise conv of the one input plane with its
// filter (kernels::conv_depthwise on a 1-channel geometry; W's [M, 1, kh, kw] layout is
// depthwise's). Split by output channels across a pool. The GEMM form has K = kh * kw (9): a
// CRNN's 3x3 1 -> 32 on 32 x 128 took 46-54 us there, the depthwise kernel per channel 43, the
// AVX-512 kernel 23-34. NOT REENTRANT: per-part scratch (the depthwise path's).
class OneChannelConvKernel : public Kernel {
public:
    OneChannelConvKernel(kernels::Isa isa, const kernels::Conv2DGeom& g, int64_t N, bool has_bias, bool has_res,
                         kernels::ConvEpi epi)
        : isa_(isa), g_(g), g1_(g), N_(N), has_bias_(has_bias), has_res_(has_res), epi_(epi) {
        g1_.C = g1_.M = 1;
        if (isa_ == kernels::Isa::kAvx512) return;  // the AVX-512 kernel needs no scratch
        mode_ = kernels::conv_dw_mode(isa, g1_);
        per_ = kernels::conv_dw_scratch_floats(g1_);
        scratch_.assign(per_, 0.0f);
    }
    void set_parallel(ThreadPool* pool, int chunks) {
        if (!pool || chunks < 2 || g_.M < 2) return;
        pool_ = pool;
        bal_ = std::make_unique<Balance>(pool->threads());
        if (per_ > 0) scratch_.assign(per_ * size_t(pool->threads()), 0.0f);
    }
    Status run(const void* const* in, void* const* out) const override {
        const float* X = static_cast<const float*>(in[0]);
        const float* W = static_cast<const float*>(in[1]);
        const float* B = has_bias_ ? static_cast<const float*>(in[2]) : nullptr;
        const float* R = has_res_ ? static_cast<const float*>(in[3]) : nullptr;
        float* Y = static_cast<float*>(out[0]);
        const int64_t plane = g_.OH * g_.OW, taps = g_.kh * g_.kw;
        per_image(N_, g_.H * g_.W, g_.M * plane, X, R, Y, [&](const float* x, const float* r, float* y) {
            for_balanced_or_caller(pool_, g_.M, 8, bal_.get(), [&](int t, int64_t m0, int64_t m1) {
#if defined(__x86_64__)
                if (isa_ == kernels::Isa::kAvx512) {
                    if (m1 > m0) kernels::conv_one_channel_avx512(g_, x, W, B, r, y, epi_, m0, m1);
                    return;
                }
#endif
                float* scratch = scratch_.data() + size_t(t) * per_;
                for (int64_t m = m0; m < m1; ++m)
                    kernels::conv_depthwise(isa_, g1_, x, W + m * taps, B ? B + m : nullptr, r ? r + m * plane : nullptr,
                                            y + m * plane, epi_, scratch, mode_);
            });
        });
        return {};
    }
    std::string describe() const override {
        return std::string(isa_ == kernels::Isa::kAvx512 ? "conv_one_channel " : "conv_one_channel dw ") +
               kernels::isa_name(isa_) + (pool_ ? " threads" : "");
    }

private:
    kernels::Isa isa_;
    kernels::Conv2DGeom g_, g1_;
    int64_t N_;
    bool has_bias_, has_res_;
    kernels::ConvEpi epi_;
    kernels::ConvDwMode mode_ = kernels::ConvDwMode::kAuto;
    size_t per_ = 0;
    mutable std::vector<float> scratch_;  // per part (the depthwise path only)
    ThreadPool* pool_ = nullptr;
    std::unique_ptr<Balance> bal_;
};

}  // namespace

bool one_channel_conv_preferred(const kernels::Conv2DGeom& g) {
    if (env_zero("JIFFY_ONE_CHANNEL_CONV")) return false;
    // Rows of >= 64 pixels: a CRNN's 3x3 1 -> 32 on 32 x 128 (padded) 46-54 -> 23-34 us against the
    // GEMM form; the embedding model's 3x3 1 -> 24 on 76 x 32 (unpadded, one 32-pixel block a
    // row) 14 against 12 us, so it keeps the GEMM (session 39, Intel host; the kernel runs at
    // ~1.4 cycles an FMA, a third of the FMA peak, with its stores: not understood yet).
    return g.C == 1 && g.M >= 2 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.OW >= 64 &&
           g.OH * g.OW >= 256 && g.kw <= kernels::kOneChannelMaxKw &&
           g.OW <= 32 * kernels::kOneChannelMaxBlocks;
}

std::unique_ptr<Kernel> make_one_channel_conv_kernel(kernels::Isa isa, const kernels::Conv2DGeom& g, int64_t N,
                                                     bool has_bias, bool has_res, kernels::ConvEpi epi,
                                                     ThreadPool* pool, int chunks) {
    auto k = std::make_unique<OneChannelConvKernel>(isa, g, N, has_bias, has_res, epi);
    k->set_parallel(pool, chunks);
    return k;
}

std::unique_ptr<Kernel> make_small_conv_kernel(kernels::Isa isa, const kernels::Conv2DGeom& g, const float* w,
                                               int64_t N, bool has_bias, bool has_res, kernels::ConvEpi epi) {
    return std::make_unique<SmallConvKernel>(isa, g, w, N, has_bias, has_res, epi);
}

std::unique_ptr<Kernel> make_chanvec_conv_kernel(kernels::Isa isa, const kernels::Conv2DGeom& g, const float* w,
                                                 int64_t N, bool has_bias, bool has_res, kernels::ConvEpi epi,
                                                 ThreadPool* pool, int chunks) {
    auto k = std::make_unique<ChanVecConvKernel>(isa, g, w, N, has_bias, has_res, epi);
    k->set_parallel(pool, chunks, w);
    return k;
}

}  // namespace jiffy

namespace jiffy {

bool stem_conv_preferred(kernels::Isa isa, const kernels::Conv2DGeom& g) {
    static const bool off = env_zero("JIFFY_STEM");
    // M <= 16 (the face detector's and MobileNetV3's 3 -> 16: in the models 104-112 against
    // 156-163 us and 115-119 against 121-144). M <= 32 with the pixel-broadcast form: 32 channels
    // channels-last 143 against the permuted form's 107 GFLOP/s (in L1), and MobileNetV2's stem,
    // depthwise and 1x1 525 -> 470 us as a channels-last chain from the stem (session 23); the
    // permuted form with 32 channels lost to the GEMM path (175 against 187-194 us).
    return !off && (g.M <= 16 || (stem_bcast() && g.M <= 32)) && g.OH * g.OW >= 1024 &&
           kernels::ConvStem::suits(isa, g);
}

std::unique_ptr<Kernel> make_stem_conv_kernel(kernels::Isa isa, const kernels::Conv2DGeom& g, const float* w,
                                              const float* b, int64_t N, bool has_res, kernels::ConvEpi epi,
                                              ThreadPool* pool, int chunks, bool nhwc) {
    auto k = std::make_unique<StemConvKernel>(isa, g, w, b, N, has_res, epi, nhwc);
    k->set_parallel(pool, chunks);
    return k;
}

}  // namespace jiffy
