// One-output-pixel convs (ops/conv.cpp make_one_pixel_conv: a single-group conv whose taps cover
// its whole input plane runs as the Gemm's GEMV, batch > 1 as its packed GEMM): the engine's
// Conv against a float64 convolution for squeeze-and-excitation's 1x1 convs on 1x1 planes (odd
// channel counts, M across the GEMV's 8-vector blocks and tails), a 3x3 conv with padding on a
// 1x1 plane (only the centre tap reads data), a kernel as large as its 3x5 input, a 1-D conv,
// every activation the Conv fuses, with and without bias, batch 1 and 3, one and two threads;
// and the convs that must keep their other kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attr_util.h"
#include "conv_ref.h"
#include "isa_util.h"
#include "runtime/plan.h"

using namespace jiffy;
using namespace jiffy::kernels;
using namespace jiffy::testisa;
using namespace jiffy::testattr;

namespace {

struct Case {
    int64_t N, C, H, W, M, kh, kw, pad;  // pad: on every side
    const char* act;                     // "" = none
    bool bias;
    int threads = 1;
    bool res = false;  // a fused residual (keeps the conv off the one-pixel path)
};

ConvEpi epi_of(const std::string& act) {
    ConvEpi e;
    if (act == "Relu") e.act = ConvAct::kRelu;
    if (act == "LeakyRelu") e.act = ConvAct::kLeakyRelu, e.alpha = 0.01f;
    if (act == "HardSigmoid") e.act = ConvAct::kHardSigmoid, e.alpha = 0.2f, e.beta = 0.5f;
    if (act == "HardSwish") e.act = ConvAct::kHardSwish;
    if (act == "Sigmoid") e.act = ConvAct::kSigmoid;
    if (act == "Tanh") e.act = ConvAct::kTanh;
    if (act == "Silu") e.act = ConvAct::kSilu;
    return e;
}

// Compiles and runs the one-node graph; returns the step's kernel description.
std::string run_case(const Case& c, uint32_t seed) {
    Conv2DGeom g;
    g.C = c.C, g.H = c.H, g.W = c.W, g.M = c.M, g.kh = c.kh, g.kw = c.kw, g.ph = c.pad, g.pw = c.pad;
    g.OH = c.H + 2 * c.pad - c.kh + 1;
    g.OW = c.W + 2 * c.pad - c.kw + 1;
    const bool one_d = c.H == 1 && c.kh == 1 && c.pad == 0;
    const int64_t xn = c.C * c.H * c.W, yn = c.M * g.OH * g.OW;
    const auto x = rnd(c.N * xn, seed, 2.0f), w = rnd(c.M * c.C * c.kh * c.kw, seed + 1),
               b = rnd(c.M, seed + 2), r = rnd(c.N * yn, seed + 3);
    Graph gr;
    gr.opset = 17;
    Node n;
    n.op = "Conv";
    n.name = "conv";
    const int xid = gr.add_value("x");
    gr.values[size_t(xid)].dtype = DType::kF32;
    gr.values[size_t(xid)].has_shape = true;
    Shape xs = one_d ? Shape{c.N, c.C, c.W} : Shape{c.N, c.C, c.H, c.W};
    for (int64_t d : xs) gr.values[size_t(xid)].dims.push_back(Dim{d, ""});
    gr.inputs.push_back(xid);
    auto add_const = [&](const std::string& name, const Shape& s, const std::vector<float>& v) {
        const int id = gr.add_value(name);
        auto t = std::make_shared<Tensor>(DType::kF32, s);
        std::memcpy(t->data(), v.data(), v.size() * sizeof(float));
        gr.values[size_t(id)].dtype = DType::kF32;
        gr.values[size_t(id)].constant = t;
        return id;
    };
    const Shape ws = one_d ? Shape{c.M, c.C, c.kw} : Shape{c.M, c.C, c.kh, c.kw};
    n.inputs = {xid, add_const("w", ws, w)};
    if (c.bias || c.res) n.inputs.push_back(c.bias ? add_const("b", {c.M}, b) : -1);
    if (c.res) {
        const Shape rs = one_d ? Shape{c.N, c.M, g.OW} : Shape{c.N, c.M, g.OH, g.OW};
        n.inputs.push_back(add_const("r", rs, r));
        n.attrs["_fused_residual"] = ai(1);
    }
    n.num_explicit_inputs = int(n.inputs.size());
    const int oid = gr.add_value("y");
    gr.values[size_t(oid)].producer = 0;
    n.outputs.push_back(oid);
    gr.outputs.push_back(oid);
    n.attrs["pads"] = one_d ? aints({c.pad, c.pad}) : aints({c.pad, c.pad, c.pad, c.pad});
    if (*c.act) n.attrs["_fused_act"] = as(c.act);
    gr.nodes.push_back(std::move(n));
    CompileOptions opt;
    opt.threads = c.threads;
    opt.parallel_min_flops = 0;
    std::shared_ptr<const Plan> plan;
    const Status st = compile_graph(gr, opt, &plan);
    EXPECT_TRUE(st.ok()) << st.message();
    if (!st.ok()) return {};
    Session s(plan);
    std::memcpy(s.input_data(0), x.data(), x.size() * sizeof(float));
    for (int rep = 0; rep < 2; ++rep) EXPECT_TRUE(s.run().ok());
    const ConvEpi e = epi_of(c.act);
    const float* y = static_cast<const float*>(s.output_data(0));
    for (int64_t i = 0; i < c.N; ++i) {
        std::vector<float> xi(x.begin() + i * xn, x.begin() + (i + 1) * xn);
        const auto want = conv_ref(g, xi, w, c.bias ? b.data() : nullptr, c.res ? r.data() + i * yn : nullptr, e);
        double mag = 1;
        for (double v : want) mag = std::max(mag, std::abs(v));
        for (int64_t k = 0; k < yn; ++k) {
            EXPECT_NEAR(y[i * yn + k], want[size_t(k)], 2e-6 * mag * std::sqrt(double(xn)))
                << "C " << c.C << " M " << c.M << " act '" << c.act << "' image " << i << " element " << k;
            if (::testing::Test::HasFailure()) return {};
        }
    }
    return plan->steps.empty() || !plan->steps[0].kernel ? "" : plan->steps[0].kernel->describe();
}

TEST(ConvOnePixel, SqueezeExciteShapesEveryActivation) {
    uint32_t seed = 1;
    for (const char* act : {"", "Relu", "LeakyRelu", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh", "Silu"})
        for (bool bias : {false, true}) {
            // 960 -> 240, 240 -> 960, 480 -> 120 (a GEMV tail of 7.5 vectors) and odd sizes: M of
            // 1, 7 (gemv_narrow on AVX-512), 17, 130 (128-column panel + tail), 257.
            const Case cases[] = {{1, 960, 1, 1, 240, 1, 1, 0, act, bias}, {1, 240, 1, 1, 960, 1, 1, 0, act, bias},
                                  {1, 480, 1, 1, 120, 1, 1, 0, act, bias},
                                  {1, 13, 1, 1, 1, 1, 1, 0, act, bias},    {1, 33, 1, 1, 7, 1, 1, 0, act, bias},
                                  {1, 5, 1, 1, 17, 1, 1, 0, act, bias},    {1, 67, 1, 1, 130, 1, 1, 0, act, bias},
                                  {1, 19, 1, 1, 257, 1, 1, 0, act, bias}};
            for (const Case& c : cases) {
                const std::string k = run_case(c, seed++);
                if (HasFailure()) return;
                EXPECT_EQ(k.rfind("conv_1px ", 0), 0u) << k;
            }
        }
}

TEST(ConvOnePixel, PaddedWholePlaneOneDBatchAndThreads) {
    const Case cases[] = {
        {1, 21, 1, 1, 45, 3, 3, 1, "Relu", true},          // 3x3 pad 1 on 1x1: the centre tap only
        {1, 6, 3, 5, 37, 3, 5, 0, "HardSigmoid", true},    // kernel as large as the plane
        {1, 4, 2, 2, 19, 3, 3, 1, "", false},              // 3x3 pad 1 on 2x2: OH = OW = 2, not one pixel
        {1, 9, 1, 11, 20, 1, 11, 0, "HardSwish", true},    // 1-D, kernel as wide as the input
        {3, 40, 1, 1, 50, 1, 1, 0, "HardSigmoid", true},   // batch: the packed GEMM
        {1, 200, 1, 1, 300, 1, 1, 0, "Relu", true, 2},     // GEMV split across 2 threads
    };
    uint32_t seed = 100;
    for (const Case& c : cases) {
        const std::string k = run_case(c, seed++);
        if (HasFailure()) return;
        const bool one_px = (c.H + 2 * c.pad - c.kh + 1) * (c.W + 2 * c.pad - c.kw + 1) == 1;
        EXPECT_EQ(k.rfind("conv_1px ", 0) == 0, one_px) << k;
    }
}

TEST(ConvOnePixel, ResidualKeepsOtherKernel) {
    const std::string k = run_case({1, 24, 1, 1, 40, 1, 1, 0, "Relu", true, 1, true}, 7);
    EXPECT_EQ(k.find("conv_1px"), std::string::npos) << k;
}

}  // namespace
