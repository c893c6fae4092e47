// Matrix products on Intel AMX (the tile unit of Sapphire Rapids and later) from FP32 operands,
// FP32 accumulators. Each operand is split into BF16 parts (x = hi + mid (+ lo)) and each output
// sums the products of parts that matter (docs/amx.md):
//  - BF16x2 (the default): hi + mid keep 16 significant bits (|x - hi - mid| <= 2^-17 |x|); the
//    products hi.hi, hi.mid, mid.hi (mid.mid, 2^-16, is below what the split already drops):
//    each product within ~2^-15 of exact, outputs within ~1e-5 of FP32's relative to their
//    magnitude (measured 2.5e-6 - 6e-6 on the transformer models against ONNX Runtime);
//  - BF16x3 (JIFFY_AMX=x3): hi + mid + lo keep 24 bits; six products (+ hi.lo, lo.hi, mid.mid),
//    FP32's own accuracy (oneMKL's "BF16x3" FP32 emulation), at twice the tile work.
// TDPBF16PS does 16 x 16 x 32 multiply-adds per instruction, ~17-30 cycles each here depending
// on the tile loads around it: three of them per FP32-equivalent block beat the AVX-512 FMA
// peak ~2x on the product itself.
//
// AmxGemm: C[M, N] = A[M, K] . B[K, N] (+ bias[N]) with B known at prepare (weights), packed
// into 32-row x 16-column B tiles (pairs of K rows interleaved, AMX's layout), [N / 16][K / 32]
// [part], zero-padded to N a multiple of 32 and K of 32. Per run A's rows are split into 16 x 32
// A tiles [M / 16][K / 32][part]; each 32 x 32 block of C is four C tiles over the whole K,
// stored straight into C where whole, then the bias. Parts of a 32-wide K block are kTile halves
// apart.
#pragma once
#include <cstddef>
#include <cstdint>

namespace jiffy::kernels {

// Whether this process can run the AMX kernels: the CPU has AMX-TILE, AMX-BF16 and AVX512-BF16,
// the OS granted the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once), the active
// ISA is AVX-512 (JIFFY_ISA=avx2 / scalar turn it off too) and JIFFY_AMX is not 0.
bool amx_usable();
// 2 (BF16x2, the default) or 3 (JIFFY_AMX=x3): the BF16 parts per FP32 operand.
int amx_parts();

class AmxGemm {
public:
    AmxGemm() = default;
    AmxGemm(int64_t M, int64_t K, int64_t N, int parts = amx_parts());

    // Packed B, in uint16 (BF16) units. B is K x N row-major (ldb = row stride) or, with
    // trans_b, N x K. False where B holds a value the parts cannot carry (NaN, an infinity, or
    // beyond BF16's largest finite value): then the product must not run here.
    size_t packed_b_halves() const { return size_t(Np_ * Kp_ * parts_); }
    bool pack_b(const float* B, int64_t ldb, bool trans_b, uint16_t* dst) const;
    // The split A (per run), in floats.
    size_t scratch_floats() const { return size_t(Mp_ / 16 * (Kp_ * 16 * parts_ + 32) / 2 + 2 * Np_ * 32 + 16); }

    // C = A . B (+ bias, may be null); A rows lda floats apart, C rows ldc. Not reentrant on the
    // same scratch. False (C untouched) where A holds NaN, an infinity or a value beyond BF16's
    // range: the caller runs its FP32 kernel instead (infinity x a zero part would be NaN).
    bool run(const float* A, int64_t lda, const uint16_t* bp, const float* bias, float* C, int64_t ldc,
             float* scratch) const;

    int64_t M() const { return M_; }
    int64_t K() const { return K_; }
    int64_t N() const { return N_; }
    int parts() const { return parts_; }

private:
    int64_t M_ = 0, K_ = 0, N_ = 0, Mp_ = 0, Kp_ = 0, Np_ = 0;
    int parts_ = 2;
};

}  // namespace jiffy::kernels
