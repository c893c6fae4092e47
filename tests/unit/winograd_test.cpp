// Winograd F(2,3) / F(4,3) conv (src/kernels/winograd.h) against a float64 direct conv on every
// ISA this CPU has: odd planes (not tile multiples), channel counts off the microkernel's blocks,
// padding 0 / 1 / 2, several tile blocks, bias, residual and activations, in both orientations
// (normal: tiles on the microkernel's lanes; transposed: output channels on them). Engine-free.
#include "kernels/cpu.h"
#include "kernels/winograd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "conv_ref.h"
#include "isa_util.h"
#include "kernels/conv.h"

using namespace jiffy::kernels;

using namespace jiffy::testisa;

namespace {

Conv2DGeom geom(int64_t C, int64_t M, int64_t H, int64_t W, int64_t pad, int64_t pad_end) {
    Conv2DGeom g;
    g.C = C, g.M = M, g.H = H, g.W = W, g.kh = g.kw = 3, g.ph = g.pw = pad;
    g.OH = H + pad + pad_end - 2;
    g.OW = W + pad + pad_end - 2;
    return g;
}

struct Case {
    int64_t C, M, H, W, pad, pad_end;
    bool bias, res;
    ConvAct act;
};

// Max over outputs of |y - ref| / (sum |w x| + |b| + |r| + 1e-30): the error relative to the
// magnitude of the terms summed. g: any kernel size Winograd::suits (3x3, 1x3, 3x1).
double max_rel_err(Isa isa, int m, bool trans, const Conv2DGeom& g, const Case& c, uint32_t seed) {
    const int64_t P = g.OH * g.OW, ks = g.kh * g.kw;
    const std::vector<float> x = rnd(g.C * g.H * g.W, seed, 1.0f);
    const std::vector<float> w = rnd(g.M * g.C * ks, seed + 1, 0.5f);
    const std::vector<float> b = rnd(g.M, seed + 2, 0.5f);
    const std::vector<float> r = rnd(g.M * P, seed + 3, 1.0f);
    ConvEpi e;
    e.act = c.act;
    if (c.act == ConvAct::kClip) e.alpha = -0.5f, e.beta = 0.75f;
    Winograd wg(isa, g, m, trans);
    std::vector<float> wp(wg.packed_w_floats()), scratch(wg.scratch_floats());
    wg.pack_w(w.data(), wp.data());
    // Canaries past the output catch stores outside it.
    std::vector<float> y(size_t(g.M * P) + 64, 12345.0f);
    wg.run(x.data(), wp.data(), c.bias ? b.data() : nullptr, c.res ? r.data() : nullptr, y.data(),
           scratch.data(), e);
    for (size_t i = size_t(g.M * P); i < y.size(); ++i) EXPECT_EQ(y[i], 12345.0f) << "store past Y";
    double worst = 0;
    for (int64_t mo = 0; mo < g.M; ++mo)
        for (int64_t oy = 0; oy < g.OH; ++oy)
            for (int64_t ox = 0; ox < g.OW; ++ox) {
                double s = c.bias ? b[size_t(mo)] : 0.0, mag = std::abs(s);
                for (int64_t ci = 0; ci < g.C; ++ci)
                    for (int64_t ky = 0; ky < g.kh; ++ky)
                        for (int64_t kx = 0; kx < g.kw; ++kx) {
                            const int64_t iy = oy + ky - g.ph, ix = ox + kx - g.pw;
                            if (iy < 0 || iy >= g.H || ix < 0 || ix >= g.W) continue;
                            const double t = double(w[size_t((mo * g.C + ci) * ks + ky * g.kw + kx)]) *
                                             x[size_t((ci * g.H + iy) * g.W + ix)];
                            s += t;
                            mag += std::abs(t);
                        }
                const int64_t o = mo * P + oy * g.OW + ox;
                if (c.res) {
                    s += r[size_t(o)];
                    mag += std::abs(r[size_t(o)]);
                }
                const double want = act_ref(s, e);
                // Sigmoid / tanh round in float on their own (a few ulps of the output): not the
                // conv's error, which a 1-term sum (a 1x3 kernel over a pad of 2) would inflate.
                const double own = deferred_act_kind(c.act) ? 5e-7 * std::abs(want) : 0.0;
                const double err = std::max(0.0, std::abs(double(y[size_t(o)]) - want) - own) / (mag + 1e-30);
                if (!(err <= worst)) worst = std::isnan(err) ? 1e9 : err;
            }
    return worst;
}

double max_rel_err(Isa isa, int m, bool trans, const Case& c, uint32_t seed) {
    return max_rel_err(isa, m, trans, geom(c.C, c.M, c.H, c.W, c.pad, c.pad_end), c, seed);
}

TEST(Winograd, MatchesDirectConvOnEveryIsa) {
    const Case cases[] = {
        {3, 5, 7, 9, 1, 1, true, false, ConvAct::kNone},      // tiny, odd plane
        {17, 19, 13, 11, 0, 0, true, true, ConvAct::kRelu},   // no padding, residual + relu
        {16, 33, 5, 6, 1, 1, false, false, ConvAct::kRelu},   // M past a 32 block
        {20, 13, 3, 3, 0, 0, true, false, ConvAct::kClip},    // one output pixel
        {8, 7, 4, 23, 2, 2, false, true, ConvAct::kSigmoid},  // pad 2, wide row
        {9, 12, 6, 5, 1, 0, true, false, ConvAct::kNone},     // asymmetric pad
        {40, 24, 31, 29, 1, 1, true, true, ConvAct::kRelu},   // several tile blocks
        {300, 14, 6, 7, 1, 1, true, false, ConvAct::kNone},   // C in several chunks
        {37, 45, 7, 7, 1, 1, true, true, ConvAct::kRelu},     // 7x7 plane, M past an NR panel
        {24, 70, 14, 14, 1, 1, false, true, ConvAct::kClip},  // 14x14, several M panels
    };
    for (Isa isa : jiffy::testisa::isas())
        for (bool trans : {false, true})
            for (int m : {2, 4})
                for (const Case& c : cases) {
                    const double err = max_rel_err(isa, m, trans, c, uint32_t(c.C * 31 + c.M));
                    if (std::getenv("WINO_VERBOSE"))
                        std::printf("%s F%d%s C=%d M=%d err %.3g\n", isa_name(isa), m, trans ? "t" : "", int(c.C),
                                    int(c.M), err);
                    // Relative to the summed magnitudes: F(2,3) rounds like a direct conv; F(4,3)'s
                    // transforms (entries up to 8, 1/24) lose a few more bits.
                    EXPECT_LT(err, m == 2 ? 2e-6 : 2e-5)
                        << isa_name(isa) << " F(" << m << ",3)" << (trans ? " trans" : "") << " C=" << c.C
                        << " M=" << c.M << " " << c.H << "x" << c.W << " pad " << c.pad << "/" << c.pad_end;
                }
}

// 1-D F(m,3) for 1x3 (tiles 1 x m along the rows) and 3x1 (m x 1 down the columns) kernels, the
// pad given applying to the kernel's long axis only (as openWakeWord's 1x3 convs, pads 0,1,0,1),
// or to both (1x3 with a pad along H: rows of bias only).
TEST(Winograd, OneDimensionalMatchesDirectConvOnEveryIsa) {
    const Case cases[] = {
        {3, 5, 7, 9, 1, 1, true, false, ConvAct::kNone},       // tiny, odd plane
        {17, 19, 13, 11, 0, 0, true, true, ConvAct::kRelu},    // no padding, residual + relu
        {16, 33, 5, 6, 1, 1, false, false, ConvAct::kRelu},    // M past a 32 block
        {20, 13, 3, 3, 0, 0, true, false, ConvAct::kClip},     // one output line
        {8, 7, 4, 23, 2, 2, false, true, ConvAct::kSigmoid},   // pad 2, wide row
        {9, 12, 6, 5, 1, 0, true, false, ConvAct::kNone},      // asymmetric pad
        {9, 12, 6, 8, 1, 0, true, true, ConvAct::kNone},       // asymmetric pad, W a tile multiple
        {24, 24, 38, 32, 1, 1, true, true, ConvAct::kRelu},    // embedding_model's 32 columns
        {300, 14, 6, 7, 1, 1, true, false, ConvAct::kNone},    // C in several chunks
        {72, 96, 14, 4, 1, 1, true, true, ConvAct::kRelu},     // small plane, M past an NR panel
        {96, 96, 10, 2, 0, 0, false, true, ConvAct::kClip},    // 2 columns
        {40, 36, 33, 17, 1, 1, true, false, ConvAct::kNone},   // odd, several tile rows per vector
        {300, 6, 40, 7, 1, 1, false, true, ConvAct::kRelu},    // several tile blocks
    };
    for (Isa isa : jiffy::testisa::isas())
        for (int kind : {1, 2, 3})  // 1x3 (pad along W), 3x1 (pad along H), 1x3 padded along both
            for (bool trans : {false, true})
                for (int m : {2, 4})
                    for (const Case& c : cases) {
                        Conv2DGeom g;
                        g.C = c.C, g.M = c.M, g.H = c.H, g.W = c.W;
                        g.kh = kind == 2 ? 3 : 1;
                        g.kw = kind == 2 ? 1 : 3;
                        g.ph = kind == 1 ? 0 : c.pad;
                        g.pw = kind == 2 ? 0 : c.pad;
                        g.OH = c.H + (kind == 1 ? 0 : c.pad + c.pad_end) - g.kh + 1;
                        g.OW = c.W + (kind == 2 ? 0 : c.pad + c.pad_end) - g.kw + 1;
                        if (g.OH < 1 || g.OW < 1) continue;
                        ASSERT_TRUE(Winograd::suits(g));
                        const double err = max_rel_err(isa, m, trans, g, c, uint32_t(c.C * 31 + c.M + kind));
                        if (std::getenv("WINO_VERBOSE"))
                            std::printf("%s %lldx%lld F%d%s C=%d M=%d err %.3g\n", isa_name(isa),
                                        (long long)g.kh, (long long)g.kw, m, trans ? "t" : "", int(c.C), int(c.M),
                                        err);
                        EXPECT_LT(err, m == 2 ? 2e-6 : 1e-5)
                            << isa_name(isa) << " " << g.kh << "x" << g.kw << " F(" << m << ",3)"
                            << (trans ? " trans" : "") << " C=" << c.C << " M=" << c.M << " " << c.H << "x" << c.W
                            << " pad " << c.pad << "/" << c.pad_end;
                    }
}

// Splitting the output channels (as the thread pool does) gives the same bits in the transposed
// orientation: every channel's sums run in the same order whatever M is.
TEST(Winograd, TransposedChannelSplitIsBitwiseEqual) {
    for (Isa isa : jiffy::testisa::isas())
        for (int m : {2, 4}) {
            const Conv2DGeom g = geom(40, 50, 9, 9, 1, 1);
            const int64_t P = g.OH * g.OW, split = 24;
            const std::vector<float> x = rnd(g.C * g.H * g.W, 5), w = rnd(g.M * g.C * 9, 6, 0.3f),
                                     b = rnd(g.M, 7);
            const ConvEpi e{ConvAct::kRelu};
            auto run = [&](int64_t m0, int64_t m1, float* y) {
                Conv2DGeom gp = g;
                gp.M = m1 - m0;
                Winograd wg(isa, gp, m, true);
                std::vector<float> wp(wg.packed_w_floats()), scratch(wg.scratch_floats());
                wg.pack_w(w.data() + m0 * g.C * 9, wp.data());
                wg.run(x.data(), wp.data(), b.data() + m0, nullptr, y + m0 * P, scratch.data(), e);
            };
            std::vector<float> whole(size_t(g.M * P)), parts(whole.size());
            run(0, g.M, whole.data());
            run(0, split, parts.data());
            run(split, g.M, parts.data());
            EXPECT_EQ(whole, parts) << isa_name(isa) << " F(" << m << ",3)";
        }
}

// A split by tiles (as the thread pool does it) gives the same bits as one run, in the transposed
// orientation (each part its tiles into the shared pixel-major yt and Y's rows of its own whole
// tile rows, then finish_rows for the tile rows that parts share): 3x3, 1x3 and 3x1 kernels, tile
// ranges that start and end inside a tile row (one part within a single row), edge tiles past the
// plane (odd sizes), a residual and a deferred activation (Sigmoid).
TEST(Winograd, TileSplitIsBitwiseEqual) {
    for (Isa isa : jiffy::testisa::isas())
        for (int m : {2, 4})
            for (int kind : {0, 1, 2}) {
                Conv2DGeom g = geom(24, 37, 11, 13, 1, 1);
                if (kind == 1) g.kh = 1, g.ph = 0, g.OH = g.H;
                if (kind == 2) g.kw = 1, g.pw = 0, g.OW = g.W;
                if (!Winograd::suits(g)) continue;
                const int64_t P = g.OH * g.OW, ks = g.kh * g.kw;
                const std::vector<float> x = rnd(g.C * g.H * g.W, 15), w = rnd(g.M * g.C * ks, 16, 0.3f),
                                         b = rnd(g.M, 17), r = rnd(g.M * P, 18);
                const ConvEpi e{ConvAct::kSigmoid};
                Winograd wg(isa, g, m, true);
                std::vector<float> wp(wg.packed_w_floats());
                wg.pack_w(w.data(), wp.data());
                std::vector<float> whole(size_t(g.M * P)), scratch(wg.scratch_floats());
                wg.run(x.data(), wp.data(), b.data(), r.data(), whole.data(), scratch.data(), e);
                const int64_t T = wg.args().T;
                std::vector<float> parts(size_t(g.M * P) + 16, 12345.0f), yt(wg.yt_floats());
                const int64_t cuts[] = {0, T / 3, T / 3 + 1, (2 * T) / 3 + 1, T};  // one part of 1 tile
                for (int i = 3; i >= 0; --i)  // the parts in reverse order
                    wg.run_tiles(x.data(), wp.data(), b.data(), r.data(), parts.data(), scratch.data(), e,
                                 cuts[i], cuts[i + 1], yt.data());
                std::vector<int64_t> shared;
                for (int i = 1; i < 4; ++i)
                    if (const int64_t tr = wg.shared_row(cuts[i]); tr >= 0 && (shared.empty() || shared.back() != tr))
                        shared.push_back(tr);
                ASSERT_FALSE(shared.empty());
                for (int64_t tr : shared) wg.finish_rows(yt.data(), b.data(), r.data(), parts.data(), e, tr, tr + 1);
                for (size_t i = size_t(g.M * P); i < parts.size(); ++i) ASSERT_EQ(parts[i], 12345.0f);
                parts.resize(size_t(g.M * P));
                EXPECT_EQ(whole, parts) << isa_name(isa) << " F(" << m << ",3) kind " << kind;
            }
}

TEST(Winograd, Suits3x3And1DStride1) {
    Conv2DGeom g = geom(8, 8, 10, 10, 1, 1);
    EXPECT_TRUE(Winograd::suits(g));
    g.sh = 2;
    EXPECT_FALSE(Winograd::suits(g));
    g = geom(8, 8, 10, 10, 1, 1);
    g.dw = 2;
    EXPECT_FALSE(Winograd::suits(g));
    g = geom(8, 8, 10, 10, 1, 1);
    g.kw = 1;  // 3x1: the 1-D kind
    EXPECT_TRUE(Winograd::suits(g));
    EXPECT_EQ(Winograd::kind_of(g), 2);
    g.kh = 1;  // 1x1
    EXPECT_FALSE(Winograd::suits(g));
    g.kw = 3;  // 1x3
    EXPECT_TRUE(Winograd::suits(g));
    EXPECT_EQ(Winograd::kind_of(g), 1);
    g.kw = 5;
    EXPECT_FALSE(Winograd::suits(g));
    g.kw = 3;
    g.sw = 2;
    EXPECT_FALSE(Winograd::suits(g));
}

}  // namespace

namespace {

// The cost model's picks on the shapes it was fitted on (docs/winograd.md): F(4,3) on large
// planes, F(2,3) on 14x14 and 7x7 (transposed: output channels on the lanes), the normal
// orientation where few output channels would fill a panel's lanes, the direct conv where the
// transforms dominate (few channels).
TEST(Winograd, ChoiceFollowsTheCostModel) {
    if (std::getenv("JIFFY_WINOGRAD")) GTEST_SKIP() << "JIFFY_WINOGRAD overrides the choice";
    // Intel cores: the transposed variants discounted on planes of many tiles when picking the
    // orientation (winograd_speedup; measured on a Sapphire / Emerald Rapids Xeon); whether
    // Winograd at all, and the tile size, stay the fitted model's call.
    const bool intel = tuning_vendor() == CpuVendor::kIntel;
    auto pick = [](const Conv2DGeom& g) {
        const WinoPick p = winograd_choice(Isa::kAvx512, g);
        return p.m * 10 + (p.trans ? 1 : 0);
    };
    // 56x56 (196 tiles): F(4,3) transposed (Zen 5), normal (Intel: 1.22x faster there).
    EXPECT_EQ(pick(geom(64, 64, 56, 56, 1, 1)), intel ? 40 : 41);
    // 14x14: F(2,3) transposed (F(4,3) not 10% better by the fit; on Intel 1.12x faster hot but
    // ~10% slower in ResNet-50, its transformed weights from DRAM: the tile size stays the fit's).
    EXPECT_EQ(pick(geom(256, 256, 14, 14, 1, 1)), 21);
    EXPECT_EQ(pick(geom(512, 512, 7, 7, 1, 1)), 21);
    EXPECT_EQ(pick(geom(96, 24, 160, 160, 1, 1)), 40);  // M = 24 of a 32-lane panel: normal
    EXPECT_EQ(pick(geom(32, 32, 160, 160, 1, 1)), intel ? 40 : 41);  // the line detector's
    EXPECT_EQ(pick(geom(16, 16, 160, 160, 1, 1)), 0);
    Conv2DGeom s2 = geom(64, 64, 56, 56, 1, 1);
    s2.sh = s2.sw = 2;
    EXPECT_EQ(pick(s2), 0);
    // 1-D (openWakeWord's embedding_model): F(4,3) from 24 channels, transposed on the small
    // planes, the direct conv for few channels.
    auto g1 = [](int64_t C, int64_t M, int64_t H, int64_t W, bool row) {
        Conv2DGeom g;
        g.C = C, g.M = M, g.H = H, g.W = W, g.kh = row ? 1 : 3, g.kw = row ? 3 : 1, g.pw = row ? 1 : 0;
        g.OH = row ? H : H - 2, g.OW = W;
        return g;
    };
    EXPECT_EQ(pick(g1(72, 72, 30, 8, true)), 40);
    EXPECT_EQ(pick(g1(72, 72, 30, 8, false)), 40);
    EXPECT_EQ(pick(g1(48, 48, 34, 16, true)), 40);
    EXPECT_EQ(pick(g1(24, 24, 74, 32, true)), 40);
    // YOLO's 32 x 40x40 (100 tiles): F(4,3) transposed on both (on Intel 170-200 against
    // 235-245 us normal, in the model).
    EXPECT_EQ(pick(geom(32, 32, 40, 40, 1, 1)), 41);
    EXPECT_EQ(pick(g1(96, 96, 12, 4, true)), 41);
    EXPECT_EQ(pick(g1(96, 96, 12, 4, false)), 41);
    EXPECT_EQ(pick(g1(8, 8, 74, 32, true)), 0);
    EXPECT_EQ(pick(g1(8, 8, 74, 32, false)), 0);
}

}  // namespace
