// Channels-last (NHWC) float32 conv kernels: the pointwise (1x1) and depthwise convs of the chains
// that the layout_nhwc pass moves to channels-last (jiffy::ConvNhwc nodes; docs/layout.md). An
// image is H x W pixels of C contiguous channels. Per-ISA code: conv_nhwc_impl.h, compiled in the
// same translation units as conv_impl.h.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cpu.h"

namespace jiffy::kernels {

// 1x1, stride 1, no padding, one group: Y[P, M] = act(X[P, K] . W^T + bias (+ R)), X, Y and R
// row-major (a pixel's channels contiguous).
class NhwcPointwise {
public:
    NhwcPointwise() = default;
    NhwcPointwise(Isa isa, int64_t K, int64_t M);
    // W is M x K row-major (the ONNX weight); b (may be null) M floats. Packed: ceil(M / NR)
    // panels of K x NR, then the bias zero-padded to the panels' width.
    size_t packed_floats() const { return size_t((K_ + 1) * Mp_); }
    void pack(const float* W, const float* b, float* dst) const;
    // Pixels [p0, p1) (any range: the thread split). x_plane > 0: X is one NCHW image instead
    // (K planes of x_plane pixels; the layout_nhwc pass's chain entries that only 1x1s read,
    // which then need no Transpose before them); Y and R stay channels-last.
    void run(const float* x, const float* packed, const float* res, float* y, const ConvEpi& epi, int64_t p0,
             int64_t p1, int64_t x_plane = 0) const;
    // dst (packed_floats()) = packed with input channel k's weights times s[k] (K floats), the
    // bias as it is: X scaled per channel (squeeze-and-excite's Mul) read as it is (ConvNhwc
    // _x_scale: the Mul's pass over X becomes one over the weights, K x M).
    void scale_inputs(const float* packed, const float* s, float* dst) const;
    int64_t K() const { return K_; }
    int64_t M() const { return M_; }

private:
    Isa isa_ = Isa::kScalar;
    int64_t K_ = 0, M_ = 0, nr_ = 8, Mp_ = 0;
};

// Depthwise (g.C == g.M channels, one filter each; any kernel, stride, padding, dilation) of one
// image of g.H x g.W pixels into g.OH x g.OW.
class NhwcDepthwise {
public:
    NhwcDepthwise() = default;
    NhwcDepthwise(Isa isa, const Conv2DGeom& g);
    // W is C x kh x kw (the ONNX weight), b (may be null) C floats. Packed: kh * kw taps of Cp
    // floats (C rounded up to 16, zero past C), then the bias (Cp floats).
    size_t packed_floats() const { return size_t((g_.kh * g_.kw + 1) * Cp_); }
    void pack(const float* W, const float* b, float* dst) const;
    // Output rows [oy0, oy1) (any range: the thread split). y_nchw: Y is channels-first instead
    // (C planes of OH x OW): the sums are transposed in registers on the way out, so a chain's
    // depthwise whose readers are NCHW (detection heads) needs no Transpose after it. Only where
    // nhwc_dw_writes_nchw(geom()) and without a residual (ConvNhwc's prepare rejects the rest);
    // otherwise nothing is written. Channels [c0, c1) only (c1 < 0: all; any range, but a part
    // range only where nhwc_dw_writes_nchw(geom()), else nothing is written): the thread split of
    // a channels-first output, whole planes per thread.
    void run(const float* x, const float* packed, const float* res, float* y, const ConvEpi& epi, int64_t oy0,
             int64_t oy1, bool y_nchw = false, int64_t c0 = 0, int64_t c1 = -1) const;
    // As run, but x holds only the image's input rows [h0, h1) (a band, rows W * C floats apart:
    // the expand 1x1 before it wrote just those; ConvNhwcBand). Output rows [oy0, oy1) read no
    // row outside it: h0 <= oy0 * sh - ph (or 0) and h1 >= (oy1 - 1) * sh - ph + (kh - 1) * dh + 1
    // (or H). The same sums as run on the whole image.
    void run_band(const float* x, int64_t h0, int64_t h1, const float* packed, float* y, const ConvEpi& epi,
                  int64_t oy0, int64_t oy1, bool y_nchw = false) const;
    const Conv2DGeom& geom() const { return g_; }

private:
    Isa isa_ = Isa::kScalar;
    Conv2DGeom g_;
    int64_t Cp_ = 0;
};

// A dense conv (one group, any kernel, stride, padding, dilation) with 1 to 15 output channels,
// channels-last in and out: each output a dot product over taps x C along the vector axis, reduced
// across the lanes at the end (kernels/conv_nhwc_impl.h, "few outputs"). For the detection heads
// whose outputs are too few for the pointwise kernel's panels (64 -> 6 fills 6 of 16 lanes) and
// too many pixels short for the NCHW GEMM's (4x5: 20 of 32 lanes).
// Outputs an accumulator of NhwcDot's kernel for M outputs at vl lanes (4, 2 or 1, dividing M; 4
// outputs go 2 an accumulator: 8 pixels a block loaded fewer times, 15x20 128 -> 4 4.6 -> 4.1 µs).
// The kernel's blocks and the weights' packing both follow it.
constexpr int nhwc_dot_group(int64_t M, int vl) {
    return M == 4 ? 2 : (M % 4 == 0 && vl >= 8) ? 4 : M % 2 == 0 ? 2 : 1;
}

class NhwcDot {
public:
    static constexpr int64_t kMaxM = 15;
    static bool supports(const Conv2DGeom& g) { return g.M >= 1 && g.M <= kMaxM && g.kh * g.kw <= 64 && g.C >= 1; }
    NhwcDot() = default;
    NhwcDot(Isa isa, const Conv2DGeom& g);
    // W is M x C x kh x kw (the ONNX weight), b (may be null) M floats. Packed: per tap, per L
    // channels (L = vector / G), M / G vectors of G outputs' L weights (zero past C); then the
    // bias tiled over 16 x M.
    size_t packed_floats() const { return size_t(g_.kh * g_.kw * Cp_ * g_.M + 16 * g_.M); }
    void pack(const float* W, const float* b, float* dst) const;
    // Floats of the zero-padded image (0 without padding: X is read in place).
    size_t scratch_floats() const { return padded() ? size_t(Hp_ * Wp_ * g_.C) : 0; }
    // X as run reads it: X itself, or its copy into scratch (scratch_floats()) with ph rows and pw
    // columns of zeros before it and zeros after it up to the last row and column an output reads.
    const float* pad_input(const float* x, float* scratch) const;
    // Output pixels [p0, p1) of OH x OW (row-major; any range: the thread split), Y and R (may be
    // null) channels-last; xp from pad_input (rows of the padded width; the kernel's geometry
    // carries it as W, its padding already in the rows).
    void run(const float* xp, const float* packed, const float* res, float* y, const ConvEpi& epi, int64_t p0,
             int64_t p1) const;
    const Conv2DGeom& geom() const { return g_; }

private:
    bool padded() const { return Hp_ != g_.H || Wp_ != g_.W || g_.ph > 0 || g_.pw > 0; }
    Isa isa_ = Isa::kScalar;
    Conv2DGeom g_;
    int64_t G_ = 1;           // outputs an accumulator (4, 2 or 1, dividing M)
    int64_t Cp_ = 0;          // C rounded up to a multiple of the lanes an output (vector / G)
    int64_t Hp_ = 0, Wp_ = 0;  // the padded image's rows and columns (H, W where none)
};

// The depthwise geometries whose output NhwcDepthwise::run can write channels-first: square 3x3
// or 5x5 kernels, stride 1 or 2 both ways, dilation 1 (the register-window strips).
inline bool nhwc_dw_writes_nchw(const Conv2DGeom& g) {
    return g.kh == g.kw && g.sh == g.sw && g.dh == 1 && g.dw == 1 && (g.kw == 3 || g.kw == 5) &&
           (g.sw == 1 || g.sw == 2);
}

// y[b][j][i] = x[b][i][j] (b < batch, i < rows, j < cols) for 4-byte elements, bit for bit: the
// Transpose op's kernel for permutations that are a batched 2-D transpose (NCHW <-> NHWC).
void transpose32(Isa isa, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols);
// One matrix (rows x cols), only y[j][i] for i in [i0, i1), j in [j0, j1) (a thread's share).
void transpose32(Isa isa, const void* x, void* y, int64_t rows, int64_t cols, int64_t i0, int64_t i1, int64_t j0,
                 int64_t j1);

// Per-ISA entry points (internal).
using ConvNhwcPwFn = void (*)(int64_t K, int64_t M, const float* x, const float* wp, const float* bias,
                              const float* res, float* y, const ConvEpi& e, int64_t p0, int64_t p1,
                              int64_t x_plane);
using ConvNhwcPwScaleFn = void (*)(int64_t K, int64_t Mp, const float* wp, const float* s, float* dst);
using ConvNhwcDotFn = void (*)(const Conv2DGeom& g, const float* x, const float* wp, const float* bias_t,
                               const float* res, float* y, const ConvEpi& e, int64_t p0, int64_t p1);
using ConvNhwcDwFn = void (*)(const Conv2DGeom& g, const float* x, const float* wp, const float* bias,
                              const float* res, float* y, const ConvEpi& e, int64_t oy0, int64_t oy1, bool y_nchw,
                              int64_t c0, int64_t c1);

}  // namespace jiffy::kernels
