// Single-precision GEMM with B packed once (weights, at compile time):
//   C[M, N] = act(A[M, K] . B[K, N] + bias[N] (+ C when accumulate))
// B is packed into panels of NR columns (K x NR floats each, zero-padded past N) so the
// microkernel streams one contiguous panel per MR-row block. Per-ISA microkernels:
//   f32_gemm_8x32__avx512, f32_gemm_4x16__avx2, f32_gemm_4x16__neon (MR x NR; src/kernels/arm/),
//   and a scalar reference.
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/activation.h"
#include "kernels/cpu.h"

namespace jiffy::kernels {

enum class Act : int { kNone = 0, kRelu = 1 };

struct PackedB {
    int64_t K = 0, N = 0;
    int NR = 16;
    std::shared_ptr<float> data;  // ceil(N / NR) panels of K x NR
    const float* panel(int64_t p) const { return data.get() + p * K * NR; }
};

// B is K x N row-major (ldb = row stride) or, with trans_b, N x K row-major.
PackedB pack_b(const float* B, int64_t K, int64_t N, int64_t ldb, bool trans_b, Isa isa);

using SgemmFn = void (*)(int64_t M, const float* A, int64_t lda, const PackedB& B, const float* bias,
                         float* C, int64_t ldc, Act act);
// The microkernel driver for an ISA (no allocation; safe to call from Plan::run).
SgemmFn sgemm_for(Isa isa);

// Plain triple loop over unpacked B (the oracle in tests).
void sgemm_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                     bool trans_b, const float* bias, float* C, int64_t ldc, Act act);

// Packs B into `dst` (pack_b's layout: packed_floats(K, N, isa) floats, 64-byte aligned) without
// allocating, e.g. a non-constant B into a kernel's scratch at run time. `into` must have been
// made by packed_view(K, N, isa, dst).
int64_t packed_floats(int64_t K, int64_t N, Isa isa);
PackedB packed_view(int64_t K, int64_t N, Isa isa, float* dst);  // non-owning
void pack_b_into(const float* B, int64_t ldb, bool trans_b, const PackedB& into);
// pack_b_into for NR = 32 (AVX-512): rows copied with masked vector loads; a transposed B in
// 16 x 16 blocks transposed in registers (attention's K^T and V heads, packed per run).
void pack_b32_avx512(const float* B, int64_t ldb, bool trans_b, const PackedB& into);  // x86-64 only

// ---- M = 1 (GEMV): y[N] = act(a[K] . B + bias). B is stored as column panels of
// kGemvPanel = 128 columns (the last one ldb - n0 wide, ldb = N rounded up to 16, zero-filled),
// each a contiguous K x width row-major block: a kernel working on a column block streams one
// contiguous stretch of memory front to back (no 4 KiB row stride that defeats the hardware
// prefetchers once B spills out of L2), with several independent accumulators per column block;
// the full Activation is applied on the registers. Every ISA's column block (AVX-512 128, AVX2
// 64, NEON 32, scalar 64) divides the panel width, so one packing serves every ISA.
constexpr int64_t kGemvPanel = 128;
// A GEMV split across threads (repack_gemv_split) uses narrower panels, one per thread-split unit
// (sgemv_split_unit: 4 vectors), so every thread's columns are one contiguous stretch; its last
// panel starts at the tail block (sgemv_main_cols) and holds the whole tail.
// Serpentine order (docs/gemv.md): weights from kGemvSerpentineMin to kGemvSerpentineMax bytes
// (about L2's size to a few times it; per thread when split) sum K in up to kGemvMaxSegs segments
// of seg_rows rows, and the caller alternates `backward` run after run so that each run begins
// with what the last one read last (still in L2). Smaller weights stay in L2 anyway (a 528 KiB
// share ran 1.09x slower with it) and larger ones evict it whatever the order.
constexpr int64_t kGemvSerpentineMin = 768 << 10, kGemvSerpentineMax = 3 << 20;
constexpr int kGemvMaxSegs = 8, kGemvMaxBlocks = 64;
struct PackedGemv {
    int64_t K = 0, N = 0, ldb = 0;
    int64_t seg_rows = 0;        // > 0: K summed in segments of this many rows (the serpentine order)
    bool alternate = false;      // the caller alternates `backward` (off where a thread's share fits L2)
    int64_t panel = kGemvPanel;  // width of every panel but the last
    int64_t last0 = 0;           // first column of the last panel (width ldb - last0)
    std::shared_ptr<float> data;
    // 24-bit weights (gemv_set_w24, docs/gemv.md): every float of `data` rounded to 16 significant
    // bits and kept as its top three bytes, in data's order (K * ldb of them, then 64 bytes of
    // padding: a 16-weight group is one 64-byte load of which 48 bytes are the group's). Read
    // instead of `data` where use24: 3/4 of the bytes streamed per run.
    std::shared_ptr<unsigned char> w24;
    bool use24 = false;
    // 20-bit block weights (gemv_set_i20, docs/gemv.md): per column and block of kGemvI20Rows rows
    // a float scale s (s20 holds s * 2^-12, in the panels' layout with ceil(K / kGemvI20Rows)
    // rows), each weight an integer q of 20 bits, |q| <= 2^19 - 1, q * s within s / 2 of it; 16
    // weights (one group, in data's order) in 40 bytes (q20, then 64 bytes of padding). Read
    // instead of `data` where use20: 0.64 of the bytes streamed per run.
    std::shared_ptr<unsigned char> q20;
    std::shared_ptr<float> s20;
    bool use20 = false;
    // Column n0's first row and the row stride of the panel that holds it.
    int64_t stride(int64_t n0) const { return n0 >= last0 ? ldb - last0 : panel; }
    const float* col(int64_t n0) const {
        const int64_t p0 = n0 >= last0 ? last0 : n0 / panel * panel;
        return data.get() + p0 * K + (n0 - p0);
    }
    // col(n0) in the 24-bit copy (3 bytes a weight; a row stride is 3 * stride(n0) bytes).
    const unsigned char* col24(int64_t n0) const { return w24.get() + 3 * (col(n0) - data.get()); }
    // col(n0) in q20 (a row stride is 5 * stride(n0) / 2 bytes) and in s20 (row stride stride(n0)).
    const unsigned char* col20(int64_t n0) const { return q20.get() + 40 * ((col(n0) - data.get()) / 16); }
    const float* scale20(int64_t n0) const;
};
constexpr int64_t kGemvI20Rows = 64;
// The 24-bit weights: w rounded to nearest even at 16 significant bits (|error| <= 2^-16 |w|;
// a finite w whose rounding would overflow is truncated instead; NaN stays NaN), as the top 24
// bits of a float (the low byte zero); gemv_w24_value is the float those bits make.
uint32_t gemv_w24_bits(float w);
float gemv_w24_value(float w);
// Whether the 24-bit GEMV runs on `isa` here: AVX-512 with VBMI (one byte permute widens 16
// weights), and JIFFY_GEMV_W24 is not 0.
bool gemv_w24_supported(Isa isa);
// Turns the 24-bit weights on (building B->w24 from B->data the first time) or off. False, B
// unchanged, where gemv_w24_supported(isa) is not. Compile time only.
bool gemv_set_w24(PackedGemv* B, Isa isa, bool on);
// The 20-bit block weights: AVX-512 with VBMI (a byte permute and a bit-field shift per 16
// weights), and neither JIFFY_GEMV_W24 nor JIFFY_GEMV_I20 is 0. gemv_set_i20 as gemv_set_w24
// (false too where a weight is not finite).
bool gemv_i20_supported(Isa isa);
bool gemv_set_i20(PackedGemv* B, Isa isa, bool on);
// A GEMV's less exact weights where its bytes matter (docs/gemv.md): on Intel's cores the 20-bit
// blocks (offered there only for weights that come from L3, where they beat 24-bit ones: 4 MB
// in 74.5 against 102.5 us), elsewhere the 24-bit weights (the 20-bit decode's five vector
// instructions per 16 weights would bound a Zen 4 core, whose L3 is ~3x faster). gemv_set_fast
// turns that mode on or off; false where this ISA has none.
bool gemv_set_fast(PackedGemv* B, Isa isa, bool on);
// B is K x N row-major (ldb = row stride) or, with trans_b, N x K row-major; scaled by `scale`.
PackedGemv pack_b_gemv(const float* B, int64_t K, int64_t N, int64_t ldb, bool trans_b, float scale = 1.0f);
// backward: the serpentine order's direction (ignored unless B.seg_rows > 0; the same bits either way).
using SgemvFn = void (*)(const float* a, const PackedGemv& B, const float* bias, float* y, const Activation& act,
                         bool backward);
SgemvFn sgemv_for(Isa isa);
// The same weights in the split layout for `isa` (narrow panels, see PackedGemv); the sums and
// their order per column are unchanged.
PackedGemv repack_gemv_split(const PackedGemv& src, Isa isa);
void sgemv_scalar(const float*, const PackedGemv&, const float*, float*, const Activation&, bool);
void sgemv_avx2(const float*, const PackedGemv&, const float*, float*, const Activation&, bool);
void sgemv_avx512(const float*, const PackedGemv&, const float*, float*, const Activation&, bool);
void sgemv_neon(const float*, const PackedGemv&, const float*, float*, const Activation&, bool);  // aarch64 only

// Columns [c0, c1) of the same product (y, bias indexed by absolute column): a thread's share of
// a split GEMV. c0 must be a multiple of sgemv_split_unit(isa); c1 one too or N, and no c1 may
// fall inside the last partial 8-vector block (c1 <= N rounded down to sgemv_main_cols's block).
// Every column sums in the same order as in the whole call, so a split result is bitwise equal.
using SgemvColsFn = void (*)(const float* a, const PackedGemv& B, int64_t c0, int64_t c1, const float* bias,
                             float* y, const Activation& act, bool backward);
SgemvColsFn sgemv_cols_for(Isa isa);
int64_t sgemv_split_unit(Isa isa);                 // 4 vectors: 64 (AVX-512), 32 (AVX2), 16 (NEON/scalar)
int64_t sgemv_main_cols(Isa isa, int64_t N);       // N rounded down to 8 vectors (the tail is one block)
void sgemv_cols_scalar(const float*, const PackedGemv&, int64_t, int64_t, const float*, float*, const Activation&, bool);
void sgemv_cols_avx2(const float*, const PackedGemv&, int64_t, int64_t, const float*, float*, const Activation&, bool);
void sgemv_cols_avx512(const float*, const PackedGemv&, int64_t, int64_t, const float*, float*, const Activation&, bool);
void sgemv_cols_neon(const float*, const PackedGemv&, int64_t, int64_t, const float*, float*,
                     const Activation&, bool);  // aarch64 only

}  // namespace jiffy::kernels
