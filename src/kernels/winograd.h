// Winograd convolution F(m x m, 3 x 3), m = 2 or 4 (alpha = m + 2 transform points per axis), for
// 3x3, stride-1, dilation-1 convs of one group. Per image, in blocks of `nb` output tiles (m x m
// pixels each, tiles numbered row-major over the tile grid):
//   1. input transform V = B^T d B of every (channel, tile) of the block, vectorized across
//      adjacent tiles of a tile row (a vector holds VL tiles), from a zero-padded copy of the
//      alpha input rows that tile row reads; stored as alpha^2 row-major C x nb matrices;
//   2. alpha^2 GEMMs Mt[t] (M x nb) = U[t] (M x C) . V[t] (C x nb) on the conv GEMM microkernel
//      (conv_impl.h's ukr, B rows read at offsets like the implicit GEMM; U packed at prepare);
//   3. output transform Y = A^T Mt A + bias per (output channel, tile), the tiles' columns
//      interleaved back into output rows, then the conv's epilogue (residual add, activation).
// The weights are transformed once (U = G g G^T, in double) at prepare. The scratch (V, Mt and
// the padded rows) is ~L2-sized: nb is chosen so that V and Mt of a block fit in ~768 KiB.
// Transposed orientation (small planes, where a block's few tiles would fill a fraction of the
// microkernel's NR lanes): Mt[t]^T (nb x M) = V[t]^T (nb x C) . U[t]^T (C x M), the tiles as the
// microkernel's rows (V stored in balanced row blocks of <= MR tiles, C x mr each) and the output
// channels on its lanes (U packed as C x NR column panels, zero past M, like ConvGemm's `trans`
// mode); the output transform then runs across VL output channels per tile into a P x Mpad
// pixel-major buffer, which trans_out transposes into Y with bias, residual and activation.
// F(4,3) multiplies 4x less than direct convolution, F(2,3) 2.25x less; F(4,3) rounds worse
// (its transform has entries up to 8 and 1/24): see docs/winograd.md for the measured errors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cpu.h"

namespace jiffy::kernels {

struct WinoArgs {
    Conv2DGeom g;
    int m = 2, alpha = 4;    // output tile m x m, transform points alpha x alpha
    // 0: 3x3 (tiles m x m, alpha^2 points); 1-D (alpha points): 1 a 1x3 kernel (tiles 1 x m
    // along a row), 2 a 3x1 kernel (tiles m x 1 down a column).
    int kind = 0;
    int npts = 16;           // transform points (alpha^2 or alpha): GEMMs per block
    int64_t TH = 0, TW = 0;  // tile grid (rows, columns), T = TH * TW tiles
    int64_t T = 0;
    int64_t nb = 0;                 // tiles per block (multiple of the microkernel's NR)
    int64_t kc = 0;                 // C chunk of the microkernel
    int64_t RW = 0;                 // row stride of the padded input rows buffer (alpha rows)
    // 1-D kinds: VL consecutive tiles per vector across tile rows (3x1 always; 1x3 where pw = 1 and
    // W = OW = TW m, so that the tiles of consecutive rows follow each other in the plane).
    bool flat = false;
    const int64_t* offs = nullptr;  // offs[c] = c * nb: the GEMM's B rows
    bool trans = false;             // transposed orientation (tiles as rows, channels on lanes)
    int64_t Mpad = 0;               // trans: M rounded up to NR
    // A split by tiles across threads (Winograd::run_tiles): tiles [t0, t1) only (t1 0: all);
    // the transposed orientation then writes its pixel-major P x Mpad output to `yt` (shared by
    // the threads), and Y for the tile rows wholly inside [t0, t1). out_only: only Y's pixels of
    // tile rows [tr0, tr1) from that yt (the rows two parts share, once both are done).
    int64_t t0 = 0, t1 = 0;
    float* yt = nullptr;
    bool out_only = false;
    int64_t tr0 = 0, tr1 = 0;
};

// A Winograd variant: tile size m (2 or 4; 0: the direct conv) and orientation.
struct WinoPick {
    int m = 0;
    bool trans = false;
};

class Winograd {
public:
    Winograd() = default;
    // g: 3x3, 1x3 or 3x1, stride 1, dilation 1 (suits(g)); m: 2 or 4; trans: the transposed
    // orientation.
    Winograd(Isa isa, const Conv2DGeom& g, int m, bool trans = false);

    // The kind of g (WinoArgs::kind: 0 3x3, 1 1x3, 2 3x1).
    static int kind_of(const Conv2DGeom& g) { return g.kh == 1 ? 1 : g.kw == 1 ? 2 : 0; }
    static bool suits(const Conv2DGeom& g) {
        const bool k = (g.kh == 3 && g.kw == 3) || (g.kh == 1 && g.kw == 3) || (g.kh == 3 && g.kw == 1);
        return k && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.ph <= 2 && g.pw <= 2 && g.OH >= 1 &&
               g.OW >= 1 && g.C >= 1 && g.M >= 1;
    }

    // W is M x C x kh x kw; packed as npts matrices U[t] (M x C) in the microkernel's row blocks
    // (transposed: U[t]^T as C x NR column panels, Mpad columns).
    size_t packed_w_floats() const { return size_t(a_.npts * (a_.trans ? a_.Mpad : a_.g.M) * a_.g.C); }
    void pack_w(const float* W, float* dst) const;
    size_t scratch_floats() const;

    // One image: x is C x H x W, y M x OH x OW; bias (M) and res (like y) may be null.
    // Not reentrant on the same scratch.
    void run(const float* x, const float* wpacked, const float* bias, const float* res, float* y,
             float* scratch, const ConvEpi& epi) const;
    // A split by tiles (each thread its own scratch; results equal run()'s bitwise): tiles
    // [t0, t1) of the image. Normal orientation: writes their pixels of Y. Transposed: writes
    // their pixels of yt (yt_floats(), shared by the threads) and Y's pixel rows of the tile rows
    // wholly inside [t0, t1); once every part is done, finish_rows(tr0, tr1) writes Y's pixels of
    // tile rows [tr0, tr1) from yt: those split between parts (shared_row).
    void run_tiles(const float* x, const float* wpacked, const float* bias, const float* res, float* y,
                   float* scratch, const ConvEpi& epi, int64_t t0, int64_t t1, float* yt) const;
    void finish_rows(const float* yt, const float* bias, const float* res, float* y, const ConvEpi& epi,
                     int64_t tr0, int64_t tr1) const;
    // The tile row that a part starting at tile `start` shares with the part before it, which
    // finish_rows writes once both are done (transposed orientation), or -1 when the part starts
    // a tile row (or none is shared). Ascending starts give ascending rows; two boundaries inside
    // one row (a part of less than a row) give that row twice, to finish once.
    int64_t shared_row(int64_t start) const {
        return a_.trans && start % a_.TW != 0 && start < a_.T ? start / a_.TW : -1;
    }
    size_t yt_floats() const { return a_.trans ? size_t(a_.g.OH * a_.g.OW * a_.Mpad) : 0; }

    const WinoArgs& args() const { return a_; }
    Isa isa() const { return isa_; }
    // "f32_winograd_f4x3__avx512", "f32_winograd_f2x3_trans__avx2" etc.; 1-D:
    // "f32_winograd_f1x4_1x3__avx512" (1x3 kernel, 1 x 4 tiles), "f32_winograd_f4x1_3x1_trans__avx2".
    const char* name() const { return name_; }

private:
    Isa isa_ = Isa::kScalar;
    WinoArgs a_;
    char name_[48] = "";
    std::vector<int64_t> offs_;
};

// The Winograd variant worth using for this conv on this ISA, or m = 0 where the direct conv
// (ConvGemm) is expected to be as fast (few channels, tiny planes): a cost model measured on
// ResNet-50's and PP-OCR's 3x3 layers (docs/winograd.md). JIFFY_WINOGRAD overrides it: 0 (never),
// 2 / 4 (that tile size for every conv that suits(), the orientation by the model), 2n / 4n / 2t /
// 4t (that tile size and orientation: n normal, t transposed).
WinoPick winograd_choice(Isa isa, const Conv2DGeom& g);
// The cost model's estimated speedup of a variant over the direct conv (bench, tests).
// tuned: with the corrections measured for tuning_vendor()'s cores (kernels/cpu.h), else the fit.
double winograd_speedup(Isa isa, const Conv2DGeom& g, WinoPick p, bool tuned = true);

// Per-ISA entry point (internal).
using WinoFn = void (*)(const WinoArgs& a, const float* x, const float* wp, const float* bias,
                        const float* res, float* y, float* scratch, const ConvEpi& e);

}  // namespace jiffy::kernels
