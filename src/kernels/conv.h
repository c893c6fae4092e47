// Fast float32 2-D convolution kernels (1-D convs use H = 1):
//   * ConvGemm: im2col + packed GEMM. Per image and group, Y[m, p] = W[m, k] . col[k, p] with
//     k = (ic, ky, kx) and p = output pixel. The output pixels are processed in tiles; each tile's
//     im2col is written straight into panels of NR pixels x K (zero-padded past the tile), the
//     weights are packed once into row blocks of <= MR output channels (K x mr each), and an
//     MR x NR register-blocked microkernel computes the tile, K in chunks of <= KC, applying the
//     epilogue (bias, residual add, activation) to each block on its last chunk while it is hot.
//   * conv_depthwise: one filter per channel (group == C == M), a direct kernel vectorized along
//     the output row over blocks of output rows, reading the input in place (masked loads at
//     the borders); small planes on AVX-512 as one flat vector range with per-tap lane masks
//     (ConvDwMode).
// Per-ISA code: src/kernels/conv_impl.h compiled once per ISA (x86/conv_avx512.cpp,
// x86/conv_avx2.cpp, and the portable 4-lane build in conv.cpp).
#pragma once
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu.h"

namespace jiffy::kernels {

// Activation applied after bias (+ residual). Clip: min = alpha, max = beta; LeakyRelu: alpha;
// HardSigmoid: max(0, min(1, alpha * x + beta)); HardSwish: x * max(0, min(1, x / 6 + 0.5)).
// `clamp` (only with an activation other than kNone): the activation's result then goes through
// min(max(v, lo), hi), std::max / std::min order (a fused Max / Min with a scalar constant).
// `affine` (only with an activation other than kNone): last of all, v * scale + shift as one
// FMA (PaddleOCR's learnable affine after each activation: a Mul and an Add by scalars).
// SiLU: x * Sigmoid(x).
enum class ConvAct : int { kNone, kRelu, kLeakyRelu, kClip, kHardSigmoid, kHardSwish, kSigmoid, kTanh, kSilu };

// Sigmoid and Tanh run after a kernel's epilogue, in one vector pass over the rows it just wrote
// (conv_impl.h's deferred_rows), not on the microkernel's registers. SiLU (EfficientNet, YOLO:
// after nearly every conv) runs on the registers like the piecewise-linear ones: deferred, it
// re-read every output it had stored (from L3 for the 112x112 layers) or paid a call per 32
// values in the GEMM's block stores (see docs/benchmarks.md, session 19).
constexpr bool deferred_act_kind(ConvAct a) { return a == ConvAct::kSigmoid || a == ConvAct::kTanh; }

struct ConvEpi {
    ConvAct act = ConvAct::kNone;
    float alpha = 0, beta = 0;
    bool clamp = false;
    float lo = -__builtin_inff(), hi = __builtin_inff();
    bool affine = false;
    float scale = 1, shift = 0;
};

// The geometry of one group: C input channels of H x W, M output channels of OH x OW.
struct Conv2DGeom {
    int64_t C = 0, H = 1, W = 1, M = 0, OH = 1, OW = 1;
    int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0;
};

// Whether planes `floats` apart sit within 512 bytes of a multiple of 4 KiB: their rows then
// collide in the same L1 sets when a kernel reads several planes at once (ConvGemm copies or
// pads such images, or keeps its packed mode for them).
inline bool plane_aliased(int64_t floats) {
    const int64_t r = (floats * 4) % 4096;
    return r < 512 || r > 3584;
}

// Microkernel shape per ISA (AVX-512 12 x 32, AVX2 6 x 16, portable 6 x 8).
int conv_mr(Isa isa);
int conv_nr(Isa isa);

// Precomputed per-kernel-column tables and tiling for the GEMM path (built at prepare).
struct ConvGemmArgs {
    Conv2DGeom g;
    int64_t K = 0, P = 0;        // K = C * kh * kw, P = OH * OW
    int64_t tile = 0;            // output pixels per tile (multiple of NR)
    int64_t kc = 0;              // K chunk of the microkernel
    bool pointwise = false;      // 1x1, stride 1, no padding: im2col is a plane copy
    // With padding, each image's group input is first copied into a zero-padded HP x WP image
    // (after the tile in the scratch) so the im2col reads in bounds without checks.
    bool pad_copy = false;
    int64_t HP = 0, WP = 0;
    int64_t PS = 0;  // plane stride of the image read (padded: HP * WP or more, off 4 KiB multiples)
    // Stride 1: implicit GEMM reading B rows straight from the (padded) image at offsets offs[k]
    // (no im2col); the scratch holds an M x tile output buffer and one packed K x NR tail panel.
    bool implicit = false;
    int64_t ldbuf = 0;  // row stride of the M x tile output buffer (off 4 KiB multiples)
    const int64_t* offs = nullptr;
    // Few pixels (7x7, 14x14 planes, where P is far from a multiple of NR): the product is
    // transposed, Yt[P, Mpad] = col^T[P, K] . Wt[K, Mpad], with the output channels on the
    // microkernel's NR-wide vector axis (weights packed at prepare as K x NR panels, zero past M)
    // and the pixels as its rows (packed per K chunk); Yt is then transposed into Y with the
    // epilogue. Scratch: P x kc packed rows, P x Mpad Yt, then the padded image if any.
    bool trans = false;
    int64_t Mpad = 0;
    // Masked implicit GEMM (AVX-512, stride 1, padded, OW == W): B rows are read straight from
    // the unpadded image at offs[k] = c * H * W + (ky * dh - ph) * W + kx * dw - pw with masked
    // loads, so taps in the padding and pixels past P load as zero (masked-out lanes never fault),
    // and the output is written in place: no padded copy, no output buffer, no wasted columns.
    // hmask[kx * W + s]: the lanes l < NR whose column (s + l) % W reads inside the row for tap
    // column kx. Scratch: (tile / NR) * kh * kw lane masks per tile.
    bool masked = false;
    const uint32_t* hmask = nullptr;
    // A pixel split across threads (im2col mode, masked mode, split mode with srows > 0, or
    // 1x1-direct without a copy): output pixels [pb, pe) of the image (im2col: the padded copy only of the
    // rows they read; split: whole tiles); pe 0: every pixel. Sums as for the whole image.
    int64_t pb = 0, pe = 0;
    // The pixels [begin, end) of n to compute: the range where there is one, else all n.
    int64_t range_begin() const { return pe > 0 ? pb : 0; }
    int64_t range_end(int64_t n) const { return pe > 0 ? std::min(n, pe) : n; }
    // A channel split across threads (ConvGemm::run_channels): the weights' row blocks [cb, ce)
    // only (balanced blocks of <= MR output channels; transposed: NR-wide channel panels) of the
    // whole conv's packing; ce 0: every block. Sums as for the whole conv.
    int64_t cb = 0, ce = 0;
    int64_t blocks_begin() const { return ce > 0 ? cb : 0; }
    int64_t blocks_end(int64_t n) const { return ce > 0 ? std::min(n, ce) : n; }

    // Split (stride > 1; with implicit): each image's group input is first copied into planes of
    // HQ x OW floats, one per (row phase r, tap column kx), plane[c][r][kx][i][j] =
    // xp[c][i * sh + rph[r]][j * sw + kx * dw] (xp: the zero-padded image; rph: the nry distinct
    // row phases (ky * dh) % sh). Tap (c, ky, kx) of output pixel p then reads
    // plane[c][r(ky)][kx][p + (ky * dh / sh) * OW]: a stride-1 shift, so the implicit GEMM runs
    // over the planes (offs) and writes Y in place (grid width OW, no wasted columns). 1x1
    // stride 2 becomes a subsampled copy and the pointwise GEMM. Planes PQ floats apart,
    // channels PS. srows > 0 (kernels larger than 1x1): the planes hold the rows of srows output
    // rows only (tile = srows * OW pixels), refilled per tile so that they stay in L2.
    bool split = false;
    int64_t HQ = 0, PQ = 0, nry = 0, srows = 0;
    const int64_t* rph = nullptr;
    int64_t offs_max = 0;  // implicit modes: the largest offs[k]
};

// How ConvGemm computes a group (chosen per shape at prepare; see ConvGemmArgs).
enum class ConvGemmMode : int {
    kAuto,      // the constructor's choice (only as a request)
    kIm2col,    // im2col (a plane copy for 1x1) into packed panels, then the packed GEMM
    kImplicit,  // stride 1: B rows read straight from the (padded) image
    kMasked,    // AVX-512, stride 1, OW == W: implicit with masked loads, output in place
    kTrans,     // few pixels: Yt = col^T . Wt, output channels on the vector axis
    kSplit,     // stride > 1: the input split into stride-1 planes, then implicit (ConvGemmArgs::split)
};
// The forcible modes (tests and benchmarks).
inline constexpr ConvGemmMode kConvGemmModes[] = {ConvGemmMode::kIm2col, ConvGemmMode::kImplicit,
                                                  ConvGemmMode::kMasked, ConvGemmMode::kTrans,
                                                  ConvGemmMode::kSplit};

class ConvGemm {
public:
    ConvGemm() = default;
    // `force`: a mode to use instead of the automatic choice where the shape and ISA allow it
    // (tests and benchmarks; mode() tells which one was taken).
    ConvGemm(Isa isa, const Conv2DGeom& g, int64_t groups, ConvGemmMode force = ConvGemmMode::kAuto);

    // Weights (groups * M) x K row-major, packed into per-group row blocks (transposed mode:
    // per-group K x NR column panels).
    size_t packed_w_floats() const {
        return size_t(groups_ * (args_.trans ? args_.Mpad : args_.g.M) * args_.K);
    }
    void pack_w(const float* W, float* dst) const;
    size_t scratch_floats() const {
        const ConvGemmArgs& a = args_;
        const int64_t main = a.trans      ? a.P * a.kc + a.P * a.Mpad
                             : a.masked   ? a.tile / nr_ * a.g.kh * a.g.kw
                             : a.implicit ? a.g.M * a.ldbuf + a.K * nr_
                                          : a.K * a.tile;
        return size_t(main + (a.pad_copy || a.split ? a.g.C * a.PS : 0));
    }

    // One image: x holds groups * C planes, y groups * M planes; bias (groups * M) and res (same
    // shape as y) may be null. Not reentrant on the same scratch.
    void run(const float* x, const float* wpacked, const float* bias, const float* res, float* y,
             float* scratch, const ConvEpi& epi) const;
    // Only output pixels [pb, pe) of one group (groups == 1; im2col or masked mode, 1x1-direct without
    // a copy, split mode with tiled planes (args().srows > 0), where pb and pe must be
    // multiples of args().tile (or pe == P), or the transposed mode, any range, in balanced
    // blocks of its own): each thread of a pixel split runs its range on its own scratch;
    // results equal run()'s bitwise.
    void run_pixels(const float* x, const float* wpacked, const float* bias, const float* res, float* y,
                    float* scratch, const ConvEpi& epi, int64_t pb, int64_t pe) const;
    // Only the output channels of weight blocks [cb, ce) of channel_blocks() (groups == 1), from
    // the whole conv's packed weights: each thread of a channel split runs its range on its own
    // scratch (each packs or pads the input it reads); results equal run()'s bitwise.
    void run_channels(const float* x, const float* wpacked, const float* bias, const float* res, float* y,
                      float* scratch, const ConvEpi& epi, int64_t cb, int64_t ce) const;
    // The weights' row blocks (balanced, <= MR output channels each) or, transposed, NR-wide
    // channel panels: the units of a run_channels range.
    int64_t channel_blocks() const;
    // The multiple of output pixels a run_pixels range must start at (NR for im2col, masked and
    // 1x1-direct, a tile of output rows for tiled split planes, 1 for the transposed mode); 0
    // where run_pixels does not apply (the other modes).
    int64_t pixel_align() const;

    Isa isa() const { return isa_; }
    const ConvGemmArgs& args() const { return args_; }
    ConvGemmMode mode() const;
    // The mode for profiles and `jiffy inspect` ("1x1-packed", "implicit-masked", ...).
    const char* name() const;

private:
    ConvGemmArgs bound_args() const;  // args_ with offs / hmask / rph pointing at the tables below
    Isa isa_ = Isa::kScalar;
    int64_t groups_ = 1;
    ConvGemmArgs args_;
    int64_t nr_ = 8;
    std::vector<int64_t> offs_;
    std::vector<uint32_t> hmask_;
    std::vector<int64_t> rph_;
};

// The zero-padded channel plane of the plane-copy depthwise kernel (dw_plane_impl.h): HP x WP
// floats, plus slack so that the vector strips past the last output column read inside the
// buffer (`floats` in all).
struct DwPlane {
    int64_t HP = 0, WP = 0, floats = 0;
};
inline DwPlane dw_plane_dims(const Conv2DGeom& g, int64_t vl) {
    DwPlane d;
    d.HP = (g.OH - 1) * g.sh + (g.kh - 1) * g.dh + 1;
    d.WP = std::max((g.OW - 1) * g.sw + (g.kw - 1) * g.dw + 1, g.pw + g.W);
    const int64_t owv = (g.OW + vl - 1) / vl * vl;
    d.floats = d.HP * d.WP + owv * g.sw + 2 * vl * g.sw + g.kw * g.dw + 64;
    return d;
}
// How conv_depthwise computes a shape (chosen per shape and ISA by conv_dw_mode).
enum class ConvDwMode : int {
    kAuto,  // the automatic choice (only as a request)
    // Vectors along the row (any shape; masked strips at the borders): AVX-512 sweeps each strip
    // column down the plane (3x3 stride 2 on planes > 2048 pixels: tiles of 3 strips x 4 rows,
    // conv_dw_s2_strips; > 8192 pixels with wider rows: blocks of rows), others blocks of
    // output rows. Same summation order everywhere (the same bits as kFlat).
    kRows,
    // AVX-512, small planes (3x3 / 5x5; stride 1 with OW == W, or stride 2 with each input
    // parity's rows / columns fitting the output): the whole output plane is one flat range of
    // vectors; tap t of output pixel p reads src[p + off[t]] under a per-(vector, tap) lane mask
    // that zeroes the taps outside the image (and the lanes past the plane). Stride 1 reads the
    // input in place; stride 2 first splits each channel into its 4 (row, column) parity planes
    // of OH x OW, where the taps become stride 1. No per-row overhead: 49 of 64 lanes busy on
    // 7x7 planes instead of 7 of 16.
    kFlat,
    // Each channel copied into a zero-padded plane (dw_plane_impl.h), every tap one unchecked
    // vector load along the row: for planes of < 8 output rows (PP-OCR's 2x96 / 3x96 planes:
    // ~47 against ~84 us for a 200-channel 5x5 in rows mode) and uneven strides (2 x 1).
    kPlane,
    // VL channels at a time transposed into a zero-padded pixel-major plane (one vector of VL
    // channels per pixel), every tap one unmasked load and FMA, then transposed back
    // (dw_blocked_impl.h): any kernel, stride and dilation, on planes of <= kConvDwBlockedMaxPad
    // padded pixels. For small planes, where the other modes waste lanes (MobileNetV3's 5x5 on
    // 7x7 and 14 -> 7).
    kBlocked,
};
// The padded plane the blocked mode reads: the rows and columns the output pixels' taps reach.
struct DwBlocked {
    int64_t HP = 0, WP = 0;
};
inline DwBlocked dw_blocked_dims(const Conv2DGeom& g) {
    return {(g.OH - 1) * g.sh + (g.kh - 1) * g.dh + 1, (g.OW - 1) * g.sw + (g.kw - 1) * g.dw + 1};
}
inline constexpr int64_t kConvDwBlockedMaxPad = 4096;
// Kernels the rows mode has no specialized path for (other than 3x3 / 5x5, stride 1 or 2 both
// ways, dilation 1) run a generic per-tap loop there (64 x 80x80 7x7: ~3.4 ms): the blocked mode
// takes them on planes up to 4x larger (a 1 MiB plane buffer).
inline bool conv_dw_generic_kernel(const Conv2DGeom& g) {
    const bool special = g.kh == g.kw && (g.kh == 3 || g.kh == 5) && g.sh == g.sw && (g.sh == 1 || g.sh == 2) &&
                         g.dh == 1 && g.dw == 1;
    return !special;
}
inline constexpr int64_t kConvDwBlockedMaxPadGeneric = 16384;
// Its scratch (16-channel vectors, the widest ISA): the padded plane and a dump slot, the output
// pixels, the taps and a 32-bit offset per input pixel; 0 where the plane is too large for the mode.
inline int64_t conv_dw_blocked_floats(const Conv2DGeom& g) {
    const DwBlocked d = dw_blocked_dims(g);
    if (d.HP * d.WP > (conv_dw_generic_kernel(g) ? kConvDwBlockedMaxPadGeneric : kConvDwBlockedMaxPad)) return 0;
    const int64_t P = g.OH * g.OW, T = g.kh * g.kw;
    return (d.HP * d.WP + 1 + (P + 15) / 16 * 16 + (T + 15) / 16 * 16) * 16 + g.H * g.W + 16;
}
// The largest output plane the flat mode takes (its lane-mask table and parity planes live in
// the scratch); the automatic choice takes it up to kConvDwFlatAutoP pixels.
inline constexpr int64_t kConvDwFlatMaxP = 1024;
inline constexpr int64_t kConvDwFlatAutoP = 256;
// The mode for (isa, g): `force` where the shape and ISA allow it, else the automatic choice.
ConvDwMode conv_dw_mode(Isa isa, const Conv2DGeom& g, ConvDwMode force = ConvDwMode::kAuto);
// For profiles and `jiffy inspect`: "rows", "plane", "flat" (stride 1), "flat-s2" or "blocked".
const char* conv_dw_mode_name(ConvDwMode m, const Conv2DGeom& g);
// The rows mode's 3x3 stride-2 strip tiles (AVX-512): planes of > 2048 pixels, or output rows of
// more than one strip (OW > 16), whose output rows are <= kConvDwS2MaxStrips strips of 16 (the
// per-strip masks are set once per call). Smaller planes with one-strip rows keep the column
// sweep (MobileNetV2 192 x 28 -> 14 ~20 against ~24.5 us in the tiles); 2-strip rows gain
// (face detector 64 x 30 x 40 -> 15 x 20 ~13.8 -> ~11.7 us, line detector 192 x 40 -> 20 ~52 ->
// ~47 us; JIFFY_PROFILE, 3 rounds alternating, medians).
inline constexpr int64_t kConvDwS2MaxStrips = 16;
inline bool conv_dw_s2_strips(const Conv2DGeom& g) {
    return g.kh == 3 && g.kw == 3 && g.sh == 2 && g.sw == 2 && g.dh == 1 && g.dw == 1 &&
           (g.H * g.W > 2048 || g.OW > 16) && (g.OW + 15) / 16 <= kConvDwS2MaxStrips;
}
// The mode's name, "rows-s2" where the rows mode runs the strip tiles above (isa: AVX-512).
const char* conv_dw_kernel_name(Isa isa, ConvDwMode m, const Conv2DGeom& g);

// Scratch of conv_depthwise: a zeroed row read in place of the rows above and below the image
// (wider than any row's reads of any ISA), the padded plane, or the flat mode's lane masks and
// parity planes.
// Flat mode layout: 16-lane masks (uint16, <= 25 taps per vector), then two sets of 4 parity
// planes.
inline int64_t conv_dw_flat_mask_floats(int64_t P) { return ((P + 15) / 16 * 25 / 2 + 16) / 16 * 16; }
// (the parity planes are a fixed distance apart: the kernel's loads address them by constants)
inline constexpr int64_t conv_dw_flat_plane_floats() { return kConvDwFlatMaxP + 16; }
inline size_t conv_dw_scratch_floats(const Conv2DGeom& g) {
    const int64_t rows = g.W + 2 * g.kw * g.dw + 64, P = g.OH * g.OW;
    const int64_t flat = P <= kConvDwFlatMaxP ? conv_dw_flat_mask_floats(P) + 8 * conv_dw_flat_plane_floats() + 16 : 0;
    return size_t(std::max({rows, flat, dw_plane_dims(g, 16).floats, conv_dw_blocked_floats(g)}));
}

// Depthwise conv of one image: g.C == g.M channels, w is C x kh x kw; scratch holds
// conv_dw_scratch_floats(g) floats. `mode`: conv_dw_mode(isa, g, mode) runs (kAuto: the
// automatic choice). Not reentrant on the same scratch. [oy0, oy1): only those output rows of
// every channel (oy1 < 0: all), for a thread split by rows; only where conv_dw_rows_range_ok
// (elsewhere a partial range computes nothing). Each output is computed as in a whole run.
// One input channel to output channels [m0, m1) of M, stride 1, no dilation (any kernel size and
// padding; ops/conv_small.cpp OneChannelConvKernel): vectors of 16 output pixels along each row, 8
// output channels at a time, each tap's input vector loaded once for the 8 (the depthwise kernel
// per channel loads it per channel: a CRNN's 3x3 1 -> 32 on 32 x 128 43 us that way). w: [M, 1,
// kh, kw]; bias (or null) and then epi (with res, per channel plane) as the other convs. AVX-512
// only (x86/conv1ch_avx512.cpp); the same outputs whatever the channel range.
constexpr int64_t kOneChannelMaxKw = 16, kOneChannelMaxBlocks = 64;  // kw, OW / 32
void conv_one_channel_avx512(const Conv2DGeom& g, const float* x, const float* w, const float* bias, const float* res,
                             float* y, const ConvEpi& epi, int64_t m0, int64_t m1);

void conv_depthwise(Isa isa, const Conv2DGeom& g, const float* x, const float* w,
                    const float* bias, const float* res, float* y, const ConvEpi& epi,
                    float* scratch, ConvDwMode mode = ConvDwMode::kAuto, int64_t oy0 = 0, int64_t oy1 = -1);
// Whether conv_depthwise takes a row range for this shape (the rows mode: its row blocks and
// column sweeps start and stop at any output row).
inline bool conv_dw_rows_range_ok(Isa isa, const Conv2DGeom& g, ConvDwMode mode) {
    return conv_dw_mode(isa, g, mode) == ConvDwMode::kRows;
}

// Epilogue over n contiguous values (residual r may be null; bias already added).
void conv_epilogue(Isa isa, float* y, const float* r, int64_t n, const ConvEpi& epi);
// y[c][i][j] = x[c][i * sh][j * sw] for channels [c0, c1) of an H x W image into OH x OW planes
// (i * sh < H, j * sw < W): a strided 1x1 conv's input as a stride-1 one's.
void conv_subsample(Isa isa, const float* x, int64_t H, int64_t W, int64_t sh, int64_t sw, int64_t OH,
                    int64_t OW, float* y, int64_t c0, int64_t c1);

// Dilated "same" convs as one conv over a mosaic of their phases (ops/conv.cpp,
// DilatedPhaseConvKernel). x: planes of H x W (W = dl ws); the mosaic: planes of MP floats, rows of
// MW, phase (a, b) at row a sh, column b sw. phase_split: mosaic[c][(r % dl) sh + r / dl][b sw + j]
// = x[c][r][j dl + b] for channels [c0, c1); phase_merge: the reverse (y from the mosaic).
struct PhaseMosaic {
    int64_t H = 0, W = 0, dl = 1, sh = 0, sw = 0, MW = 0, MP = 0;
};
void phase_split(Isa isa, const PhaseMosaic& p, const float* x, float* mosaic, int64_t c0, int64_t c1);
void phase_merge(Isa isa, const PhaseMosaic& p, const float* mosaic, float* y, int64_t c0, int64_t c1);

// Per-ISA entry points (internal).
using ConvGemmGroupFn = void (*)(const ConvGemmArgs& a, const float* x, const float* wp,
                                 const float* bias, const float* res, float* y, float* scratch,
                                 const ConvEpi& epi);
using ConvDwFn = void (*)(const Conv2DGeom& g, const float* x, const float* w, const float* bias,
                          const float* res, float* y, const ConvEpi& epi, float* scratch,
                          ConvDwMode mode, int64_t oy0, int64_t oy1);
using ConvEpiFn = void (*)(float* y, const float* r, int64_t n, const ConvEpi& epi);
using MaxPoolW2Fn = void (*)(int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW,
                             int64_t kh, int64_t sh, const float* x, float* y);

}  // namespace jiffy::kernels
