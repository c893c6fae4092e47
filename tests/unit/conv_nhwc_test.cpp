// Channels-last conv kernels (kernels/conv_nhwc.h) and the batched 2-D transpose, on every ISA the
// CPU has, against the float64 reference (conv_ref.h, which is NCHW: inputs and outputs are
// transposed around it): odd channel counts (masked channel tails), planes narrower than a strip,
// every border case of 3x3 / 5x5 / 7x7 kernels with strides 1 and 2, dilation, residuals and
// activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "conv_ref.h"
#include "isa_util.h"
#include "kernels/conv_nhwc.h"
#include "kernels/weight_alloc.h"

using namespace jiffy;
using namespace jiffy::kernels;
using jiffy::testisa::rnd;
using jiffy::testisa::to_nhwc;

namespace {

struct DwCase {
    int64_t C, H, W, k, s, pad, dil;
};

Conv2DGeom geom(const DwCase& d, int64_t M) { return testisa::square_geom(d.C, M, d.H, d.W, d.k, d.s, d.dil, d.pad); }

void expect_near(const std::vector<float>& got, const std::vector<double>& want_nchw, int64_t C, int64_t P,
                 const char* what, Isa isa) {
    for (int64_t c = 0; c < C; ++c)
        for (int64_t p = 0; p < P; ++p) {
            const double want = want_nchw[size_t(c * P + p)];
            const float v = got[size_t(p * C + c)];
            ASSERT_NEAR(v, want, 1e-5 * (1 + std::abs(want)))
                << what << " " << isa_name(isa) << " channel " << c << " pixel " << p;
        }
}

}  // namespace

TEST(ConvNhwc, DepthwiseMatchesReference) {
    const std::vector<DwCase> cases = {
        {16, 12, 20, 3, 1, 1, 1}, {32, 9, 11, 3, 2, 1, 1}, {37, 7, 7, 3, 1, 1, 1}, {64, 5, 3, 3, 1, 1, 1},
        {5, 6, 17, 3, 2, 1, 1},   {24, 14, 14, 5, 1, 2, 1}, {40, 13, 9, 5, 2, 2, 1}, {16, 8, 8, 3, 1, 0, 1},
        {20, 10, 12, 7, 1, 3, 1}, {18, 11, 13, 3, 1, 2, 2}, {48, 2, 2, 3, 1, 1, 1}, {16, 1, 19, 3, 2, 1, 1},
        {96, 4, 5, 5, 2, 2, 1},
        // Rows wide enough for the 3x3 kernels' strips of 16 inside, then one of 8, then the
        // checked border strips (the right one partial); 5x5 the same with strips of 8.
        {16, 5, 40, 3, 1, 1, 1},  {24, 6, 79, 3, 2, 1, 1}, {19, 4, 37, 5, 1, 2, 1}, {8, 3, 60, 3, 1, 1, 1},
    };
    const ConvEpi epis[] = {{ConvAct::kNone}, {ConvAct::kClip, 0.0f, 6.0f}, {ConvAct::kHardSwish},
                            {ConvAct::kSigmoid}, {ConvAct::kRelu},  {ConvAct::kSilu}};
    int idx = 0;
    for (const DwCase& d : cases)
        for (Isa isa : testisa::isas()) {
            const ConvEpi& e = epis[idx % 6];
            const bool with_res = idx % 3 == 1;
            ++idx;
            const Conv2DGeom g = geom(d, d.C);
            const int64_t P = g.OH * g.OW;
            const auto x = rnd(d.C * d.H * d.W, 11 + uint32_t(idx));
            const auto w = rnd(d.C * d.k * d.k, 5 + uint32_t(idx), 0.5f);
            const auto b = rnd(d.C, 3);
            const auto r = rnd(d.C * P, 9);
            const auto want = testisa::conv_ref(g, x, w, b.data(), with_res ? r.data() : nullptr, e, d.C);
            const NhwcDepthwise k(isa, g);
            std::shared_ptr<float> packed = alloc_weights(k.packed_floats());
            k.pack(w.data(), b.data(), packed.get());
            const auto xn = to_nhwc(x, d.C, d.H * d.W), rn = to_nhwc(r, d.C, P);
            std::vector<float> y(size_t(d.C * P) + 16, -7.0f);
            // In two row ranges (a thread split), the second one first.
            const int64_t mid = g.OH / 2;
            k.run(xn.data(), packed.get(), with_res ? rn.data() : nullptr, y.data(), e, mid, g.OH);
            k.run(xn.data(), packed.get(), with_res ? rn.data() : nullptr, y.data(), e, 0, mid);
            expect_near(y, want, d.C, P, "depthwise", isa);
            for (size_t i = size_t(d.C * P); i < y.size(); ++i) ASSERT_EQ(y[i], -7.0f) << "wrote past the output";
        }
}

// y_nchw: the same sums written channels-first (the sums transposed in registers on AVX-512, through
// a stack buffer elsewhere), bit for bit the channels-last run's values; every strip kind (the
// left / right border strips, partial strips of 1-7 pixels, channel tails), row ranges out of
// order, every activation (Sigmoid / Tanh deferred to a pass over each channel's rows), and
// nothing written outside the planes.
TEST(ConvNhwc, DepthwiseChannelsFirstOutputIsTheTransposedNhwc) {
    const std::vector<DwCase> cases = {
        {64, 30, 40, 3, 1, 1, 1}, {128, 15, 20, 3, 1, 1, 1}, {256, 8, 10, 3, 1, 1, 1}, {24, 9, 13, 3, 1, 1, 1},
        {40, 11, 17, 3, 2, 1, 1}, {16, 7, 5, 5, 1, 2, 1},    {37, 12, 23, 5, 2, 2, 1}, {48, 2, 3, 3, 1, 1, 1},
        {5, 6, 9, 3, 2, 1, 1},    {16, 8, 8, 3, 1, 0, 1},    {32, 1, 1, 3, 1, 1, 1},
    };
    const ConvEpi epis[] = {{ConvAct::kRelu}, {ConvAct::kNone}, {ConvAct::kClip, 0.0f, 6.0f},
                            {ConvAct::kHardSwish}, {ConvAct::kSigmoid}, {ConvAct::kTanh}, {ConvAct::kSilu}};
    int idx = 0;
    for (const DwCase& d : cases)
        for (Isa isa : testisa::isas()) {
            const ConvEpi& e = epis[idx % 7];
            ++idx;
            const Conv2DGeom g = geom(d, d.C);
            ASSERT_TRUE(nhwc_dw_writes_nchw(g));
            const int64_t P = g.OH * g.OW;
            const auto xn = rnd(d.C * d.H * d.W, 21 + uint32_t(idx));
            const auto w = rnd(d.C * d.k * d.k, 7 + uint32_t(idx), 0.5f);
            const auto b = rnd(d.C, 4);
            const NhwcDepthwise k(isa, g);
            std::shared_ptr<float> packed = alloc_weights(k.packed_floats());
            k.pack(w.data(), b.data(), packed.get());
            std::vector<float> yl(size_t(d.C * P)), yf(size_t(d.C * P) + 32, -7.0f);
            k.run(xn.data(), packed.get(), nullptr, yl.data(), e, 0, g.OH);
            const int64_t mid = (g.OH + 1) / 2;
            k.run(xn.data(), packed.get(), nullptr, yf.data() + 16, e, mid, g.OH, true);
            k.run(xn.data(), packed.get(), nullptr, yf.data() + 16, e, 0, mid, true);
            for (int64_t c = 0; c < d.C; ++c)
                for (int64_t p = 0; p < P; ++p)
                    ASSERT_EQ(yf[size_t(16 + c * P + p)], yl[size_t(p * d.C + c)])
                        << isa_name(isa) << " C " << d.C << " " << d.H << "x" << d.W << " k" << d.k << " s" << d.s
                        << " channel " << c << " pixel " << p;
            for (size_t i = 0; i < 16; ++i) ASSERT_EQ(yf[i], -7.0f) << "wrote before the output";
            for (size_t i = size_t(16 + d.C * P); i < yf.size(); ++i) ASSERT_EQ(yf[i], -7.0f) << "wrote past the output";
            // Channel ranges (the two-thread split of small planes): three parts cut at odd
            // channels, each written alone, give the whole output bit for bit, channels-first and
            // channels-last alike; an empty range writes nothing.
            const int64_t c1 = d.C / 3, c2 = std::max(c1, d.C - 5);
            for (bool yt : {true, false}) {
                std::vector<float> yc(size_t(d.C * P) + 32, -7.0f);
                float* y0 = yc.data() + 16;
                k.run(xn.data(), packed.get(), nullptr, y0, e, 0, g.OH, yt, c2, d.C);
                k.run(xn.data(), packed.get(), nullptr, y0, e, 0, g.OH, yt, c1, c1);
                k.run(xn.data(), packed.get(), nullptr, y0, e, 0, g.OH, yt, 0, c1);
                k.run(xn.data(), packed.get(), nullptr, y0, e, 0, g.OH, yt, c1, c2);
                for (int64_t c = 0; c < d.C; ++c)
                    for (int64_t p = 0; p < P; ++p)
                        ASSERT_EQ(y0[yt ? c * P + p : p * d.C + c], yl[size_t(p * d.C + c)])
                            << isa_name(isa) << " C " << d.C << " channels [" << c1 << ", " << c2 << ") "
                            << (yt ? "channels-first" : "channels-last") << " channel " << c << " pixel " << p;
                for (size_t i = 0; i < 16; ++i) ASSERT_EQ(yc[i], -7.0f) << "wrote before the output";
                for (size_t i = size_t(16 + d.C * P); i < yc.size(); ++i)
                    ASSERT_EQ(yc[i], -7.0f) << "wrote past the output";
            }
        }
}

TEST(ConvNhwc, PointwiseMatchesReference) {
    struct PwCase {
        int64_t K, M, P;
    };
    // Output channel counts whose last panel is 8 wide or less past a vector (5, 70 = 64 + 6, 17,
    // 24, 40, 120 = 96 + 24): AVX-512's 8-wide tail accumulators.
    const PwCase cases[] = {{16, 32, 100}, {7, 5, 13}, {33, 70, 29}, {64, 16, 12}, {3, 48, 1}, {128, 256, 37},
                            {24, 17, 25},  {40, 24, 29}, {24, 40, 31}, {32, 120, 26}};
    const ConvEpi epis[] = {{ConvAct::kRelu}, {ConvAct::kNone}, {ConvAct::kClip, -1.0f, 1.0f}, {ConvAct::kTanh},
                            {ConvAct::kSilu}};
    int idx = 0;
    for (const PwCase& c : cases)
        for (Isa isa : testisa::isas()) {
            const ConvEpi& e = epis[idx % 5];
            const bool with_res = idx % 2 == 0;
            ++idx;
            Conv2DGeom g;
            g.C = c.K;
            g.M = c.M;
            g.H = g.OH = 1;
            g.W = g.OW = c.P;
            const auto x = rnd(c.K * c.P, 21 + uint32_t(idx));
            const auto w = rnd(c.M * c.K, 8 + uint32_t(idx), 0.3f);
            const auto b = rnd(c.M, 4);
            const auto r = rnd(c.M * c.P, 2);
            const auto want = testisa::conv_ref(g, x, w, b.data(), with_res ? r.data() : nullptr, e);
            const NhwcPointwise k(isa, c.K, c.M);
            std::shared_ptr<float> packed = alloc_weights(k.packed_floats());
            k.pack(w.data(), b.data(), packed.get());
            const auto xn = to_nhwc(x, c.K, c.P), rn = to_nhwc(r, c.M, c.P);
            std::vector<float> y(size_t(c.M * c.P) + 16, -7.0f);
            const int64_t mid = c.P / 3;
            k.run(xn.data(), packed.get(), with_res ? rn.data() : nullptr, y.data(), e, 0, mid);
            k.run(xn.data(), packed.get(), with_res ? rn.data() : nullptr, y.data(), e, mid, c.P);
            expect_near(y, want, c.M, c.P, "pointwise", isa);
            for (size_t i = size_t(c.M * c.P); i < y.size(); ++i) ASSERT_EQ(y[i], -7.0f) << "wrote past the output";
            // The same with X read in place as NCHW (x_plane = P), in three ranges (one unaligned).
            std::fill(y.begin(), y.end(), -7.0f);
            const int64_t third = 2 * c.P / 3;
            k.run(x.data(), packed.get(), with_res ? rn.data() : nullptr, y.data(), e, third, c.P, c.P);
            k.run(x.data(), packed.get(), with_res ? rn.data() : nullptr, y.data(), e, 0, mid, c.P);
            k.run(x.data(), packed.get(), with_res ? rn.data() : nullptr, y.data(), e, mid, third, c.P);
            expect_near(y, want, c.M, c.P, "pointwise NCHW X", isa);
            for (size_t i = size_t(c.M * c.P); i < y.size(); ++i) ASSERT_EQ(y[i], -7.0f) << "wrote past the output";
        }
}

// The whole 12-pixel blocks that AVX-512 runs in inline assembly (no residual; ReLU, Clip or no
// activation; every full 32-channel panel and a last panel of exactly 16) against the reference,
// and bit for bit against the compiled blocks the same call takes with a residual of zeros (x + 0
// is x): M with and without a 16-channel or other tail panel, K from 1, pixel counts with a
// partial last block, a NaN input (ReLU and Clip give what vmax / vmin give), ranges split at an
// odd pixel; nothing written past the output. On every ISA (the others take the compiled path).
TEST(ConvNhwc, PointwiseAssemblyBlocksMatchTheCompiledOnes) {
    struct PwCase {
        int64_t K, M, P;
    };
    const PwCase cases[] = {{16, 32, 100}, {16, 16, 37}, {1, 48, 24}, {37, 96, 25}, {64, 80, 13},
                            {5, 70, 30},   {16, 64, 12}, {128, 16, 50}};
    const ConvEpi epis[] = {{ConvAct::kRelu}, {ConvAct::kNone}, {ConvAct::kClip, -0.5f, 0.7f}};
    auto same = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
    int idx = 0;
    for (const PwCase& c : cases)
        for (const ConvEpi& e : epis)
            for (Isa isa : testisa::isas()) {
                ++idx;
                Conv2DGeom g;
                g.C = c.K, g.M = c.M, g.H = g.OH = 1, g.W = g.OW = c.P;
                const auto x = rnd(c.K * c.P, 41 + uint32_t(idx));
                const auto w = rnd(c.M * c.K, 13 + uint32_t(idx), 0.3f);
                const auto b = rnd(c.M, 6);
                const auto want = testisa::conv_ref(g, x, w, b.data(), nullptr, e);
                const NhwcPointwise k(isa, c.K, c.M);
                std::shared_ptr<float> packed = alloc_weights(k.packed_floats());
                k.pack(w.data(), b.data(), packed.get());
                auto xn = to_nhwc(x, c.K, c.P);
                const std::vector<float> zeros(size_t(c.M * c.P), 0.0f);
                std::vector<float> y(size_t(c.M * c.P) + 16, -7.0f), yc(y.size(), -7.0f);
                const int64_t mid = c.P / 3 | 1;
                k.run(xn.data(), packed.get(), nullptr, y.data(), e, mid, c.P);
                k.run(xn.data(), packed.get(), nullptr, y.data(), e, 0, mid);
                expect_near(y, want, c.M, c.P, "pointwise, no residual", isa);
                k.run(xn.data(), packed.get(), zeros.data(), yc.data(), e, 0, c.P);
                for (size_t i = 0; i < y.size(); ++i)
                    ASSERT_TRUE(same(y[i], yc[i])) << isa_name(isa) << " K " << c.K << " M " << c.M << " P " << c.P
                                                   << " act " << int(e.act) << " element " << i << ": " << y[i]
                                                   << " against " << yc[i];
                // A NaN in pixel 5's first channel: its whole output row, the same on both paths.
                xn[size_t(5 * c.K)] = std::nanf("");
                k.run(xn.data(), packed.get(), nullptr, y.data(), e, 0, c.P);
                k.run(xn.data(), packed.get(), zeros.data(), yc.data(), e, 0, c.P);
                for (size_t i = 0; i < y.size(); ++i)
                    ASSERT_TRUE(same(y[i], yc[i])) << isa_name(isa) << " NaN input, K " << c.K << " M " << c.M
                                                   << " act " << int(e.act) << " element " << i;
                for (size_t i = size_t(c.M * c.P); i < y.size(); ++i) ASSERT_EQ(y[i], -7.0f) << "wrote past the output";
            }
}

// scale_inputs (squeeze-and-excite's channel scale moved onto the weights, ConvNhwc _x_scale): the
// pointwise conv run on the scaled packed weights equals the reference conv of the scaled input,
// on every ISA, with the bias untouched; channel counts off the panel width, a residual.
TEST(ConvNhwc, PointwiseOnScaledWeightsMatchesScaledInput) {
    struct PwCase {
        int64_t K, M, P;
    };
    const PwCase cases[] = {{16, 32, 40}, {7, 5, 13}, {40, 24, 29}, {96, 70, 12}};
    int idx = 0;
    for (const PwCase& c : cases)
        for (Isa isa : testisa::isas()) {
            ++idx;
            const bool with_res = idx % 2 == 0;
            Conv2DGeom g;
            g.C = c.K, g.M = c.M, g.H = g.OH = 1, g.W = g.OW = c.P;
            const auto x = rnd(c.K * c.P, 31 + uint32_t(idx));
            const auto w = rnd(c.M * c.K, 9 + uint32_t(idx), 0.3f);
            const auto b = rnd(c.M, 4);
            const auto r = rnd(c.M * c.P, 2);
            const auto sc = rnd(c.K, 17 + uint32_t(idx));
            std::vector<float> xs = x;  // NCHW: channel k's plane times sc[k]
            for (int64_t k = 0; k < c.K; ++k)
                for (int64_t p = 0; p < c.P; ++p) xs[size_t(k * c.P + p)] *= sc[size_t(k)];
            const ConvEpi e{ConvAct::kSilu};
            const auto want = testisa::conv_ref(g, xs, w, b.data(), with_res ? r.data() : nullptr, e);
            const NhwcPointwise k(isa, c.K, c.M);
            std::shared_ptr<float> packed = alloc_weights(k.packed_floats());
            std::shared_ptr<float> scaled = alloc_weights(k.packed_floats());
            k.pack(w.data(), b.data(), packed.get());
            k.scale_inputs(packed.get(), sc.data(), scaled.get());
            const auto rn = to_nhwc(r, c.M, c.P);
            std::vector<float> y(size_t(c.M * c.P) + 16, -7.0f);
            k.run(x.data(), scaled.get(), with_res ? rn.data() : nullptr, y.data(), e, 0, c.P, c.P);
            expect_near(y, want, c.M, c.P, "pointwise, scaled weights", isa);
            for (size_t i = size_t(c.M * c.P); i < y.size(); ++i) ASSERT_EQ(y[i], -7.0f) << "wrote past the output";
        }
}

TEST(ConvNhwc, Transpose32MovesBitsExactly) {
    for (Isa isa : testisa::isas())
        for (auto [B, R, C] : std::vector<std::array<int64_t, 3>>{{1, 16, 19200}, {2, 5, 7}, {1, 17, 33}, {3, 1, 9}, {1, 40, 1}}) {
            std::vector<float> x = rnd(B * R * C, 3);
            x[0] = testisa::kNaN;
            std::vector<float> y(x.size() + 16, -7.0f);
            transpose32(isa, x.data(), y.data(), B, R, C);
            for (int64_t b = 0; b < B; ++b)
                for (int64_t i = 0; i < R; ++i)
                    for (int64_t j = 0; j < C; ++j) {
                        const float a = x[size_t((b * R + i) * C + j)], t = y[size_t((b * C + j) * R + i)];
                        ASSERT_EQ(std::memcmp(&a, &t, 4), 0) << isa_name(isa) << " " << b << "," << i << "," << j;
                    }
            for (size_t i = x.size(); i < y.size(); ++i) ASSERT_EQ(y[i], -7.0f);
        }
}

// The few-outputs dense conv (NhwcDot: 1 to 15 outputs, any kernel) against the reference on every
// ISA: each M (so every accumulator grouping: 4, 2 or 1 outputs an accumulator, whole blocks
// reduced in registers or parked), channel counts that leave a partial last group of lanes, 1x1
// and 3x3 / 5x5 kernels with padding (symmetric, and only after the image: SAME_UPPER's), strides,
// dilation, a 1x1 image; residuals and activations; pixel ranges cut at odd pixels and run out of
// order; nothing written past the output or the padded image's scratch.
TEST(ConvNhwc, FewOutputsMatchReference) {
    struct DotCase {
        int64_t C, M, H, W, k, s, pad, dil;
    };
    const DotCase cases[] = {
        {64, 6, 30, 40, 1, 1, 0, 1}, {128, 4, 15, 20, 1, 1, 0, 1}, {256, 8, 8, 10, 1, 1, 0, 1},
        {256, 12, 4, 5, 3, 1, 1, 1}, {256, 6, 4, 5, 3, 1, 1, 1},  {20, 5, 7, 9, 3, 2, 1, 1},
        {3, 15, 5, 6, 3, 1, 1, 1},   {70, 1, 3, 37, 1, 1, 0, 1},  {33, 2, 6, 7, 3, 1, 2, 2},
        {16, 10, 9, 9, 5, 2, 2, 1},  {130, 14, 2, 3, 3, 1, 1, 1}, {64, 3, 1, 1, 3, 1, 1, 1},
        {48, 7, 5, 4, 1, 1, 0, 1},   {40, 9, 6, 6, 3, 2, 0, 1},   {36, 11, 4, 9, 3, 1, 1, 1},
        {52, 13, 3, 5, 1, 1, 0, 1},  {24, 4, 11, 3, 3, 1, 1, 1},  {100, 12, 7, 3, 1, 1, 0, 1},
    };
    const ConvEpi epis[] = {{ConvAct::kNone}, {ConvAct::kRelu}, {ConvAct::kClip, -0.5f, 0.5f}, {ConvAct::kSigmoid}};
    int idx = 0;
    for (int sameu = 0; sameu < 2; ++sameu)
        for (const DotCase& d : cases)
            for (Isa isa : testisa::isas()) {
                const ConvEpi& e = epis[idx % 4];
                const bool with_res = idx % 3 == 2;
                ++idx;
                Conv2DGeom g = testisa::square_geom(d.C, d.M, d.H, d.W, d.k, d.s, d.dil, d.pad);
                if (sameu) {
                    // SAME_UPPER: ceil(H / s) rows, the padding all after the image where it is one row
                    if (d.k != 3 || d.dil != 1) continue;
                    g.OH = (d.H + d.s - 1) / d.s, g.OW = (d.W + d.s - 1) / d.s;
                    const int64_t th = std::max<int64_t>(0, (g.OH - 1) * d.s + 3 - d.H);
                    const int64_t tw = std::max<int64_t>(0, (g.OW - 1) * d.s + 3 - d.W);
                    g.ph = th / 2, g.pw = tw / 2;
                }
                ASSERT_TRUE(NhwcDot::supports(g));
                const int64_t P = g.OH * g.OW;
                const auto x = rnd(d.C * d.H * d.W, 31 + uint32_t(idx));
                const auto w = rnd(d.M * d.C * d.k * d.k, 17 + uint32_t(idx), 0.3f);
                const auto b = rnd(d.M, 6);
                const auto r = rnd(d.M * P, 12);
                const auto want = testisa::conv_ref(g, x, w, b.data(), with_res ? r.data() : nullptr, e);
                const NhwcDot k(isa, g);
                std::shared_ptr<float> packed = alloc_weights(k.packed_floats());
                k.pack(w.data(), b.data(), packed.get());
                const auto xn = to_nhwc(x, d.C, d.H * d.W), rn = to_nhwc(r, d.M, P);
                std::vector<float> scratch(k.scratch_floats() + 16, -9.0f);
                const float* xp = k.pad_input(xn.data(), scratch.data());
                for (size_t i = k.scratch_floats(); i < scratch.size(); ++i)
                    ASSERT_EQ(scratch[i], -9.0f) << "padded past the scratch";
                std::vector<float> y(size_t(d.M * P) + 16, -7.0f);
                const int64_t a = P / 3, c = std::max(a, 2 * P / 3 + 1);
                k.run(xp, packed.get(), with_res ? rn.data() : nullptr, y.data(), e, c, P);
                k.run(xp, packed.get(), with_res ? rn.data() : nullptr, y.data(), e, 0, a);
                k.run(xp, packed.get(), with_res ? rn.data() : nullptr, y.data(), e, a, c);
                const std::string what = "dot C " + std::to_string(d.C) + " M " + std::to_string(d.M) + " " +
                                         std::to_string(d.H) + "x" + std::to_string(d.W) + " k" +
                                         std::to_string(d.k) + (sameu ? " same-upper" : "");
                expect_near(y, want, d.M, P, what.c_str(), isa);
                for (size_t i = size_t(d.M * P); i < y.size(); ++i) ASSERT_EQ(y[i], -7.0f) << "wrote past the output";
            }
}
