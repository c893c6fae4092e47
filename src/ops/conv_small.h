// Conv kernels for few output pixels, chosen by prep_Conv for float32 single-group convs with
// constant weights: the channel-vector conv (kernels/conv_cv.h) for stride-1 convs on small planes
// where ConvChanVec::preferred says so, else the transposed GEMM (kernels/small_conv.h) when the
// output has <= SmallConv::kMaxPixels pixels.
#pragma once
#include <memory>

#include "kernels/conv_cv.h"
#include "kernels/conv_stem.h"
#include "kernels/small_conv.h"
#include "ops/op.h"

namespace jiffy {

// in: X, W, B (optional), residual (optional; present when has_res). N images of in_img floats.
std::unique_ptr<Kernel> make_small_conv_kernel(kernels::Isa isa, const kernels::Conv2DGeom& g, const float* w,
                                               int64_t N, bool has_bias, bool has_res, kernels::ConvEpi epi);

class ThreadPool;

// Same inputs; kernels::ConvChanVec, split by output-channel blocks across `pool` in `chunks`
// parts when pool is set and chunks >= 2 (bit-identical to one thread).
std::unique_ptr<Kernel> make_chanvec_conv_kernel(kernels::Isa isa, const kernels::Conv2DGeom& g, const float* w,
                                                 int64_t N, bool has_bias, bool has_res, kernels::ConvEpi epi,
                                                 ThreadPool* pool = nullptr, int chunks = 1);

// The direct stem conv (kernels/conv_stem.h) for float32 single-group 3x3 stride-2 convs with few
// input channels and constant weights (and bias b, may be null), where ConvStem::suits, M <= 32
// (M <= 16 with JIFFY_STEM_BCAST=0) and the output has >= 1024 pixels; env JIFFY_STEM=0 turns it off (A/B timing). Split by output rows
// across `pool` in `chunks` parts (bit-identical to one thread). nhwc: Y channels-last, no residual
// (a ConvNhwc reading an NCHW X: the stem of a channels-last chain, layout_nhwc).
bool stem_conv_preferred(kernels::Isa isa, const kernels::Conv2DGeom& g);
std::unique_ptr<Kernel> make_stem_conv_kernel(kernels::Isa isa, const kernels::Conv2DGeom& g, const float* w,
                                              const float* b, int64_t N, bool has_res, kernels::ConvEpi epi,
                                              ThreadPool* pool = nullptr, int chunks = 1, bool nhwc = false);

// One input channel, stride 1, no dilation, >= 256 output pixels in rows of >= 64 (a grayscale or
// spectrogram stem): on AVX-512 kernels::conv_one_channel_avx512 (8 output channels at a time),
// elsewhere per output channel the depthwise kernel on the one input plane (W as is, B and the
// residual per channel); split by output channels across `pool` in `chunks` parts (bit-identical
// to one thread). JIFFY_ONE_CHANNEL_CONV=0: off (A/B timing).
bool one_channel_conv_preferred(const kernels::Conv2DGeom& g);
std::unique_ptr<Kernel> make_one_channel_conv_kernel(kernels::Isa isa, const kernels::Conv2DGeom& g, int64_t N,
                                                     bool has_bias, bool has_res, kernels::ConvEpi epi,
                                                     ThreadPool* pool = nullptr, int chunks = 1);

}  // namespace jiffy
