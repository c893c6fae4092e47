// Convs of one input channel, stride 1 (a grayscale or spectrogram stem: OneChannelConvKernel,
// ops/conv_small.cpp): the AVX-512 kernel (kernels::conv_one_channel_avx512: 8 output channels at a
// time, 32 pixels a step) against the float64 reference (conv_ref.h) on odd sizes (channel counts
// off the blocks of 8 and 4, rows off 32 pixels, 1-D and 2-D kernels up to 1 x 9 and 5 x 5,
// paddings 0 to 4), every activation it applies (ReLU on the registers, the others and a residual
// through the row epilogue), channel ranges (the thread split) computed out of order, nothing
// written past the output; then the Conv node: where it is chosen, its outputs on every ISA the
// machine has, and two threads bitwise as one.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attr_util.h"
#include "conv_ref.h"
#include "isa_util.h"
#include "kernels/conv.h"
#include "one_node.h"
#include "ops/conv_small.h"

using namespace jiffy;
using namespace jiffy::kernels;
using jiffy::testisa::rnd;
using namespace jiffy::testattr;

namespace {

struct Case {
    int64_t M, H, W, kh, kw, ph, pw;
};

Conv2DGeom geom(const Case& c) {
    Conv2DGeom g;
    g.C = 1, g.M = c.M, g.H = c.H, g.W = c.W, g.kh = c.kh, g.kw = c.kw, g.ph = c.ph, g.pw = c.pw;
    g.OH = c.H + 2 * c.ph - c.kh + 1;
    g.OW = c.W + 2 * c.pw - c.kw + 1;
    return g;
}

const Case kCases[] = {{32, 32, 128, 3, 3, 1, 1}, {13, 9, 70, 3, 3, 1, 1},  {12, 7, 33, 5, 5, 2, 2},
                       {8, 1, 300, 1, 9, 0, 4},   {21, 16, 40, 3, 7, 0, 3}, {5, 10, 17, 3, 3, 0, 0},
                       {4, 6, 70, 3, 3, 1, 1}};

}  // namespace

TEST(ConvOneChannel, KernelMatchesReference) {
    if (int(cpu_isa()) < int(Isa::kAvx512) || cpu_isa() == Isa::kNeon)
        GTEST_SKIP() << "no AVX-512 here: the one-channel kernel is not used";
    const ConvEpi epis[] = {{ConvAct::kRelu},
                            {ConvAct::kNone},
                            {ConvAct::kClip, 0.0f, 6.0f},
                            {ConvAct::kSigmoid},
                            {ConvAct::kLeakyRelu, 0.1f}};
    int idx = 0;
    for (const Case& c : kCases)
        for (const ConvEpi& e : epis)
            for (bool with_res : {false, true}) {
                ++idx;
                const Conv2DGeom g = geom(c);
                const int64_t P = g.OH * g.OW;
                const auto x = rnd(c.H * c.W, 7 + uint32_t(idx));
                const auto w = rnd(c.M * c.kh * c.kw, 3 + uint32_t(idx), 0.5f);
                const auto b = rnd(c.M, 5);
                const auto r = rnd(c.M * P, 9);
                const bool with_bias = idx % 3 != 0;
                const auto want = testisa::conv_ref(g, x, w, with_bias ? b.data() : nullptr,
                                                    with_res ? r.data() : nullptr, e);
                std::vector<float> whole(size_t(c.M * P) + 16, -7.0f), split = whole;
                conv_one_channel_avx512(g, x.data(), w.data(), with_bias ? b.data() : nullptr,
                                        with_res ? r.data() : nullptr, whole.data(), e, 0, c.M);
                // Three channel ranges, the last one first (a thread split).
                const int64_t a = c.M / 3, bnd = 2 * c.M / 3;
                for (auto [m0, m1] : {std::pair<int64_t, int64_t>{bnd, c.M}, {0, a}, {a, bnd}})
                    conv_one_channel_avx512(g, x.data(), w.data(), with_bias ? b.data() : nullptr,
                                            with_res ? r.data() : nullptr, split.data(), e, m0, m1);
                for (int64_t i = 0; i < c.M * P; ++i) {
                    ASSERT_NEAR(whole[size_t(i)], want[size_t(i)], 1e-5 * (1 + std::abs(want[size_t(i)])))
                        << "M " << c.M << " " << c.H << "x" << c.W << " k " << c.kh << "x" << c.kw << " pad "
                        << c.ph << "," << c.pw << " act " << int(e.act) << " res " << with_res << " at " << i;
                    ASSERT_EQ(split[size_t(i)], whole[size_t(i)]) << "a channel range differs at " << i;
                }
                for (size_t i = size_t(c.M * P); i < whole.size(); ++i) {
                    ASSERT_EQ(whole[i], -7.0f) << "wrote past the output";
                    ASSERT_EQ(split[i], -7.0f) << "wrote past the output";
                }
            }
}

TEST(ConvOneChannel, WhereItApplies) {
    Conv2DGeom g = geom({32, 32, 128, 3, 3, 1, 1});
    EXPECT_TRUE(one_channel_conv_preferred(g));
    Conv2DGeom h = g;
    h.C = 3;  // more than one input channel
    EXPECT_FALSE(one_channel_conv_preferred(h));
    h = g;
    h.sh = h.sw = 2, h.OH = 16, h.OW = 64;  // strided
    EXPECT_FALSE(one_channel_conv_preferred(h));
    h = g;
    h.dh = h.dw = 2;  // dilated
    EXPECT_FALSE(one_channel_conv_preferred(h));
    h = g;
    h.H = h.OH = 2, h.W = h.OW = 64, h.ph = 0, h.kh = 1;  // too few pixels
    EXPECT_FALSE(one_channel_conv_preferred(h));
    h = g;
    h.W = h.OW = 32;  // rows of one 32-pixel block: the GEMM form measured faster
    EXPECT_FALSE(one_channel_conv_preferred(h));
    h = g;
    h.M = 1;  // one output channel
    EXPECT_FALSE(one_channel_conv_preferred(h));
}

// The Conv node (constant W and B, a fused ReLU): the one-channel kernel is chosen and its outputs
// match the reference; with two threads (split by output channels) bitwise as one.
TEST(ConvOneChannel, NodeMatchesReferenceAndTwoThreadsMatchOne) {
    for (const Case& c : {kCases[0], kCases[1], kCases[3]}) {
        const Conv2DGeom g = geom(c);
        const auto x = rnd(c.H * c.W, 11), w = rnd(c.M * c.kh * c.kw, 12, 0.5f), b = rnd(c.M, 13);
        ConvEpi relu{ConvAct::kRelu};
        const auto want = testisa::conv_ref(g, x, w, b.data(), nullptr, relu);
        const Shape xs = c.kh == 1 && c.H == 1 ? Shape{1, 1, c.W} : Shape{1, 1, c.H, c.W};
        const Shape ws = c.kh == 1 && c.H == 1 ? Shape{c.M, 1, c.kw} : Shape{c.M, 1, c.kh, c.kw};
        std::map<std::string, Attr> attrs = {{"_fused_act", as("Relu")}};
        if (xs.size() == 3)
            attrs["pads"] = aints({c.pw, c.pw});
        else
            attrs["pads"] = aints({c.ph, c.pw, c.ph, c.pw});
        std::vector<float> one;
        for (int threads : {1, 2}) {
            CompileOptions opt;
            opt.threads = threads;
            opt.parallel_min_flops = 0;
            const testnode::NodeRun r = testnode::run_one_node(
                "Conv",
                {{testnode::f32(xs, x)}, {testnode::f32(ws, w), true}, {testnode::f32({c.M}, b), true}},
                attrs, 17, {true}, 2, opt);
            ASSERT_TRUE(r.st.ok()) << r.st.message();
            EXPECT_NE(r.kernel.find("conv_one_channel"), std::string::npos)
                << c.M << " " << c.H << "x" << c.W << ": " << r.kernel;
            if (threads == 2) EXPECT_NE(r.kernel.find("threads"), std::string::npos) << r.kernel;
            const Tensor& y = r.outs.at(0);
            ASSERT_EQ(y.numel(), int64_t(want.size()));
            std::vector<float> got(want.size());
            std::memcpy(got.data(), y.data(), got.size() * sizeof(float));
            for (size_t i = 0; i < want.size(); ++i)
                ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i])))
                    << kernels::isa_name(active_isa()) << " at " << i;
            if (threads == 1)
                one = got;
            else
                for (size_t i = 0; i < got.size(); ++i)
                    ASSERT_EQ(got[i], one[i]) << "two threads differ at " << i;
        }
    }
}
