// Kernel-level tests that need only src/kernels (no engine): the same binary runs in the x86 unit
// tests and, cross-compiled for aarch64, under qemu-aarch64 (scripts/test_arm.sh), where it is the
// check of the NEON kernels. Every ISA this CPU has is compared with the scalar reference on odd
// sizes and edge values (NaN, +-inf, denormals, exp over/underflow), with the tolerances of
// linalg_fast_test / conv_fast_test. Sizes stay small: under qemu this runs ~65x slower.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "kernels/binary.h"
#include "kernels/conv.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/weight_alloc.h"
#include "conv_ref.h"
#include "isa_util.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

using namespace jiffy::kernels;
using namespace jiffy::testisa;

namespace {

// ---------------------------------------------------------------- dispatch

TEST(KernelsIsa, ActiveIsaHonoursEnvironment) {
    const char* e = std::getenv("JIFFY_ISA");
    const Isa best = cpu_isa();
    Isa want = best;
    if (e) {
        const std::string s = e;
        Isa asked = best;
        if (s == "scalar") asked = Isa::kScalar;
        else if (s == "neon" && best == Isa::kNeon) asked = Isa::kNeon;
        else if (s == "avx2" && int(best) >= int(Isa::kAvx2)) asked = Isa::kAvx2;
        else if (s == "avx512" && int(best) >= int(Isa::kAvx512)) asked = Isa::kAvx512;
        want = int(asked) < int(best) ? asked : best;
    }
    EXPECT_EQ(int(active_isa()), int(want)) << "JIFFY_ISA=" << (e ? e : "") << " active "
                                            << isa_name(active_isa());
#if defined(__aarch64__)
    EXPECT_EQ(int(best), int(Isa::kNeon));
    EXPECT_STREQ(isa_name(Isa::kNeon), "neon");
#endif
    // The dispatchers hand out the active ISA's kernels; for a lower ISA, its own ones.
    for (Isa isa : isas()) {
        EXPECT_NE(sgemm_for(isa), nullptr);
        EXPECT_NE(sgemv_for(isa), nullptr);
        EXPECT_NE(act_apply_for(isa), nullptr);
    }
    if (active_isa() != Isa::kScalar) {
        EXPECT_NE(sgemm_for(active_isa()), sgemm_for(Isa::kScalar));
        EXPECT_NE(sgemv_for(active_isa()), sgemv_for(Isa::kScalar));
        EXPECT_NE(act_apply_for(active_isa()), act_apply_for(Isa::kScalar));
    }
}

// ---------------------------------------------------------------- activations

const Activation kAllActs[] = {
    {ActKind::kNone, 0, 0},        {ActKind::kRelu, 0, 0},       {ActKind::kLeakyRelu, 0.1f, 0},
    {ActKind::kClip, -1.5f, 2.0f}, {ActKind::kClip, 0.0f, 6.0f}, {ActKind::kHardSigmoid, 0.2f, 0.5f},
    {ActKind::kHardSwish, 0, 0},   {ActKind::kSigmoid, 0, 0},    {ActKind::kTanh, 0, 0},
    {ActKind::kExp, 0, 0},         {ActKind::kSilu, 0, 0},
};

// The vendor that picks per-vendor blockings (the conv GEMM's K chunk) is the one the kernel
// reports in /proc/cpuinfo.
TEST(KernelsIsa, CpuVendorMatchesProcCpuinfo) {
    std::string id;
    if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
        char line[256];
        while (id.empty() && std::fgets(line, sizeof line, f))
            if (!std::strncmp(line, "vendor_id", 9) && std::strchr(line, ':')) id = std::strchr(line, ':') + 1;
        std::fclose(f);
    }
#if defined(__x86_64__)
    if (id.empty()) GTEST_SKIP() << "no vendor_id in /proc/cpuinfo";
    const CpuVendor want = id.find("GenuineIntel") != std::string::npos   ? CpuVendor::kIntel
                           : id.find("AuthenticAMD") != std::string::npos ? CpuVendor::kAmd
                                                                          : CpuVendor::kOther;
    EXPECT_EQ(int(cpu_vendor()), int(want)) << id;
#else
    EXPECT_EQ(int(cpu_vendor()), int(CpuVendor::kOther));
#endif
    EXPECT_STREQ(cpu_vendor_name(CpuVendor::kIntel), "intel");
    EXPECT_STREQ(cpu_vendor_name(CpuVendor::kAmd), "amd");
}

TEST(KernelsIsa, ActivationsMatchScalarOnEdgeValues) {
    const std::vector<float> x = edge_values(400, 0.05f);
    for (Isa isa : isas()) {
        ActApplyFn fn = act_apply_for(isa);
        for (const Activation& a : kAllActs) {
            const bool hard = a.kind == ActKind::kHardSigmoid || a.kind == ActKind::kHardSwish;
            for (int64_t n : {int64_t(x.size()), int64_t(1), int64_t(3), int64_t(7), int64_t(13)}) {
                std::vector<float> y(x.size() + 1, 12345.0f);
                fn(a, x.data(), y.data(), n);
                for (int64_t i = 0; i < n; ++i) {
                    const float want = act_scalar(a, x[size_t(i)]);
                    ASSERT_TRUE(close_rel(y[size_t(i)], want, 2e-6f, hard ? 1e-7f : 1e-37f))
                        << isa_name(isa) << " act " << int(a.kind) << " x=" << x[size_t(i)] << " got "
                        << y[size_t(i)] << " want " << want;
                }
                EXPECT_EQ(y[size_t(n)], 12345.0f) << isa_name(isa) << " wrote past n";
            }
            std::vector<float> y = x;  // in place
            fn(a, y.data(), y.data(), int64_t(y.size()));
            for (size_t i = 0; i < x.size(); ++i)
                ASSERT_TRUE(close_rel(y[i], act_scalar(a, x[i]), 2e-6f, 1e-7f)) << isa_name(isa) << " in place";
        }
    }
}

TEST(KernelsIsa, ErfAndGeluMatchScalarEveryIsa) {
    // The vector erf (Abramowitz-Stegun 7.1.26 for |x| >= 0.5, Taylor below) and GELU (both
    // forms) against std::erf / std::tanh in double: <= 1e-6 absolute (times |x| for GELU), on a
    // dense range across the 0.5 switch, the tails, edge values, tails of every length.
    std::vector<float> x = edge_values(400, 0.05f);
    for (int i = -4000; i <= 4000; ++i) x.push_back(float(i) * 0.0025f);
    for (float v : {-30.0f, -9.0f, -5.6f, -4.0f, 4.0f, 5.6f, 9.0f, 30.0f, 1e-30f, -1e-30f, 0.4999f, 0.5f, 0.5001f})
        x.push_back(v);
    for (Isa isa : isas())
        for (ActKind k : {ActKind::kErf, ActKind::kGelu, ActKind::kGeluTanh}) {
            const Activation a{k, 0, 0};
            for (int64_t n : {int64_t(x.size()), int64_t(1), int64_t(5), int64_t(13)}) {
                std::vector<float> y(x.size() + 1, 12345.0f);
                act_apply_for(isa)(a, x.data(), y.data(), n);
                for (int64_t i = 0; i < n; ++i) {
                    const double xi = x[size_t(i)], want = act_scalar_t<double>(a, xi), got = y[size_t(i)];
                    if (std::isnan(want)) {
                        EXPECT_TRUE(std::isnan(got)) << isa_name(isa) << " act " << int(k) << " x=" << xi;
                        continue;
                    }
                    if (std::isinf(want)) {
                        EXPECT_EQ(got, want) << isa_name(isa) << " act " << int(k) << " x=" << xi;
                        continue;
                    }
                    const double tol = 1e-6 * (k == ActKind::kErf ? 1.0 : std::max(1.0, std::fabs(xi)));
                    ASSERT_LE(std::fabs(got - want), tol) << isa_name(isa) << " act " << int(k) << " x=" << xi
                                                          << " got " << got << " want " << want;
                }
                EXPECT_EQ(y[size_t(n)], 12345.0f) << isa_name(isa) << " wrote past n";
            }
        }
}

TEST(KernelsIsa, LogExpm1SoftplusMishMatchDoubleEveryIsa) {
    // Log, Sqrt, Elu, Selu, Softplus, Mish, Abs, Neg, Floor, Ceil, Round (exact: 2.5 -> 2, -0.5 ->
    // -0, 8388609 kept, in the dense range's halves) against the scalar reference in double:
    // <= 1e-6 relative (plus ~1e-44 absolute for denormal results) on the edge values, a dense
    // range across the expm1 switch at |x| = 0.5, log over every binade (denormals included),
    // and tails of every length. NaN must stay NaN, infinities and signed zeros must match.
    std::vector<float> x = edge_values(400, 0.05f);
    for (int i = -1000; i <= 1000; ++i) x.push_back(float(i) * 0.001f);
    for (int e = -149; e < 128; ++e)
        for (float f : {1.0f, 1.3f, 1.7f}) x.push_back(std::ldexp(f, e));
    for (float v : {0.4999f, 0.5f, 0.5001f, -0.4999f, -0.5f, -0.5001f, 0.70710677f, 0.7071068f, 1.0000001f,
                    0.99999994f, 1.17549435e-38f, 1.1754942e-38f, -15.0f, -17.0f, 15.0f, 17.0f, 19.99f, 20.01f,
                    30.0f, -30.0f, -50.0f, 50.0f, 1.5f, 2.5f, -2.5f, -1.5f, 8388609.0f, -8388609.0f, 0.49999997f})
        x.push_back(v);
    const Activation acts[] = {{ActKind::kLog, 0, 0},      {ActKind::kSqrt, 0, 0},
                               {ActKind::kElu, 0.7f, 0},   {ActKind::kSelu, 1.6732632f, 1.050701f},
                               {ActKind::kSoftplus, 0, 0}, {ActKind::kMish, 0, 0},
                               {ActKind::kAbs, 0, 0},      {ActKind::kNeg, 0, 0},
                               {ActKind::kFloor, 0, 0},    {ActKind::kCeil, 0, 0},
                               {ActKind::kRound, 0, 0}};
    for (Isa isa : isas())
        for (const Activation& a : acts) {
            for (int64_t n : {int64_t(x.size()), int64_t(1), int64_t(5), int64_t(13), int64_t(17)}) {
                std::vector<float> y(x.size() + 1, 12345.0f);
                act_apply_for(isa)(a, x.data(), y.data(), n);
                for (int64_t i = 0; i < n; ++i) {
                    const double xi = x[size_t(i)], want = act_scalar_t<double>(a, xi), got = y[size_t(i)];
                    const std::string what = std::string(isa_name(isa)) + " " + act_name(a.kind) +
                                             " x=" + std::to_string(xi) + " (" + std::to_string(i) + ")";
                    if (std::isnan(want)) {
                        EXPECT_TRUE(std::isnan(got)) << what << " got " << got;
                        continue;
                    }
                    if (std::isinf(float(want)) || want == 0.0) {  // float overflow counts as inf
                        EXPECT_EQ(got, double(float(want))) << what;
                        if (want == 0.0) EXPECT_EQ(std::signbit(got), std::signbit(float(want))) << what;
                        continue;
                    }
                    // Denormal intermediates (exp(-100) in Mish) keep a few bits: 1e-44 |x| absolute.
                    ASSERT_LE(std::fabs(got - want), 1e-6 * std::fabs(want) + 1e-44 * std::max(1.0, std::fabs(xi)))
                        << what << " got " << got << " want " << want;
                }
                EXPECT_EQ(y[size_t(n)], 12345.0f) << isa_name(isa) << " wrote past n";
            }
        }
}

TEST(KernelsIsa, SoftplusAndLogSpecialValues) {
    // Exact limits, every ISA: softplus never overflows (= x for large x), log(0) = -inf.
    const float xs[] = {0.0f, -0.0f, 1.0f, kInf, -kInf, 100.0f, 1e30f, -1e30f, -200.0f};
    const Activation sp{ActKind::kSoftplus, 0, 0}, lg{ActKind::kLog, 0, 0};
    for (Isa isa : isas()) {
        float y[9], l[9];
        act_apply_for(isa)(sp, xs, y, 9);
        act_apply_for(isa)(lg, xs, l, 9);
        EXPECT_FLOAT_EQ(y[0], 0.6931472f) << isa_name(isa);
        EXPECT_EQ(y[3], kInf) << isa_name(isa);
        EXPECT_EQ(y[4], 0.0f) << isa_name(isa);
        EXPECT_EQ(y[5], 100.0f) << isa_name(isa);
        EXPECT_EQ(y[6], 1e30f) << isa_name(isa);
        EXPECT_EQ(y[7], 0.0f) << isa_name(isa);
        EXPECT_EQ(y[8], 0.0f) << isa_name(isa);
        EXPECT_EQ(l[0], -kInf) << isa_name(isa);
        EXPECT_EQ(l[1], -kInf) << isa_name(isa);
        EXPECT_EQ(l[2], 0.0f) << isa_name(isa);
        EXPECT_EQ(l[3], kInf) << isa_name(isa);
        EXPECT_TRUE(std::isnan(l[4])) << isa_name(isa);
        EXPECT_TRUE(std::isnan(l[7])) << isa_name(isa);
    }
}

TEST(KernelsIsa, ExpDenormalAndOverflowEdges) {
    // exp down to the denormal range and past the overflow threshold, every ISA.
    const float xs[] = {-87.3f, -88.5f, -95.0f, -100.0f, -103.5f, -103.9f, 88.7f, 88.73f, 90.0f};
    const Activation e{ActKind::kExp, 0, 0};
    for (Isa isa : isas()) {
        float y[9];
        act_apply_for(isa)(e, xs, y, 9);
        for (int i = 0; i < 9; ++i) {
            const float want = std::exp(xs[i]);
            if (std::isinf(want) || want < 1e-38f) {
                // Denormal results: within a few ulps of the denormal spacing.
                EXPECT_TRUE(std::isinf(want) ? y[i] == want : std::fabs(y[i] - want) <= 4e-45f + 2e-6f * want)
                    << isa_name(isa) << " exp(" << xs[i] << ") = " << y[i] << " want " << want;
            } else {
                EXPECT_TRUE(close_rel(y[i], want, 2e-6f)) << isa_name(isa) << " exp(" << xs[i] << ")";
            }
        }
    }
}

// ---------------------------------------------------------------- binary rows

TEST(KernelsIsa, BinaryRowsMatchScalarExactly) {
    std::vector<float> a = edge_values(400, 0.05f), b = edge_values(400, 0.05f);
    std::reverse(b.begin(), b.end());
    b[3] = kNaN;
    for (Isa isa : isas())
        for (int op = 0; op <= int(BinOp::kPRelu); ++op) {
            const BinaryRows r = binary_rows_for(isa, BinOp(op));
            auto ref = [&](float x, float y) -> float {
                switch (BinOp(op)) {
                    case BinOp::kAdd: return x + y;
                    case BinOp::kSub: return x - y;
                    case BinOp::kMul: return x * y;
                    case BinOp::kDiv: return x / y;
                    case BinOp::kMax: return std::isnan(x) || std::isnan(y) ? kNaN : (x > y ? x : y);
                    case BinOp::kMin: return std::isnan(x) || std::isnan(y) ? kNaN : (x < y ? x : y);
                    case BinOp::kPRelu: return x < 0.0f ? x * y : x;
                }
                return 0;
            };
            for (int64_t n : {int64_t(a.size()), int64_t(0), int64_t(1), int64_t(5), int64_t(11), int64_t(19)}) {
                std::vector<float> y(size_t(n) + 1, 99.0f);
                r.vv(a.data(), b.data(), y.data(), n);
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_TRUE(close_rel(y[size_t(i)], ref(a[size_t(i)], b[size_t(i)]), 0))
                        << isa_name(isa) << " op " << op << " vv at " << i;
                EXPECT_EQ(y[size_t(n)], 99.0f);
                r.vs(a.data(), 2.5f, y.data(), n);
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_TRUE(close_rel(y[size_t(i)], ref(a[size_t(i)], 2.5f), 0))
                        << isa_name(isa) << " op " << op << " vs at " << i;
                r.vs(a.data(), kNaN, y.data(), n);
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_TRUE(close_rel(y[size_t(i)], ref(a[size_t(i)], kNaN), 0))
                        << isa_name(isa) << " op " << op << " vs NaN at " << i;
                r.sv(-1.25f, b.data(), y.data(), n);
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_TRUE(close_rel(y[size_t(i)], ref(-1.25f, b[size_t(i)]), 0))
                        << isa_name(isa) << " op " << op << " sv at " << i;
                EXPECT_EQ(y[size_t(n)], 99.0f);
            }
        }
}

// ---------------------------------------------------------------- GEMV, GEMM edges, packing

TEST(KernelsIsa, GemvMatchesReference) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    const int64_t Ks[] = {1, 3, 17, 130};
    // 60, 120, 127: a tail of 7 vectors and a partial 8th (AVX2 / AVX-512), which once ran as 7.
    const int64_t Ns[] = {1, 3, 7, 16, 17, 33, 45, 60, 100, 120, 127, 129};
    for (Isa isa : isas()) {
        SgemvFn fn = sgemv_for(isa);
        for (int64_t K : Ks)
            for (int64_t N : Ns)
                for (bool trans : {false, true}) {
                    std::vector<float> a(static_cast<size_t>(K)), B(static_cast<size_t>(K * N)), bias(static_cast<size_t>(N));
                    for (auto* v : {&a, &B, &bias})
                        for (float& x : *v) x = u(rng);
                    const int64_t ldb = trans ? K : N;
                    const PackedGemv pg = pack_b_gemv(B.data(), K, N, ldb, trans, 0.5f);
                    std::vector<float> Bs(B);
                    for (float& x : Bs) x *= 0.5f;
                    for (const Activation& act : kAllActs) {
                        if (act.kind == ActKind::kExp) continue;
                        for (const float* bp : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
                            std::vector<float> want(static_cast<size_t>(N)), got(size_t(N) + 1, 7.0f);
                            sgemm_reference(1, N, K, a.data(), K, Bs.data(), ldb, trans, bp, want.data(), N, Act::kNone);
                            fn(a.data(), pg, bp, got.data(), act, false);
                            for (int64_t j = 0; j < N; ++j)
                                ASSERT_NEAR(got[size_t(j)], act_scalar(act, want[size_t(j)]),
                                            2e-5f * (1 + std::sqrt(float(K))))
                                    << isa_name(isa) << " K" << K << " N" << N << " trans " << trans << " act "
                                    << int(act.kind) << " at " << j;
                            EXPECT_EQ(got[size_t(N)], 7.0f) << isa_name(isa) << " wrote past N";
                        }
                    }
                }
    }
}

// A GEMV split by columns (threads, docs/threading.md): every range that sgemv_cols_for accepts,
// on the whole-panel layout and the split layout, writes exactly its columns, bitwise equal to the
// unsplit call (each column keeps its summation order).
TEST(KernelsIsa, GemvColumnRangesEqualWhole) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1, 1);
    const int64_t Ns[] = {7, 33, 64, 96, 128, 129, 200, 300};
    for (Isa isa : isas()) {
        const int64_t unit = sgemv_split_unit(isa);
        for (int64_t K : {5, 130}) {
            for (int64_t N : Ns) {
                std::vector<float> a(static_cast<size_t>(K)), B(static_cast<size_t>(K * N)), bias(static_cast<size_t>(N));
                for (auto* v : {&a, &B, &bias})
                    for (float& x : *v) x = u(rng);
                const PackedGemv whole = pack_b_gemv(B.data(), K, N, N, false);
                const PackedGemv split = repack_gemv_split(whole, isa);
                const Activation act{ActKind::kRelu, 0, 0};
                std::vector<float> want(static_cast<size_t>(N));
                sgemv_for(isa)(a.data(), whole, bias.data(), want.data(), act, false);
                // Every boundary: the multiples of unit up to the main columns, and N.
                std::vector<int64_t> cuts;
                const int64_t main = sgemv_main_cols(isa, N);
                for (int64_t c = 0; c <= main; c += unit) cuts.push_back(c);
                if (cuts.back() != N) cuts.push_back(N);
                for (const PackedGemv* pg : {&whole, &split}) {
                    std::vector<float> got(static_cast<size_t>(N) + 1, 7.0f);
                    sgemv_for(isa)(a.data(), *pg, bias.data(), got.data(), act, false);
                    EXPECT_EQ(std::memcmp(got.data(), want.data(), size_t(N) * sizeof(float)), 0)
                        << isa_name(isa) << " whole call, split layout " << (pg == &split) << " N" << N;
                    for (size_t i = 0; i + 1 < cuts.size(); ++i)
                        for (size_t j = i + 1; j < cuts.size(); ++j) {
                            std::fill(got.begin(), got.end(), 7.0f);
                            sgemv_cols_for(isa)(a.data(), *pg, cuts[i], cuts[j], bias.data(), got.data(), act, false);
                            for (int64_t c = 0; c <= N; ++c) {
                                const bool in = c >= cuts[i] && c < cuts[j];
                                const float w = in ? want[size_t(c)] : 7.0f;
                                ASSERT_EQ(std::memcmp(&got[size_t(c)], &w, sizeof(float)), 0)
                                    << isa_name(isa) << " split layout " << (pg == &split) << " K" << K << " N" << N
                                    << " cols [" << cuts[i] << ", " << cuts[j] << ") at " << c;
                            }
                        }
                }
            }
        }
    }
}

// The serpentine order (kernels/gemm.h): weights of 512 KiB to 3 MiB sum K in segments; run in
// either direction, whole or by column ranges (both layouts), every column has the same bits, and
// they match the reference. N = 60: one tail block; 5000 x 128: more blocks than kGemvMaxBlocks on
// AVX2 (the block order then stays forward); 1024 x 1024: 4 MiB, past the serpentine range;
// 2100 x 60: 528 KiB, below it.
TEST(KernelsIsa, GemvSerpentineSameBitsBothWays) {
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> u(-1, 1);
    struct Shape { int64_t K, N; bool seg; };
    for (const Shape sh : {Shape{3100, 60, true}, Shape{2100, 128, true}, Shape{1400, 129, true}, Shape{1500, 200, true},
                           Shape{128, 5000, true}, Shape{1024, 1024, false}, Shape{2100, 60, false}}) {
        const int64_t K = sh.K, N = sh.N;
        std::vector<float> a(static_cast<size_t>(K)), B(static_cast<size_t>(K * N)), bias(static_cast<size_t>(N));
        for (auto* v : {&a, &B, &bias})
            for (float& x : *v) x = u(rng);
        const PackedGemv whole = pack_b_gemv(B.data(), K, N, N, false);
        ASSERT_EQ(whole.seg_rows > 0, sh.seg) << "K" << K << " N" << N;
        EXPECT_EQ(whole.alternate, sh.seg);
        if (sh.seg) {
            EXPECT_LE((K + whole.seg_rows - 1) / whole.seg_rows, kGemvMaxSegs);
        }
        std::vector<float> ref(static_cast<size_t>(N));
        sgemm_reference(1, N, K, a.data(), K, B.data(), N, false, bias.data(), ref.data(), N, Act::kNone);
        const Activation act{ActKind::kRelu, 0, 0};
        for (Isa isa : isas()) {
            const PackedGemv split = repack_gemv_split(whole, isa);
            EXPECT_EQ(split.seg_rows, whole.seg_rows);
            std::vector<float> fwd(size_t(N) + 1, 7.0f), got(size_t(N) + 1, 7.0f);
            sgemv_for(isa)(a.data(), whole, bias.data(), fwd.data(), act, false);
            for (int64_t j = 0; j < N; ++j)
                ASSERT_NEAR(fwd[size_t(j)], std::max(0.0f, ref[size_t(j)]), 2e-5f * (1 + std::sqrt(float(K))))
                    << isa_name(isa) << " K" << K << " N" << N << " at " << j;
            EXPECT_EQ(fwd[size_t(N)], 7.0f) << isa_name(isa) << " wrote past N";
            const int64_t unit = sgemv_split_unit(isa), main = sgemv_main_cols(isa, N);
            const int64_t mid = std::min(main, (N / 2) / unit * unit);
            for (const PackedGemv* pg : {&whole, &split})
                for (bool backward : {false, true}) {
                    std::fill(got.begin(), got.end(), 7.0f);
                    sgemv_for(isa)(a.data(), *pg, bias.data(), got.data(), act, backward);
                    ASSERT_EQ(std::memcmp(got.data(), fwd.data(), (size_t(N) + 1) * sizeof(float)), 0)
                        << isa_name(isa) << " K" << K << " N" << N << " backward " << backward << " split layout "
                        << (pg == &split);
                    std::fill(got.begin(), got.end(), 7.0f);
                    sgemv_cols_for(isa)(a.data(), *pg, 0, mid, bias.data(), got.data(), act, backward);
                    sgemv_cols_for(isa)(a.data(), *pg, mid, N, bias.data(), got.data(), act, !backward);
                    ASSERT_EQ(std::memcmp(got.data(), fwd.data(), (size_t(N) + 1) * sizeof(float)), 0)
                        << isa_name(isa) << " K" << K << " N" << N << " cols at " << mid << " backward " << backward
                        << " split layout " << (pg == &split);
                }
        }
    }
}

// The 24-bit weights' rounding (kernels/gemm.h, docs/gemv.md): to nearest even at 16 significant
// bits (|error| <= 2^-16 |w|), values with <= 16 significant bits and zeros unchanged, a finite
// value that would round to infinity truncated, infinities kept, NaN kept NaN; denormals rounded
// like any other bits.
TEST(KernelsIsa, Gemv24BitRounding) {
    auto bits = [](float f) {
        uint32_t u;
        std::memcpy(&u, &f, sizeof(u));
        return u;
    };
    auto from = [](uint32_t u) {
        float f;
        std::memcpy(&f, &u, sizeof(f));
        return f;
    };
    EXPECT_EQ(gemv_w24_bits(from(0x3f800080u)), 0x3f800000u);  // a tie, even below: down
    EXPECT_EQ(gemv_w24_bits(from(0x3f800180u)), 0x3f800200u);  // a tie, odd below: up
    EXPECT_EQ(gemv_w24_bits(from(0x3f80007fu)), 0x3f800000u);
    EXPECT_EQ(gemv_w24_bits(from(0x3f800081u)), 0x3f800100u);
    EXPECT_EQ(gemv_w24_bits(from(0xbf8001c0u)), 0xbf800200u);  // the sign kept
    EXPECT_EQ(gemv_w24_bits(from(0x3fffff80u)), 0x40000000u);  // carries into the exponent
    EXPECT_EQ(gemv_w24_bits(0.0f), 0u);
    EXPECT_EQ(gemv_w24_bits(-0.0f), 0x80000000u);
    EXPECT_EQ(gemv_w24_value(0.75f), 0.75f);
    EXPECT_EQ(gemv_w24_value(std::numeric_limits<float>::max()), from(0x7f7fff00u));  // truncated, finite
    EXPECT_EQ(gemv_w24_value(-std::numeric_limits<float>::max()), from(0xff7fff00u));
    EXPECT_EQ(gemv_w24_value(kInf), kInf);
    EXPECT_EQ(gemv_w24_value(-kInf), -kInf);
    EXPECT_TRUE(std::isnan(gemv_w24_value(kNaN)));
    EXPECT_TRUE(std::isnan(gemv_w24_value(from(0x7f800001u))));  // a NaN whose payload is all rounded off
    EXPECT_EQ(gemv_w24_bits(from(0x000000ffu)), 0x00000100u);      // a denormal
    EXPECT_EQ(gemv_w24_bits(from(0x00000080u)), 0x00000000u);
    std::mt19937 rng(17);
    std::uniform_int_distribution<uint32_t> any(0, 0xffffffffu);
    for (int i = 0; i < 200000; ++i) {
        const float w = from(any(rng));
        if (!std::isfinite(w) || std::abs(w) < std::numeric_limits<float>::min()) continue;
        const float r = gemv_w24_value(w);
        ASSERT_EQ(bits(r) & 0xffu, 0u);
        ASSERT_LE(std::abs(double(r) - double(w)), std::ldexp(std::abs(double(w)), -16)) << w;
        // Nearest: the other candidate (one step of 2^8 in the bits, towards w) is no closer.
        const uint32_t other = (bits(r) & 0x7fffffffu) > (bits(w) & 0x7fffffffu) ? bits(r) - 0x100u : bits(r) + 0x100u;
        if ((other & 0x7f800000u) != 0x7f800000u)
            ASSERT_LE(std::abs(double(r) - double(w)), std::abs(double(from(other)) - double(w))) << w;
    }
}

// A GEMV mode on less exact weights (AVX-512 with VBMI; `set` turns it on / off, `weights` gives
// the K x N weights it stands for): the sums of those weights (double reference, only float32
// accumulation apart), in every layout and order the float32 GEMV has: whole or split layout,
// forward or backward (serpentine), by column ranges; each column the same bits in all of them.
// The shapes: tails of 1..7 vectors, one row, the serpentine's segments, K past and under 64.
void expect_gemv_mode_matches(bool (*set)(PackedGemv*, Isa, bool),
                              std::vector<double> (*weights)(const std::vector<float>& B, int64_t K, int64_t N)) {
    std::mt19937 rng(19);
    std::uniform_real_distribution<float> u(-1, 1);
    struct Shape { int64_t K, N; };
    for (const Shape sh : {Shape{1, 7}, Shape{17, 1}, Shape{5, 33}, Shape{130, 129}, Shape{64, 300}, Shape{200, 120},
                           Shape{2100, 128}, Shape{1400, 129}, Shape{3100, 60}}) {
        const int64_t K = sh.K, N = sh.N;
        std::vector<float> a(static_cast<size_t>(K)), B(static_cast<size_t>(K * N)), bias(static_cast<size_t>(N));
        for (auto* v : {&a, &B, &bias})
            for (float& x : *v) x = u(rng);
        for (int64_t i = 0; i < K * N; i += 7) B[size_t(i)] *= 1e-3f;  // a spread of exponents
        PackedGemv whole = pack_b_gemv(B.data(), K, N, N, false);
        PackedGemv split = repack_gemv_split(whole, Isa::kAvx512);
        ASSERT_TRUE(set(&whole, Isa::kAvx512, true));
        ASSERT_TRUE(set(&split, Isa::kAvx512, true));
        const std::vector<double> W = weights(B, K, N);
        std::vector<double> want(static_cast<size_t>(N)), mag(static_cast<size_t>(N));
        for (int64_t j = 0; j < N; ++j) {
            double s = bias[size_t(j)], m = std::abs(bias[size_t(j)]);
            for (int64_t k = 0; k < K; ++k) {
                const double p = double(a[size_t(k)]) * W[size_t(k * N + j)];
                s += p, m += std::abs(p);
            }
            want[size_t(j)] = std::max(0.0, s), mag[size_t(j)] = m;
        }
        const Activation act{ActKind::kRelu, 0, 0};
        std::vector<float> fwd(size_t(N) + 1, 7.0f), got(size_t(N) + 1, 7.0f);
        sgemv_for(Isa::kAvx512)(a.data(), whole, bias.data(), fwd.data(), act, false);
        for (int64_t j = 0; j < N; ++j)
            ASSERT_NEAR(fwd[size_t(j)], want[size_t(j)], 1e-6 * mag[size_t(j)]) << "K" << K << " N" << N << " at " << j;
        EXPECT_EQ(fwd[size_t(N)], 7.0f) << "wrote past N";
        const int64_t unit = sgemv_split_unit(Isa::kAvx512), main = sgemv_main_cols(Isa::kAvx512, N);
        const int64_t mid = std::min(main, (N / 2) / unit * unit);
        for (const PackedGemv* pg : {&whole, &split})
            for (bool backward : {false, true}) {
                std::fill(got.begin(), got.end(), 7.0f);
                sgemv_for(Isa::kAvx512)(a.data(), *pg, bias.data(), got.data(), act, backward);
                ASSERT_EQ(std::memcmp(got.data(), fwd.data(), (size_t(N) + 1) * sizeof(float)), 0)
                    << "K" << K << " N" << N << " backward " << backward << " split layout " << (pg == &split);
                std::fill(got.begin(), got.end(), 7.0f);
                sgemv_cols_for(Isa::kAvx512)(a.data(), *pg, 0, mid, bias.data(), got.data(), act, backward);
                sgemv_cols_for(Isa::kAvx512)(a.data(), *pg, mid, N, bias.data(), got.data(), act, !backward);
                ASSERT_EQ(std::memcmp(got.data(), fwd.data(), (size_t(N) + 1) * sizeof(float)), 0)
                    << "K" << K << " N" << N << " cols at " << mid << " split layout " << (pg == &split);
            }
        // Off again: the float32 weights' sums.
        ASSERT_TRUE(set(&whole, Isa::kAvx512, false));
        std::vector<float> exact(static_cast<size_t>(N)), ref(static_cast<size_t>(N));
        sgemv_for(Isa::kAvx512)(a.data(), whole, bias.data(), exact.data(), act, false);
        sgemm_reference(1, N, K, a.data(), K, B.data(), N, false, bias.data(), ref.data(), N, Act::kNone);
        for (int64_t j = 0; j < N; ++j)
            ASSERT_NEAR(exact[size_t(j)], std::max(0.0f, ref[size_t(j)]), 2e-5f * (1 + std::sqrt(float(K))));
    }
    // Where it is not supported nothing changes.
    PackedGemv g = pack_b_gemv(std::vector<float>(64, 1.0f).data(), 8, 8, 8, false);
    EXPECT_FALSE(set(&g, Isa::kAvx2, true));
    EXPECT_FALSE(g.use24 || g.use20);
    EXPECT_EQ(g.w24, nullptr);
    EXPECT_EQ(g.q20, nullptr);
}

// The 24-bit weights: each rounded (gemv_w24_value).
TEST(KernelsIsa, Gemv24BitWeightsMatchRoundedReference) {
    if (!gemv_w24_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 VBMI here (or JIFFY_GEMV_W24=0)";
    expect_gemv_mode_matches(gemv_set_w24, [](const std::vector<float>& B, int64_t, int64_t) {
        std::vector<double> w(B.size());
        for (size_t i = 0; i < B.size(); ++i) w[i] = gemv_w24_value(B[i]);
        return w;
    });
}

// The 20-bit block weights: per column and block of 64 rows s = max |w| / (2^19 - 1) (a float),
// each weight q * s with q the nearest integer to w / s; within s / 2 of w (checked here too).
TEST(KernelsIsa, Gemv20BitBlocksMatchQuantizedReference) {
    if (!gemv_i20_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 VBMI here (or JIFFY_GEMV_W24=0 / _I20=0)";
    expect_gemv_mode_matches(gemv_set_i20, [](const std::vector<float>& B, int64_t K, int64_t N) {
        std::vector<double> w(B.size());
        for (int64_t j = 0; j < N; ++j)
            for (int64_t k0 = 0; k0 < K; k0 += 64) {
                const int64_t k1 = std::min(K, k0 + 64);
                double m = 0;
                for (int64_t k = k0; k < k1; ++k) m = std::max(m, std::abs(double(B[size_t(k * N + j)])));
                const double s = float(m / 524287.0);
                for (int64_t k = k0; k < k1; ++k) {
                    const double x = B[size_t(k * N + j)];
                    const double q = std::clamp(std::nearbyint(x / s), -524287.0, 524287.0);
                    w[size_t(k * N + j)] = q * s;
                    EXPECT_LE(std::abs(q * s - x), 0.5 * s * (1 + 1e-6)) << "k" << k << " j" << j;
                }
            }
        return w;
    });
    // A weight that is not finite: no 20-bit blocks (the float32 GEMV stays).
    std::vector<float> B(64 * 16, 0.5f);
    B[77] = std::numeric_limits<float>::infinity();
    PackedGemv g = pack_b_gemv(B.data(), 64, 16, 16, false);
    EXPECT_FALSE(gemv_set_i20(&g, Isa::kAvx512, true));
    EXPECT_FALSE(g.use20);
}

#if defined(__linux__)
// Whether the mapping that holds `addr` carries MADV_HUGEPAGE ("hg" in /proc/self/smaps).
// *found: whether smaps lists a mapping holding it.
bool smaps_hugepage_advised(const void* addr, bool* found) {
    const unsigned long a = static_cast<unsigned long>(reinterpret_cast<uintptr_t>(addr));
    *found = false;
    FILE* f = std::fopen("/proc/self/smaps", "r");
    if (!f) return false;
    char line[1024];
    bool advised = false;
    while (std::fgets(line, sizeof line, f)) {
        unsigned long lo = 0, hi = 0;
        char dash = 0;
        if (!*found && std::sscanf(line, "%lx%c%lx", &lo, &dash, &hi) == 3 && dash == '-' && lo <= a && a < hi) {
            *found = true;
        } else if (*found && std::strncmp(line, "VmFlags:", 8) == 0) {
            advised = std::strstr(line, " hg") != nullptr;
            break;
        }
    }
    std::fclose(f);
    return advised;
}
#endif

// Weights over 2 MiB live on a 2 MiB-aligned mapping advised for huge pages (kernels/
// weight_alloc.h); smaller ones on the heap. Both zero-filled, 64-byte aligned, writable.
TEST(KernelsIsa, WeightAllocAlignsLargeBuffersForHugePages) {
#if defined(__linux__)
    // Where the kernel records the advice (not under qemu-user, which accepts and drops it), a
    // probe mapping advised here shows it; then alloc_weights' mappings must show it too.
    bool probe_found = false, honoured = false;
    const size_t probe_len = 2 * kHugeBytes;
    if (void* p = mmap(nullptr, probe_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        p != MAP_FAILED) {
        honoured = madvise(p, probe_len, MADV_HUGEPAGE) == 0 && smaps_hugepage_advised(p, &probe_found);
        munmap(p, probe_len);
    }
#endif
    for (size_t floats : {size_t(1), size_t(1000), kHugeBytes / 4 - 1, kHugeBytes / 4, size_t(1300000)}) {
        std::shared_ptr<float> w = alloc_weights(floats);
        ASSERT_NE(w.get(), nullptr);
        const uintptr_t addr = reinterpret_cast<uintptr_t>(w.get());
        EXPECT_EQ(addr % 64, 0u) << floats;
        for (size_t i = 0; i < floats; ++i) ASSERT_EQ(w.get()[i], 0.0f) << floats << " at " << i;
        w.get()[floats - 1] = 1.0f;
#if defined(__linux__)
        if (floats * sizeof(float) >= kHugeBytes) {
            EXPECT_EQ(addr % kHugeBytes, 0u) << floats;
            bool found = false;
            const bool advised = smaps_hugepage_advised(w.get(), &found);
            if (honoured) {
                EXPECT_TRUE(found) << "mapping not found in smaps";
                EXPECT_TRUE(advised) << "mapping not advised for huge pages";
            }
        }
#endif
    }
}

// Mid-sized weights (kWeightSlabFrom up to kHugeBytes) come out of shared 2 MiB huge-page slabs:
// zeroed, 64-byte aligned, not overlapping, each buffer alive (and writable) after every other
// one from its slab is gone.
TEST(KernelsIsa, WeightAllocCarvesMidSizedBuffersFromHugePageSlabs) {
    const size_t sizes[] = {kWeightSlabFrom / 4, 230400, 100001, 400000, kWeightSlabFrom / 4 + 3, 16385};
    std::vector<std::shared_ptr<float>> bufs;
    for (size_t floats : sizes) {
        std::shared_ptr<float> w = alloc_weights(floats);
        ASSERT_NE(w.get(), nullptr);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(w.get()) % 64, 0u) << floats;
        for (size_t i = 0; i < floats; ++i) ASSERT_EQ(w.get()[i], 0.0f) << floats << " at " << i;
        for (size_t i = 0; i < floats; ++i) w.get()[i] = float(bufs.size() + 1);
        bufs.push_back(std::move(w));
    }
    for (size_t b = 0; b < bufs.size(); ++b)  // no buffer overwrote another
        for (size_t i = 0; i < sizes[b]; ++i) ASSERT_EQ(bufs[b].get()[i], float(b + 1)) << b << " at " << i;
    std::shared_ptr<float> last = bufs.back();
    bufs.clear();  // the slab lives on through `last`
    for (size_t i = 0; i < sizes[5]; ++i) ASSERT_EQ(last.get()[i], 6.0f);
    last.get()[0] = 1.0f;
}

// A GEMV whose packed weights take the huge-page path (> 2 MiB), odd K and N, transB both ways,
// with bias and a fused activation.
TEST(KernelsIsa, GemvLargeWeightsMatchReference) {
    const int64_t K = 701, N = 777;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> a(static_cast<size_t>(K)), B(static_cast<size_t>(K * N)), bias(static_cast<size_t>(N));
    for (auto* v : {&a, &B, &bias})
        for (float& x : *v) x = u(rng);
    for (bool trans : {false, true}) {
        const int64_t ldb = trans ? K : N;
        std::vector<float> want(static_cast<size_t>(N));
        sgemm_reference(1, N, K, a.data(), K, B.data(), ldb, trans, bias.data(), want.data(), N, Act::kNone);
        const PackedGemv pg = pack_b_gemv(B.data(), K, N, ldb, trans);
        ASSERT_EQ(reinterpret_cast<uintptr_t>(pg.data.get()) % kHugeBytes, 0u);
        for (Isa isa : isas()) {
            std::vector<float> got(size_t(N) + 1, 7.0f);
            const Activation act{ActKind::kLeakyRelu, 0.1f, 0};
            sgemv_for(isa)(a.data(), pg, bias.data(), got.data(), act, false);
            for (int64_t j = 0; j < N; ++j)
                ASSERT_NEAR(got[size_t(j)], act_scalar(act, want[size_t(j)]), 2e-5f * (1 + std::sqrt(float(K))))
                    << isa_name(isa) << " trans " << trans << " at " << j;
            EXPECT_EQ(got[size_t(N)], 7.0f) << isa_name(isa) << " wrote past N";
        }
    }
}

// NaN and infinity in the inputs reach exactly the outputs they touch (the reference sums in
// double, so an inf meets no -inf here and the sign follows the product).
TEST(KernelsIsa, GemmAndGemvPropagateNaNAndInf) {
    const int64_t M = 6, K = 21, N = 37;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(0.25f, 1.0f);
    std::vector<float> A(static_cast<size_t>(M * K)), B(static_cast<size_t>(K * N));
    for (float& x : A) x = u(rng);
    for (float& x : B) x = (u(rng) > 0.6f ? -1.0f : 1.0f) * u(rng);
    A[size_t(1 * K + 4)] = kNaN;  // row 1: all NaN
    A[size_t(3 * K + 7)] = kInf;  // row 3: +-inf by the sign of B[7, n]
    B[size_t(9 * N + 5)] = -kInf;  // column 5: -inf (NaN in row 1, and in row 3 if B[7, 5] > 0)
    std::vector<float> want(static_cast<size_t>(M * N));
    sgemm_reference(M, N, K, A.data(), K, B.data(), N, false, nullptr, want.data(), N, Act::kNone);
    auto same = [](float g, float w) { return std::isnan(w) ? std::isnan(g) : (std::isinf(w) ? g == w : true); };
    for (Isa isa : isas()) {
        const PackedB pb = pack_b(B.data(), K, N, N, false, isa);
        std::vector<float> got(size_t(M * N), 3.0f);
        sgemm_for(isa)(M, A.data(), K, pb, nullptr, got.data(), N, Act::kNone);
        for (int64_t i = 0; i < M * N; ++i) {
            ASSERT_TRUE(same(got[size_t(i)], want[size_t(i)])) << isa_name(isa) << " gemm at " << i << " got "
                                                               << got[size_t(i)] << " want " << want[size_t(i)];
            if (std::isfinite(want[size_t(i)])) {
                ASSERT_NEAR(got[size_t(i)], want[size_t(i)], 1e-4f * (1 + std::sqrt(float(K)))) << isa_name(isa);
            }
        }
        const PackedGemv pg = pack_b_gemv(B.data(), K, N, N, false);
        for (int64_t m = 0; m < M; ++m) {
            std::vector<float> y(static_cast<size_t>(N));
            sgemv_for(isa)(A.data() + m * K, pg, nullptr, y.data(), Activation{}, false);
            for (int64_t n = 0; n < N; ++n)
                ASSERT_TRUE(same(y[size_t(n)], want[size_t(m * N + n)]))
                    << isa_name(isa) << " gemv row " << m << " col " << n << " got " << y[size_t(n)];
        }
    }
}

TEST(KernelsIsa, PackIntoMatchesPackB) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1, 1);
    for (Isa isa : isas())
        for (bool trans : {false, true}) {
            const int64_t K = 19, N = 45;
            std::vector<float> B(static_cast<size_t>(K * N));
            for (float& x : B) x = u(rng);
            const PackedB want = pack_b(B.data(), K, N, trans ? K : N, trans, isa);
            std::vector<float> buf(size_t(packed_floats(K, N, isa)), 123.0f);
            const PackedB got = packed_view(K, N, isa, buf.data());
            pack_b_into(B.data(), trans ? K : N, trans, got);
            const int64_t panels = (N + want.NR - 1) / want.NR;
            for (int64_t i = 0; i < panels * K * want.NR; ++i)
                ASSERT_EQ(buf[size_t(i)], want.data.get()[i]) << isa_name(isa) << " at " << i;
        }
}

// ---------------------------------------------------------------- conv kernels

struct ConvCase {
    int64_t C, H, W, M, kh, kw, sh, sw, dh, dw, ph, pw, pb, pr, G;
};

Conv2DGeom geom_of(const ConvCase& c, bool depthwise) {
    Conv2DGeom g;
    g.C = depthwise ? c.C : c.C / c.G;
    g.M = depthwise ? c.M : c.M / c.G;
    g.H = c.H;
    g.W = c.W;
    g.kh = c.kh;
    g.kw = c.kw;
    g.sh = c.sh;
    g.sw = c.sw;
    g.dh = c.dh;
    g.dw = c.dw;
    g.ph = c.ph;
    g.pw = c.pw;
    g.OH = (c.H + c.ph + c.pb - ((c.kh - 1) * c.dh + 1)) / c.sh + 1;
    g.OW = (c.W + c.pw + c.pr - ((c.kw - 1) * c.dw + 1)) / c.sw + 1;
    return g;
}

// The whole conv's geometry (all groups' channels) for the float64 reference of conv_ref.h.
Conv2DGeom whole_geom(const ConvCase& c) {
    Conv2DGeom g = geom_of(c, true);
    g.C = c.C;
    g.M = c.M;
    return g;
}

std::vector<float> rnd(int64_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = u(rng);
    return v;
}

void check_conv(const ConvCase& c, bool depthwise, const ConvEpi& e, bool with_res, uint32_t seed) {
    const Conv2DGeom g = geom_of(c, depthwise);
    const std::vector<float> x = rnd(c.C * c.H * c.W, seed, 2.0f), w = rnd(c.M * (c.C / c.G) * c.kh * c.kw, seed + 1);
    const std::vector<float> b = rnd(c.M, seed + 2), r = rnd(c.M * g.OH * g.OW, seed + 3);
    const std::vector<double> want = conv_ref(whole_geom(c), x, w, b.data(), with_res ? r.data() : nullptr, e, c.G);
    for (Isa isa : isas()) {
        std::vector<float> y(want.size() + 1, 12345.0f);
        if (depthwise) {
            std::vector<float> scratch(conv_dw_scratch_floats(g));
            conv_depthwise(isa, g, x.data(), w.data(), b.data(), with_res ? r.data() : nullptr, y.data(), e,
                           scratch.data());
        } else {
            const ConvGemm cg(isa, g, c.G);
            std::vector<float> wp(cg.packed_w_floats()), scratch(cg.scratch_floats());
            cg.pack_w(w.data(), wp.data());
            cg.run(x.data(), wp.data(), b.data(), with_res ? r.data() : nullptr, y.data(), scratch.data(), e);
        }
        for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(y[i], want[i], 4e-5 * (1 + std::abs(want[i])))
                << isa_name(isa) << (depthwise ? " depthwise" : " gemm") << " C" << c.C << " " << c.H << "x" << c.W
                << " M" << c.M << " k" << c.kh << "x" << c.kw << " s" << c.sh << " act " << int(e.act) << " res "
                << with_res << " at " << i;
        EXPECT_EQ(y[want.size()], 12345.0f) << isa_name(isa) << " wrote past the output";
    }
}

TEST(KernelsIsa, ConvGemmMatchesDirectReference) {
    const ConvCase cases[] = {
        // C  H   W   M  kh kw sh sw dh dw ph pw pb pr G
        {3, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     // padded 3x3 (implicit GEMM), odd M
        {8, 5, 13, 13, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},   // pointwise, 65 pixels
        {5, 10, 17, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},   // stride 2 (im2col)
        {4, 9, 12, 11, 3, 2, 1, 2, 2, 1, 2, 0, 1, 3, 1},   // dilation, asymmetric pads
        {16, 6, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},   // grouped
        {40, 4, 5, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   // K = 360 > one chunk
        {3, 1, 40, 4, 1, 5, 1, 3, 1, 1, 0, 2, 0, 1, 1},    // 1-D shaped, stride 3
        {3, 9, 8, 5, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1},     // unpadded stride 1
        {3, 9, 75, 6, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 1},    // unpadded stride 2, wide rows
        {40, 7, 7, 90, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},   // transposed mode: 7x7 pointwise
        {20, 7, 7, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   // transposed mode: 7x7 3x3, K = 180
    };
    uint32_t seed = 1;
    for (const ConvCase& c : cases) {
        check_conv(c, false, ConvEpi{}, false, seed++);
        if (HasFatalFailure()) return;
    }
}

TEST(KernelsIsa, ConvDepthwiseMatchesDirectReference) {
    const ConvCase cases[] = {
        {3, 9, 37, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3},   // strips + tails
        {4, 11, 41, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 4},  // stride 2
        {2, 8, 30, 2, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 2},   // 5x5
        {2, 9, 31, 2, 3, 3, 1, 3, 2, 2, 2, 2, 1, 0, 2},   // dilation, stride 3
        {3, 5, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3},    // narrower than a vector
    };
    uint32_t seed = 100;
    for (const ConvCase& c : cases) {
        check_conv(c, true, ConvEpi{}, false, seed++);
        if (HasFatalFailure()) return;
    }
}

TEST(KernelsIsa, ConvEpilogueEveryActivationAndResidual) {
    const ConvCase gemm{5, 6, 9, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const ConvCase dw{3, 6, 21, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3};
    const ConvAct acts[] = {ConvAct::kNone,        ConvAct::kRelu,      ConvAct::kLeakyRelu, ConvAct::kClip,
                            ConvAct::kHardSigmoid, ConvAct::kHardSwish, ConvAct::kSigmoid,   ConvAct::kTanh,
                            ConvAct::kSilu};
    uint32_t seed = 200;
    for (ConvAct a : acts)
        for (bool res : {false, true}) {
            ConvEpi e;
            e.act = a;
            e.alpha = a == ConvAct::kClip ? -0.3f : a == ConvAct::kHardSigmoid ? 0.25f : 0.07f;
            e.beta = a == ConvAct::kClip ? 0.4f : 0.45f;
            check_conv(gemm, false, e, res, seed++);
            check_conv(dw, true, e, res, seed++);
            if (HasFatalFailure()) return;
        }
    // conv_epilogue on its own, odd lengths, with and without a residual.
    for (Isa isa : isas())
        for (int64_t n : {int64_t(1), int64_t(5), int64_t(19)}) {
            ConvEpi e;
            e.act = ConvAct::kHardSwish;
            std::vector<float> y = rnd(n, 5, 4.0f), r = rnd(n, 6);
            std::vector<float> got = y;
            conv_epilogue(isa, got.data(), r.data(), n, e);
            for (int64_t i = 0; i < n; ++i)
                ASSERT_NEAR(got[size_t(i)], act_ref(double(y[size_t(i)]) + r[size_t(i)], e),
                            1e-6 * (1 + std::abs(got[size_t(i)])))
                    << isa_name(isa) << " n " << n << " at " << i;
        }
}

// The phase mosaic of dilated convs: split and merge on every ISA equal the definition (they only
// move floats: bit for bit, NaN and -0 included), dilations 2-9 (the AVX-512 path takes 2-8, 16
// columns a phase at a time, the rest one at a time), widths with and without a tail, a channel
// range; neither writes outside its cells (the mosaic's separators, the channels outside the range).
TEST(KernelsIsa, PhaseMosaicSplitAndMergeMoveEveryFloat) {
    struct Sz {
        int64_t dl, hs, ws;
    };
    const Sz sizes[] = {{2, 3, 16}, {2, 2, 37}, {3, 2, 33}, {4, 3, 16}, {5, 2, 32}, {5, 3, 21}, {7, 2, 18}, {8, 2, 48},
                        {9, 2, 17}};
    const float sentinel = 12345.0f;
    for (Isa isa : isas())
        for (const Sz& z : sizes) {
            const int64_t C = 3, dl = z.dl, kh = 3, kw = 5;  // separators of kh - 1 rows, kw - 1 columns
            PhaseMosaic p;
            p.H = dl * z.hs, p.W = dl * z.ws, p.dl = dl;
            p.sh = z.hs + kh - 1, p.sw = z.ws + kw - 1;
            p.MW = p.W + (dl - 1) * (kw - 1), p.MP = (p.H + (dl - 1) * (kh - 1)) * p.MW;
            std::vector<float> x = rnd(C * p.H * p.W, uint32_t(dl * 31 + z.ws), 3.0f);
            x[1] = std::numeric_limits<float>::quiet_NaN();
            x[2] = -0.0f;
            std::vector<float> m(size_t(C * p.MP), sentinel), y(x.size(), sentinel);
            phase_split(isa, p, x.data(), m.data(), 1, 3);  // channels 1, 2 only
            phase_split(isa, p, x.data(), m.data(), 0, 1);
            std::vector<char> cell(m.size(), 0);
            for (int64_t c = 0; c < C; ++c)
                for (int64_t r = 0; r < p.H; ++r)
                    for (int64_t col = 0; col < p.W; ++col) {
                        const int64_t a = r % dl, i = r / dl, b = col % dl, j = col / dl;
                        const size_t at = size_t(c * p.MP + (a * p.sh + i) * p.MW + b * p.sw + j);
                        cell[at] = 1;
                        const float want = x[size_t((c * p.H + r) * p.W + col)];
                        ASSERT_EQ(std::memcmp(&m[at], &want, 4), 0)
                            << isa_name(isa) << " dl " << dl << " ws " << z.ws << " c " << c << " row " << r
                            << " col " << col << ": " << m[at] << " want " << want;
                    }
            for (size_t i = 0; i < m.size(); ++i)
                if (!cell[i]) ASSERT_EQ(m[i], sentinel) << isa_name(isa) << " dl " << dl << " separator " << i;
            phase_merge(isa, p, m.data(), y.data(), 0, 2);  // channels 0, 1: channel 2 untouched
            for (size_t i = 0; i < y.size(); ++i) {
                if (int64_t(i) >= 2 * p.H * p.W) {
                    ASSERT_EQ(y[i], sentinel) << isa_name(isa) << " dl " << dl << " merge wrote channel 2 at " << i;
                    continue;
                }
                ASSERT_EQ(std::memcmp(&y[i], &x[i], 4), 0)
                    << isa_name(isa) << " dl " << dl << " ws " << z.ws << " merge at " << i << ": " << y[i];
            }
        }
}

}  // namespace
