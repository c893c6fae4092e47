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
#include "conv_ref.h"
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
          std::vector<float>* a_override = nullptr, bool b_lo = true) {
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
    g.set_b_lo(b_lo);
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

// sum_c |x[c][p] w[m][c]| + |b[m]| (+ |r[m][p]|) of a 1x1 conv (x, r: [C or M][P]): the scale of
// the products' rounding, as in check().
std::vector<double> scale_1x1(const Conv2DGeom& g, const std::vector<float>& x, const std::vector<float>& w,
                              const std::vector<float>& b, const float* r = nullptr) {
    const int64_t P = g.OH * g.OW;
    std::vector<double> s(size_t(g.M * P));
    for (int64_t m = 0; m < g.M; ++m)
        for (int64_t p = 0; p < P; ++p) {
            double v = std::abs(double(b[size_t(m)])) + (r ? std::abs(double(r[m * P + p])) : 0.0);
            for (int64_t c = 0; c < g.C; ++c) v += std::abs(double(x[size_t(c * P + p)]) * w[size_t(m * g.C + c)]);
            s[size_t(m * P + p)] = v;
        }
    return s;
}

// The tolerance of an AMX conv's output v of products' scale sc: the weights to 17 bits (the
// compile's probe chose them: "w17" in the kernel) are within ~2^-16 of sc per output
// (Amx.GemmWeightsTo17Bits), BF16x3 FP32's own.
double conv_tol(const std::string& kernel, double v, double sc) {
    return kernel.find("w17") != std::string::npos ? 2e-5 * sc + 1e-6 : 1e-5 * (1 + std::abs(v));
}

}  // namespace

TEST(Amx, GemmMatchesDoubleOnOddSizes) {
    if (!have_amx()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    const int64_t Ms[] = {1, 15, 16, 17, 33, 64, 70, 100};
    const int64_t Ks[] = {1, 31, 32, 33, 100, 257};
    const int64_t Ns[] = {1, 16, 17, 31, 33, 100, 200};
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

// BF16x3 without B's lo parts (the weights to 17 bits: hi + mid within 2^-16 of each weight, A
// still exact in three parts): each product within ~2^-16 of exact, from the same packing as
// BF16x3 (which still reads its lo parts after a run without them).
TEST(Amx, GemmWeightsTo17Bits) {
    if (!have_amx()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    uint32_t seed = 500;
    double worst = 0;
    for (int64_t M : {int64_t(15), int64_t(33), int64_t(64), int64_t(100)})
        for (int64_t K : {int64_t(31), int64_t(100), int64_t(257)})
            for (int64_t N : {int64_t(17), int64_t(33), int64_t(100), int64_t(200)}) {
                const std::string what = "M" + std::to_string(M) + " K" + std::to_string(K) + " N" + std::to_string(N);
                const bool tb = seed % 2 == 0, bias = seed % 3 != 0;
                const Err e = check(M, K, N, 3, tb, bias, seed, nullptr, false);
                const Err e3 = check(M, K, N, 3, tb, bias, seed);
                ++seed;
                EXPECT_TRUE(e.ran && e3.ran) << what;
                EXPECT_LT(e.worst, 2e-5) << what;
                EXPECT_LT(e3.worst, 1e-6) << what;
                worst = std::max(worst, e.worst);
                if (HasFailure()) return;
            }
    // The lo parts are really left out: FP32's accuracy would be ~1e-7.
    EXPECT_GT(worst, 1e-6);
    std::printf("worst error / sum|ab| with the weights to 17 bits: %.3g\n", worst);
}

// A tall product whose split A passes 1 MiB runs in row chunks (each split while B's column
// blocks pass over it): the same accuracy, every row and column written.
TEST(Amx, TallGemmRunsInRowChunks) {
    if (!have_amx()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    const int64_t M = 600, K = 520, N = 70;
    const AmxGemm g(M, K, N, 3);
    EXPECT_LT(g.chunk_rows(), M);
    EXPECT_EQ(g.chunk_rows() % 32, 0);
    EXPECT_EQ(AmxGemm(64, K, N, 3).chunk_rows(), 64);  // small: split whole
    const Err e = check(M, K, N, 3, false, true, 77);
    EXPECT_TRUE(e.ran);
    EXPECT_LT(e.worst, 1e-6);
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
        // BF16x3 splits A by truncation, so A's largest finite values are carried there (hi
        // never rounds up to an infinity); BF16x2 rounds and refuses them.
        for (float b : bad)
            for (int64_t at : {int64_t(0), 19 * lda + 39, 7 * lda + 33}) {
                std::vector<float> A2 = A;
                A2[size_t(at)] = b;
                const Err e = check(M, K, N, parts, false, true, 5, &A2);
                if (parts == 3 && std::isfinite(b)) {
                    EXPECT_TRUE(e.ran) << b << " at " << at;
                    EXPECT_LT(e.worst, 1e-6) << b << " at " << at;
                } else {
                    EXPECT_FALSE(e.ran) << b << " at " << at;
                }
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

// A Gemm node (transB, alpha, beta): on AMX with a constant C as its bias and the fused Relu,
// and with a per-row C input added after the product (Sigmoid after it); an infinity in A runs
// the AVX-512 fallback.
TEST(Amx, GemmNodeRunsOnAmxAndFallsBack) {
    if (!have_amx()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    const int64_t M = 40, K = 70, N = 45;
    const float alpha = 0.5f, beta = 2.0f;
    std::mt19937 rng(12);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> a(size_t(M * K)), bt(size_t(N * K)), cvec(static_cast<size_t>(N)), cmat(size_t(M * N));
    for (float& v : a) v = u(rng);
    for (float& v : bt) v = u(rng);
    for (float& v : cvec) v = u(rng);
    for (float& v : cmat) v = u(rng);
    for (int general = 0; general < 2; ++general)
        for (int pass = 0; pass < 2; ++pass) {
            std::vector<float> ai_ = a;
            if (pass == 1) ai_[size_t(3 * K + 5)] = std::numeric_limits<float>::infinity();  // row 3
            std::map<std::string, Attr> at;
            at["transB"] = ai(1);
            at["alpha"] = af(alpha);
            at["beta"] = af(beta);
            at["_fused_act"] = as(general ? "Sigmoid" : "Relu");
            const NodeIn c = general ? NodeIn{f32({M, N}, cmat)} : NodeIn{f32({N}, cvec), true};
            const NodeRun r = run_one_node("Gemm", {NodeIn{f32({M, K}, ai_)}, NodeIn{f32({N, K}, bt), true}, c}, at, 17,
                                           {true}, 2);
            ASSERT_TRUE(r.st.ok()) << r.st.message();
            EXPECT_NE(r.kernel.find("amx_bf16"), std::string::npos) << r.kernel;
            const float* y = r.outs[0].as<float>();
            for (int64_t m = 0; m < M; ++m)
                for (int64_t n = 0; n < N; ++n) {
                    const double cv = general ? cmat[size_t(m * N + n)] : cvec[size_t(n)];
                    double s = 0.0, scale = std::abs(beta * cv);
                    for (int64_t k = 0; k < K; ++k) {
                        const double p = double(ai_[size_t(m * K + k)]) * bt[size_t(n * K + k)];
                        s += p;
                        scale += std::abs(alpha * p);
                    }
                    s = alpha * s + beta * cv;
                    const double want = general ? 1.0 / (1.0 + std::exp(-s)) : std::max(s, 0.0);
                    const double got = y[m * N + n];
                    if (!std::isfinite(s)) {  // the infinity's row
                        EXPECT_EQ(got, want) << m << " " << n;
                        continue;
                    }
                    ASSERT_NEAR(got, want, 4e-5 * scale + 1e-6)
                        << "general " << general << " pass " << pass << " m " << m << " n " << n;
                }
        }
}

// ---------------------------------------------------------------- AmxConv

namespace {

struct ConvCase {
    int64_t C, M, H, W, k, s, d, p;
};

// One image through AmxConv (whole, then split into pixel and channel ranges, which must give
// the same bits) against the double reference; errors relative to the conv of |w| and |x|.
void check_conv(const ConvCase& c, int parts, ConvAct act, bool with_res, uint32_t seed) {
    const Conv2DGeom g = jiffy::testisa::square_geom(c.C, c.M, c.H, c.W, c.k, c.s, c.d, c.p);
    const int64_t P = g.OH * g.OW, K = g.C * g.kh * g.kw;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(size_t(g.C * g.H * g.W)), w(size_t(g.M * K)), bias(static_cast<size_t>(g.M)), res(size_t(g.M * P));
    for (float& v : x) v = u(rng);
    for (float& v : w) v = u(rng);
    for (float& v : bias) v = u(rng);
    for (float& v : res) v = u(rng);
    ConvEpi e;
    e.act = act;
    AmxConv a(g, parts);
    auto wp = alloc_weights((a.packed_w_halves() + 1) / 2);
    ASSERT_TRUE(a.pack_w(w.data(), reinterpret_cast<uint16_t*>(wp.get())));
    const uint16_t* W16 = reinterpret_cast<const uint16_t*>(wp.get());
    std::vector<float> scratch(a.scratch_floats()), y(size_t(g.M * P), 9.0f);
    ASSERT_TRUE(a.run(x.data(), W16, bias.data(), with_res ? res.data() : nullptr, y.data(), scratch.data(), e));
    const std::vector<double> want = jiffy::testisa::conv_ref(g, x, w, bias.data(), with_res ? res.data() : nullptr, e);
    std::vector<float> ax(x.size()), aw(w.size()), ab(bias.size()), ar(res.size());
    for (size_t i = 0; i < x.size(); ++i) ax[i] = std::abs(x[i]);
    for (size_t i = 0; i < w.size(); ++i) aw[i] = std::abs(w[i]);
    for (size_t i = 0; i < bias.size(); ++i) ab[i] = std::abs(bias[i]);
    for (size_t i = 0; i < res.size(); ++i) ar[i] = std::abs(res[i]);
    const std::vector<double> scale = jiffy::testisa::conv_ref(g, ax, aw, ab.data(), with_res ? ar.data() : nullptr, ConvEpi{});
    const double tol = parts == 2 ? 4e-5 : 1e-6;
    const std::string what = "C" + std::to_string(c.C) + " M" + std::to_string(c.M) + " " + std::to_string(c.H) + "x" +
                             std::to_string(c.W) + " k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " d" +
                             std::to_string(c.d) + " p" + std::to_string(c.p) + " parts " + std::to_string(parts) +
                             " act " + std::to_string(int(act)) + (with_res ? " +res" : "");
    for (size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], want[i], tol * scale[i] + 1e-6) << what << " at " << i;
    // Split into ranges: pixel ranges at multiples of 32, channel blocks of 32.
    std::vector<float> y2(y.size(), -9.0f);
    const int64_t half = (P / 2) / 32 * 32, blocks = (g.M + 31) / 32;
    for (int64_t cb = 0; cb < blocks; ++cb) {
        ASSERT_TRUE(a.run(x.data(), W16, bias.data(), with_res ? res.data() : nullptr, y2.data(), scratch.data(), e, 0,
                          half, cb, cb + 1));
        ASSERT_TRUE(a.run(x.data(), W16, bias.data(), with_res ? res.data() : nullptr, y2.data(), scratch.data(), e,
                          half, -1, cb, cb + 1));
    }
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y2[i], y[i]) << what << " split at " << i;
}

}  // namespace

TEST(Amx, ConvMatchesReference) {
    if (!have_amx()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    const ConvCase cases[] = {
        {64, 64, 14, 14, 1, 1, 1, 0},   // pointwise, two channel blocks
        {33, 40, 9, 11, 1, 1, 1, 0},    // K and M tails, P = 99
        {70, 17, 5, 7, 1, 2, 1, 0},     // 1x1 stride 2 (gathered)
        {16, 96, 12, 10, 3, 1, 1, 1},   // 3x3 padded
        {24, 48, 15, 13, 3, 2, 1, 1},   // 3x3 stride 2
        {8, 32, 16, 16, 3, 1, 2, 2},    // dilated
        {5, 33, 20, 20, 5, 2, 1, 2},    // 5x5 stride 2, K = 125
        {3, 64, 23, 23, 7, 2, 1, 3},    // a 7x7 stem
    };
    uint32_t seed = 40;
    for (const ConvCase& c : cases)
        for (int parts : {2, 3}) {
            check_conv(c, parts, ConvAct::kNone, false, seed++);
            if (HasFatalFailure()) return;
            check_conv(c, parts, seed % 2 ? ConvAct::kRelu : ConvAct::kSilu, true, seed++);
            if (HasFatalFailure()) return;
            check_conv(c, parts, ConvAct::kSigmoid, false, seed++);
            if (HasFatalFailure()) return;
        }
}

TEST(Amx, ConvRefusesWhatThePartsCannotCarry) {
    if (!have_amx()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    for (int k : {1, 3}) {
        Conv2DGeom g;
        g.C = 20;
        g.M = 64;
        g.H = g.W = g.OH = g.OW = 12;
        g.kh = g.kw = k;
        g.ph = g.pw = k / 2;
        AmxConv a(g);
        std::vector<float> x(size_t(g.C * 144), 0.25f), w(size_t(g.M * g.C * k * k), 0.5f), y(size_t(g.M * 144));
        auto wp = alloc_weights((a.packed_w_halves() + 1) / 2);
        ASSERT_TRUE(a.pack_w(w.data(), reinterpret_cast<uint16_t*>(wp.get())));
        std::vector<float> scratch(a.scratch_floats());
        for (float b : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), -3.4e38f}) {
            std::vector<float> xb = x;
            xb[size_t(19 * 144 + 143)] = b;  // the last value
            EXPECT_FALSE(a.run(xb.data(), reinterpret_cast<const uint16_t*>(wp.get()), nullptr, nullptr, y.data(),
                               scratch.data(), ConvEpi{}))
                << "k " << k << " value " << b;
            std::vector<float> wb = w;
            wb[5] = b;
            EXPECT_FALSE(a.pack_w(wb.data(), reinterpret_cast<uint16_t*>(wp.get()))) << b;
        }
    }
}

// A Conv node the plan gives to AMX; an input value the BF16 parts cannot carry runs that run
// on the AVX-512 kernel instead (the same answer as the reference, infinities included).
TEST(Amx, ConvNodeRunsOnAmxAndFallsBack) {
    if (!have_amx()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    Conv2DGeom g;
    g.C = 64;
    g.M = 96;
    g.H = g.W = g.OH = g.OW = 16;
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(size_t(g.C * 256)), w(size_t(g.M * g.C)), b(static_cast<size_t>(g.M));
    for (float& v : x) v = u(rng);
    for (float& v : w) v = u(rng);
    for (float& v : b) v = u(rng);
    for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) x[size_t(7 * 256 + 100)] = std::numeric_limits<float>::infinity();
        const NodeRun r = run_one_node("Conv", {NodeIn{f32({1, g.C, 16, 16}, x)}, NodeIn{f32({g.M, g.C, 1, 1}, w), true},
                                                NodeIn{f32({g.M}, b), true}},
                                       {}, 17, {true}, 2);
        ASSERT_TRUE(r.st.ok()) << r.st.message();
        EXPECT_NE(r.kernel.find("conv_amx"), std::string::npos) << r.kernel;
        const std::vector<double> want = jiffy::testisa::conv_ref(g, x, w, b.data(), nullptr, ConvEpi{});
        const std::vector<double> sc = scale_1x1(g, x, w, b);
        const float* y = r.outs[0].as<float>();
        for (size_t i = 0; i < want.size(); ++i) {
            if (!std::isfinite(want[i])) {
                EXPECT_TRUE(std::isnan(want[i]) ? std::isnan(y[i]) : double(y[i]) == want[i]) << "pass " << pass << " at " << i;
                continue;
            }
            ASSERT_NEAR(y[i], want[i], conv_tol(r.kernel, want[i], sc[i])) << "pass " << pass << " at " << i << " " << r.kernel;
        }
    }
}

// A channels-last 1x1 (ConvNhwc, the layout_nhwc pass's op) the plan gives to AMX's product with
// the conv epilogue (bias, residual, activation) after it; an input value the parts cannot carry
// runs that run on the AVX-512 kernel; two threads (by 32-column blocks) give one thread's bits.
TEST(Amx, ConvNhwcNodeRunsOnAmxAndFallsBack) {
    if (!have_amx()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    // 7 x 9 pixels: two threads split by columns; 12 x 12: by 32-pixel blocks.
    for (const int64_t h : {7, 12}) {
        Conv2DGeom g;
        g.C = 96;
        g.M = 128;
        g.H = g.OH = h;
        g.W = g.OW = h == 7 ? 9 : 12;
        const int64_t P = g.OH * g.OW;
        std::mt19937 rng(5);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<float> x(size_t(g.C * P)), w(size_t(g.M * g.C)), b(static_cast<size_t>(g.M)),
            r(size_t(g.M * P));
        for (float& v : x) v = u(rng);
        for (float& v : w) v = u(rng);
        for (float& v : b) v = u(rng);
        for (float& v : r) v = u(rng);
        const ConvEpi epi{ConvAct::kRelu};
        const std::map<std::string, Attr> attrs = {{"_fused_act", as("Relu")}, {"_fused_residual", ai(1)}};
        std::vector<float> one_thread;
        for (int pass = 0; pass < 3; ++pass) {
            if (pass == 2) x[size_t(5 * P + 40)] = std::numeric_limits<float>::infinity();
            CompileOptions opt;
            if (pass == 1) opt.threads = 2;
            opt.parallel_min_flops = 0;
            const auto xn = jiffy::testisa::to_nhwc(x, g.C, P), rn = jiffy::testisa::to_nhwc(r, g.M, P);
            const NodeRun run =
                run_one_node("ConvNhwc",
                             {NodeIn{f32({1, g.OH, g.OW, g.C}, xn)}, NodeIn{f32({g.M, g.C, 1, 1}, w), true},
                              NodeIn{f32({g.M}, b), true}, NodeIn{f32({1, g.OH, g.OW, g.M}, rn)}},
                             attrs, 17, {true}, 2, opt, "jiffy");
            ASSERT_TRUE(run.st.ok()) << run.st.message();
            EXPECT_NE(run.kernel.find("conv_nhwc_1x1 amx"), std::string::npos) << run.kernel;
            if (pass == 1)
                EXPECT_NE(run.kernel.find(h == 7 ? "by columns threaded x2" : "by pixels threaded x2"),
                          std::string::npos)
                    << run.kernel;
            const std::vector<double> want = jiffy::testisa::conv_ref(g, x, w, b.data(), r.data(), epi);
            const std::vector<double> sc = scale_1x1(g, x, w, b, r.data());
            const float* y = run.outs[0].as<float>();
            if (pass == 0) one_thread.assign(y, y + g.M * P);
            for (int64_t m = 0; m < g.M; ++m)
                for (int64_t p = 0; p < P; ++p) {
                    const double wv = want[size_t(m * P + p)];
                    const float got = y[size_t(p * g.M + m)];
                    if (pass == 1)
                        ASSERT_EQ(got, one_thread[size_t(p * g.M + m)])
                            << "two threads, m " << m << " p " << p;
                    if (!std::isfinite(wv)) {
                        EXPECT_TRUE(std::isnan(wv) ? std::isnan(got) : double(got) == wv)
                            << "pass " << pass << " m " << m;
                        continue;
                    }
                    ASSERT_NEAR(got, wv, conv_tol(run.kernel, wv, sc[size_t(m * P + p)]))
                        << "pass " << pass << " m " << m << " p " << p << " " << run.kernel;
                }
        }
    }
}
