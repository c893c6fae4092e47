// Packed-B SGEMM microkernels on every ISA this CPU has, against the plain reference, on sizes
// below, at and above the tiles (MR 8/4, NR 32/16), with bias, ReLU and strided rows (NEON too
// when built for aarch64: scripts/test_arm.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/gemm.h"
#include "isa_util.h"

using namespace jiffy::kernels;
using namespace jiffy::testisa;

namespace {

TEST(Gemm, MatchesReferenceOnOddSizesEveryIsa) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    const int64_t sizes[][3] = {{1, 1, 1},   {1, 10, 64},  {1, 128, 96}, {3, 17, 5},  {8, 32, 16},
                                {9, 33, 17}, {7, 31, 255}, {16, 64, 63}, {13, 100, 1}, {2, 1024, 256}};
    for (Isa isa : isas()) {
        SgemmFn fn = sgemm_for(isa);
        for (const auto& s : sizes) {
            int64_t M = s[0], N = s[1], K = s[2];
            for (bool trans : {false, true})
                for (Act act : {Act::kNone, Act::kRelu}) {
                    int64_t lda = K + 3, ldc = N + 5;
                    std::vector<float> A(static_cast<size_t>(M * lda)), B(static_cast<size_t>(K * N)), bias(static_cast<size_t>(N));
                    for (auto* v : {&A, &B, &bias})
                        for (float& x : *v) x = u(rng);
                    std::vector<float> want(size_t(M * ldc), 7.0f), got(size_t(M * ldc), 7.0f);
                    int64_t ldb = trans ? K : N;
                    sgemm_reference(M, N, K, A.data(), lda, B.data(), ldb, trans, bias.data(), want.data(), ldc, act);
                    PackedB pb = pack_b(B.data(), K, N, ldb, trans, isa);
                    fn(M, A.data(), lda, pb, bias.data(), got.data(), ldc, act);
                    for (int64_t i = 0; i < M * ldc; ++i)
                        ASSERT_NEAR(got[size_t(i)], want[size_t(i)], 1e-4f * (1 + std::sqrt(float(K))))
                            << isa_name(isa) << " M" << M << " N" << N << " K" << K << " trans " << trans
                            << " at " << i;  // padding columns (7.0) must stay untouched too
                }
        }
    }
}

// A transposed B (N x K rows, ldb >= K) packs to exactly the panels of the same matrix given
// K x N: the AVX-512 16 x 16 register transpose (NR = 32) and the portable loop, on sizes below,
// at and above the 16 x 16 blocks and the 32-column panels, with zero padding past N.
TEST(Gemm, TransposedPackingEqualsPlainPacking) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1, 1);
    const int64_t sizes[][2] = {{1, 1}, {1, 40}, {15, 16}, {16, 16}, {17, 33}, {32, 32}, {33, 31}, {64, 65}, {100, 7}};
    for (Isa isa : isas())
        for (const auto& s : sizes) {
            const int64_t K = s[0], N = s[1], ldt = K + 3;
            std::vector<float> Bt(size_t(N * ldt)), B(size_t(K * N));
            for (int64_t n = 0; n < N; ++n)
                for (int64_t k = 0; k < ldt; ++k) {
                    Bt[size_t(n * ldt + k)] = u(rng);
                    if (k < K) B[size_t(k * N + n)] = Bt[size_t(n * ldt + k)];
                }
            const int64_t nf = packed_floats(K, N, isa);
            std::vector<float> buf_t(size_t(nf + 16), NAN), buf_p(size_t(nf + 16), NAN);
            auto align = [](float* p) { return p + (16 - (reinterpret_cast<uintptr_t>(p) / sizeof(float)) % 16) % 16; };
            PackedB pt = packed_view(K, N, isa, align(buf_t.data())), pp = packed_view(K, N, isa, align(buf_p.data()));
            pack_b_into(Bt.data(), ldt, true, pt);
            pack_b_into(B.data(), N, false, pp);
            const int64_t used = (N + pt.NR - 1) / pt.NR * K * pt.NR;
            for (int64_t i = 0; i < used; ++i)
                ASSERT_EQ(pt.data.get()[i], pp.data.get()[i]) << isa_name(isa) << " K" << K << " N" << N << " at " << i;
        }
}

TEST(Gemm, NoBias) {
    float A[2] = {1, 2}, B[2] = {3, 4}, C[1] = {0};
    for (Isa isa : isas()) {
        PackedB pb = pack_b(B, 2, 1, 1, false, isa);
        sgemm_for(isa)(1, A, 2, pb, nullptr, C, 1, Act::kNone);
        EXPECT_FLOAT_EQ(C[0], 11) << isa_name(isa);
    }
}

}  // namespace
