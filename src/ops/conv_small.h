// Conv kernel for few output pixels (kernels/small_conv.h), chosen by prep_Conv for float32
// single-group convs with constant weights whose output has <= SmallConv::kMaxPixels pixels.
#pragma once
#include <memory>

#include "kernels/small_conv.h"
#include "ops/op.h"

namespace jiffy {

// in: X, W, B (optional), residual (optional; present when has_res). N images of in_img floats.
std::unique_ptr<Kernel> make_small_conv_kernel(kernels::Isa isa, const kernels::Conv2DGeom& g, const float* w,
                                               int64_t N, bool has_bias, bool has_res, kernels::ConvEpi epi);

}  // namespace jiffy
