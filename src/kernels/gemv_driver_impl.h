// (No include guard: each per-ISA file includes it once, inside its anonymous namespace.)
// The GEMV driver shared by the per-ISA gemm files (x86/gemm_avx2.cpp, x86/gemm_avx512.cpp,
// arm/gemm_neon.cpp): full blocks of 8 vectors over the packed column panels, then one narrower
// block for the tail. Include it inside the file's anonymous namespace after its
//   template <int V, int U> void gemv_block(K, a, b, ldb, bias, y, nvalid, act)
// (V vectors of columns, U-way unrolled K loop) and these constants:
//   kGemvVL          floats per vector,
//   kGemvMainU       U of the full 8-vector blocks,
//   kGemvTailU[7]    U of a tail of 1..7 vectors.

// KIND >= 0: the activation kind is a compile-time constant (folds the epilogue's switch).
template <int KIND>
void sgemv_k(const float* a, const PackedGemv& B, const float* bias, float* y, const Activation& act0) {
    Activation act = act0;
    if constexpr (KIND >= 0) act.kind = ActKind(KIND);
    constexpr int64_t kBlock = 8 * kGemvVL;
    const int64_t K = B.K, N = B.N;
    int64_t n0 = 0;
    for (; n0 + kBlock <= N; n0 += kBlock)
        gemv_block<8, kGemvMainU>(K, a, B.col(n0), B.stride(n0), bias ? bias + n0 : nullptr, y + n0, kBlock, act);
    if (n0 >= N) return;
    const float* bb = bias ? bias + n0 : nullptr;
    const int64_t nv = N - n0;
    const float* b = B.col(n0);
    const int64_t ldb = B.stride(n0);
    switch ((nv + kGemvVL - 1) / kGemvVL) {
        case 1: gemv_block<1, kGemvTailU[0]>(K, a, b, ldb, bb, y + n0, nv, act); break;
        case 2: gemv_block<2, kGemvTailU[1]>(K, a, b, ldb, bb, y + n0, nv, act); break;
        case 3: gemv_block<3, kGemvTailU[2]>(K, a, b, ldb, bb, y + n0, nv, act); break;
        case 4: gemv_block<4, kGemvTailU[3]>(K, a, b, ldb, bb, y + n0, nv, act); break;
        case 5: gemv_block<5, kGemvTailU[4]>(K, a, b, ldb, bb, y + n0, nv, act); break;
        case 6: gemv_block<6, kGemvTailU[5]>(K, a, b, ldb, bb, y + n0, nv, act); break;
        default: gemv_block<7, kGemvTailU[6]>(K, a, b, ldb, bb, y + n0, nv, act); break;
    }
}

// The ISA's sgemv entry: Relu and no activation get their own instantiation.
inline void sgemv_run(const float* a, const PackedGemv& B, const float* bias, float* y, const Activation& act) {
    switch (act.kind) {
        case ActKind::kNone: return sgemv_k<int(ActKind::kNone)>(a, B, bias, y, act);
        case ActKind::kRelu: return sgemv_k<int(ActKind::kRelu)>(a, B, bias, y, act);
        default: return sgemv_k<-1>(a, B, bias, y, act);
    }
}
