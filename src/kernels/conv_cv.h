// Channel-vector conv for small planes (P = OH * OW <= 64 output pixels, stride 1, OW == W), e.g.
// the 96 -> 96 1x3 / 3x1 convs of openWakeWord's embedding_model on 14x4 .. 6x2 planes. The GEMM
// conv (conv.h) puts the pixels on the microkernel's NR-wide vector axis, which such planes fill
// badly (48 of 64 lanes, 12 of 32); here the output channels run along the vector and the pixels
// are broadcast:
//   Yt[p, m] = bias[m] + sum_k A[k, p] . Wt[k, m]     (k = (c, ky, kx), K = C * kh * kw)
// With stride 1 and OW == W, output pixel p of tap (ky, kx) reads x[c * H * W + p + d_t] with
// d_t = (ky * dh - ph) * W + kx * dw - pw, so row k of A is a plain stretch of the input plane
// ("direct" tap: no copy) unless some pixels of the tap fall in the padding or wrap to the
// neighbouring row; those taps' rows are copied per run with one masked vector load per VL
// pixels (zeros where the tap is outside the image). The weights are packed at prepare as
// K x NR panels of output channels (zero past M); the microkernel keeps mr <= MR pixels x NR
// channels in registers; Yt (P x Mp) is then transposed into the NCHW output in VL x VL register
// blocks with the epilogue (residual, activation) applied on the way.
// Per-ISA code: src/kernels/conv_cv_impl.h, compiled in the same units as conv_impl.h.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/conv.h"

namespace jiffy::kernels {

struct ConvCvArgs {
    Conv2DGeom g;
    int64_t K = 0, P = 0;
    int64_t Mp = 0;     // M rounded up to the vector width (the packed weights' columns)
    int64_t Pr = 0;     // P rounded up to the vector width (row stride of a copied tap row)
    int64_t ncopy = 0;  // taps whose rows are copied (per input channel)
    const int64_t* tap_d = nullptr;      // kh * kw: flat shift of tap t
    const int64_t* tap_slot = nullptr;   // kh * kw: -1 direct, else the tap's copy slot
    const uint64_t* tap_bits = nullptr;  // kh * kw: bit p set when pixel p reads inside the image
};

class ConvChanVec {
public:
    static constexpr int64_t kMaxPixels = 64;
    // True when the geometry (one group of g.C -> g.M channels) fits this kernel at all
    // (stride 1, OW == W, P <= kMaxPixels); `preferred` says whether it should beat the GEMM conv.
    static bool fits(const Conv2DGeom& g);
    static bool preferred(Isa isa, const Conv2DGeom& g);
    // Output channels per microkernel panel (a split by channels keeps to multiples of it).
    static int64_t panel(Isa isa);

    ConvChanVec() = default;
    // W is M x K row-major (the ONNX layout of one group); packed at construction.
    ConvChanVec(Isa isa, const Conv2DGeom& g, const float* W);

    size_t scratch_floats() const;
    // One image: x is C x H x W, y is M x OH x OW; bias (M) and res (like y) may be null.
    void run(const float* x, const float* bias, const float* res, float* y, float* scratch,
             const ConvEpi& epi) const;
    // "conv_chanvec <mr>x<NR> <isa> (<n> copied taps)" for inspect / profile.
    std::string describe() const;

private:
    Isa isa_ = Isa::kScalar;
    ConvCvArgs a_;
    std::vector<int64_t> tap_d_, tap_slot_;
    std::vector<uint64_t> tap_bits_;
    // Packed weights (shared by copies). From 1 MiB up on 2 MiB pages (weight_alloc.h): in a
    // model they stream from L3 / DRAM once per run, and on 4 KiB pages every 4 KiB of them
    // (about 32 k steps of one panel) also waits on a page walk.
    std::shared_ptr<float> wp_;
};

// Per-ISA entry points (internal).
using ConvCvFn = void (*)(const ConvCvArgs& a, const float* x, const float* wp, const float* bias,
                          const float* res, float* y, float* scratch, const ConvEpi& epi);

}  // namespace jiffy::kernels
