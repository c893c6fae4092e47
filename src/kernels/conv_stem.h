// Direct 3x3 stride-2 conv for few input channels (the RGB stems of MobileNets and the face
// detector: 3 -> 16 / 32 on 224x224 or 240x320), NCHW in, NCHW or channels-last out. Two forms:
// the pixel-broadcast one (default; output channels on the lanes, the input value of each pixel
// and tap broadcast from memory into an FMA) and the permuted-row one below. The GEMM path spends most of its
// time moving the K = 27 im2col panel (and its stride-2 split) for a K too short to amortize it
// (the face detector's 3 -> 16 on 240x320: ~146 us, ~113 GFLOP/s). Here 16 output pixels of a row
// sit on the vector: per input channel and kernel row two loads and three permutes give the
// pixels each kernel column reads (even / odd / even shifted by one input column), and every tap
// is one FMA per output channel with the weight broadcast; the sums of 8 output channels x 32
// pixels stay in registers over all 27 taps. AVX-512 only (suits() is false elsewhere: the GEMM
// path).
#pragma once
#include <cstdint>

#include "kernels/conv.h"
#include "kernels/cpu.h"

namespace jiffy::kernels {

class ConvStem {
public:
    // 3x3, stride 2, no dilation, C <= 4 input channels, M a multiple of 8, left / top padding
    // 0 or 1, output at least 16 pixels wide, on AVX-512.
    static bool suits(Isa isa, const Conv2DGeom& g);
    ConvStem() = default;
    // nhwc: Y is channels-last (OH x OW x M) instead of NCHW; no residual then.
    // bcast: the pixel-broadcast form (output channels on the lanes, one broadcast input value per
    // pixel and tap) instead of pixels on the lanes (permuted input rows, broadcast weights); it
    // takes no residual (a run with one uses the other form).
    ConvStem(Isa isa, const Conv2DGeom& g, bool nhwc = false, bool bcast = true)
        : isa_(isa), g_(g), nhwc_(nhwc), bcast_(bcast) {}
    // W is M x C x 3 x 3 (the ONNX weight), b (may be null) M floats. Packed: per block of 16
    // output channels (the last one 8 when M % 16 == 8), C x 9 taps x 16 floats, then the bias.
    size_t packed_floats() const { return size_t((g_.M + 15) / 16 * 16 * (g_.C * 9 + 1)); }
    void pack(const float* W, const float* b, float* dst) const;
    // Output rows [oy0, oy1) of one image (any range: the thread split); bias, then residual and
    // activation.
    void run(const float* x, const float* packed, const float* res, float* y, const ConvEpi& e, int64_t oy0,
             int64_t oy1) const;
    // Channels-last output rows [oy0, oy1) into `rows` (row oy0 first, OW x M floats a row), by the
    // pixel-broadcast form whatever the constructor said: the stem as the producer of a band
    // (ConvNhwcBand). No residual.
    void run_rows(const float* x, const float* packed, float* rows, const ConvEpi& e, int64_t oy0,
                  int64_t oy1) const;
    const Conv2DGeom& geom() const { return g_; }

private:
    Isa isa_ = Isa::kScalar;
    Conv2DGeom g_;
    bool nhwc_ = false;
    bool bcast_ = true;
};

}  // namespace jiffy::kernels
