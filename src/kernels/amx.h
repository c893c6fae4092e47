// Matrix products on Intel AMX (the tile unit of Sapphire Rapids and later) from FP32 operands,
// FP32 accumulators. Each operand is split into BF16 parts (x = hi + mid (+ lo)) and each output
// sums the products of parts that matter (docs/amx.md):
//  - BF16x3 (the default): hi + mid + lo keep 24 bits; the six products hi.hi, hi.mid, mid.hi,
//    hi.lo, lo.hi, mid.mid (what is dropped, mid.lo, lo.mid, lo.lo, is below 2^-24 relative):
//    FP32's own accuracy (oneMKL's "BF16x3" FP32 emulation);
//  - BF16x2 (JIFFY_AMX=x2, opt-in): hi + mid keep 16 significant bits (|x - hi - mid| <=
//    2^-17 |x|), three products (hi.hi, hi.mid, mid.hi), half the tile work and weights as
//    large as FP32's: each product within ~2^-15 of exact. Fine on well-conditioned models
//    (2.5e-6 - 6e-6 of the output magnitude on the transformer models, 3.7e-6 on ResNet-50,
//    against ONNX Runtime) but not on all: PP-OCR det, 3.4e-5 from ORT in FP32, reads 2e-4;
//  - BF16x3 without B's lo parts (AmxGemm::set_b_lo(false): the weights to 17 bits, A exact):
//    five products, 2/3 of B's bytes, ~2^-16 per product; likewise AmxConv::set_w_lo(false) for
//    a conv's weights (its A). Taken only where the compile's probe finds the plan's outputs
//    within 1e-5 (runtime/precision.cpp).
// TDPBF16PS does 16 x 16 x 32 multiply-adds per instruction, ~17-30 cycles each here depending
// on the tile loads around it: three of them per FP32-equivalent block beat the AVX-512 FMA
// peak ~2x on the product itself.
//
// AmxGemm: C[M, N] = A[M, K] . B[K, N] (+ bias[N]) with B known at prepare (weights), packed
// into 32-row x 16-column B tiles (pairs of K rows interleaved, AMX's layout), [N / 16][K / 32]
// [hi, mid], then (BF16x3) all the lo parts [N / 16][K / 32] after them, zero-padded to N a
// multiple of 32 and K of 32. Per run A's rows are split into 16 x 32
// A tiles [M / 16][K / 32][part]; each 32 x 32 block of C is four C tiles over the whole K,
// started from the bias and stored straight into C where whole. Parts of a 32-wide K block are
// kTile halves apart.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/conv.h"

namespace jiffy::kernels {

// Whether this process can run the AMX kernels: the CPU has AMX-TILE, AMX-BF16 and AVX512-BF16,
// the OS granted the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once), the active
// ISA is AVX-512 (JIFFY_ISA=avx2 / scalar turn it off too) and JIFFY_AMX is not 0.
bool amx_usable();
// 3 (BF16x3, the default) or 2 (JIFFY_AMX=x2): the BF16 parts per FP32 operand.
int amx_parts();
// JIFFY_AMX=x3: every product keeps the weights' lo parts (no weights to 17 bits, no probe). Read
// at each call (each compile), unlike amx_parts().
bool amx_exact_weights();
// The kernel name of a mode: "amx_bf16x2", "amx_bf16x3" or, without the weights' lo parts,
// "amx_bf16x3_w17".
inline const char* amx_mode_name(int parts, bool weights_lo) {
    return parts == 2 ? "amx_bf16x2" : weights_lo ? "amx_bf16x3" : "amx_bf16x3_w17";
}

class AmxGemm {
public:
    AmxGemm() = default;
    AmxGemm(int64_t M, int64_t K, int64_t N, int parts = amx_parts());

    // Packed B, in uint16 (BF16) units. B is K x N row-major (ldb = row stride) or, with
    // trans_b, N x K. False where B holds a value the parts cannot carry (NaN, an infinity, or
    // beyond BF16's largest finite value): then the product must not run here.
    size_t packed_b_halves() const { return size_t(Np_ * Kp_ * parts_); }
    bool pack_b(const float* B, int64_t ldb, bool trans_b, uint16_t* dst) const;
    // The split A (per run) of a row chunk, the edge tiles' buffer and the zero-padded bias, in
    // floats (with 64-byte alignment slack).
    size_t scratch_floats() const { return size_t(mc_ / 16 * (Kp_ * 16 * parts_ + 32) / 2 + 16 + 1024 + Np_ + 16); }
    // Rows of A split at a time (all of them where the split A is small; docs/amx.md).
    int64_t chunk_rows() const { return mc_; }

    // C = A . B (+ bias, may be null), columns [n0, n1) only (n0 a multiple of 32; n1 -1: N);
    // A rows lda floats apart, C rows ldc. Each output's sums do not depend on the range (a split
    // across threads gives the same bits). Not reentrant on the same scratch. False where A holds
    // NaN or an infinity, or (BF16x2, whose parts round) a value beyond BF16's range: the caller
    // runs its FP32 kernel instead (infinity x a zero part would be NaN); C is then untouched
    // where A is split whole (chunk_rows() >= the rows), else it may hold the row chunks before
    // the one that refused.
    // Rows [m0, m1) only (m1 -1: M): that part of A is split and those rows of C written.
    // With epi (may be null): then each output row gets the conv epilogue (kernels/conv.h: the
    // residual res, rows ldc apart like C, may be null; activation, clamp) after the bias: a
    // channels-last 1x1 conv (Y[pixels, M] = X[pixels, C] . W^T).
    bool run(const float* A, int64_t lda, const uint16_t* bp, const float* bias, float* C, int64_t ldc,
             float* scratch, int64_t n0 = 0, int64_t n1 = -1, const float* res = nullptr,
             const ConvEpi* epi = nullptr, int64_t m0 = 0, int64_t m1 = -1) const;

    int64_t M() const { return M_; }
    int64_t K() const { return K_; }
    int64_t N() const { return N_; }
    int parts() const { return parts_; }
    // BF16x3 only: whether run reads B's lo parts (true, the default: FP32's accuracy) or only hi
    // and mid (false: the weights to 17 bits, five products instead of six and 2/3 of B's bytes;
    // docs/amx.md "Weights to 17 bits"). The same packing serves both.
    void set_b_lo(bool on) { b_lo_ = on || parts_ != 3; }
    bool b_lo() const { return b_lo_; }
    const char* mode_name() const { return amx_mode_name(parts_, b_lo_); }

private:
    int64_t M_ = 0, K_ = 0, N_ = 0, Mp_ = 0, Kp_ = 0, Np_ = 0, mc_ = 0;
    int parts_ = 2;
    bool b_lo_ = true;
};
inline constexpr int64_t kAmxWholeA = int64_t(1) << 20, kAmxChunkA = int64_t(768) << 10;

// AmxConv: one group of a 2-D convolution, Y[M, P] = W[M, K] . im2col(X)[K, P] (K = C kh kw,
// P = OH OW), with W known at prepare: packed into 16 x 32 A tiles [M / 16][K / 32][part]
// (M padded to 32, K to 32). Per run the pixels of a tile of the output plane are gathered
// (1x1 stride 1: straight rows; otherwise per-tap gathers with the padding as masked-off lanes)
// and split into B tiles [pixel block of 16][K / 32][part]; each 32 channels x 32 pixels of Y is
// four C tiles over the whole K, stored straight into Y where whole; then bias, residual and
// activation over the rows (docs/amx.md).
// The largest kernel (taps kh x kw) AmxConv takes.
inline constexpr int64_t kAmxMaxTaps = 64;

class AmxConv {
public:
    AmxConv() = default;
    AmxConv(const Conv2DGeom& g, int parts = amx_parts());

    size_t packed_w_halves() const { return size_t(Mp_ * Kp_ * parts_); }
    // False where W holds a value the parts cannot carry (as AmxGemm::pack_b).
    bool pack_w(const float* W, uint16_t* dst) const;
    size_t scratch_floats() const {
        return size_t(ptile_ / 16 * (Kp_ * 16 * parts_ + 32) / 2 + 1024 + 16);
    }

    // Output pixels [pb, pe) (pb a multiple of 32; pe -1: P) of the 32-channel blocks [cb, ce)
    // (ce -1: all) of one image; each output's sums do not depend on the ranges. False (Y
    // untouched) where the input holds a value the parts cannot carry: run the FP32 kernel.
    bool run(const float* x, const uint16_t* wp, const float* bias, const float* res, float* y, float* scratch,
             const ConvEpi& e, int64_t pb = 0, int64_t pe = -1, int64_t cb = 0, int64_t ce = -1) const;

    int64_t pixels() const { return P_; }
    int64_t channel_blocks() const { return Mp_ / 32; }  // units of 32 output channels
    int parts() const { return parts_; }
    // BF16x3 only: whether run reads W's lo parts (true, the default) or not (the weights to 17
    // bits, as AmxGemm::set_b_lo; W's parts stay interleaved, the lo tiles skipped).
    void set_w_lo(bool on) { w_lo_ = on || parts_ != 3; }
    bool w_lo() const { return w_lo_; }
    const char* mode_name() const { return amx_mode_name(parts_, w_lo_); }

private:
    Conv2DGeom g_;
    int64_t K_ = 0, Kp_ = 0, Mp_ = 0, P_ = 0, ptile_ = 32;
    bool pointwise_ = false;
    int parts_ = 2;
    bool w_lo_ = true;
};

}  // namespace jiffy::kernels
