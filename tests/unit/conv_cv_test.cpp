// The channel-vector conv (src/kernels/conv_cv.h: output channels on the vector, pixels broadcast,
// padded taps copied per run) on every ISA this machine has, against a plain float64 convolution:
// embedding_model's 1x3 / 3x1 layers, odd channel counts (M not a multiple of the vector, panels
// of one vector), 2-D kernels with padding and dilation, taps entirely in the padding, one pixel,
// 64 pixels (kMaxPixels), MobileNetV2's 960 -> 160 on 7x7, every epilogue with and without a residual, and the fused clamp.
// Engine-free (the aarch64 kernels-only build runs it too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "conv_ref.h"
#include "isa_util.h"
#include "kernels/conv_cv.h"

using namespace jiffy::kernels;
using namespace jiffy::testisa;

namespace {

// Stride 1; pads top / left / bottom / right.
Conv2DGeom geom(int64_t C, int64_t H, int64_t W, int64_t M, int64_t kh, int64_t kw, int64_t dh, int64_t dw,
                int64_t ph, int64_t pw, int64_t pb, int64_t pr) {
    Conv2DGeom g;
    g.C = C, g.H = H, g.W = W, g.M = M, g.kh = kh, g.kw = kw, g.dh = dh, g.dw = dw, g.ph = ph, g.pw = pw;
    g.OH = H + ph + pb - ((kh - 1) * dh + 1) + 1;
    g.OW = W + pw + pr - ((kw - 1) * dw + 1) + 1;
    return g;
}

void check(const Conv2DGeom& g, const ConvEpi& e, bool bias, bool res, uint32_t seed, const std::string& what) {
    ASSERT_TRUE(ConvChanVec::fits(g)) << what;
    const int64_t xn = g.C * g.H * g.W, wn = g.M * g.C * g.kh * g.kw, yn = g.M * g.OH * g.OW;
    const auto x = rnd(xn, seed, 2.0f), w = rnd(wn, seed + 1), b = rnd(g.M, seed + 2), r = rnd(yn, seed + 3);
    const auto want = conv_ref(g, x, w, bias ? b.data() : nullptr, res ? r.data() : nullptr, e);
    double mag = 1;
    for (double v : want) mag = std::max(mag, std::abs(v));
    const double tol = 2e-6 * mag * std::sqrt(double(g.C * g.kh * g.kw));
    for (Isa isa : isas()) {
        ConvChanVec cv(isa, g, w.data());
        // NaN scratch: any read of a scratch value the kernel did not write shows in the output.
        std::vector<float> scratch(cv.scratch_floats(), NAN), y(size_t(yn + 64), 12345.0f);
        // Twice: the second run reuses the scratch the first one left.
        for (int rep = 0; rep < 2; ++rep)
            cv.run(x.data(), bias ? b.data() : nullptr, res ? r.data() : nullptr, y.data(), scratch.data(), e);
        for (int64_t i = 0; i < yn; ++i)
            ASSERT_NEAR(y[size_t(i)], want[size_t(i)], tol) << what << " isa " << isa_name(isa) << " element " << i;
        for (int64_t i = yn; i < yn + 64; ++i)
            ASSERT_EQ(y[size_t(i)], 12345.0f) << what << " isa " << isa_name(isa) << ": wrote past the output";
        EXPECT_NE(cv.describe().find(isa_name(isa)), std::string::npos) << cv.describe();
    }
}

TEST(ConvChanVec, MatchesReferenceOnOddShapesEveryIsa) {
    struct C {
        int64_t C, H, W, M, kh, kw, dh, dw, ph, pw, pb, pr;
    };
    const C cases[] = {
        {96, 12, 4, 96, 1, 3, 1, 1, 0, 1, 0, 1},  // embedding_model 1x3 (two taps copied)
        {96, 12, 4, 96, 3, 1, 1, 1, 0, 0, 0, 0},  // embedding_model 3x1 (every tap direct)
        {72, 14, 4, 96, 1, 3, 1, 1, 0, 1, 0, 1},  // 72 -> 96, 56 pixels
        {96, 8, 2, 96, 1, 3, 1, 1, 0, 1, 0, 1},   // 16 pixels, rows of 2
        {5, 7, 3, 37, 3, 3, 1, 1, 1, 1, 1, 1},    // 2-D, M = 37 (a partial panel)
        {3, 6, 5, 19, 3, 3, 2, 2, 2, 2, 2, 2},    // dilation 2
        {4, 5, 6, 33, 2, 3, 1, 1, 1, 2, 0, 0},    // asymmetric pads
        {7, 8, 8, 40, 3, 3, 1, 1, 1, 1, 1, 1},    // 64 pixels (kMaxPixels)
        {2, 2, 2, 16, 5, 5, 1, 1, 2, 2, 2, 2},    // pads wider than the input: taps wholly outside
        {6, 1, 1, 48, 1, 1, 1, 1, 0, 0, 0, 0},    // one pixel, one tap
        {3, 4, 4, 1, 3, 3, 1, 1, 1, 1, 1, 1},     // one output channel
        {9, 3, 5, 24, 3, 1, 1, 1, 0, 0, 0, 0},    // M = 24: one full panel and one of 8
        {160, 7, 7, 40, 1, 1, 1, 1, 0, 0, 0, 0},  // 1x1 on 7x7 (MobileNetV2-like, M = 40)
        {37, 5, 3, 33, 1, 1, 1, 1, 0, 0, 0, 0},   // 1x1, 15 pixels, odd C and M
        // Next-panel weight prefetches (conv_cv_impl.h): MobileNetV2's 960 -> 160 on 7x7 (five
        // pixel blocks, the last panel of one vector), a 5x5 plane, and one pixel block (P <= MR).
        {960, 7, 7, 160, 1, 1, 1, 1, 0, 0, 0, 0},
        {320, 5, 5, 48, 1, 1, 1, 1, 0, 0, 0, 0},
        {64, 3, 4, 80, 1, 1, 1, 1, 0, 0, 0, 0},
    };
    uint32_t seed = 1;
    for (const C& c : cases) {
        const Conv2DGeom g = geom(c.C, c.H, c.W, c.M, c.kh, c.kw, c.dh, c.dw, c.ph, c.pw, c.pb, c.pr);
        const std::string what = "C" + std::to_string(c.C) + " " + std::to_string(c.H) + "x" + std::to_string(c.W) +
                                 " M" + std::to_string(c.M) + " k" + std::to_string(c.kh) + "x" + std::to_string(c.kw);
        check(g, ConvEpi{}, true, false, seed++, what);
        check(g, ConvEpi{}, false, false, seed++, what + " no bias");
    }
}

TEST(ConvChanVec, EveryEpilogueWithAndWithoutResidual) {
    const ConvAct acts[] = {ConvAct::kNone, ConvAct::kRelu, ConvAct::kLeakyRelu, ConvAct::kClip,
                            ConvAct::kHardSigmoid, ConvAct::kHardSwish, ConvAct::kSigmoid, ConvAct::kTanh, ConvAct::kSilu};
    const Conv2DGeom shapes[] = {geom(11, 5, 3, 21, 1, 3, 1, 1, 0, 1, 0, 1), geom(8, 9, 4, 35, 3, 1, 1, 1, 0, 0, 0, 0)};
    uint32_t seed = 100;
    for (const Conv2DGeom& g : shapes)
        for (ConvAct a : acts)
            for (int variant = 0; variant < 3; ++variant) {  // plain, residual, residual + clamp
                ConvEpi e;
                e.act = a;
                e.alpha = a == ConvAct::kClip ? -0.3f : 0.2f;
                e.beta = a == ConvAct::kClip ? 0.4f : 0.5f;
                if (variant == 2 && a != ConvAct::kNone) {
                    e.clamp = true;
                    e.lo = -0.05f;
                    e.hi = 0.35f;
                }
                check(g, e, true, variant > 0, seed++,
                      "act " + std::to_string(int(a)) + " variant " + std::to_string(variant));
            }
}

TEST(ConvChanVec, ChosenForSmallPlanesOnly) {
    for (Isa isa : isas()) {
        // embedding_model's 96 -> 96 layers on 12x4 and 8x2 planes (48 and 16 pixels).
        EXPECT_TRUE(ConvChanVec::preferred(isa, geom(96, 12, 4, 96, 1, 3, 1, 1, 0, 1, 0, 1))) << isa_name(isa);
        EXPECT_TRUE(ConvChanVec::preferred(isa, geom(96, 10, 2, 96, 3, 1, 1, 1, 0, 0, 0, 0))) << isa_name(isa);
        // 64 pixels fill the AVX-512 GEMM conv's lanes: kept there; elsewhere (no masked implicit
        // GEMM) the channel-vector conv still wins.
        EXPECT_EQ(ConvChanVec::preferred(isa, geom(16, 8, 8, 96, 3, 3, 1, 1, 1, 1, 1, 1)), isa != Isa::kAvx512)
            << isa_name(isa);
        // Its large planes (the GEMM conv fills every lane), one pixel, stride 2.
        EXPECT_FALSE(ConvChanVec::preferred(isa, geom(24, 74, 32, 24, 1, 3, 1, 1, 0, 1, 0, 1)));
        EXPECT_FALSE(ConvChanVec::preferred(isa, geom(96, 3, 1, 96, 3, 1, 1, 1, 0, 0, 0, 0)));
        // 1x1 on 7x7: AVX-512 only, reductions (M <= C) only, and only with weights up to 2 MiB
        // (MobileNetV2 960 -> 320 yes, 320 -> 1280 no, ResNet-50 512 -> 2048 no).
        EXPECT_EQ(ConvChanVec::preferred(isa, geom(960, 7, 7, 320, 1, 1, 1, 1, 0, 0, 0, 0)), isa == Isa::kAvx512)
            << isa_name(isa);
        EXPECT_FALSE(ConvChanVec::preferred(isa, geom(320, 7, 7, 1280, 1, 1, 1, 1, 0, 0, 0, 0)));
        EXPECT_FALSE(ConvChanVec::preferred(isa, geom(512, 7, 7, 2048, 1, 1, 1, 1, 0, 0, 0, 0)));
        Conv2DGeom s2 = geom(16, 8, 8, 32, 3, 3, 1, 1, 1, 1, 1, 1);
        s2.sh = s2.sw = 2;
        s2.OH = s2.OW = 4;
        EXPECT_FALSE(ConvChanVec::fits(s2));
    }
}

}  // namespace
