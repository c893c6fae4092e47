// Few-output-pixel convs (src/kernels/small_conv.h: gather rows + packed GEMM with the weights as
// B) on every ISA this machine has, against a plain float64 convolution, on odd sizes: padding,
// stride, dilation, 2-D kernels, one pixel, kMaxPixels pixels, M not a multiple of the panel
// width, every epilogue; and the engine's Conv choosing the path for constant weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attr_util.h"
#include "kernels/small_conv.h"
#include "runtime/plan.h"
#include "conv_ref.h"
#include "isa_util.h"

using namespace jiffy;
using namespace jiffy::kernels;
using namespace jiffy::testisa;
using namespace jiffy::testattr;

namespace {

Conv2DGeom geom(int64_t C, int64_t H, int64_t W, int64_t M, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                int64_t dh, int64_t dw, int64_t ph, int64_t pw, int64_t pb, int64_t pr) {
    Conv2DGeom g;
    g.C = C, g.H = H, g.W = W, g.M = M, g.kh = kh, g.kw = kw, g.sh = sh, g.sw = sw, g.dh = dh, g.dw = dw;
    g.ph = ph, g.pw = pw;
    g.OH = (H + ph + pb - ((kh - 1) * dh + 1)) / sh + 1;
    g.OW = (W + pw + pr - ((kw - 1) * dw + 1)) / sw + 1;
    return g;
}

void check(const Conv2DGeom& g, const ConvEpi& e, bool bias, bool res, uint32_t seed, const std::string& what) {
    ASSERT_TRUE(SmallConv::suits(g)) << what;
    const int64_t xn = g.C * g.H * g.W, wn = g.M * g.C * g.kh * g.kw, yn = g.M * g.OH * g.OW;
    const auto x = rnd(xn, seed, 2.0f), w = rnd(wn, seed + 1), b = rnd(g.M, seed + 2), r = rnd(yn, seed + 3);
    const auto want = conv_ref(g, x, w, bias ? b.data() : nullptr, res ? r.data() : nullptr, e);
    double mag = 1;
    for (double v : want) mag = std::max(mag, std::abs(v));
    for (Isa isa : isas()) {
        SmallConv sc(isa, g, w.data());
        std::vector<float> scratch(sc.scratch_floats(), NAN), y(size_t(yn), 12345.0f);
        sc.run(x.data(), bias ? b.data() : nullptr, res ? r.data() : nullptr, y.data(), scratch.data(), e);
        for (int64_t i = 0; i < yn; ++i)
            ASSERT_NEAR(y[size_t(i)], want[size_t(i)], 2e-6 * mag * std::sqrt(double(g.C * g.kh * g.kw)))
                << what << " isa " << isa_name(isa) << " element " << i;
    }
}

TEST(SmallConv, MatchesReferenceOnOddShapesEveryIsa) {
    struct C {
        int64_t C, H, W, M, kh, kw, sh, sw, dh, dw, ph, pw, pb, pr;
    };
    const C cases[] = {
        {1, 1, 1280, 257, 1, 512, 1, 160, 1, 1, 0, 0, 0, 0},  // melspectrogram STFT (5 pixels)
        {1, 1, 576, 258, 1, 256, 1, 128, 1, 1, 0, 0, 0, 0},   // Silero v5 STFT (3 pixels)
        {129, 1, 4, 128, 1, 3, 1, 1, 1, 1, 0, 1, 0, 1},       // Silero encoder: padded k3
        {3, 1, 23, 37, 1, 5, 1, 3, 1, 2, 0, 2, 0, 1},         // dilation, asymmetric pads
        {5, 3, 7, 33, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},          // 2-D, 2x4 pixels
        {7, 4, 4, 17, 4, 4, 1, 1, 1, 1, 0, 0, 0, 0},          // one pixel, K = 112
        {2, 1, 31, 9, 1, 2, 1, 2, 1, 1, 0, 1, 0, 0},          // 16 pixels (kMaxPixels)
        {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},           // 1x1x1
        {2, 1, 2, 3, 1, 3, 1, 1, 1, 1, 0, 2, 0, 2},           // pads wider than the input
        {1, 1, 40, 19, 1, 25, 1, 1, 1, 1, 0, 0, 0, 0},        // rows read from x directly, stride 1
        {3, 2, 5, 7, 2, 5, 1, 1, 1, 1, 0, 0, 0, 0},           // one pixel over the whole image: direct
        {1, 1, 50, 33, 1, 7, 1, 9, 1, 1, 0, 0, 0, 0},         // direct, stride past the kernel width
    };
    uint32_t seed = 1;
    for (const C& c : cases) {
        const Conv2DGeom g = geom(c.C, c.H, c.W, c.M, c.kh, c.kw, c.sh, c.sw, c.dh, c.dw, c.ph, c.pw, c.pb, c.pr);
        const std::string what = std::string("C") + std::to_string(c.C) + " " + std::to_string(c.H) + "x" + std::to_string(c.W) +
                                 " M" + std::to_string(c.M) + " k" + std::to_string(c.kh) + "x" + std::to_string(c.kw);
        check(g, ConvEpi{}, true, false, seed++, what);
        check(g, ConvEpi{}, false, false, seed++, what + " no bias");
    }
}

TEST(SmallConv, EveryEpilogueWithAndWithoutResidual) {
    const Conv2DGeom g = geom(6, 1, 19, 21, 1, 3, 1, 2, 1, 1, 0, 1, 0, 1);
    const ConvAct acts[] = {ConvAct::kNone, ConvAct::kRelu, ConvAct::kLeakyRelu, ConvAct::kClip,
                            ConvAct::kHardSigmoid, ConvAct::kHardSwish, ConvAct::kSigmoid, ConvAct::kTanh, ConvAct::kSilu};
    uint32_t seed = 100;
    for (ConvAct a : acts)
        for (bool res : {false, true}) {
            ConvEpi e;
            e.act = a;
            e.alpha = a == ConvAct::kClip ? -0.3f : 0.2f;
            e.beta = a == ConvAct::kClip ? 0.4f : 0.5f;
            check(g, e, true, res, seed++, "act " + std::to_string(int(a)) + " res " + std::to_string(res));
        }
}

TEST(SmallConv, SuitsOnlyFewPixels) {
    EXPECT_TRUE(SmallConv::suits(geom(1, 1, 1280, 257, 1, 512, 1, 160, 1, 1, 0, 0, 0, 0)));
    EXPECT_FALSE(SmallConv::suits(geom(8, 1, 40, 8, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1)));  // 40 pixels
    EXPECT_FALSE(SmallConv::suits(geom(3, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1)));   // 81 pixels
}

// The engine's float32 Conv with constant weights and few pixels (the SmallConv path), batch 2,
// against the same formula in float64.
TEST(SmallConv, EngineConvUsesItAndMatches) {
    const Conv2DGeom g = geom(4, 1, 50, 13, 1, 7, 1, 9, 1, 1, 0, 3, 0, 3);
    const int64_t N = 2, xn = g.C * g.H * g.W, yn = g.M * g.OH * g.OW;
    const auto x = rnd(N * xn, 7), w = rnd(g.M * g.C * g.kw, 8), b = rnd(g.M, 9);
    Graph gr;
    gr.opset = 17;
    Node n;
    n.op = "Conv";
    n.name = "conv";
    int xid = gr.add_value("x");
    gr.values[size_t(xid)].dtype = DType::kF32;
    gr.values[size_t(xid)].has_shape = true;
    for (int64_t d : {N, g.C, g.W}) gr.values[size_t(xid)].dims.push_back(Dim{d, ""});
    gr.inputs.push_back(xid);
    auto add_const = [&](const std::string& name, const Shape& s, const std::vector<float>& v) {
        int id = gr.add_value(name);
        auto t = std::make_shared<Tensor>(DType::kF32, s);
        std::memcpy(t->data(), v.data(), v.size() * sizeof(float));
        gr.values[size_t(id)].dtype = DType::kF32;
        gr.values[size_t(id)].constant = t;
        return id;
    };
    n.inputs = {xid, add_const("w", {g.M, g.C, g.kw}, w), add_const("b", {g.M}, b)};
    n.num_explicit_inputs = 3;
    int oid = gr.add_value("y");
    gr.values[size_t(oid)].producer = 0;
    n.outputs.push_back(oid);
    gr.outputs.push_back(oid);
    n.attrs["strides"] = aints({g.sw});
    n.attrs["pads"] = aints({g.pw, 3});
    n.attrs["_fused_act"] = as("Relu");
    gr.nodes.push_back(std::move(n));
    std::shared_ptr<const Plan> plan;
    Status st = compile_graph(gr, CompileOptions{}, &plan);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(plan->outputs[0].shape, (Shape{N, g.M, g.OW}));
    Session s(plan);
    std::memcpy(s.input_data(0), x.data(), x.size() * sizeof(float));
    for (int rep = 0; rep < 2; ++rep) ASSERT_TRUE(s.run().ok());
    ConvEpi e;
    e.act = ConvAct::kRelu;
    const float* y = static_cast<const float*>(s.output_data(0));
    for (int64_t i = 0; i < N; ++i) {
        std::vector<float> xi(x.begin() + i * xn, x.begin() + (i + 1) * xn);
        const auto want = conv_ref(g, xi, w, b.data(), nullptr, e);
        for (int64_t k = 0; k < yn; ++k) ASSERT_NEAR(y[i * yn + k], want[size_t(k)], 1e-5) << "image " << i << " " << k;
    }
}

}  // namespace
