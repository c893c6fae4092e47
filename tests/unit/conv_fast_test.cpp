// Fast float32 conv kernels (src/kernels/conv.h: im2col + packed GEMM, depthwise) on every ISA
// this machine has, and the fused Conv epilogue (_fused_act / _fused_residual) on every Conv
// path. The oracle is the engine's reference Conv path, run in float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "attr_util.h"
#include "kernels/conv.h"
#include "kernels/cpu.h"
#include "runtime/plan.h"
#include "isa_util.h"
#include "one_node.h"

using namespace jiffy;
using namespace jiffy::testattr;
using namespace jiffy::kernels;
using namespace jiffy::testisa;

namespace {

Tensor make(DType t, const Shape& s, const std::vector<float>& v) {
    Tensor r(t, s);
    for (int64_t i = 0; i < r.numel(); ++i) {
        if (t == DType::kF64) r.as<double>()[i] = v[size_t(i)];
        else r.as<float>()[i] = v[size_t(i)];
    }
    return r;
}

struct Result {
    Status st;
    std::vector<double> out;
    Shape shape;
    std::string kernel;  // the plan's steps' describe()
};

// One Conv node; inputs X, W, B (optional: empty vector), R (optional residual). W and B are
// constants unless w_input.
Result run_conv(DType t, const Shape& xs, const std::vector<float>& x, const Shape& ws,
                const std::vector<float>& w, const std::vector<float>& b,
                const std::vector<float>* res, const Shape& rs, const Attrs& attrs,
                bool w_input = false, const char* op = "Conv") {
    std::vector<testnode::NodeIn> ins{{make(t, xs, x), false}, {make(t, ws, w), !w_input}};
    if (!b.empty()) ins.push_back({make(t, {int64_t(b.size())}, b), true});
    else if (res) ins.push_back({Tensor(), false, true});
    if (res) ins.push_back({make(t, rs, *res), false});
    testnode::NodeRun n = testnode::run_one_node(op, ins, attrs, 17);
    Result r;
    r.st = n.st;
    if (!r.st.ok()) return r;
    r.kernel = n.kernel;
    const Tensor& y = n.outs.at(0);
    r.shape = y.shape();
    r.out.resize(size_t(y.numel()));
    for (int64_t i = 0; i < y.numel(); ++i) r.out[size_t(i)] = y.get_f64(i);
    return r;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  const std::string& what, double tol = 2e-5) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " element " << i;
}

struct Case {
    int64_t N, C, H, W, M, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, G;
};

std::string case_str(const Case& c) {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "N%ld C%ld %ldx%ld M%ld k%ldx%ld s%ld,%ld d%ld,%ld p%ld,%ld,%ld,%ld G%ld",
                  long(c.N), long(c.C), long(c.H), long(c.W), long(c.M), long(c.kh), long(c.kw),
                  long(c.sh), long(c.sw), long(c.dh), long(c.dw), long(c.pt), long(c.pl),
                  long(c.pb), long(c.pr), long(c.G));
    return buf;
}

Attrs case_attrs(const Case& c) {
    Attrs a;
    a["strides"] = aints({c.sh, c.sw});
    a["dilations"] = aints({c.dh, c.dw});
    a["pads"] = aints({c.pt, c.pl, c.pb, c.pr});
    a["group"] = ai(c.G);
    return a;
}

Conv2DGeom case_geom(const Case& c, bool depthwise) {
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
    g.ph = c.pt;
    g.pw = c.pl;
    g.OH = (c.H + c.pt + c.pb - ((c.kh - 1) * c.dh + 1)) / c.sh + 1;
    g.OW = (c.W + c.pl + c.pr - ((c.kw - 1) * c.dw + 1)) / c.sw + 1;
    return g;
}

const char* kActs[] = {"", "Relu", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh", "Silu"};

ConvEpi epi_of(const std::string& act, float alpha, float beta) {
    ConvEpi e;
    if (act == "Relu") e.act = ConvAct::kRelu;
    if (act == "LeakyRelu") e.act = ConvAct::kLeakyRelu;
    if (act == "Clip") e.act = ConvAct::kClip;
    if (act == "HardSigmoid") e.act = ConvAct::kHardSigmoid;
    if (act == "HardSwish") e.act = ConvAct::kHardSwish;
    if (act == "Sigmoid") e.act = ConvAct::kSigmoid;
    if (act == "Tanh") e.act = ConvAct::kTanh;
    if (act == "Silu") e.act = ConvAct::kSilu;
    e.alpha = alpha;
    e.beta = beta;
    return e;
}

// What follows the activation in check_case's epilogue (a bit set): a fused Max / Min, and the
// affine (Mul and Add by scalars) after it.
constexpr int kClamp = 1, kAffine = 2;

// Runs case c through the kernels directly on every ISA (GEMM path, or depthwise when
// `depthwise`) and compares with the float64 reference Conv graph carrying the same epilogue.
// `post`: kClamp / kAffine (true: kClamp). `force`: the GEMM mode to run (ConvGemm's choice with
// kAuto); `ran` (may be null) collects the modes that ran.
void check_case(const Case& c, bool depthwise, const std::string& act, bool with_res,
                bool with_bias, uint32_t seed, float scale = 1.0f, int post = 0,
                ConvGemmMode force = ConvGemmMode::kAuto, std::map<ConvGemmMode, int>* ran = nullptr,
                ConvDwMode dw_force = ConvDwMode::kAuto, std::map<ConvDwMode, int>* dw_ran = nullptr) {
    const Conv2DGeom g = case_geom(c, depthwise);
    const Shape xs{c.N, c.C, c.H, c.W}, ws{c.M, c.C / c.G, c.kh, c.kw};
    const Shape ys{c.N, c.M, g.OH, g.OW};
    const int64_t xn = c.N * c.C * c.H * c.W, wn = c.M * (c.C / c.G) * c.kh * c.kw;
    const int64_t yn = c.N * c.M * g.OH * g.OW;
    const std::vector<float> x = rnd(xn, seed, scale), w = rnd(wn, seed + 1);
    const std::vector<float> b = with_bias ? rnd(c.M, seed + 2) : std::vector<float>{};
    const std::vector<float> r = rnd(yn, seed + 3);
    const float alpha = act == "Clip" ? -0.3f : act == "HardSigmoid" ? 0.25f : 0.07f;
    const float beta = act == "Clip" ? 0.4f : 0.45f;
    Attrs attrs = case_attrs(c);
    if (!act.empty()) {
        attrs["_fused_act"] = as(act);
        attrs["_fused_alpha"] = af(alpha);
        attrs["_fused_beta"] = af(beta);
    }
    if (with_res) attrs["_fused_residual"] = ai(1);
    const bool clamp = post & kClamp, affine = post & kAffine;
    const float lo = -0.05f, hi = 0.35f;  // a fused Max / Min after the activation
    if (clamp) {
        attrs["_fused_lo"] = af(lo);
        attrs["_fused_hi"] = af(hi);
    }
    const float mul = -1.75f, add = 0.625f;  // then y * mul + add
    if (affine) {
        attrs["_fused_scale"] = af(mul);
        attrs["_fused_shift"] = af(add);
    }
    Result ref = run_conv(DType::kF64, xs, x, ws, w, b, with_res ? &r : nullptr, ys, attrs);
    ASSERT_TRUE(ref.st.ok()) << ref.st.message();
    ASSERT_EQ(ref.shape, ys);
    if (act == "Relu" && !with_res && !affine) {  // the oracle applies the fused attributes too
        double lo = 1;
        for (double v : ref.out) lo = std::min(lo, v);
        ASSERT_EQ(lo, 0.0);
    }
    if (clamp) {  // the oracle clamps, and the bounds bind somewhere
        int at_hi = 0;
        for (double v : ref.out) {
            const double u = affine ? (v - add) / mul : v;
            ASSERT_GE(u, double(lo) - 1e-6);
            ASSERT_LE(u, double(hi) + 1e-6);
            at_hi += std::abs(u - double(hi)) < 1e-6;
        }
        EXPECT_GT(at_hi, 0) << act;
    }
    if (affine && act == "Relu" && !with_res && !clamp) {  // the oracle maps Relu's zeros to add
        double top = -1e30;
        for (double v : ref.out) top = std::max(top, v);
        ASSERT_EQ(top, double(add));
    }
    const std::string what = case_str(c) + " act '" + act + "' res " + std::to_string(with_res) +
                             (clamp ? " clamp" : "") + (affine ? " affine" : "");
    ConvEpi e = epi_of(act, alpha, beta);
    if (clamp) {
        e.clamp = true;
        e.lo = lo;
        e.hi = hi;
    }
    if (affine) {
        e.affine = true;
        e.scale = mul;
        e.shift = add;
    }
    const int64_t in_img = c.C * c.H * c.W, out_img = c.M * g.OH * g.OW;
    for (Isa isa : isas()) {
        std::vector<float> y(size_t(yn), 12345.0f);
        if (depthwise) {
            std::vector<float> scratch(conv_dw_scratch_floats(g), 777.0f);
            if (dw_ran) ++(*dw_ran)[conv_dw_mode(isa, g, dw_force)];
            for (int64_t n = 0; n < c.N; ++n)
                conv_depthwise(isa, g, x.data() + n * in_img, w.data(),
                               with_bias ? b.data() : nullptr,
                               with_res ? r.data() + n * out_img : nullptr,
                               y.data() + n * out_img, e, scratch.data(), dw_force);
        } else {
            ConvGemm cg(isa, g, c.G, force);
            if (ran) ++(*ran)[cg.mode()];
            std::vector<float> wp(cg.packed_w_floats()), scratch(cg.scratch_floats());
            cg.pack_w(w.data(), wp.data());
            for (int64_t n = 0; n < c.N; ++n)
                cg.run(x.data() + n * in_img, wp.data(), with_bias ? b.data() : nullptr,
                       with_res ? r.data() + n * out_img : nullptr, y.data() + n * out_img,
                       scratch.data(), e);
        }
        expect_close(y, ref.out, what + " isa " + isa_name(isa) + " mode " +
                                     (depthwise ? conv_dw_mode_name(conv_dw_mode(isa, g, dw_force), g)
                                                : ConvGemm(isa, g, c.G, force).name()),
                     2e-5 * scale);
    }
}

// ---------------------------------------------------------------- kernels, every ISA

TEST(ConvFast, GemmMatchesReferenceOnOddShapes) {
    const Case cases[] = {
        // N  C   H   W   M  kh kw sh sw dh dw pt pl pb pr G
        {1, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},      // padded 3x3, odd M
        {2, 8, 11, 13, 13, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},   // pointwise, 143 pixels
        {1, 5, 10, 17, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},    // stride 2
        {1, 4, 9, 12, 25, 3, 2, 1, 2, 2, 1, 2, 0, 1, 3, 1},    // dilation, asymmetric pads
        {1, 2, 6, 5, 3, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 1},      // kernel larger than the interior
        {1, 16, 6, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},    // grouped, 8 per group
        {1, 300, 4, 5, 9, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // K > one chunk (pointwise)
        {1, 40, 5, 6, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // K = 360 > one chunk
        {1, 3, 1, 40, 4, 1, 5, 1, 3, 1, 1, 0, 2, 0, 1, 1},     // 1-D shaped, stride 3
        {1, 6, 33, 35, 29, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},   // several pixel tiles
        {1, 2, 3, 3, 2, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 1},      // single output pixel
        {1, 1, 4, 4, 1, 4, 4, 1, 1, 1, 1, 3, 3, 3, 3, 1},      // pads wider than the input
        {1, 4, 40, 45, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   // padded, several output tiles
        {2, 3, 9, 8, 5, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1},      // unpadded stride 1, batch 2
        {1, 24, 74, 32, 24, 1, 3, 1, 1, 1, 1, 0, 1, 0, 1, 1},  // embedding_model shapes
        {1, 24, 74, 32, 24, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},
        {1, 72, 32, 8, 72, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},   // planes 1 KiB apart
        {1, 48, 32, 32, 20, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1},  // planes 4 KiB apart
        {1, 8, 32, 30, 5, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // copied planes, partial panel
        {1, 96, 3, 1, 96, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // one output pixel per channel
        // Masked implicit mode (AVX-512, OW == W): taps in the padding and pixels past P masked.
        {1, 50, 12, 4, 40, 1, 3, 1, 1, 1, 1, 0, 1, 0, 1, 1},   // 1x3, K = 150 in two chunks
        {1, 96, 8, 2, 96, 1, 3, 1, 1, 1, 1, 0, 1, 0, 1, 1},    // few pixels (instead of transposed)
        {1, 96, 8, 2, 96, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // unpadded few pixels
        {1, 5, 13, 11, 14, 3, 3, 1, 1, 2, 1, 2, 1, 2, 1, 1},   // dilated rows, vertical pads
        {1, 7, 10, 33, 9, 5, 3, 1, 1, 1, 2, 1, 2, 3, 2, 1},    // dilated columns, uneven pads
        {1, 3, 9, 75, 6, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 1},     // unpadded stride 2, wide rows
        {1, 3, 34, 34, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},   // stem-like stride 2
        // Transposed mode (few pixels, output channels on the vector axis):
        {1, 40, 7, 7, 90, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // 7x7 pointwise, M not x NR
        {1, 300, 7, 7, 64, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},   // 7x7 pointwise, K > one chunk
        {1, 20, 7, 7, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // 7x7 3x3 padded, K = 180
        {1, 24, 14, 14, 60, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},  // stride 2 to 7x7
        {1, 16, 14, 14, 64, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},  // 14x14 pointwise
        {1, 32, 10, 10, 64, 3, 3, 3, 3, 1, 1, 0, 0, 0, 0, 2},  // stride 3, unpadded, grouped
    };
    uint32_t seed = 1;
    for (const Case& c : cases) check_case(c, false, "", false, true, seed++);
    check_case(cases[0], false, "", false, false, seed++);  // no bias
    // The 7x7 cases above run the transposed mode where NR >= 16 (49 of 64 lanes otherwise), the
    // 3x3-output one on every ISA; 56x56 planes never.
    for (Isa isa : isas()) {
        Conv2DGeom g;
        g.C = 40;
        g.M = 96;
        g.H = g.W = g.OH = g.OW = 7;
        EXPECT_EQ(ConvGemm(isa, g, 1).args().trans, conv_nr(isa) >= 16);
        g.H = g.W = g.OH = g.OW = 3;
        EXPECT_TRUE(ConvGemm(isa, g, 1).args().trans);
        g.H = g.W = g.OH = g.OW = 56;
        EXPECT_FALSE(ConvGemm(isa, g, 1).args().trans);
        // 1x1 on 8x10: 80 pixels fill every lane (AVX-512: 2 panels and a one-vector tail):
        // the normal mode. 30x40 and 40x40 planes read B straight from the image (1x1-direct).
        g.C = 256;
        g.M = 256;
        g.H = g.OH = 8;
        g.W = g.OW = 10;
        EXPECT_FALSE(ConvGemm(isa, g, 1).args().trans) << isa_name(isa);
        g.C = g.M = 64;
        g.H = g.OH = 30;
        g.W = g.OW = 40;
        EXPECT_TRUE(ConvGemm(isa, g, 1).args().implicit) << isa_name(isa);
        g.H = g.W = g.OH = g.OW = 56;
        EXPECT_FALSE(ConvGemm(isa, g, 1).args().implicit) << isa_name(isa);
    }
}

TEST(ConvFast, EveryForcedModeMatchesReference) {
    // Each GEMM mode where the shape allows it, on odd P (partial and packed tail panels), M
    // (partial row blocks) and K (one and several chunks), with a residual and an activation.
    const Case cases[] = {
        // N  C   H   W   M  kh kw sh sw dh dw pt pl pb pr G
        {1, 7, 9, 13, 13, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // 1x1, P = 117, K = 7
        {2, 300, 5, 7, 25, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},   // 1x1, K in chunks, batch 2
        {1, 37, 10, 11, 40, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},  // 1x1 on 10x11 (direct by default)
        {1, 5, 7, 7, 70, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},     // 7x7, tiny K
        {1, 9, 11, 9, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // 3x3 padded
        {1, 6, 12, 10, 11, 1, 3, 1, 1, 1, 1, 0, 1, 0, 1, 1},   // 1x3 padded (OW == W)
        {1, 8, 13, 12, 9, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1},    // 1x1 stride 2
        // Strided (split mode: stride-1 planes per row phase and tap column):
        {2, 3, 17, 19, 13, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},   // stem-like 3x3 s2, odd sizes
        {1, 5, 23, 21, 35, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1},   // 7x7 s2 pad 3
        {1, 40, 15, 14, 17, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},  // K = 360 in chunks
        {1, 6, 16, 17, 10, 3, 3, 3, 3, 1, 1, 0, 1, 2, 0, 1},   // stride 3, uneven pads
        {1, 4, 14, 19, 9, 3, 5, 1, 2, 2, 1, 2, 2, 2, 1, 1},    // stride 1 x 2, dilated rows
        {1, 4, 19, 11, 9, 5, 3, 2, 1, 1, 2, 1, 2, 0, 2, 1},    // stride 2 x 1, dilated columns
        {1, 3, 9, 8, 5, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 1},      // even kernel, dilation = stride
        {1, 2, 3, 40, 6, 1, 3, 1, 4, 1, 1, 0, 5, 0, 5, 1},     // pads wider than the stride
        // K chunks that start inside a tap (the packing steps (c, ky, kx) from the chunk's start):
        {1, 31, 9, 10, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},   // K = 279: chunks of 140
        {1, 29, 12, 11, 18, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1},  // K = 261, dilated
        // MobileNetV3's 16-channel layers on large planes (odd sizes, P > 1024: tiled planes,
        // prefetches past the tile), and the 16 = 8 + 8 row blocks:
        {1, 3, 75, 69, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},   // stem 3 -> 16 3x3 s2 on 75x69
        {1, 16, 37, 43, 16, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},  // 1x1 16 -> 16, P = 1591
        {1, 16, 35, 33, 64, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},  // 1x1 16 -> 64, P = 1155
        {1, 15, 41, 29, 17, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},  // 1x1 15 -> 17 (9 + 8 rows)
    };
    const char* acts[] = {"Relu", "Clip", "HardSwish", "Sigmoid"};
    std::map<ConvGemmMode, int> ran;
    uint32_t seed = 900;
    for (const Case& c : cases)
        for (ConvGemmMode m : kConvGemmModes)
            for (bool res : {false, true}) {
                check_case(c, false, acts[seed % 4], res, seed % 3 != 0, seed, 2.0f, false, m, &ran);
                ++seed;
            }
    EXPECT_GT(ran[ConvGemmMode::kIm2col], 0);
    EXPECT_GT(ran[ConvGemmMode::kImplicit], 0);
    EXPECT_GT(ran[ConvGemmMode::kTrans], 0);
    EXPECT_GT(ran[ConvGemmMode::kSplit], 0);
    if (cpu_isa() == Isa::kAvx512) {
        EXPECT_GT(ran[ConvGemmMode::kMasked], 0);
    }
    // The automatic choice for 1x1 convs: packed on large planes, direct on mid-sized ones
    // whose rows are not 4 KiB apart, transposed on 7x7 where the vector is wide.
    for (Isa isa : isas()) {
        Conv2DGeom g;
        g.C = 64;
        g.M = 96;
        g.H = g.W = g.OH = g.OW = 56;
        EXPECT_EQ(ConvGemm(isa, g, 1).mode(), ConvGemmMode::kIm2col) << isa_name(isa);
        EXPECT_STREQ(ConvGemm(isa, g, 1).name(), "1x1-packed");
        g.H = g.W = g.OH = g.OW = 14;
        EXPECT_EQ(ConvGemm(isa, g, 1).mode(), ConvGemmMode::kImplicit) << isa_name(isa);
        EXPECT_STREQ(ConvGemm(isa, g, 1).name(), "1x1-direct");
        g.H = g.W = g.OH = g.OW = 32;  // 4 KiB planes
        EXPECT_EQ(ConvGemm(isa, g, 1).mode(), ConvGemmMode::kIm2col) << isa_name(isa);
        // Large planes with few input and output channels (MobileNetV2's 32 -> 16 on 112x112):
        // direct; 33 output channels (over the 32 the rule allows) or 33 input ones, packed.
        g.C = 32;
        g.M = 16;
        g.H = g.W = g.OH = g.OW = 112;
        EXPECT_EQ(ConvGemm(isa, g, 1).mode(), ConvGemmMode::kImplicit) << isa_name(isa);
        EXPECT_STREQ(ConvGemm(isa, g, 1).name(), "1x1-direct");
        g.M = 33;
        EXPECT_EQ(ConvGemm(isa, g, 1).mode(), ConvGemmMode::kIm2col) << isa_name(isa);
        g.M = 16;
        g.C = 33;
        EXPECT_EQ(ConvGemm(isa, g, 1).mode(), ConvGemmMode::kIm2col) << isa_name(isa);
        // Up to 32 output channels: direct up to 20480 pixels (the face detector's 16 -> 32 on
        // 120x160), packed past that.
        g.C = 16;
        g.M = 32;
        g.H = g.OH = 120;
        g.W = g.OW = 160;
        EXPECT_EQ(ConvGemm(isa, g, 1).mode(), ConvGemmMode::kImplicit) << isa_name(isa);
        g.H = g.OH = 130;  // 20800 pixels (planes not 4 KiB multiples)
        EXPECT_EQ(ConvGemm(isa, g, 1).mode(), ConvGemmMode::kIm2col) << isa_name(isa);
        // More than 32 in, at most 32 out, 40x40 to 64x64 (MobileNetV2's 144 -> 24 on 56x56):
        // masked on AVX-512, packed elsewhere; 33 out or 80x80, packed.
        g.C = 144;
        g.M = 24;
        g.H = g.W = g.OH = g.OW = 56;
        EXPECT_EQ(ConvGemm(isa, g, 1).mode(), isa == Isa::kAvx512 ? ConvGemmMode::kMasked : ConvGemmMode::kIm2col)
            << isa_name(isa);
        g.M = 33;
        EXPECT_EQ(ConvGemm(isa, g, 1).mode(), ConvGemmMode::kIm2col) << isa_name(isa);
        g.M = 24;
        g.H = g.W = g.OH = g.OW = 80;
        EXPECT_EQ(ConvGemm(isa, g, 1).mode(), ConvGemmMode::kIm2col) << isa_name(isa);
    }
    // That choice on odd large planes (P > 1024, odd K and M) against the float64 reference,
    // every epilogue.
    const Case big[] = {
        {1, 13, 37, 41, 11, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},
        {1, 32, 33, 35, 16, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},
    };
    for (const Case& c : big) {
        const Conv2DGeom g = case_geom(c, false);
        for (Isa isa : isas()) EXPECT_EQ(ConvGemm(isa, g, 1).mode(), ConvGemmMode::kImplicit) << case_str(c);
        for (const char* act : kActs)
            for (bool res : {false, true}) {
                check_case(c, false, act, res, !res, seed, 2.0f, false);
                ++seed;
            }
        check_case(c, false, "Relu", true, true, seed++, 2.0f, true);
    }
}

// The implicit GEMM on a padded copy (output rows WP apart on the buffered grid) splits by whole
// output rows (run_pixels; the two-thread split of e.g. the line detector's dilated 3x3): each part
// copies only the padded rows it reads. Parts out of order, each on its own scratch pre-filled with
// NaN (a read of a row the part did not copy would show), bit for bit the whole run, every ISA.
TEST(ConvFast, ImplicitPaddedGridSplitsByRows) {
    const Case cases[] = {
        // N  C   H   W   M  kh kw sh sw dh dw pt pl pb pr G
        {1, 9, 13, 11, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  // 3x3 pad 1, partial row blocks
        {1, 5, 20, 17, 32, 3, 3, 1, 1, 5, 5, 5, 5, 5, 5, 1},  // dilated 5 (the line detector's)
        {1, 6, 9, 23, 13, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 1},   // 5x5 pad 2
        {1, 4, 15, 8, 7, 1, 3, 1, 1, 1, 2, 0, 2, 0, 2, 1},    // 1x3 dilated columns
    };
    uint32_t seed = 4000;
    for (const Case& c : cases)
        for (Isa isa : isas()) {
            const Conv2DGeom g = case_geom(c, false);
            const ConvGemm cg(isa, g, 1, ConvGemmMode::kImplicit);
            ASSERT_EQ(cg.mode(), ConvGemmMode::kImplicit) << case_str(c);
            ASSERT_EQ(cg.pixel_align(), g.OW) << case_str(c) << " " << isa_name(isa);
            const int64_t P = g.OH * g.OW;
            const auto x = rnd(c.C * c.H * c.W, ++seed);
            const auto w = rnd(c.M * c.C * c.kh * c.kw, ++seed, 0.3f);
            const auto b = rnd(c.M, ++seed);
            const auto r = rnd(c.M * P, ++seed);
            std::vector<float> wp(cg.packed_w_floats());
            cg.pack_w(w.data(), wp.data());
            for (bool with_res : {false, true}) {
                ConvEpi e;
                e.act = with_res ? ConvAct::kRelu : ConvAct::kSilu;
                const float* res = with_res ? r.data() : nullptr;
                std::vector<float> whole(size_t(c.M * P), 0.0f), parts(size_t(c.M * P), -7.0f);
                std::vector<float> scratch(cg.scratch_floats());
                cg.run(x.data(), wp.data(), b.data(), res, whole.data(), scratch.data(), e);
                // Rows [0, 1), [OH - 2, OH), [1, OH - 2): a one-row part, the last rows, then the middle.
                const int64_t cuts[][2] = {{0, 1}, {g.OH - 2, g.OH}, {1, g.OH - 2}};
                for (const auto& cut : cuts) {
                    std::vector<float> own(cg.scratch_floats(), std::nanf(""));
                    cg.run_pixels(x.data(), wp.data(), b.data(), res, parts.data(), own.data(), e,
                                  cut[0] * g.OW, cut[1] * g.OW);
                }
                ASSERT_EQ(std::memcmp(parts.data(), whole.data(), whole.size() * sizeof(float)), 0)
                    << case_str(c) << " " << isa_name(isa) << (with_res ? " residual" : "");
            }
        }
}

TEST(ConvFast, DepthwiseMatchesReferenceOnOddShapes) {
    const Case cases[] = {
        {1, 3, 9, 37, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3},    // strips + tails
        {2, 4, 17, 41, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 4},   // stride 2
        {1, 2, 12, 50, 2, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 2},   // 5x5
        {1, 2, 12, 70, 2, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 2},   // 5x5 stride 2, even width
        {1, 2, 13, 71, 2, 3, 3, 1, 3, 2, 2, 2, 2, 1, 0, 2},   // dilation, stride 3
        {1, 3, 5, 4, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3},     // narrower than a vector
        {1, 2, 6, 33, 2, 1, 7, 1, 1, 1, 1, 0, 3, 0, 3, 2},    // 1x7
        {1, 2, 8, 36, 2, 3, 3, 1, 2, 1, 1, 0, 0, 0, 0, 2},    // unpadded stride 2 near the end
        {1, 5, 7, 7, 5, 3, 3, 2, 1, 1, 1, 1, 0, 1, 2, 5},     // 7x7, strides 2x1, uneven pads
        {1, 3, 14, 14, 3, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 3},   // 14x14 (MobileNet tail), 5x5
        // Blocks of output rows with masked border strips (3x3 / 5x5, strides 1 and 2):
        {1, 3, 7, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3},     // 7x7: a block and its overlapped tail
        {1, 2, 3, 3, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},     // fewer rows than a block
        {1, 3, 15, 33, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3},   // stride 2, odd sizes
        {1, 2, 14, 14, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2},   // stride 2, 14 -> 7
        {1, 2, 11, 67, 2, 3, 3, 2, 2, 1, 1, 0, 2, 1, 0, 2},   // stride 2, asymmetric pads
        {1, 2, 9, 70, 2, 3, 3, 1, 1, 1, 1, 2, 0, 0, 2, 2},    // stride 1, pads on one side each
        {1, 2, 37, 113, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},  // interior and border strips
        {1, 2, 29, 99, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2},   // stride 2, several strips
        {1, 2, 13, 45, 2, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 2},   // 5x5 stride 2, odd
        {1, 2, 10, 31, 2, 5, 5, 1, 1, 1, 1, 2, 1, 2, 3, 2},   // 5x5, asymmetric pads
        {1, 2, 9, 40, 2, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 2},    // unpadded
        {1, 2, 6, 5, 2, 3, 3, 1, 1, 1, 1, 3, 3, 3, 3, 2},     // pads wider than the input
        {1, 2, 11, 35, 2, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 2},   // 7x7 stride 2 (any-geometry rows)
        {1, 2, 8, 21, 2, 3, 3, 1, 2, 1, 3, 1, 3, 1, 2, 2},    // dilated columns, stride 1x2
    };
    uint32_t seed = 100;
    for (const Case& c : cases) check_case(c, true, "", false, true, seed++);
    check_case(cases[0], true, "", false, false, seed++);
}

TEST(ConvFast, DepthwiseStride2LargePlanes) {
    // 3x3 stride 2 on planes past 8192 pixels (AVX-512: every strip masked, three strips per
    // tile, tap 2 as tap 0 shifted a lane; rows of more than 16 strips: the older row blocks):
    // odd sizes, asymmetric pads, pads only at the end, OW a multiple of 16 or not, 5 strips
    // (a tile of 3 and one of 2), output heights not a multiple of 3 (tiles of 3 rows, then 2 or
    // 1), in place, every mode.
    const Case cases[] = {
        // N  C   H    W   M  kh kw sh sw dh dw pt pl pb pr G
        {1, 2, 120, 160, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2},  // face detector: 80 = 5 strips
        {1, 2, 112, 112, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2},  // MobileNet: 56 = 3.5 strips
        {1, 2, 97, 131, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2},   // odd: 49 rows, 66 columns
        {1, 2, 91, 101, 2, 3, 3, 2, 2, 1, 1, 0, 1, 1, 0, 2},   // asymmetric pads
        {1, 2, 90, 100, 2, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 2},   // pads at the end only (TF SAME)
        {1, 2, 66, 130, 2, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 2},   // unpadded
        {1, 1, 20, 513, 1, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},   // 257 columns: 17 strips
        {1, 2, 75, 383, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2},   // 192 columns: 12 strips
        {1, 2, 30, 40, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2},    // 1200 pixels, 20 columns: 2 strips
    };
    uint32_t seed = 4400;
    for (const Case& c : cases) {
        check_case(c, true, seed % 2 ? "Relu" : "Clip", seed % 2 == 0, true, seed, 2.0f);
        ++seed;
        for (ConvDwMode m : {ConvDwMode::kRows, ConvDwMode::kPlane}) {
            check_case(c, true, "", true, false, seed, 2.0f, false, ConvGemmMode::kAuto, nullptr, m);
            ++seed;
        }
    }
    // In place (residual == output) and every activation on one of them.
    for (const char* act : kActs) check_case(cases[2], true, act, true, true, seed++, 2.0f);
    for (Isa isa : isas()) {
        const Case& c = cases[3];
        const Conv2DGeom g = case_geom(c, true);
        const int64_t xn = c.C * c.H * c.W, yn = c.M * g.OH * g.OW;
        const std::vector<float> x = rnd(xn, 61), w = rnd(c.M * 9, 62), b = rnd(c.M, 63), r = rnd(yn, 64);
        std::vector<float> scratch(conv_dw_scratch_floats(g)), want(static_cast<size_t>(yn)), y = r;
        ConvEpi e;
        e.act = ConvAct::kRelu;
        conv_depthwise(isa, g, x.data(), w.data(), b.data(), r.data(), want.data(), e, scratch.data());
        conv_depthwise(isa, g, x.data(), w.data(), b.data(), y.data(), y.data(), e, scratch.data());
        EXPECT_EQ(y, want) << isa_name(isa);
    }
    // The kernel name in profiles: "rows-s2" for the strip tiles (AVX-512, > 2048 pixels or
    // output rows of > 16, <= 16 strips), "rows" for the column sweep (28 -> 14) and rows of 17
    // strips.
    const Conv2DGeom face = case_geom(cases[0], true), wide = case_geom(cases[6], true);
    const Conv2DGeom small = case_geom(Case{1, 2, 28, 28, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2}, true);
    EXPECT_STREQ(conv_dw_kernel_name(Isa::kAvx512, conv_dw_mode(Isa::kAvx512, face), face), "rows-s2");
    EXPECT_STREQ(conv_dw_kernel_name(Isa::kAvx2, conv_dw_mode(Isa::kAvx2, face), face), "rows");
    EXPECT_STREQ(conv_dw_kernel_name(Isa::kAvx512, ConvDwMode::kRows, small), "rows");
    const Conv2DGeom two = case_geom(Case{1, 2, 30, 40, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2}, true);
    EXPECT_STREQ(conv_dw_kernel_name(Isa::kAvx512, ConvDwMode::kRows, two), "rows-s2");  // 20 = 2 strips
    EXPECT_STREQ(conv_dw_kernel_name(Isa::kAvx512, ConvDwMode::kRows, wide), "rows");
}

TEST(ConvFast, DepthwiseEveryPathEveryActivation) {
    // The fixed-size paths (3x3 / 5x5, strides 1 and 2, with a partial last block) and the
    // any-geometry path, each with every activation and a residual.
    const Case cases[] = {
        {1, 2, 9, 37, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},
        {1, 2, 9, 37, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2},
        {1, 2, 10, 21, 2, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 2},
        {1, 2, 11, 21, 2, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 2},
        {1, 2, 7, 19, 2, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 2},
    };
    uint32_t seed = 900;
    for (const Case& c : cases)
        for (const char* act : kActs) check_case(c, true, act, true, true, seed++, 2.0f);
}

TEST(ConvFast, DepthwiseSmallPlanesEveryModeEveryActivation) {
    // The flat small-plane mode (AVX-512; elsewhere the rows mode runs) against the reference
    // and the rows mode: 7x7 / 14x14 planes, odd planes, stride 2 on odd sizes (the parity
    // planes), pads on one side, 5x5, partial last vectors, every activation with a residual.
    const Case cases[] = {
        // N  C   H   W   M  kh kw sh sw dh dw pt pl pb pr G
        {1, 3, 7, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3},      // 7x7: 49 of 64 lanes
        {2, 4, 14, 14, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4},    // 14x14, batch 2
        {1, 3, 9, 11, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3},     // odd plane
        {1, 2, 5, 3, 2, 3, 3, 1, 1, 1, 1, 2, 2, 0, 0, 2},      // pads on one side, fewer rows than taps
        {1, 2, 11, 6, 2, 3, 3, 1, 1, 1, 1, 0, 0, 2, 2, 2},     // pads on the other side
        {1, 3, 14, 14, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3},    // stride 2, 14 -> 7
        {1, 3, 28, 28, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3},    // stride 2, 28 -> 14
        {1, 2, 15, 13, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2},    // stride 2, odd sizes
        {1, 2, 13, 9, 2, 3, 3, 2, 2, 1, 1, 0, 1, 2, 1, 2},     // stride 2, odd, uneven pads
        {1, 2, 10, 12, 2, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 2},    // stride 2, pads at the end only
        {1, 2, 7, 7, 2, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 2},      // 5x5
        {1, 2, 11, 9, 2, 5, 5, 1, 1, 1, 1, 1, 3, 3, 1, 2},     // 5x5, asymmetric pads
        {1, 2, 14, 14, 2, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 2},    // 5x5 stride 2, 14 -> 7
        {1, 2, 13, 15, 2, 5, 5, 2, 2, 1, 1, 1, 2, 3, 2, 2},    // 5x5 stride 2, odd pads
        {1, 2, 1, 37, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},     // one row
        {1, 2, 2, 37, 2, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 2},     // PP-OCR: 5x5 on 2 rows (kernel rows skipped)
        {1, 2, 6, 21, 2, 5, 5, 2, 1, 1, 1, 2, 2, 2, 2, 2},     // 5x5, strides 2 x 1, 6 -> 3 rows
        {1, 2, 3, 19, 2, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 2},     // dilation 2 on 3 rows
        {1, 2, 16, 16, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},    // exactly 16 vectors
        {1, 2, 32, 31, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},    // past the automatic limit (forced)
        {1, 37, 7, 7, 37, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 37},   // channel blocks and a channel tail
        {1, 19, 14, 14, 19, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 19}, // 5x5 stride 2, 14 -> 7, 19 channels
        {1, 17, 9, 8, 17, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 17},   // dilation 2, 17 channels
        {1, 18, 23, 21, 18, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3, 18}, // 7x7 (generic kernel)
        {1, 5, 15, 17, 5, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 5},    // 7x7 stride 2
    };
    std::map<ConvDwMode, int> ran;
    uint32_t seed = 3000;
    for (const Case& c : cases)
        for (ConvDwMode m : {ConvDwMode::kRows, ConvDwMode::kFlat, ConvDwMode::kPlane, ConvDwMode::kBlocked})
            for (const char* act : kActs) {
                check_case(c, true, act, true, seed % 2 == 0, seed, 2.0f, false, ConvGemmMode::kAuto, nullptr, m, &ran);
                ++seed;
            }
    EXPECT_GT(ran[ConvDwMode::kRows], 0);
    EXPECT_GT(ran[ConvDwMode::kPlane], 0);
    EXPECT_GT(ran[ConvDwMode::kBlocked], 0);
    if (cpu_isa() == Isa::kAvx512) {
        EXPECT_GT(ran[ConvDwMode::kFlat], 0);
    }
    // Both modes sum the taps in the same order: the same bits. And the clamp, no bias.
    for (const Case& c : cases) {
        const Conv2DGeom g = case_geom(c, true);
        const int64_t xn = c.C * c.H * c.W, yn = c.M * g.OH * g.OW;
        const std::vector<float> x = rnd(xn, 41), w = rnd(c.M * c.kh * c.kw, 42), r = rnd(yn, 43);
        ConvEpi e = epi_of("Relu", 0, 0);
        e.clamp = true;
        e.lo = -0.05f;
        e.hi = 0.3f;
        for (Isa isa : isas()) {
            std::vector<float> scratch(conv_dw_scratch_floats(g)), a(static_cast<size_t>(yn)), b(static_cast<size_t>(yn));
            conv_depthwise(isa, g, x.data(), w.data(), nullptr, r.data(), a.data(), e, scratch.data(), ConvDwMode::kRows);
            conv_depthwise(isa, g, x.data(), w.data(), nullptr, r.data(), b.data(), e, scratch.data(), ConvDwMode::kFlat);
            EXPECT_EQ(a, b) << case_str(c) << " " << isa_name(isa);
        }
    }
    // The automatic choice: blocked on AVX-512 where 3x3 output rows fill few lanes on small
    // planes (MobileNetV2's 7x7, 14 -> 7; other ISAs: plane, < 8 output rows, or rows), rows on
    // 14x14 planes, on 3x3 stride 2 down to 4 output rows, on large planes, on unpadded stride 1
    // (OW != W) and on other kernels; plane for few output rows and uneven strides.
    for (Isa isa : isas()) {
        const bool wide = isa == Isa::kAvx512;
        Conv2DGeom g;
        g.C = g.M = 960;
        g.kh = g.kw = 3;
        g.ph = g.pw = 1;
        g.H = g.W = g.OH = g.OW = 7;
        EXPECT_EQ(conv_dw_mode(isa, g), wide ? ConvDwMode::kBlocked : ConvDwMode::kPlane) << isa_name(isa);
        EXPECT_STREQ(conv_dw_mode_name(conv_dw_mode(isa, g), g), wide ? "blocked" : "plane");
        // The face detector's 256 x 8x10 (10 of 16 lanes) and 128 x 15x20 (20 of 32): blocked;
        // 384 x 20x20 (400 pixels): rows; 30x40 -> 15x20 stride 2 (two strips): rows.
        g.C = g.M = 256;
        g.H = g.OH = 8;
        g.W = g.OW = 10;
        EXPECT_EQ(conv_dw_mode(isa, g), wide ? ConvDwMode::kBlocked : ConvDwMode::kRows) << isa_name(isa);
        g.C = g.M = 128;
        g.H = g.OH = 15;
        g.W = g.OW = 20;
        EXPECT_EQ(conv_dw_mode(isa, g), wide ? ConvDwMode::kBlocked : ConvDwMode::kRows) << isa_name(isa);
        g.C = g.M = 384;
        g.H = g.W = g.OH = g.OW = 20;
        EXPECT_EQ(conv_dw_mode(isa, g), ConvDwMode::kRows) << isa_name(isa);
        g.C = g.M = 64;
        g.H = 30, g.W = 40, g.OH = 15, g.OW = 20, g.sh = g.sw = 2;
        EXPECT_EQ(conv_dw_mode(isa, g), ConvDwMode::kRows) << isa_name(isa);
        g.sh = g.sw = 1;
        g.C = g.M = 960;
        g.H = g.W = g.OH = g.OW = 14;  // 14-wide rows fill most of a vector: rows
        EXPECT_EQ(conv_dw_mode(isa, g), ConvDwMode::kRows) << isa_name(isa);
        EXPECT_EQ(conv_dw_mode(isa, g, ConvDwMode::kFlat), wide ? ConvDwMode::kFlat : ConvDwMode::kRows);
        g.OH = g.OW = 7;
        g.sh = g.sw = 2;  // 3x3 stride 2, 14 -> 7: blocked; rows elsewhere (not flat: its parity planes)
        EXPECT_EQ(conv_dw_mode(isa, g), wide ? ConvDwMode::kBlocked : ConvDwMode::kRows) << isa_name(isa);
        EXPECT_EQ(conv_dw_mode(isa, g, ConvDwMode::kFlat), wide ? ConvDwMode::kFlat : ConvDwMode::kRows);
        EXPECT_STREQ(conv_dw_mode_name(conv_dw_mode(isa, g, ConvDwMode::kFlat), g), wide ? "flat-s2" : "rows");
        g.H = g.W = 6;  // 6 -> 3: few output rows, the plane copy (AVX-512: blocked)
        g.OH = g.OW = 3;
        EXPECT_EQ(conv_dw_mode(isa, g), wide ? ConvDwMode::kBlocked : ConvDwMode::kPlane) << isa_name(isa);
        g.H = g.W = 28;  // 28 -> 14: 14-wide rows fill most of a vector, the split costs more
        g.OH = g.OW = 14;
        EXPECT_EQ(conv_dw_mode(isa, g), ConvDwMode::kRows) << isa_name(isa);
        EXPECT_EQ(conv_dw_mode(isa, g, ConvDwMode::kFlat), wide ? ConvDwMode::kFlat : ConvDwMode::kRows);
        g.H = g.W = 112;
        g.OH = g.OW = 56;
        EXPECT_EQ(conv_dw_mode(isa, g), ConvDwMode::kRows) << isa_name(isa);
        EXPECT_EQ(conv_dw_mode(isa, g, ConvDwMode::kFlat), ConvDwMode::kRows) << "too large";
        g.sh = g.sw = 1;
        g.H = g.W = 9;
        g.OH = g.OW = 7;
        g.ph = g.pw = 0;
        EXPECT_EQ(conv_dw_mode(isa, g, ConvDwMode::kFlat), ConvDwMode::kRows) << "OW != W";
        g.kh = g.kw = 7;
        g.H = g.W = g.OH = g.OW = 7;
        g.ph = g.pw = 3;
        EXPECT_EQ(conv_dw_mode(isa, g, ConvDwMode::kFlat), ConvDwMode::kRows) << "7x7 kernel";
        // Kernels without a specialized rows path (7x7 here) go blocked where the plane fits
        // (7x7 planes; 80x80: 86x86 padded), rows beyond (200x200).
        EXPECT_EQ(conv_dw_mode(isa, g), ConvDwMode::kBlocked) << "7x7 kernel, 7x7 plane";
        g.H = g.W = g.OH = g.OW = 80;
        EXPECT_EQ(conv_dw_mode(isa, g), ConvDwMode::kBlocked) << "7x7 kernel, 80x80 plane";
        g.H = g.W = g.OH = g.OW = 200;
        EXPECT_EQ(conv_dw_mode(isa, g), ConvDwMode::kRows) << "7x7 kernel, 200x200 plane";
        EXPECT_EQ(conv_dw_mode(isa, g, ConvDwMode::kBlocked), ConvDwMode::kRows) << "too large to force";
        // PP-OCR cls: 5x5, stride (2, 1), 6x96 -> 3x96, and 2 x 96 planes: plane; 16 x 96: rows.
        g.kh = g.kw = 5;
        g.ph = g.pw = 2;
        g.H = 6, g.W = 96, g.OH = 3, g.OW = 96, g.sh = 2, g.sw = 1;
        EXPECT_EQ(conv_dw_mode(isa, g), ConvDwMode::kPlane) << "uneven strides";
        g.H = g.OH = 2, g.sh = 1;
        EXPECT_EQ(conv_dw_mode(isa, g), ConvDwMode::kPlane) << "5x5, 2 rows";
        g.H = g.OH = 16;
        EXPECT_EQ(conv_dw_mode(isa, g), ConvDwMode::kRows) << isa_name(isa);
    }
}

TEST(ConvFast, DepthwiseResidualInPlace) {
    // The residual may be the output buffer itself: a partial last block of rows must not be
    // recomputed over rows that already hold the result (it would add the residual twice).
    for (Isa isa : isas()) {
        for (int64_t H : {5, 7, 9}) {
            Conv2DGeom g;
            g.C = g.M = 3;
            g.H = g.W = g.OH = g.OW = H;
            g.kh = g.kw = 3;
            g.ph = g.pw = 1;
            const int64_t n = g.C * H * H;
            const std::vector<float> x = rnd(n, 31), w = rnd(g.C * 9, 32), b = rnd(g.C, 33), r = rnd(n, 34);
            std::vector<float> scratch(conv_dw_scratch_floats(g)), want(static_cast<size_t>(n)), y = r;
            ConvEpi e;
            e.act = ConvAct::kRelu;
            for (ConvDwMode m : {ConvDwMode::kRows, ConvDwMode::kFlat}) {
                y = r;
                conv_depthwise(isa, g, x.data(), w.data(), b.data(), r.data(), want.data(), e, scratch.data(), m);
                conv_depthwise(isa, g, x.data(), w.data(), b.data(), y.data(), y.data(), e, scratch.data(), m);
                EXPECT_EQ(y, want) << isa_name(isa) << " H " << H << " " << conv_dw_mode_name(conv_dw_mode(isa, g, m), g);
            }
        }
    }
}

TEST(ConvFast, DepthwiseRowsEveryHeightAndWidth) {
    // The rows mode's column sweeps (AVX-512: rotating row slots, rows S * stride at a time, so
    // output heights that are / aren't a multiple of the slot count; two interior strips at a
    // time for 3x3 stride 1) and row blocks (other ISAs: blocks of 4, then 2, then 1 rows):
    // widths that are / aren't multiples of 16, one to several interior strips, odd pairs.
    uint32_t seed = 7000;
    for (int64_t k : {3, 5})
        for (int64_t s : {1, 2})
            for (int64_t W : {16, 33, 48, 70, 112})
                for (int64_t H : {1, 2, 3, 4, 5, 6, 7, 11}) {
                    const int64_t p = k / 2;
                    const Case c{1, 2, H, W, 2, k, k, s, s, 1, 1, p, p, p, p, 2};
                    check_case(c, true, seed % 3 == 0 ? "Clip" : "", seed % 2 == 0, true, seed, 1.0f, false,
                               ConvGemmMode::kAuto, nullptr, ConvDwMode::kRows);
                    ++seed;
                }
    // Residual == output (in place) on every height: each output read and written once.
    for (Isa isa : isas())
        for (int64_t k : {3, 5})
            for (int64_t s : {1, 2})
                for (int64_t H : {1, 2, 3, 4, 5, 6, 7, 10}) {
                    Conv2DGeom g;
                    g.C = g.M = 3;
                    g.H = H;
                    g.W = 37;
                    g.kh = g.kw = k;
                    g.sh = g.sw = s;
                    g.ph = g.pw = k / 2;
                    g.OH = (H + 2 * g.ph - k) / s + 1;
                    g.OW = (g.W + 2 * g.pw - k) / s + 1;
                    const int64_t xn = g.C * H * g.W, yn = g.C * g.OH * g.OW;
                    const std::vector<float> x = rnd(xn, 51), w = rnd(g.C * k * k, 52), b = rnd(g.C, 53), r = rnd(yn, 54);
                    std::vector<float> scratch(conv_dw_scratch_floats(g)), want(static_cast<size_t>(yn)), y = r;
                    ConvEpi e;
                    e.act = ConvAct::kRelu;
                    conv_depthwise(isa, g, x.data(), w.data(), b.data(), r.data(), want.data(), e, scratch.data(), ConvDwMode::kRows);
                    conv_depthwise(isa, g, x.data(), w.data(), b.data(), y.data(), y.data(), e, scratch.data(), ConvDwMode::kRows);
                    EXPECT_EQ(y, want) << isa_name(isa) << " k " << k << " s " << s << " H " << H;
                }
}

// A thread split by rows (conv_depthwise's [oy0, oy1)): every cut of the output rows into two
// or three ranges, run range by range, gives the whole run's bits (column sweeps start at any
// row, row blocks restart at the cut), for 3x3 / 5x5, strides 1 and 2, a dilated 3x3 (the generic
// row path) and the large-plane stride-2 tiles, with a residual and every ISA; outside the
// ranges nothing is written.
TEST(ConvFast, DepthwiseRowRangesMatchTheWholeRun) {
    struct Shape4 {
        int64_t k, s, d, H, W;
    };
    const Shape4 shapes[] = {{3, 1, 1, 13, 37}, {3, 2, 1, 14, 40}, {5, 1, 1, 11, 20}, {5, 2, 1, 12, 33},
                             {3, 1, 2, 12, 18}, {3, 2, 1, 66, 130}};
    for (Isa isa : isas())
        for (const Shape4& sh : shapes) {
            Conv2DGeom g;
            g.C = g.M = 3;
            g.H = sh.H;
            g.W = sh.W;
            g.kh = g.kw = sh.k;
            g.sh = g.sw = sh.s;
            g.dh = g.dw = sh.d;
            g.ph = g.pw = sh.d * (sh.k / 2);
            g.OH = (g.H + 2 * g.ph - sh.d * (sh.k - 1) - 1) / sh.s + 1;
            g.OW = (g.W + 2 * g.pw - sh.d * (sh.k - 1) - 1) / sh.s + 1;
            if (!conv_dw_rows_range_ok(isa, g, ConvDwMode::kRows)) continue;
            const int64_t xn = g.C * g.H * g.W, yn = g.C * g.OH * g.OW;
            const std::vector<float> x = rnd(xn, 61), w = rnd(g.C * sh.k * sh.k, 62), b = rnd(g.C, 63), r = rnd(yn, 64);
            std::vector<float> scratch(conv_dw_scratch_floats(g)), want(static_cast<size_t>(yn));
            ConvEpi e;
            e.act = ConvAct::kRelu;
            conv_depthwise(isa, g, x.data(), w.data(), b.data(), r.data(), want.data(), e, scratch.data(), ConvDwMode::kRows);
            for (int64_t a = 1; a < g.OH; ++a)
                for (int64_t c : {a, std::min(g.OH, a + 3)}) {  // [0, a) [a, c) [c, OH)
                    std::vector<float> y(static_cast<size_t>(yn), -7.0f);
                    for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, a}, {a, c}, {c, g.OH}}) {
                        if (r1 <= r0) continue;
                        conv_depthwise(isa, g, x.data(), w.data(), b.data(), r.data(), y.data(), e, scratch.data(),
                                       ConvDwMode::kRows, r0, r1);
                    }
                    ASSERT_EQ(y, want) << isa_name(isa) << " k " << sh.k << " s " << sh.s << " d " << sh.d << " cut " << a << " " << c;
                }
            // One range alone writes only its rows.
            std::vector<float> y(static_cast<size_t>(yn), -7.0f);
            conv_depthwise(isa, g, x.data(), w.data(), b.data(), r.data(), y.data(), e, scratch.data(), ConvDwMode::kRows, 1, 2);
            for (int64_t ch = 0; ch < g.C; ++ch)
                for (int64_t i = 0; i < g.OH * g.OW; ++i) {
                    const size_t at = size_t(ch * g.OH * g.OW + i);
                    ASSERT_EQ(y[at], i / g.OW == 1 ? want[at] : -7.0f) << isa_name(isa) << " " << i;
                }
        }
}

TEST(ConvFast, EpilogueEveryActivationAndResidual) {
    const Case gemm{1, 5, 7, 9, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const Case dw{1, 3, 9, 37, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3};
    uint32_t seed = 200;
    for (const char* act : kActs)
        for (bool res : {false, true}) {
            check_case(gemm, false, act, res, true, seed++, 2.0f);
            check_case(dw, true, act, res, true, seed++, 2.0f);
        }
    // A residual with the K loop split in chunks (the epilogue runs on the last one only).
    check_case({1, 300, 3, 5, 9, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, false, "HardSwish", true, true,
               seed++);
    // The transposed mode (7x7 output): epilogue applied while transposing.
    for (const char* act : kActs)
        check_case({1, 150, 7, 7, 64, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, false, act, true, true, seed++, 2.0f);
    // The direct 1x1 mode (B rows read from the image, a packed tail panel).
    for (const char* act : kActs)
        for (bool res : {false, true})
            check_case({1, 37, 10, 11, 40, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, false, act, res, true, seed++, 2.0f);
}

TEST(ConvFast, EpilogueClampAfterEveryActivation) {
    // A fused Max / Min: min(max(act(y (+ r)), lo), hi), on the GEMM, depthwise and transposed
    // paths of every ISA.
    const Case gemm{1, 5, 7, 9, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const Case dw{1, 3, 9, 37, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3};
    const Case tr{1, 150, 7, 7, 64, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1};
    uint32_t seed = 700;
    for (const char* act : kActs) {
        if (!*act) continue;  // the clamp needs an activation
        for (bool res : {false, true}) {
            check_case(gemm, false, act, res, true, seed++, 2.0f, true);
            check_case(dw, true, act, res, true, seed++, 2.0f, true);
            check_case(tr, false, act, res, true, seed++, 2.0f, true);
        }
    }
}

TEST(ConvFast, EpilogueAffineAfterEveryActivation) {
    // A fused Mul and Add by scalars after the activation (PaddleOCR's learnable affine), with
    // and without a clamp before it: y = fma(min(max(act(y (+ r)), lo), hi), scale, shift), on
    // the GEMM, depthwise and transposed paths of every ISA.
    const Case gemm{1, 5, 7, 9, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const Case dw{1, 3, 9, 37, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3};
    const Case tr{1, 150, 7, 7, 64, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1};
    const Case direct{1, 37, 10, 11, 40, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1};
    uint32_t seed = 900;
    for (const char* act : kActs) {
        if (!*act) continue;  // the affine needs an activation (else it folds into the weights)
        for (int post : {kAffine, kClamp | kAffine})
            for (bool res : {false, true}) {
                check_case(gemm, false, act, res, true, seed++, 2.0f, post);
                check_case(dw, true, act, res, true, seed++, 2.0f, post);
                check_case(tr, false, act, res, true, seed++, 2.0f, post);
                check_case(direct, false, act, res, false, seed++, 2.0f, post);
            }
    }
}

// conv_subsample (the strided 1x1 conv's input copy) on every ISA: y[c][i][j] = x[c][i sh][j sw]
// for channels [c0, c1) only, rows of every width up past two vectors (the masked tail of the
// stride-2 copy), strides 1, 2, 3 and mixed.
TEST(ConvFast, SubsampleEveryIsa) {
    struct S {
        int64_t H, W, sh, sw;
    };
    const S shapes[] = {{7, 7, 2, 2}, {14, 33, 2, 2}, {9, 65, 2, 2}, {5, 6, 1, 2}, {10, 11, 3, 3},
                        {6, 40, 2, 1}, {3, 2, 2, 2}, {4, 31, 2, 2}};
    for (Isa isa : isas())
        for (const S& s : shapes) {
            const int64_t C = 5, OH = (s.H - 1) / s.sh + 1, OW = (s.W - 1) / s.sw + 1;
            const auto x = rnd(C * s.H * s.W, 3);
            std::vector<float> y(size_t(C * OH * OW + 16), -7.0f);
            conv_subsample(isa, x.data(), s.H, s.W, s.sh, s.sw, OH, OW, y.data(), 1, 4);
            for (int64_t c = 0; c < C; ++c)
                for (int64_t i = 0; i < OH; ++i)
                    for (int64_t j = 0; j < OW; ++j) {
                        const float want = c >= 1 && c < 4 ? x[size_t((c * s.H + i * s.sh) * s.W + j * s.sw)] : -7.0f;
                        ASSERT_EQ(y[size_t((c * OH + i) * OW + j)], want)
                            << isa_name(isa) << " " << s.H << "x" << s.W << " s" << s.sh << "," << s.sw << " c" << c
                            << " (" << i << ", " << j << ")";
                    }
            for (size_t i = size_t(C * OH * OW); i < y.size(); ++i) ASSERT_EQ(y[i], -7.0f) << isa_name(isa);
        }
}

TEST(ConvFast, EdgeValues) {
    // Zeros, large magnitudes and exact cancellation.
    for (Isa isa : isas()) {
        Conv2DGeom g;
        g.C = 2;
        g.M = 3;
        g.H = 2;
        g.W = 3;
        g.OH = 2;
        g.OW = 3;
        ConvGemm cg(isa, g, 1);
        const float x[12] = {0, -0.0f, 1e30f, -1e30f, 1, 2, 3, 4, 5, 6, 7, 8};
        const float w[6] = {1, 1, 0, 0, 1, -1};  // y0 = x0 + x1, y1 = 0 . x, y2 = x0 - x1
        std::vector<float> wp(cg.packed_w_floats()), sc(cg.scratch_floats()), y(18, 9.0f);
        cg.pack_w(w, wp.data());
        ConvEpi relu;
        relu.act = ConvAct::kRelu;
        cg.run(x, wp.data(), nullptr, nullptr, y.data(), sc.data(), relu);
        const float want[6] = {3, 4, 1e30f, 0, 8, 10};  // y0 = relu(x0 + x1)
        for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(y[size_t(i)], want[i]) << isa_name(isa);
        for (int i = 6; i < 12; ++i) EXPECT_EQ(y[size_t(i)], 0.0f) << isa_name(isa);
        EXPECT_FLOAT_EQ(y[14], 1e30f) << isa_name(isa);
    }
}

// ---------------------------------------------------------------- through the engine

// Runs a Conv in float32 (fast path, active ISA) and float64 (reference path) and compares.
void check_graph(const Case& c, const Attrs& extra, bool with_res, bool w_input,
                 const Shape* xs_override = nullptr, const Shape* ws_override = nullptr) {
    const Conv2DGeom g = case_geom(c, false);
    Shape xs{c.N, c.C, c.H, c.W}, ws{c.M, c.C / c.G, c.kh, c.kw}, ys{c.N, c.M, g.OH, g.OW};
    Attrs attrs = case_attrs(c);
    if (xs_override) {
        xs = *xs_override;
        ws = *ws_override;
        ys = {c.N, c.M, g.OW};
        attrs["strides"] = aints({c.sw});
        attrs["dilations"] = aints({c.dw});
        attrs["pads"] = aints({c.pl, c.pr});
    }
    for (const auto& [k, v] : extra) attrs[k] = v;
    int64_t xn = 1, wn = 1, yn = 1;
    for (int64_t d : xs) xn *= d;
    for (int64_t d : ws) wn *= d;
    for (int64_t d : ys) yn *= d;
    const auto x = rnd(xn, 7), w = rnd(wn, 8), b = rnd(c.M, 9), r = rnd(yn, 10);
    if (with_res) attrs["_fused_residual"] = ai(1);
    Result want = run_conv(DType::kF64, xs, x, ws, w, b, with_res ? &r : nullptr, ys, attrs, w_input);
    Result got = run_conv(DType::kF32, xs, x, ws, w, b, with_res ? &r : nullptr, ys, attrs, w_input);
    ASSERT_TRUE(want.st.ok()) << want.st.message();
    ASSERT_TRUE(got.st.ok()) << got.st.message();
    ASSERT_EQ(got.shape, want.shape);
    std::vector<float> gf(got.out.begin(), got.out.end());
    expect_close(gf, want.out, case_str(c));
}

TEST(ConvFast, EnginePathsMatchReference) {
    Attrs hs{{"_fused_act", as("HardSwish")}};
    Attrs clip{{"_fused_act", as("Clip")}, {"_fused_alpha", af(0.0f)}, {"_fused_beta", af(0.5f)}};
    check_graph({2, 6, 9, 10, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, hs, true, false);
    check_graph({1, 6, 9, 10, 11, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1}, clip, false, true);  // W input
    check_graph({2, 6, 9, 10, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 6}, hs, true, false);     // depthwise
    check_graph({1, 16, 5, 6, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2}, {}, false, false);   // grouped
    check_graph({1, 6, 5, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3}, hs, true, false);      // ref path
    // Dilated "same" convs as undilated phase convs: dilation 2 (Winograd phases), 3 with a
    // batch (40x42 phases: the general gather), 5x5 dilation 2; then ones that keep the direct
    // path (phases under 40x40 beyond dilation 2, H not a multiple of the dilation, padding not
    // "same", a residual).
    check_graph({1, 8, 12, 10, 9, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1}, hs, false, false);
    check_graph({2, 5, 120, 126, 7, 3, 3, 1, 1, 3, 3, 3, 3, 3, 3, 1}, clip, false, false);
    check_graph({2, 5, 9, 12, 7, 3, 3, 1, 1, 3, 3, 3, 3, 3, 3, 1}, clip, false, false);
    check_graph({1, 4, 8, 8, 6, 5, 5, 1, 1, 2, 2, 4, 4, 4, 4, 1}, {}, false, false);
    check_graph({1, 4, 9, 8, 6, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1}, {}, false, false);
    check_graph({1, 4, 8, 8, 6, 3, 3, 1, 1, 2, 2, 1, 1, 1, 1, 1}, {}, false, false);
    check_graph({1, 4, 8, 8, 6, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1}, hs, true, false);
    // Strided 1x1 convs without padding (subsampled, then the stride-1 conv): a batch, odd
    // planes, stride 3 and mixed strides, residuals; with padding they keep ConvGemm's modes.
    check_graph({2, 24, 15, 13, 40, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1}, hs, true, false);
    check_graph({1, 40, 14, 14, 72, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1}, {}, false, false);
    check_graph({1, 16, 29, 31, 24, 1, 1, 3, 3, 1, 1, 0, 0, 0, 0, 1}, clip, true, false);
    check_graph({2, 8, 12, 17, 16, 1, 1, 1, 2, 1, 1, 0, 0, 0, 0, 1}, {}, false, false);
    check_graph({1, 16, 14, 14, 24, 1, 1, 2, 2, 1, 1, 1, 1, 1, 1, 1}, {}, true, false);
    // 1-D conv.
    const Shape xs{1, 4, 23}, ws{5, 4, 3};
    check_graph({1, 4, 1, 23, 5, 1, 3, 1, 2, 1, 1, 0, 1, 0, 1, 1}, hs, false, false, &xs, &ws);
}

// One-group conv case c (attributes `extra`, a residual if `res`) in float32 against the float64
// reference, within Winograd F(4,3)'s error, which scales with the largest output
// (docs/winograd.md: 2.4-7.1e-6 of it); returns the float32 run (its kernel description).
Result expect_near_f64(const Case& c, const Attrs& extra, bool res, uint32_t* seed) {
    const Conv2DGeom g = case_geom(c, false);
    const Shape xs{c.N, c.C, c.H, c.W}, ws{c.M, c.C, c.kh, c.kw}, ys{c.N, c.M, g.OH, g.OW};
    Attrs attrs = case_attrs(c);
    for (const auto& [k, v] : extra) attrs[k] = v;
    if (res) attrs["_fused_residual"] = ai(1);
    const auto x = rnd(c.N * c.C * c.H * c.W, (*seed)++), w = rnd(c.M * c.C * c.kh * c.kw, (*seed)++),
               b = rnd(c.M, (*seed)++), r = rnd(c.N * c.M * g.OH * g.OW, (*seed)++);
    Result want = run_conv(DType::kF64, xs, x, ws, w, b, res ? &r : nullptr, ys, attrs);
    Result got = run_conv(DType::kF32, xs, x, ws, w, b, res ? &r : nullptr, ys, attrs);
    EXPECT_TRUE(want.st.ok()) << want.st.message();
    EXPECT_TRUE(got.st.ok()) << got.st.message();
    EXPECT_EQ(got.shape, want.shape);
    if (!want.st.ok() || !got.st.ok() || got.shape != want.shape) return got;
    double mx = 1.0;
    for (double v : want.out) mx = std::max(mx, std::abs(v));
    std::vector<float> gf(got.out.begin(), got.out.end());
    expect_close(gf, want.out, case_str(c) + " " + got.kernel, 2e-5 * mx);
    return got;
}

// Dilated "same" convs whose undilated conv over the phase mosaic runs as Winograd take that path
// (the line detector's 3x3 dilation 5; dilation 2 with a batch, odd planes and a ReLU); a conv
// whose mosaic conv would not be Winograd (4 channels) keeps the dilated taps; JIFFY_DIL_PHASES
// forces either way (a 5x5 kernel through the mosaic's direct conv). Every result equals the
// float64 reference.
TEST(ConvFast, DilatedConvsRunAsOnePhaseMosaic) {
    struct T {
        Case c;
        Attrs extra;
        const char* force;  // JIFFY_DIL_PHASES, or null
        bool mosaic;        // the plan must (not) show the phase mosaic
    };
    const Attrs relu{{"_fused_act", as("Relu")}};
    const T cases[] = {
        {{1, 32, 60, 60, 32, 3, 3, 1, 1, 5, 5, 5, 5, 5, 5, 1}, {}, nullptr, true},
        {{2, 32, 34, 46, 40, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1}, relu, nullptr, true},
        {{1, 4, 24, 24, 4, 3, 3, 1, 1, 3, 3, 3, 3, 3, 3, 1}, {}, nullptr, false},
        {{1, 6, 20, 16, 5, 5, 5, 1, 1, 2, 2, 4, 4, 4, 4, 1}, relu, "1", true},
        {{1, 32, 60, 60, 32, 3, 3, 1, 1, 5, 5, 5, 5, 5, 5, 1}, {}, "0", false},
    };
    uint32_t seed = 400;
    for (const T& t : cases) {
        const Case& c = t.c;
        if (t.force) setenv("JIFFY_DIL_PHASES", t.force, 1);
        const Result got = expect_near_f64(c, t.extra, false, &seed);
        unsetenv("JIFFY_DIL_PHASES");
        EXPECT_EQ(got.kernel.find("phase mosaic") != std::string::npos, t.mosaic) << case_str(c) << ": " << got.kernel;
        if (t.mosaic && !t.force)
            EXPECT_NE(got.kernel.find("winograd"), std::string::npos) << case_str(c) << ": " << got.kernel;
        if (HasFailure()) return;
    }
}

// Convs with stride (sh, 1) whose 1 x kw conv over the row stack (kh C channels, OH x W) runs as
// 1-D Winograd take that path: an SVTR-like 3x3 (2, 1) layer, a batch with a residual, odd planes
// and asymmetric pads (no pad at the bottom, a TF-style one-sided pad on top, one-sided column
// pads), stride 3 (rows skipped), a 5x3 kernel; every result equals the float64 reference. Few channels (the stacked
// conv would not be Winograd) and stride (2, 2) keep their direct paths.
TEST(ConvFast, StridedRowsRunAsRowStackedOneByThree) {
    struct T {
        Case c;
        Attrs extra;
        bool res;
        bool stacked;  // the plan must (not) show the row stack
    };
    const Attrs hs{{"_fused_act", as("HardSwish")}};
    const T cases[] = {
        {{1, 32, 24, 160, 64, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1}, hs, false, true},
        {{2, 40, 13, 77, 48, 3, 3, 2, 1, 1, 1, 1, 1, 0, 1, 1}, {}, true, true},
        {{1, 48, 16, 64, 56, 3, 3, 2, 1, 1, 1, 0, 1, 1, 1, 1}, hs, false, true},
        {{1, 40, 20, 96, 64, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, {}, false, true},
        {{1, 32, 18, 80, 40, 5, 3, 2, 1, 1, 1, 2, 1, 2, 1, 1}, hs, true, true},
        {{1, 40, 16, 96, 48, 3, 3, 2, 1, 1, 1, 0, 2, 1, 0, 1}, {}, false, true},  // W pads 2 / 0
        {{1, 40, 16, 96, 48, 3, 3, 2, 1, 1, 1, 1, 0, 1, 1, 1}, {}, true, true},   // W pads 0 / 1
        {{1, 3, 24, 40, 4, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1}, {}, false, false},
        {{1, 32, 24, 160, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1}, {}, false, false},
    };
    uint32_t seed = 500;
    for (const T& t : cases) {
        const Case& c = t.c;
        const Result got = expect_near_f64(c, t.extra, t.res, &seed);
        if (kernels::active_isa() != kernels::Isa::kScalar) {
            EXPECT_EQ(got.kernel.find("rows stacked") != std::string::npos, t.stacked) << case_str(c) << ": " << got.kernel;
            if (t.stacked) EXPECT_NE(got.kernel.find("winograd"), std::string::npos) << case_str(c) << ": " << got.kernel;
        }
        if (HasFailure()) return;
    }
}

TEST(ConvFast, ConvTransposeGemmMatchesReference) {
    struct T {
        Shape xs, ws;
        Attrs attrs;
    };
    const T cases[] = {
        {{1, 5, 7, 9}, {5, 3, 2, 2}, {{"strides", aints({2, 2})}}},
        {{2, 4, 6, 5}, {4, 6, 3, 3},
         {{"strides", aints({2, 1})}, {"pads", aints({1, 0, 0, 1})}, {"dilations", aints({1, 2})}}},
        {{1, 3, 4, 4}, {3, 2, 3, 3}, {{"strides", aints({3, 3})}, {"output_padding", aints({1, 2})}}},
        {{1, 24, 10, 10}, {24, 1, 2, 2}, {{"strides", aints({2, 2})}}},
        {{1, 3, 11}, {3, 4, 4}, {{"strides", aints({2})}, {"pads", aints({1, 2})}}},
        // Non-overlapping taps in bands of rows (256 KiB of col): 3-row bands and a 2-row tail;
        // kernel 3 x 1 (kw != 2); 1-D.
        {{1, 8, 20, 70}, {8, 64, 2, 2}, {{"strides", aints({2, 2})}}},
        {{2, 6, 9, 40}, {6, 300, 3, 1}, {{"strides", aints({3, 1})}}},
        {{1, 3, 40}, {3, 5, 2}, {{"strides", aints({2})}}},
    };
    // The fused epilogue (fuse_activation): none, ReLU, Sigmoid with a clamp and an affine.
    const Attrs epis[] = {{},
                          {{"_fused_act", as("Relu")}},
                          {{"_fused_act", as("Sigmoid")}, {"_fused_hi", af(0.7f)}, {"_fused_scale", af(-2.0f)},
                           {"_fused_shift", af(0.5f)}}};
    uint32_t seed = 300;
    for (const T& c : cases)
        for (const Attrs& e : epis) {
            int64_t xn = 1, wn = 1;
            for (int64_t d : c.xs) xn *= d;
            for (int64_t d : c.ws) wn *= d;
            const auto x = rnd(xn, seed++), w = rnd(wn, seed++), b = rnd(c.ws[1], seed++);
            Attrs attrs = c.attrs;
            for (const auto& [k, v] : e) attrs[k] = v;
            Result want = run_conv(DType::kF64, c.xs, x, c.ws, w, b, nullptr, {}, attrs, false, "ConvTranspose");
            Result got = run_conv(DType::kF32, c.xs, x, c.ws, w, b, nullptr, {}, attrs, false, "ConvTranspose");
            ASSERT_TRUE(want.st.ok()) << want.st.message();
            ASSERT_TRUE(got.st.ok()) << got.st.message();
            ASSERT_EQ(got.shape, want.shape);
            std::vector<float> gf(got.out.begin(), got.out.end());
            expect_close(gf, want.out, "ConvTranspose " + shape_str(c.xs) + " " + shape_str(c.ws) + " epilogue " +
                                           std::to_string(e.size()));
            // W as an input: the direct kernel (no packing), the same epilogue.
            Result direct = run_conv(DType::kF32, c.xs, x, c.ws, w, b, nullptr, {}, attrs, true, "ConvTranspose");
            ASSERT_TRUE(direct.st.ok()) << direct.st.message();
            std::vector<float> df(direct.out.begin(), direct.out.end());
            expect_close(df, want.out, "ConvTranspose, W an input, " + shape_str(c.xs));
            if (e.empty()) continue;
            Result plain = run_conv(DType::kF64, c.xs, x, c.ws, w, b, nullptr, {}, c.attrs, false, "ConvTranspose");
            ASSERT_TRUE(plain.st.ok());
            EXPECT_NE(plain.out, want.out);  // the oracle applies the epilogue too
        }
}

TEST(ConvFast, BadFusedAttributesGiveClearErrors) {
    const Shape xs{1, 2, 4, 4}, ws{3, 2, 3, 3};
    const auto x = rnd(32, 1), w = rnd(54, 2), b = rnd(3, 3);
    Attrs bad{{"_fused_act", as("Gelu")}};
    Result r = run_conv(DType::kF32, xs, x, ws, w, b, nullptr, {}, bad);
    ASSERT_FALSE(r.st.ok());
    EXPECT_NE(r.st.message().find("_fused_act"), std::string::npos) << r.st.message();

    const auto res = rnd(3 * 4 * 4, 4);
    Attrs fr{{"_fused_residual", ai(1)}};  // residual of the wrong shape (unpadded out is 2x2)
    r = run_conv(DType::kF32, xs, x, ws, w, b, &res, {1, 3, 4, 4}, fr);
    ASSERT_FALSE(r.st.ok());
    EXPECT_NE(r.st.message().find("_fused_add"), std::string::npos) << r.st.message();

    // A fourth input without _fused_residual.
    r = run_conv(DType::kF32, xs, x, ws, w, b, &res, {1, 3, 2, 2}, {});
    ASSERT_FALSE(r.st.ok());
    EXPECT_NE(r.st.message().find("_fused_residual"), std::string::npos) << r.st.message();

    // A clamp without an activation.
    r = run_conv(DType::kF32, xs, x, ws, w, b, nullptr, {}, {{"_fused_lo", af(-0.4f)}});
    ASSERT_FALSE(r.st.ok());
    EXPECT_NE(r.st.message().find("_fused_lo"), std::string::npos) << r.st.message();

    // An affine without an activation, and a non-finite one.
    r = run_conv(DType::kF32, xs, x, ws, w, b, nullptr, {}, {{"_fused_scale", af(2.0f)}});
    ASSERT_FALSE(r.st.ok());
    EXPECT_NE(r.st.message().find("_fused_scale / _fused_shift need a _fused_act"), std::string::npos)
        << r.st.message();
    r = run_conv(DType::kF32, xs, x, ws, w, b, nullptr, {},
                 {{"_fused_act", as("Relu")}, {"_fused_shift", af(std::nanf(""))}});
    ASSERT_FALSE(r.st.ok());
    EXPECT_NE(r.st.message().find("must be finite"), std::string::npos) << r.st.message();
}

}  // namespace
