// The direct stem conv (kernels/conv_stem.h), both its forms (permuted input rows; broadcast input
// values, bitwise the same sums), against the float64 reference (conv_ref.h): 1-4 input
// channels, 8 / 16 / 24 / 32 output channels (blocks of 8 and 16), padding 0 and 1 with even and
// odd widths (masked border strips, a last strip of fewer than 16 pixels), every activation it
// applies on the registers, Sigmoid and a residual through the row epilogue, row ranges (the
// thread split) computed out of order; and where it applies.
#include "kernels/conv_stem.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "conv_ref.h"
#include "isa_util.h"
#include "kernels/weight_alloc.h"

using namespace jiffy;
using namespace jiffy::kernels;
using jiffy::testisa::rnd;

TEST(ConvStem, MatchesReference) {
    if (int(cpu_isa()) < int(Isa::kAvx512) || cpu_isa() == Isa::kNeon)
        GTEST_SKIP() << "no AVX-512 here: the stem conv is not used";
    struct Case {
        int64_t C, M, H, W, pad;
    };
    const Case cases[] = {{3, 16, 40, 70, 1}, {3, 8, 33, 34, 1}, {1, 16, 9, 33, 0}, {4, 24, 18, 97, 1},
                          {3, 32, 12, 64, 1}, {2, 16, 7, 66, 0}, {3, 16, 20, 31, 1}};
    const ConvEpi epis[] = {{ConvAct::kRelu},
                            {ConvAct::kNone},
                            {ConvAct::kClip, 0.0f, 6.0f},
                            {ConvAct::kHardSwish},
                            {ConvAct::kLeakyRelu, 0.1f},
                            {ConvAct::kHardSigmoid, 0.2f, 0.5f},
                            {ConvAct::kSigmoid}};
    int idx = 0;
    for (const Case& c : cases)
        for (const ConvEpi& e : epis) {
            const bool with_res = idx % 4 == 1;
            ++idx;
            Conv2DGeom g;
            g.C = c.C, g.M = c.M, g.H = c.H, g.W = c.W, g.kh = g.kw = 3, g.sh = g.sw = 2, g.ph = g.pw = c.pad;
            g.OH = (c.H + 2 * c.pad - 3) / 2 + 1;
            g.OW = (c.W + 2 * c.pad - 3) / 2 + 1;
            ASSERT_TRUE(ConvStem::suits(Isa::kAvx512, g)) << c.C << " " << c.M << " " << c.W;
            const int64_t P = g.OH * g.OW;
            const auto x = rnd(c.C * c.H * c.W, 7 + uint32_t(idx));
            const auto w = rnd(c.M * c.C * 9, 3 + uint32_t(idx), 0.5f);
            const auto b = rnd(c.M, 5);
            const auto r = rnd(c.M * P, 9);
            const auto want = testisa::conv_ref(g, x, w, b.data(), with_res ? r.data() : nullptr, e);
            std::vector<float> first;  // the permuted-row form's output: the broadcast form's must equal it
            for (bool bcast : {false, true}) {
                const ConvStem k(Isa::kAvx512, g, false, bcast);
                std::shared_ptr<float> packed = alloc_weights(k.packed_floats());
                k.pack(w.data(), b.data(), packed.get());
                std::vector<float> y(size_t(c.M * P) + 16, -7.0f);
                const int64_t mid = g.OH / 2;  // two row ranges, the second one first
                k.run(x.data(), packed.get(), with_res ? r.data() : nullptr, y.data(), e, mid, g.OH);
                k.run(x.data(), packed.get(), with_res ? r.data() : nullptr, y.data(), e, 0, mid);
                for (int64_t i = 0; i < c.M * P; ++i)
                    ASSERT_NEAR(y[size_t(i)], want[size_t(i)], 1e-5 * (1 + std::abs(want[size_t(i)])))
                        << "C " << c.C << " M " << c.M << " " << c.H << "x" << c.W << " pad " << c.pad << " act "
                        << int(e.act) << " res " << with_res << " bcast " << bcast << " at " << i;
                for (size_t i = size_t(c.M * P); i < y.size(); ++i)
                    ASSERT_EQ(y[i], -7.0f) << "wrote past the output";
                if (!bcast) first = y;
                else
                    for (size_t i = 0; i < y.size(); ++i)
                        ASSERT_EQ(y[i], first[i]) << "the two forms differ: C " << c.C << " M " << c.M << " "
                                                  << c.H << "x" << c.W << " act " << int(e.act) << " at " << i;
            }
        }
}

TEST(ConvStem, WhereItApplies) {
    Conv2DGeom g;
    g.C = 3, g.M = 16, g.H = 224, g.W = 224, g.kh = g.kw = 3, g.sh = g.sw = 2, g.ph = g.pw = 1;
    g.OH = g.OW = 112;
    EXPECT_FALSE(ConvStem::suits(Isa::kAvx2, g));
    EXPECT_FALSE(ConvStem::suits(Isa::kScalar, g));
    Conv2DGeom h = g;
    h.C = 5;  // too many input channels
    EXPECT_FALSE(ConvStem::suits(Isa::kAvx512, h));
    h = g;
    h.sh = h.sw = 1;  // stride 1
    EXPECT_FALSE(ConvStem::suits(Isa::kAvx512, h));
    h = g;
    h.M = 12;  // not a multiple of 8
    EXPECT_FALSE(ConvStem::suits(Isa::kAvx512, h));
    h = g;
    h.OW = 15;  // narrower than a strip
    EXPECT_FALSE(ConvStem::suits(Isa::kAvx512, h));
}

// Channels-last output (the stem of a ConvNhwc chain), both forms: bitwise the NCHW stem's result transposed,
// for 8 / 16 / 24 / 32 output channels (one, two, three, four blocks of 8 written into each
// pixel's row), padding 0 and 1, widths that leave masked border strips and a last strip of fewer
// than 16 pixels, every activation (Sigmoid through the row epilogue), row ranges out of order;
// nothing written past the output.
TEST(ConvStem, ChannelsLastOutputIsTheTransposedNchw) {
    if (int(cpu_isa()) < int(Isa::kAvx512) || cpu_isa() == Isa::kNeon)
        GTEST_SKIP() << "no AVX-512 here: the stem conv is not used";
    struct Case {
        int64_t C, M, H, W, pad;
    };
    const Case cases[] = {{3, 16, 40, 70, 1}, {3, 8, 33, 34, 1}, {1, 16, 9, 33, 0},
                          {4, 24, 18, 97, 1}, {3, 32, 12, 64, 1}, {3, 16, 21, 47, 1}};
    const ConvEpi epis[] = {{ConvAct::kRelu}, {ConvAct::kNone}, {ConvAct::kClip, 0.0f, 6.0f},
                            {ConvAct::kHardSwish}, {ConvAct::kSigmoid}};
    int idx = 0;
    for (const Case& c : cases)
        for (const ConvEpi& e : epis) {
            ++idx;
            Conv2DGeom g;
            g.C = c.C, g.M = c.M, g.H = c.H, g.W = c.W, g.kh = g.kw = 3, g.sh = g.sw = 2, g.ph = g.pw = c.pad;
            g.OH = (c.H + 2 * c.pad - 3) / 2 + 1;
            g.OW = (c.W + 2 * c.pad - 3) / 2 + 1;
            const int64_t P = g.OH * g.OW;
            const auto x = rnd(c.C * c.H * c.W, 11 + uint32_t(idx));
            const auto w = rnd(c.M * c.C * 9, 13 + uint32_t(idx), 0.5f);
            const auto b = rnd(c.M, 17);
            const ConvStem nchw(Isa::kAvx512, g, false, false);
            std::shared_ptr<float> packed = alloc_weights(nchw.packed_floats());
            nchw.pack(w.data(), b.data(), packed.get());
            std::vector<float> want(size_t(c.M * P));
            nchw.run(x.data(), packed.get(), nullptr, want.data(), e, 0, g.OH);
            for (bool bcast : {false, true}) {  // both forms, against the permuted-row NCHW output
                const ConvStem nhwc(Isa::kAvx512, g, true, bcast);
                std::vector<float> y(size_t(c.M * P) + 16, -7.0f);
                const int64_t mid = g.OH / 3;
                nhwc.run(x.data(), packed.get(), nullptr, y.data(), e, mid, g.OH);
                nhwc.run(x.data(), packed.get(), nullptr, y.data(), e, 0, mid);
                for (int64_t p = 0; p < P; ++p)
                    for (int64_t m = 0; m < c.M; ++m)
                        ASSERT_EQ(y[size_t(p * c.M + m)], want[size_t(m * P + p)])
                            << "C " << c.C << " M " << c.M << " " << c.H << "x" << c.W << " pad " << c.pad
                            << " act " << int(e.act) << " bcast " << bcast << " pixel " << p << " channel " << m;
                for (size_t i = size_t(c.M * P); i < y.size(); ++i)
                    ASSERT_EQ(y[i], -7.0f) << "wrote past the output";
            }
        }
}
