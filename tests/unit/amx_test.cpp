// The AMX matrix product (kernels/amx.h), where this CPU and OS have AMX (skipped elsewhere):
// BF16x2 and BF16x3 against a double reference on odd sizes (every edge of the 16 x 16 tiles
// and the 32-wide K blocks), row strides, bias, infinities and NaN; and MatMul's choice of it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/amx.h"
#include "kernels/weight_alloc.h"
#include "one_node.h"
#include "attr_util.h"

using namespace jiffy;
using namespace jiffy::kernels;
using namespace jiffy::testnode;
using namespace jiffy::testattr;

namespace {

struct Err {
    double worst = 0;  // max |got - want| / sum_k |a b|
    bool ran = false;  // run() computed C (false: an input the parts cannot carry)
};

// C = A . B (+ bias) by AmxGemm with `parts`; compares every element with the double product,
// error relative to sum_k |a_k b_k| (the scale of the rounding in any order of the sums).
Err check(int64_t M, int64_t K, int64_t N, int parts, bool trans_b, bool with_bias, uint32_t seed,
          std::vector<float>* a_override = nullptr) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int64_t lda = K + 3, ldc = N + 5, ldb = (trans_b ? K : N) + 2;
    std::vector<float> A(size_t(M * lda)), B(size_t((trans_b ? N : K) * ldb)), bias(static_cast<size_t>(N));
    for (float& v : A) v = u(rng) * std::exp2(float(int(rng() % 9) - 4));
    for (float& v : B) v = u(rng);
    for (float& v : bias) v = u(rng);
    if (a_override) A = *a_override;
    AmxGemm g(M, K, N, parts);
    EXPECT_EQ(g.parts(), parts);
    auto wp = alloc_weights((g.packed_b_halves() + 1) / 2);
    EXPECT_TRUE(g.pack_b(B.data(), ldb, trans_b, reinterpret_cast<uint16_t*>(wp.get())));
    std::vector<float> scratch(g.scratch_floats()), C(size_t(M * ldc), 7.0f);
    Err e;
    e.ran = g.run(A.data(), lda, reinterpret_cast<const uint16_t*>(wp.get()), with_bias ? bias.data() : nullptr,
                  C.data(), ldc, scratch.data());
    if (!e.ran) {
        for (float v : C) EXPECT_EQ(v, 7.0f) << "a refused run wrote C";
        return e;
    }
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
            double want = with_bias ? bias[size_t(n)] : 0.0, scale = std::abs(want);
            for (int64_t k = 0; k < K; ++k) {
                const double b = trans_b ? B[size_t(n * ldb + k)] : B[size_t(k * ldb + n)];
                want += double(A[size_t(m * lda + k)]) * b;
                scale += std::abs(double(A[size_t(m * lda + k)]) * b);
            }
            const double got = C[size_t(m * ldc + n)];
            if (std::isnan(want) || std::isinf(want)) {
                EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : got == want)
                    << "m " << m << " n " << n << " got " << got << " want " << want;
                continue;
            }
            if (scale > 0) e.worst = std::max(e.worst, std::abs(got - want) / scale);
            else EXPECT_EQ(got, 0.0) << "m " << m << " n " << n;
        }
        for (int64_t n = N; n < ldc; ++n) EXPECT_EQ(C[size_t(m * ldc + n)], 7.0f) << "wrote past N in row " << m;
    }
    return e;
}

bool have_amx() { return amx_usable(); }

}  // namespace

TEST(Amx, GemmMatchesDoubleOnOddSizes) {
    if (!have_amx()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    const int64_t Ms[] = {1, 15, 16, 17, 33, 64, 70};
    const int64_t Ks[] = {1, 31, 32, 33, 100, 257};
    const int64_t Ns[] = {1, 16, 17, 31, 33, 100};
    uint32_t seed = 1;
    double worst2 = 0, worst3 = 0;
    for (int64_t M : Ms)
        for (int64_t K : Ks)
            for (int64_t N : Ns) {
                const bool tb = seed % 2 == 0, bias = seed % 3 != 0;
                const std::string what = "M" + std::to_string(M) + " K" + std::to_string(K) + " N" + std::to_string(N);
                const Err e2 = check(M, K, N, 2, tb, bias, seed), e3 = check(M, K, N, 3, tb, bias, seed);
                ++seed;
                EXPECT_TRUE(e2.ran && e3.ran) << what;
                // BF16x2: each operand within 2^-17 of its two parts, mid.mid dropped: <= ~2^-15
                // per product, plus FP32's rounding of the sums. BF16x3: FP32's own.
                EXPECT_LT(e2.worst, 4e-5) << what;
                EXPECT_LT(e3.worst, 1e-6) << what;
                worst2 = std::max(worst2, e2.worst);
                worst3 = std::max(worst3, e3.worst);
                if (HasFailure()) return;
            }
    // The parts are all used: BF16 alone (one part) would be ~2^-9 off.
    EXPECT_GT(worst2, 1e-8);
    std::printf("worst error / sum|ab|: BF16x2 %.3g, BF16x3 %.3g\n", worst2, worst3);
}

TEST(Amx, GemmRefusesWhatThePartsCannotCarry) {
    if (!have_amx()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    const int64_t M = 20, K = 40, N = 33, lda = K + 3;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const float bad[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN(), 3.4e38f};
    for (int parts : {2, 3}) {
        // Large and tiny finite values are carried.
        std::vector<float> A(size_t(M * lda));
        for (float& v : A) v = u(rng);
        A[size_t(9 * lda + 10)] = 1e30f;
        A[size_t(9 * lda + 11)] = 1e-30f;
        A[size_t(12 * lda + 2)] = 0.0f;
        A[size_t(3 * lda + 5)] = 3.0e38f;
        const Err ok = check(M, K, N, parts, false, true, 5, &A);
        EXPECT_TRUE(ok.ran);
        EXPECT_LT(ok.worst, parts == 2 ? 4e-5 : 1e-6) << parts;
        // A value the parts cannot carry anywhere in A (first, last, a tail lane): refused.
        for (float b : bad)
            for (int64_t at : {int64_t(0), 19 * lda + 39, 7 * lda + 33}) {
                std::vector<float> A2 = A;
                A2[size_t(at)] = b;
                EXPECT_FALSE(check(M, K, N, parts, false, true, 5, &A2).ran) << b << " at " << at;
            }
        // And in B: pack_b says so.
        AmxGemm g(M, K, N, parts);
        std::vector<float> B(size_t(K * N), 0.5f), packed(g.packed_b_halves() / 2 + 1);
        EXPECT_TRUE(g.pack_b(B.data(), N, false, reinterpret_cast<uint16_t*>(packed.data())));
        for (float b : bad) {
            B[size_t(7 * N + 32)] = b;
            EXPECT_FALSE(g.pack_b(B.data(), N, false, reinterpret_cast<uint16_t*>(packed.data()))) << b;
        }
    }
}

// MatMul with constant weights on a tall product runs on AMX (with the fused bias and activation
// after it), an input AMX's parts cannot carry falls back to the AVX-512 kernel for that run, and
// the results match the double product either way.
TEST(Amx, MatMulRunsOnAmxAndFallsBack) {
    if (!have_amx()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    const int64_t R = 3, T = 20, K = 70, N = 45;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> a(size_t(R * T * K)), b(size_t(K * N)), bias(static_cast<size_t>(N));
    for (float& v : a) v = u(rng);
    for (float& v : b) v = u(rng);
    for (float& v : bias) v = u(rng);
    std::map<std::string, Attr> at;
    at["_fused_bias"] = ai(1);
    at["_fused_act"] = as("Tanh");
    for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) a[size_t(2 * K + 5)] = std::numeric_limits<float>::infinity();  // row 2
        const NodeRun r = run_one_node("MatMul", {NodeIn{f32({R, T, K}, a)}, NodeIn{f32({K, N}, b), true},
                                                  NodeIn{f32({N}, bias), true}},
                                       at, 17, {true}, 2);
        ASSERT_TRUE(r.st.ok()) << r.st.message();
        EXPECT_NE(r.kernel.find("amx_bf16"), std::string::npos) << r.kernel;
        const float* y = r.outs[0].as<float>();
        for (int64_t m = 0; m < R * T; ++m)
            for (int64_t n = 0; n < N; ++n) {
                double s = bias[size_t(n)], scale = std::abs(s);
                for (int64_t k = 0; k < K; ++k) {
                    s += double(a[size_t(m * K + k)]) * b[size_t(k * N + n)];
                    scale += std::abs(double(a[size_t(m * K + k)]) * b[size_t(k * N + n)]);
                }
                const double want = std::tanh(s), got = y[m * N + n];
                if (!std::isfinite(s)) {  // the infinity's row: tanh(+-inf) exactly
                    EXPECT_EQ(got, want) << m << " " << n;
                    continue;
                }
                // tanh' <= 1: the product's error bound carries over.
                ASSERT_NEAR(got, want, 4e-5 * scale + 1e-6) << "pass " << pass << " m " << m << " n " << n;
            }
    }
}
