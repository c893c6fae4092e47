// (No include guard: each per-ISA file includes it once, inside its anonymous namespace.)
// The GEMV driver shared by the per-ISA gemm files (x86/gemm_avx2.cpp, x86/gemm_avx512.cpp,
// arm/gemm_neon.cpp): full blocks of 8 vectors over the packed column panels, then one narrower
// block for the tail. Include it inside the file's anonymous namespace after its
//   template <int V, int U> void gemv_block(K, a, b, ldb, bias, y, nvalid, act)
// (V vectors of columns, U-way unrolled K loop) and these constants:
//   kGemvVL          floats per vector,
//   kGemvMainU       U of the full 8-vector blocks,
//   kGemvTailU[7]    U of a tail of 1..7 vectors.
//
// Columns [c0, c1) only (a thread's share, docs/threading.md): c0 is a multiple of 4 vectors and
// c1 is one too or N. Columns below N rounded down to 8 vectors ("main" columns) run in blocks of
// 8 vectors, or 4 where c0 or c1 falls between two 8-vector blocks, all with kGemvMainU: a column's
// accumulators do not depend on its neighbours, so every column sums in the same order whatever
// the range (a split GEMV is bitwise equal to the whole one). The tail past the main columns runs
// as one block, as in the unsplit call, and belongs to the range that ends at N. In the split
// layout (B.panel = 4 vectors, PackedGemv) the main columns run in blocks of 4 vectors only.

// Optionally (AVX-512): `#define JIFFY_GEMV_W24 1` and
//   template <int V, int U> void gemv_block24(K, a, const unsigned char* b, ldb, bias, y, nvalid, act)
// (the block on B.w24, rows 3 * ldb bytes apart), which runs where B.use24, and
//   template <int V, int U> void gemv_block20(n, a, q, ldq, sc, lds, k0, bias, y, nvalid, act)
// (rows [k0, k0 + n) of the block on B.q20 / B.s20), which runs where B.use20.

// The weights a GEMV reads: B.data, B.w24 or B.q20 / B.s20.
enum GemvFmt { kFmtF32 = 0, kFmtW24 = 1, kFmtI20 = 2 };

// Rows [k0, k0 + n) of the column block at n0: gemv_block on B's floats, or on its 24- / 20-bit
// weights.
template <int V, int U, int FMT>
inline void gemv_rows(int64_t n, const float* a, const PackedGemv& B, int64_t n0, int64_t k0, const float* bias,
                      float* y, int64_t nvalid, const Activation& act) {
    const int64_t ldb = B.stride(n0);
#ifdef JIFFY_GEMV_W24
    if constexpr (FMT == kFmtW24)
        return gemv_block24<V, U>(n, a, B.col24(n0) + 3 * k0 * ldb, ldb, bias, y, nvalid, act);
    if constexpr (FMT == kFmtI20)
        return gemv_block20<V, U>(n, a, B.col20(n0), 5 * ldb / 2, B.scale20(n0), ldb, k0, bias, y, nvalid, act);
#endif
    gemv_block<V, U>(n, a, B.col(n0) + k0 * ldb, ldb, bias, y, nvalid, act);
}

// Serpentine order (B.seg_rows > 0, weights of L2 size or a few times it, docs/gemv.md): K in
// segments of seg_rows; a block's sum is the sum of its segments' partial sums, added in segment
// order whatever order they were computed in. `backward` visits the blocks and each block's
// segments last to first: run after run in alternating directions, each run starts on the weights
// the previous one read last, which are still in L2. Both directions give the same bits.
template <int V, int U, int FMT>
void gemv_block_seg(const float* a, const PackedGemv& B, int64_t n0, const float* bias, float* y, int64_t nvalid,
                    const Activation& act, bool backward) {
    constexpr int64_t W = V * kGemvVL;
    const int64_t K = B.K, L = B.seg_rows, S = (K + L - 1) / L;
    alignas(64) float part[kGemvMaxSegs][W];
    const Activation none{};
    for (int64_t i = 0; i < S; ++i) {
        const int64_t s = backward ? S - 1 - i : i, k0 = s * L, k1 = std::min(K, k0 + L);
        // Every lane (the panel is zero-filled past N): the sums below read all W.
        gemv_rows<V, U, FMT>(k1 - k0, a + k0, B, n0, k0, nullptr, part[s], W, none);
    }
    for (int64_t s = 1; s < S; ++s)
        for (int64_t j = 0; j < W; ++j) part[0][j] += part[s][j];
    // Bias, activation and the (masked) store: the block epilogue on 1 x part[0] (exact).
    const float one = 1.0f;
    gemv_block<V, 1>(1, &one, part[0], W, bias, y, nvalid, act);
}

// The blocks of columns [c0, c1), first to last: f(n0, kind) with kind 8 (a main block of 8
// vectors), 4 (a main block of 4) or 0 (the tail block from n0 to N; see the top of this file).
template <typename F>
void gemv_blocks(const PackedGemv& B, int64_t c0, int64_t c1, F&& f) {
    constexpr int64_t kBlock = 8 * kGemvVL, kHalf = 4 * kGemvVL;
    const int64_t N = B.N;
    const int64_t main_end = std::min(c1, N / kBlock * kBlock);
    int64_t n0 = c0;
    if (B.panel < kBlock)  // the split layout: panels of 4 vectors
        for (; n0 + kHalf <= main_end; n0 += kHalf) f(n0, 4);
    if (n0 % kBlock != 0 && n0 + kHalf <= main_end) f(n0, 4), n0 += kHalf;
    for (; n0 + kBlock <= main_end; n0 += kBlock) f(n0, 8);
    if (n0 + kHalf <= main_end) f(n0, 4), n0 += kHalf;
    if (n0 < c1 && c1 == N) f(n0, 0);
}

// Columns [c0, c1) block by block. KIND >= 0: the activation kind is a compile-time constant
// (folds the epilogue's switch). SEG: the serpentine order (B.seg_rows > 0), whose blocks run last
// to first when `backward` (up to kGemvMaxBlocks of them; more run first to last, their segments
// still backward).
template <bool SEG, int KIND, int FMT>
void sgemv_k(const float* a, const PackedGemv& B, int64_t c0, int64_t c1, const float* bias, float* y,
             const Activation& act0, bool backward) {
    Activation act = act0;
    if constexpr (KIND >= 0) act.kind = ActKind(KIND);
    const int64_t K = B.K, N = B.N;
    auto run = [&](int64_t n0, int kind) {
        const float* bb = bias ? bias + n0 : nullptr;
        auto block = [&](auto v, auto u, int64_t nv) {
            constexpr int V = decltype(v)::value, U = decltype(u)::value;
            if constexpr (SEG) gemv_block_seg<V, U, FMT>(a, B, n0, bb, y + n0, nv, act, backward);
            else gemv_rows<V, U, FMT>(K, a, B, n0, 0, bb, y + n0, nv, act);
        };
        using std::integral_constant;
        using Main = integral_constant<int, kGemvMainU>;
        if (kind == 8) return block(integral_constant<int, 8>{}, Main{}, 8 * kGemvVL);
        if (kind == 4) return block(integral_constant<int, 4>{}, Main{}, 4 * kGemvVL);
        const int64_t nv = N - n0;
        switch ((nv + kGemvVL - 1) / kGemvVL) {
            case 1: return block(integral_constant<int, 1>{}, integral_constant<int, kGemvTailU[0]>{}, nv);
            case 2: return block(integral_constant<int, 2>{}, integral_constant<int, kGemvTailU[1]>{}, nv);
            case 3: return block(integral_constant<int, 3>{}, integral_constant<int, kGemvTailU[2]>{}, nv);
            case 4: return block(integral_constant<int, 4>{}, integral_constant<int, kGemvTailU[3]>{}, nv);
            case 5: return block(integral_constant<int, 5>{}, integral_constant<int, kGemvTailU[4]>{}, nv);
            case 6: return block(integral_constant<int, 6>{}, integral_constant<int, kGemvTailU[5]>{}, nv);
            case 7: return block(integral_constant<int, 7>{}, integral_constant<int, kGemvTailU[6]>{}, nv);
            // 7 vectors plus a partial one (N % (8 vectors) > 7 vectors, e.g. 120 columns on
            // AVX-512): the main block's shape, masked.
            default: return block(integral_constant<int, 8>{}, Main{}, nv);
        }
    };
    if (!SEG || !backward) return gemv_blocks(B, c0, c1, run);
    int64_t n0s[kGemvMaxBlocks];
    int kinds[kGemvMaxBlocks], n = 0;
    bool fits = true;
    gemv_blocks(B, c0, c1, [&](int64_t n0, int kind) {
        if (n < kGemvMaxBlocks) n0s[n] = n0, kinds[n] = kind, ++n;
        else fits = false;
    });
    if (!fits) return gemv_blocks(B, c0, c1, run);
    for (int i = n - 1; i >= 0; --i) run(n0s[i], kinds[i]);
}

// The ISA's sgemv entry over columns [c0, c1): Relu and no activation get their own instantiation.
// `backward` matters only to the serpentine order (B.seg_rows > 0). B.use24 / B.use20: the 24- or
// 20-bit weights (set only where gemv_w24_supported, i.e. where this ISA has their blocks).
inline void sgemv_cols_run(const float* a, const PackedGemv& B, int64_t c0, int64_t c1, const float* bias, float* y,
                           const Activation& act, bool backward) {
    auto go = [&](auto seg, auto fmt) {
        constexpr bool SEG = decltype(seg)::value;
        constexpr int FMT = decltype(fmt)::value;
        switch (act.kind) {
            case ActKind::kNone: return sgemv_k<SEG, int(ActKind::kNone), FMT>(a, B, c0, c1, bias, y, act, backward);
            case ActKind::kRelu: return sgemv_k<SEG, int(ActKind::kRelu), FMT>(a, B, c0, c1, bias, y, act, backward);
            default: return sgemv_k<SEG, -1, FMT>(a, B, c0, c1, bias, y, act, backward);
        }
    };
    using F32 = std::integral_constant<int, kFmtF32>;
#ifdef JIFFY_GEMV_W24
    using W24 = std::integral_constant<int, kFmtW24>;
    using I20 = std::integral_constant<int, kFmtI20>;
    if (B.use20) {
        if (B.seg_rows > 0) return go(std::true_type{}, I20{});
        return go(std::false_type{}, I20{});
    }
    if (B.use24) {
        if (B.seg_rows > 0) return go(std::true_type{}, W24{});
        return go(std::false_type{}, W24{});
    }
#endif
    if (B.seg_rows > 0) return go(std::true_type{}, F32{});
    go(std::false_type{}, F32{});
}
