// Conv / pooling / normalization ops: edge cases the ONNX conformance suite does not cover,
// checked against naive reference implementations written here, plus error handling and speed.
#include <gtest/gtest.h>

#include <time.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "attr_util.h"
#include "one_node.h"
#include "runtime/plan.h"

using namespace jiffy;
using namespace jiffy::testattr;

namespace {

// ---------------------------------------------------------------- helpers

using testnode::f32;

// Deterministic pseudo-random float tensor in [-1, 1).
Tensor rnd(Shape s, uint32_t seed) {
    Tensor t(DType::kF32, std::move(s));
    float* p = t.as<float>();
    uint32_t x = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < t.numel(); ++i) {
        x = x * 1664525u + 1013904223u;
        p[i] = float(x >> 8) / float(1 << 24) * 2.0f - 1.0f;
    }
    return t;
}

struct Result {
    Status st;
    std::vector<Tensor> outs;  // present outputs, in order
    std::shared_ptr<const Plan> plan;
};

// Builds a one-node graph. Inputs with const_in[i] = true become constants; a default-constructed
// (empty) Tensor marks an omitted optional input. out_present selects the node's outputs.
Result run_op(const std::string& op, const std::vector<Tensor>& ins, std::vector<bool> const_in,
              const Attrs& attrs, std::vector<bool> out_present = {true}, int64_t opset = 17) {
    testnode::NodeRun n = testnode::run_one_node(op, testnode::node_inputs(ins, const_in), attrs, opset, out_present);
    return Result{n.st, std::move(n.outs), n.plan};
}

void expect_close(const Tensor& got, const Tensor& want, double tol = 1e-4) {
    ASSERT_EQ(got.shape(), want.shape()) << shape_str(got.shape()) << " vs " << shape_str(want.shape());
    for (int64_t i = 0; i < got.numel(); ++i) {
        double a = got.get_f64(i), b = want.get_f64(i);
        ASSERT_NEAR(a, b, tol * (1 + std::abs(b))) << "element " << i;
    }
}

void expect_error(const Result& r, const std::string& fragment) {
    ASSERT_FALSE(r.st.ok()) << "expected an error mentioning '" << fragment << "'";
    EXPECT_NE(r.st.message().find(fragment), std::string::npos) << r.st.message();
}

// ---------------------------------------------------------------- reference conv

struct Geo3 {
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1},
            d[3] = {1, 1, 1}, pb[3] = {0, 0, 0};
};

// Naive direct convolution; spatial dims normalized to 3.
Tensor ref_conv(const Tensor& x, const Tensor& w, const Tensor* b, int64_t group, const Geo3& g) {
    const int64_t N = x.shape()[0], C = x.shape()[1], M = w.shape()[0], Cg = C / group,
                  Mg = M / group;
    Shape os = {N, M};
    const size_t nd = x.shape().size() - 2;
    for (size_t i = 0; i < nd; ++i) os.push_back(g.out[3 - nd + i]);
    Tensor y(DType::kF32, os);
    const float* X = x.as<float>();
    const float* W = w.as<float>();
    float* Y = y.as<float>();
    int64_t yi = 0;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m)
            for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
                for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
                    for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
                        double acc = b ? b->as<float>()[m] : 0.0;
                        for (int64_t c = 0; c < Cg; ++c)
                            for (int64_t k0 = 0; k0 < g.k[0]; ++k0)
                                for (int64_t k1 = 0; k1 < g.k[1]; ++k1)
                                    for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
                                        int64_t i0 = o0 * g.s[0] - g.pb[0] + k0 * g.d[0];
                                        int64_t i1 = o1 * g.s[1] - g.pb[1] + k1 * g.d[1];
                                        int64_t i2 = o2 * g.s[2] - g.pb[2] + k2 * g.d[2];
                                        if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] ||
                                            i2 < 0 || i2 >= g.in[2])
                                            continue;
                                        int64_t ic = (m / Mg) * Cg + c;
                                        double xv = X[(((n * C + ic) * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2];
                                        double wv = W[(((m * Cg + c) * g.k[0] + k0) * g.k[1] + k1) * g.k[2] + k2];
                                        acc += xv * wv;
                                    }
                        Y[yi++] = float(acc);
                    }
    return y;
}

struct ConvCase {
    Shape x, w;
    int64_t group;
    std::vector<int64_t> strides, dils, pads;  // pads: begin..., end...
    std::string auto_pad;
    bool bias;
};

void check_conv(const ConvCase& c, uint32_t seed) {
    const size_t nd = c.x.size() - 2;
    Tensor x = rnd(c.x, seed), w = rnd(c.w, seed + 1), b = rnd({c.w[0]}, seed + 2);
    Geo3 g;
    const size_t o = 3 - nd;
    for (size_t i = 0; i < nd; ++i) {
        int64_t in = c.x[2 + i], k = c.w[2 + i], s = c.strides.empty() ? 1 : c.strides[i],
                d = c.dils.empty() ? 1 : c.dils[i];
        int64_t ext = (k - 1) * d + 1, pb = 0, pe = 0, out;
        if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
            out = (in + s - 1) / s;
            int64_t total = std::max<int64_t>(0, (out - 1) * s + ext - in);
            pb = c.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        } else {
            if (c.auto_pad != "VALID" && !c.pads.empty()) {
                pb = c.pads[i];
                pe = c.pads[i + nd];
            }
            out = (in + pb + pe - ext) / s + 1;
        }
        g.in[o + i] = in;
        g.out[o + i] = out;
        g.k[o + i] = k;
        g.s[o + i] = s;
        g.d[o + i] = d;
        g.pb[o + i] = pb;
    }
    Attrs at = {{"group", ai(c.group)}};
    if (!c.strides.empty()) at["strides"] = aints(c.strides);
    if (!c.dils.empty()) at["dilations"] = aints(c.dils);
    if (!c.pads.empty()) at["pads"] = aints(c.pads);
    if (!c.auto_pad.empty()) at["auto_pad"] = as(c.auto_pad);
    Result r = c.bias ? run_op("Conv", {x, w, b}, {false, true, true}, at)
                      : run_op("Conv", {x, w}, {false, true}, at);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], ref_conv(x, w, c.bias ? &b : nullptr, c.group, g));
}

// ---------------------------------------------------------------- Conv

TEST(ConvOps, ConvMatchesReference) {
    const std::vector<ConvCase> cases = {
        {{1, 1, 7}, {1, 1, 3}, 1, {}, {}, {}, "", true},                       // 1-D
        {{2, 3, 9}, {4, 3, 2}, 1, {2}, {2}, {1, 2}, "", true},                 // 1-D stride/dil/pads
        {{1, 3, 8, 7}, {5, 3, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, "", true},       // 2-D padded
        {{1, 4, 9, 8}, {6, 2, 3, 2}, 2, {2, 3}, {1, 2}, {0, 1, 2, 0}, "", false},  // groups, asym
        {{1, 6, 7, 7}, {6, 1, 3, 3}, 6, {2, 2}, {}, {1, 1, 1, 1}, "", true},   // depthwise strided
        {{1, 3, 6, 6}, {6, 1, 3, 3}, 3, {}, {2, 2}, {2, 2, 2, 2}, "", true},   // depthwise x2, dilated
        {{1, 4, 5, 6}, {3, 4, 1, 1}, 1, {}, {}, {}, "", true},                 // pointwise
        {{2, 4, 5, 6}, {6, 2, 1, 1}, 2, {}, {}, {}, "", false},                // grouped pointwise
        {{1, 4, 5, 6}, {3, 4, 1, 1}, 1, {2, 2}, {}, {}, "", true},             // strided 1x1
        {{1, 2, 7, 6}, {3, 2, 3, 3}, 1, {2, 2}, {}, {}, "SAME_UPPER", true},
        {{1, 2, 7, 6}, {3, 2, 4, 4}, 1, {2, 1}, {}, {}, "SAME_LOWER", true},
        {{1, 2, 7, 6}, {3, 2, 3, 2}, 1, {2, 2}, {}, {5, 5, 5, 5}, "VALID", true},  // pads ignored
        {{1, 2, 4, 5, 6}, {3, 2, 2, 3, 3}, 1, {1, 2, 1}, {2, 1, 1}, {1, 0, 1, 0, 1, 1}, "", true},
        {{1, 4, 3, 4, 5}, {4, 2, 3, 3, 3}, 2, {}, {}, {1, 1, 1, 1, 1, 1}, "", true},  // 3-D groups
        {{1, 1, 2, 2}, {1, 1, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, "", true},       // kernel > input
        {{1, 2, 3, 3}, {2, 2, 3, 3}, 1, {4, 4}, {}, {2, 2, 2, 2}, "", true},   // stride > kernel
    };
    for (size_t i = 0; i < cases.size(); ++i) {
        SCOPED_TRACE("case " + std::to_string(i));
        check_conv(cases[i], uint32_t(i * 7 + 1));
    }
}

TEST(ConvOps, ConvFloat64AndKernelShapeAttr) {
    Tensor x(DType::kF64, {1, 1, 3, 3}), w(DType::kF64, {1, 1, 2, 2});
    for (int i = 0; i < 9; ++i) x.as<double>()[i] = i + 1;
    for (int i = 0; i < 4; ++i) w.as<double>()[i] = 1;
    Result r = run_op("Conv", {x, w}, {false, true}, {{"kernel_shape", aints({2, 2})}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    ASSERT_EQ(r.outs[0].dtype(), DType::kF64);
    const double* y = r.outs[0].as<double>();
    EXPECT_DOUBLE_EQ(y[0], 1 + 2 + 4 + 5);
    EXPECT_DOUBLE_EQ(y[3], 5 + 6 + 8 + 9);
}

TEST(ConvOps, ConvRejectsBadModels) {
    Tensor x = rnd({1, 4, 5, 5}, 1);
    expect_error(run_op("Conv", {x, rnd({2, 3, 3, 3}, 2)}, {false, true}, {}), "channels");
    expect_error(run_op("Conv", {x, rnd({3, 2, 3, 3}, 2)}, {false, true}, {{"group", ai(2)}}),
                 "divisible by group");
    expect_error(run_op("Conv", {x, rnd({2, 4, 3, 3}, 2)}, {false, true},
                        {{"kernel_shape", aints({3, 2})}}),
                 "kernel_shape");
    expect_error(run_op("Conv", {x, rnd({2, 4, 3, 3}, 2)}, {false, true},
                        {{"auto_pad", as("SAME")}}),
                 "auto_pad");
    expect_error(run_op("Conv", {x, rnd({2, 4, 3, 3}, 2)}, {false, true},
                        {{"strides", aints({1, 0})}}),
                 "strides");
    expect_error(run_op("Conv", {x, rnd({2, 4, 3, 3}, 2)}, {false, true},
                        {{"pads", aints({1, 1})}}),
                 "pads");
    expect_error(run_op("Conv", {x, rnd({2, 4, 7, 7}, 2)}, {false, true}, {}), "kernel extent");
    expect_error(run_op("Conv", {x, rnd({2, 4, 3}, 2)}, {false, true}, {}), "rank");
    expect_error(run_op("Conv", {x, rnd({2, 4, 3, 3}, 2), rnd({3}, 3)}, {false, true, true}, {}),
                 "B");
    expect_error(run_op("Conv", {rnd({1, 4}, 1), rnd({2, 4}, 2)}, {false, true}, {}), "rank");
    expect_error(run_op("Conv", {Tensor(DType::kI32, {1, 1, 3}), Tensor(DType::kI32, {1, 1, 1})},
                        {false, true}, {}),
                 "int32");
}

// ---------------------------------------------------------------- ConvTranspose

// Naive scatter form: y[o = i*s - pb + k*d] += x[i] * w.
Tensor ref_convt(const Tensor& x, const Tensor& w, const Tensor* b, int64_t group, const Geo3& g) {
    const int64_t N = x.shape()[0], C = x.shape()[1], Mg = w.shape()[1], M = Mg * group,
                  Cg = C / group;
    Shape os = {N, M};
    const size_t nd = x.shape().size() - 2;
    for (size_t i = 0; i < nd; ++i) os.push_back(g.out[3 - nd + i]);
    Tensor y(DType::kF32, os);
    std::vector<double> acc(size_t(y.numel()), 0.0);
    const int64_t OP = g.out[0] * g.out[1] * g.out[2];
    for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m)
            for (int64_t q = 0; q < OP; ++q) acc[size_t((n * M + m) * OP + q)] = b ? b->as<float>()[m] : 0;
    const float* X = x.as<float>();
    const float* W = w.as<float>();
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t i0 = 0; i0 < g.in[0]; ++i0)
                for (int64_t i1 = 0; i1 < g.in[1]; ++i1)
                    for (int64_t i2 = 0; i2 < g.in[2]; ++i2) {
                        double xv = X[(((n * C + c) * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2];
                        for (int64_t ml = 0; ml < Mg; ++ml)
                            for (int64_t k0 = 0; k0 < g.k[0]; ++k0)
                                for (int64_t k1 = 0; k1 < g.k[1]; ++k1)
                                    for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
                                        int64_t o0 = i0 * g.s[0] - g.pb[0] + k0 * g.d[0];
                                        int64_t o1 = i1 * g.s[1] - g.pb[1] + k1 * g.d[1];
                                        int64_t o2 = i2 * g.s[2] - g.pb[2] + k2 * g.d[2];
                                        if (o0 < 0 || o0 >= g.out[0] || o1 < 0 || o1 >= g.out[1] ||
                                            o2 < 0 || o2 >= g.out[2])
                                            continue;
                                        int64_t m = (c / Cg) * Mg + ml;
                                        double wv = W[(((c * Mg + ml) * g.k[0] + k0) * g.k[1] + k1) * g.k[2] + k2];
                                        acc[size_t(((n * M + m) * g.out[0] + o0) * g.out[1] * g.out[2] +
                                                   o1 * g.out[2] + o2)] += xv * wv;
                                    }
                    }
    for (int64_t i = 0; i < y.numel(); ++i) y.as<float>()[i] = float(acc[size_t(i)]);
    return y;
}

TEST(ConvOps, ConvTransposeMatchesReference) {
    struct Case {
        Shape x, w;
        int64_t group;
        std::vector<int64_t> strides, dils, pads, outpad, out_shape;
        std::string auto_pad;
    };
    const std::vector<Case> cases = {
        {{1, 2, 5}, {2, 3, 3}, 1, {2}, {}, {1, 0}, {1}, {}, ""},
        {{1, 4, 3, 4}, {4, 2, 3, 3}, 2, {2, 2}, {2, 1}, {1, 0, 0, 1}, {1, 0}, {}, ""},
        {{2, 3, 3, 3}, {3, 2, 2, 2}, 1, {2, 2}, {}, {}, {}, {}, "SAME_UPPER"},
        {{1, 1, 3, 3}, {1, 2, 3, 3}, 1, {2, 2}, {}, {}, {}, {}, "SAME_LOWER"},
        {{1, 1, 3, 3}, {1, 2, 3, 3}, 1, {3, 2}, {}, {}, {}, {10, 8}, ""},
        {{1, 1, 4, 4}, {1, 1, 3, 3}, 1, {2, 2}, {}, {}, {}, {6, 7}, ""},  // output_shape < natural
        {{1, 2, 2, 3, 2}, {2, 2, 2, 2, 3}, 1, {2, 1, 2}, {1, 2, 1}, {0, 1, 1, 1, 0, 0}, {}, {}, ""},
        {{1, 3, 4, 4}, {3, 1, 3, 3}, 3, {1, 1}, {}, {1, 1, 1, 1}, {}, {}, ""},  // depthwise
    };
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        SCOPED_TRACE("case " + std::to_string(ci));
        const Case& c = cases[ci];
        const size_t nd = c.x.size() - 2;
        Tensor x = rnd(c.x, uint32_t(ci + 3)), w = rnd(c.w, uint32_t(ci + 4)),
               b = rnd({c.w[1] * c.group}, uint32_t(ci + 5));
        Geo3 g;
        const size_t o = 3 - nd;
        for (size_t i = 0; i < nd; ++i) {
            int64_t in = c.x[2 + i], k = c.w[2 + i], s = c.strides.empty() ? 1 : c.strides[i],
                    d = c.dils.empty() ? 1 : c.dils[i], op = c.outpad.empty() ? 0 : c.outpad[i];
            int64_t natural = s * (in - 1) + op + (k - 1) * d + 1, out, pb = 0;
            if (!c.out_shape.empty() || !c.auto_pad.empty()) {
                out = c.out_shape.empty() ? in * s : c.out_shape[i];
                int64_t total = std::max<int64_t>(0, natural - out);
                pb = c.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
            } else {
                pb = c.pads.empty() ? 0 : c.pads[i];
                out = natural - pb - (c.pads.empty() ? 0 : c.pads[i + nd]);
            }
            g.in[o + i] = in;
            g.out[o + i] = out;
            g.k[o + i] = k;
            g.s[o + i] = s;
            g.d[o + i] = d;
            g.pb[o + i] = pb;
        }
        Attrs at = {{"group", ai(c.group)}};
        if (!c.strides.empty()) at["strides"] = aints(c.strides);
        if (!c.dils.empty()) at["dilations"] = aints(c.dils);
        if (!c.pads.empty()) at["pads"] = aints(c.pads);
        if (!c.outpad.empty()) at["output_padding"] = aints(c.outpad);
        if (!c.out_shape.empty()) at["output_shape"] = aints(c.out_shape);
        if (!c.auto_pad.empty()) at["auto_pad"] = as(c.auto_pad);
        Result r = run_op("ConvTranspose", {x, w, b}, {false, true, true}, at);
        ASSERT_TRUE(r.st.ok()) << r.st.message();
        expect_close(r.outs[0], ref_convt(x, w, &b, c.group, g));
    }
}

TEST(ConvOps, ConvTransposeRejectsBadModels) {
    Tensor x = rnd({1, 4, 3, 3}, 1);
    expect_error(run_op("ConvTranspose", {x, rnd({3, 2, 3, 3}, 2)}, {false, true}, {}),
                 "channel count");
    expect_error(run_op("ConvTranspose", {x, rnd({4, 2, 3, 3}, 2)}, {false, true},
                        {{"group", ai(3)}}),
                 "group");
    expect_error(run_op("ConvTranspose", {x, rnd({4, 2, 3, 3}, 2)}, {false, true},
                        {{"output_shape", aints({5})}}),
                 "output_shape");
    expect_error(run_op("ConvTranspose", {x, rnd({4, 2, 3, 3}, 2)}, {false, true},
                        {{"pads", aints({4, 4, 4, 4})}}),
                 "output size");
}

// ---------------------------------------------------------------- pools

TEST(ConvOps, MaxPoolIndicesStorageOrderAndCeil) {
    // 1x1x4x5 input 0..19; 2x2 kernel, stride 2, ceil_mode: output 2x3 (last column partial).
    std::vector<float> v(20);
    for (int i = 0; i < 20; ++i) v[size_t(i)] = float(i);
    Tensor x = f32({1, 1, 4, 5}, v);
    Attrs at = {{"kernel_shape", aints({2, 2})}, {"strides", aints({2, 2})}, {"ceil_mode", ai(1)}};
    Result r = run_op("MaxPool", {x}, {false}, at, {true, true}, 12);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    ASSERT_EQ(r.outs[0].shape(), (Shape{1, 1, 2, 3}));
    const float* y = r.outs[0].as<float>();
    const int64_t* idx = r.outs[1].as<int64_t>();
    EXPECT_EQ(y[0], 6);
    EXPECT_EQ(y[2], 9);
    EXPECT_EQ(y[5], 19);
    EXPECT_EQ(idx[2], 9);
    EXPECT_EQ(idx[5], 19);
    at["storage_order"] = ai(1);  // column-major: h + w * H
    r = run_op("MaxPool", {x}, {false}, at, {true, true}, 12);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    idx = r.outs[1].as<int64_t>();
    EXPECT_EQ(idx[2], 1 + 4 * 4);  // (h=1, w=4)
    EXPECT_EQ(idx[5], 3 + 4 * 4);  // (h=3, w=4)
}

TEST(ConvOps, MaxPoolIndicesIncludeBatchAndChannelOffset) {
    Tensor x = rnd({2, 3, 4, 4}, 9);
    Result r = run_op("MaxPool", {x}, {false},
                      {{"kernel_shape", aints({2, 2})}, {"strides", aints({2, 2})}}, {true, true}, 12);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    const float* xv = x.as<float>();
    for (int64_t i = 0; i < r.outs[0].numel(); ++i) {
        int64_t k = r.outs[1].as<int64_t>()[i];
        ASSERT_GE(k, (i / 4) * 16);
        ASSERT_LT(k, (i / 4 + 1) * 16);
        EXPECT_EQ(xv[k], r.outs[0].as<float>()[i]);
    }
}

TEST(ConvOps, MaxPoolInt8DilatedAndPadded) {
    Tensor x(DType::kI8, {1, 1, 5});
    int8_t xv[5] = {-5, 3, -7, 1, -2};
    std::memcpy(x.data(), xv, 5);
    Result r = run_op("MaxPool", {x}, {false},
                      {{"kernel_shape", aints({2})}, {"dilations", aints({2})}, {"pads", aints({1, 1})}},
                      {true}, 12);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    // windows (start -1, taps at -1, 1 / 0, 2 / 1, 3 / 2, 4 / 3, 5): 3, -5, 3, -2, 1
    ASSERT_EQ(r.outs[0].shape(), (Shape{1, 1, 5}));
    const int8_t* y = r.outs[0].as<int8_t>();
    EXPECT_EQ(y[0], 3);
    EXPECT_EQ(y[1], -5);
    EXPECT_EQ(y[2], 3);
    EXPECT_EQ(y[3], -2);
    EXPECT_EQ(y[4], 1);
}

TEST(ConvOps, AveragePoolCountIncludePadWithCeilMode) {
    // 1-D input of 5 ones, kernel 3, stride 2, pads 1/1, ceil_mode: output 3; the last window
    // (start 3) covers 3, 4 and the end pad (5): with pad counted the divisor is 3.
    Tensor x = f32({1, 1, 5}, {1, 1, 1, 1, 1});
    Attrs at = {{"kernel_shape", aints({3})}, {"strides", aints({2})}, {"pads", aints({1, 1})},
                {"ceil_mode", ai(1)}, {"count_include_pad", ai(1)}};
    Result r = run_op("AveragePool", {x}, {false}, at);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    ASSERT_EQ(r.outs[0].shape(), (Shape{1, 1, 3}));
    const float* y = r.outs[0].as<float>();
    EXPECT_NEAR(y[0], 2.0 / 3, 1e-6);
    EXPECT_NEAR(y[1], 1.0, 1e-6);
    EXPECT_NEAR(y[2], 2.0 / 3, 1e-6);
    at["count_include_pad"] = ai(0);
    r = run_op("AveragePool", {x}, {false}, at);
    ASSERT_TRUE(r.st.ok());
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(r.outs[0].as<float>()[i], 1.0, 1e-6);
}

TEST(ConvOps, AveragePoolCeilDropsWindowStartingInPadding) {
    // in 4, kernel 2, stride 2, pads 0/1, ceil: (4+1-2)/2 -> ceil 2.5 = 3 windows, but the third
    // would start at 4 (in the end padding), so the output has 2.
    Tensor x = f32({1, 1, 4}, {1, 2, 3, 4});
    Result r = run_op("AveragePool", {x}, {false},
                      {{"kernel_shape", aints({2})}, {"strides", aints({2})}, {"pads", aints({0, 1})},
                       {"ceil_mode", ai(1)}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    ASSERT_EQ(r.outs[0].shape(), (Shape{1, 1, 2}));
}

TEST(ConvOps, AveragePoolDilationsOpset19) {
    Tensor x = f32({1, 1, 1, 5}, {1, 2, 3, 4, 5});
    Result r = run_op("AveragePool", {x}, {false},
                      {{"kernel_shape", aints({1, 2})}, {"dilations", aints({1, 3})}}, {true}, 19);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    ASSERT_EQ(r.outs[0].shape(), (Shape{1, 1, 1, 2}));
    EXPECT_NEAR(r.outs[0].as<float>()[0], 2.5, 1e-6);
    EXPECT_NEAR(r.outs[0].as<float>()[1], 3.5, 1e-6);
}

TEST(ConvOps, LpPoolAndGlobalPools) {
    Tensor x = f32({1, 2, 2, 2}, {3, 4, 0, 0, 1, -1, 1, -1});
    Result r = run_op("LpPool", {x}, {false}, {{"kernel_shape", aints({2, 2})}, {"p", ai(2)}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_NEAR(r.outs[0].as<float>()[0], 5.0, 1e-5);
    EXPECT_NEAR(r.outs[0].as<float>()[1], 2.0, 1e-5);
    r = run_op("GlobalLpPool", {x}, {false}, {{"p", ai(1)}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    ASSERT_EQ(r.outs[0].shape(), (Shape{1, 2, 1, 1}));
    EXPECT_NEAR(r.outs[0].as<float>()[0], 7.0, 1e-5);
    EXPECT_NEAR(r.outs[0].as<float>()[1], 4.0, 1e-5);
    r = run_op("GlobalAveragePool", {x}, {false}, {});
    ASSERT_TRUE(r.st.ok());
    EXPECT_NEAR(r.outs[0].as<float>()[0], 1.75, 1e-6);
    r = run_op("GlobalMaxPool", {x}, {false}, {});
    ASSERT_TRUE(r.st.ok());
    EXPECT_EQ(r.outs[0].as<float>()[1], 1.0f);
}

// GlobalMaxPool keeps 16 partial maxima: every plane size around the 16-step, the maximum at
// each position, NaN skipped, a plane of only NaN gives -inf.
TEST(ConvOps, GlobalMaxPoolEveryPositionAndNaN) {
    for (int64_t size : {1, 15, 16, 17, 33, 400}) {
        const int64_t planes = size;  // plane q has its maximum at q
        Tensor x = rnd({1, planes, 1, size}, uint32_t(size));
        for (int64_t q = 0; q < planes; ++q) {
            float* p = x.as<float>() + q * size;
            p[q] = 5.0f + float(q);
            if (size > 1) p[(q + 1) % size] = NAN;
        }
        Result r = run_op("GlobalMaxPool", {x}, {false}, {});
        ASSERT_TRUE(r.st.ok()) << r.st.message();
        for (int64_t q = 0; q < planes; ++q) ASSERT_EQ(r.outs[0].as<float>()[q], 5.0f + float(q)) << size << " " << q;
    }
    Tensor nan(DType::kF32, {1, 1, 1, 20});
    for (int64_t i = 0; i < 20; ++i) nan.as<float>()[i] = NAN;
    Result r = run_op("GlobalMaxPool", {nan}, {false}, {});
    ASSERT_TRUE(r.st.ok());
    EXPECT_EQ(r.outs[0].as<float>()[0], -INFINITY);
}

TEST(ConvOps, PoolsRejectBadModels) {
    Tensor x = rnd({1, 1, 4, 4}, 1);
    expect_error(run_op("MaxPool", {x}, {false}, {}), "kernel_shape");
    expect_error(run_op("AveragePool", {x}, {false}, {{"kernel_shape", aints({2})}}), "kernel_shape");
    expect_error(run_op("MaxPool", {x}, {false},
                        {{"kernel_shape", aints({2, 2})}, {"pads", aints({2, 2, 2, 2})}}),
                 "padding");
    expect_error(run_op("MaxPool", {x}, {false},
                        {{"kernel_shape", aints({2, 2})}, {"storage_order", ai(2)}}),
                 "storage_order");
    expect_error(run_op("LpPool", {x}, {false}, {{"kernel_shape", aints({2, 2})}, {"p", ai(0)}}), "p must");
    expect_error(run_op("AveragePool", {rnd({1, 4}, 1)}, {false}, {{"kernel_shape", aints({2})}}),
                 "rank");
    expect_error(run_op("GlobalAveragePool", {rnd({4}, 1)}, {false}, {}), "rank");
    expect_error(run_op("GlobalMaxPool", {rnd({1, 2, 0}, 1)}, {false}, {}), "empty");
    expect_error(run_op("GlobalLpPool", {x}, {false}, {{"p", ai(-1)}}), "p must");
    expect_error(run_op("AveragePool", {Tensor(DType::kI32, {1, 1, 4})}, {false},
                        {{"kernel_shape", aints({2})}}),
                 "int32");
}

// ---------------------------------------------------------------- normalizations

TEST(ConvOps, BatchNormInferenceAndExtraOutputs) {
    Tensor x = f32({1, 2, 2}, {1, 2, 3, 4});
    Tensor scale = f32({2}, {1, 2}), bias = f32({2}, {0, 1}), mean = f32({2}, {1, 3}),
           var = f32({2}, {4, 1});
    Result r = run_op("BatchNormalization", {x, scale, bias, mean, var},
                      {false, true, true, true, true}, {{"epsilon", af(0)}},
                      {true, true, true, true, true}, 9);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    const float* y = r.outs[0].as<float>();
    EXPECT_NEAR(y[0], 0.0, 1e-6);
    EXPECT_NEAR(y[1], 0.5, 1e-6);
    EXPECT_NEAR(y[2], 1.0, 1e-6);
    EXPECT_NEAR(y[3], 3.0, 1e-6);
    ASSERT_EQ(r.outs.size(), 5u);
    EXPECT_EQ(r.outs[1].as<float>()[1], 3.0f);  // running mean passed through
    EXPECT_EQ(r.outs[2].as<float>()[0], 4.0f);  // running var passed through

    // opset 7, spatial = 0: one statistic per (C x D) element.
    Tensor s2 = f32({2, 2}, {1, 1, 1, 2}), z2 = f32({2, 2}, {0, 0, 0, 0}), o2 = f32({2, 2}, {1, 1, 1, 1});
    r = run_op("BatchNormalization", {x, s2, z2, z2, o2}, {false, true, true, true, true},
               {{"epsilon", af(0)}, {"spatial", ai(0)}}, {true}, 7);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_NEAR(r.outs[0].as<float>()[3], 8.0, 1e-6);
}

TEST(ConvOps, BatchNormRejectsTrainingAndBadShapes) {
    Tensor x = rnd({1, 2, 2, 2}, 1), p = f32({2}, {1, 1}), q = f32({3}, {1, 1, 1});
    Result r = run_op("BatchNormalization", {x, p, p, p, p}, {false, true, true, true, true},
                      {{"training_mode", ai(1)}}, {true, true, true}, 15);
    expect_error(r, "training_mode");
    expect_error(run_op("BatchNormalization", {x, p, q, p, p}, {false, true, true, true, true}, {},
                        {true}, 15),
                 "[2]");
    expect_error(run_op("BatchNormalization", {x, p, p, p}, {false, true, true, true}, {}, {true}, 15),
                 "5 inputs");
}

TEST(ConvOps, InstanceNormMatchesFormula) {
    Tensor x = f32({1, 2, 3}, {1, 2, 3, 5, 5, 5});
    Tensor s = f32({2}, {2, 1}), b = f32({2}, {1, 0});
    Result r = run_op("InstanceNormalization", {x, s, b}, {false, true, true}, {});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    const float* y = r.outs[0].as<float>();
    const double sd = std::sqrt(2.0 / 3 + 1e-5);
    EXPECT_NEAR(y[0], 2 * (-1 / sd) + 1, 1e-5);
    EXPECT_NEAR(y[2], 2 * (1 / sd) + 1, 1e-5);
    EXPECT_NEAR(y[4], 0.0, 1e-5);  // constant channel: (x - mean) = 0, default epsilon
    expect_error(run_op("InstanceNormalization", {x, f32({3}, {1, 1, 1}), b}, {false, true, true}, {}),
                 "scale");
}

TEST(ConvOps, LayerNormOutputsMeanInvStdDevAndBroadcastsScale) {
    Tensor x = f32({2, 2, 2}, {1, 2, 3, 4, 0, 0, 2, 2});
    Tensor s = f32({2}, {1, 2});  // broadcast over normalized shape 2x2 (axis 1)
    Result r = run_op("LayerNormalization", {x, s, Tensor()}, {false, true},
                      {{"axis", ai(1)}, {"epsilon", af(0)}}, {true, true, true});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    ASSERT_EQ(r.outs[1].shape(), (Shape{2, 1, 1}));
    EXPECT_NEAR(r.outs[1].as<float>()[0], 2.5, 1e-6);
    EXPECT_NEAR(r.outs[2].as<float>()[0], 1 / std::sqrt(1.25), 1e-5);
    EXPECT_NEAR(r.outs[2].as<float>()[1], 1.0, 1e-5);
    const float* y = r.outs[0].as<float>();
    EXPECT_NEAR(y[1], 2 * (-0.5 / std::sqrt(1.25)), 1e-5);
    EXPECT_NEAR(y[7], 2 * 1.0, 1e-5);
    // Only the InvStdDev output requested (Mean omitted).
    r = run_op("LayerNormalization", {x, s}, {false, true}, {{"axis", ai(-2)}}, {true, false, true});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    ASSERT_EQ(r.outs.size(), 2u);
    expect_error(run_op("LayerNormalization", {x, s}, {false, true}, {{"axis", ai(3)}}), "axis");
    expect_error(run_op("LayerNormalization", {x, f32({3}, {1, 1, 1})}, {false, true}, {}), "Scale");
}

TEST(ConvOps, GroupNormPerGroupAndPerChannel) {
    Tensor x = f32({1, 4, 2}, {1, 3, 1, 3, 0, 0, 4, 4});
    // Opset 18 style: scale/bias per group (2 groups).
    Result r = run_op("GroupNormalization", {x, f32({2}, {1, 2}), f32({2}, {0, 1})},
                      {false, true, true}, {{"num_groups", ai(2)}, {"epsilon", af(0)}}, {true}, 18);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    const float* y = r.outs[0].as<float>();
    EXPECT_NEAR(y[0], -1, 1e-5);
    EXPECT_NEAR(y[1], 1, 1e-5);
    EXPECT_NEAR(y[4], 2 * -1 + 1, 1e-5);
    EXPECT_NEAR(y[7], 2 * 1 + 1, 1e-5);
    // Opset 21: per channel.
    r = run_op("GroupNormalization", {x, f32({4}, {1, 1, 1, 3}), f32({4}, {0, 0, 0, 0})},
               {false, true, true}, {{"num_groups", ai(2)}, {"epsilon", af(0)}}, {true}, 21);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_NEAR(r.outs[0].as<float>()[7], 3, 1e-5);
    expect_error(run_op("GroupNormalization", {x, f32({4}, {1, 1, 1, 1}), f32({4}, {0, 0, 0, 0})},
                        {false, true, true}, {{"num_groups", ai(3)}}, {true}, 21),
                 "num_groups");
}

TEST(ConvOps, LpNormalizationAndMvnAndLrn) {
    Tensor x = f32({2, 2}, {3, -4, 0, 0});
    Result r = run_op("LpNormalization", {x}, {false}, {{"p", ai(1)}, {"axis", ai(1)}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_NEAR(r.outs[0].as<float>()[0], 3.0 / 7, 1e-6);
    EXPECT_NEAR(r.outs[0].as<float>()[1], -4.0 / 7, 1e-6);
    EXPECT_EQ(r.outs[0].as<float>()[2], 0.0f);  // zero norm stays zero (no NaN)
    r = run_op("LpNormalization", {x}, {false}, {{"axis", ai(0)}});
    ASSERT_TRUE(r.st.ok());
    EXPECT_NEAR(r.outs[0].as<float>()[1], -1.0, 1e-6);
    expect_error(run_op("LpNormalization", {x}, {false}, {{"p", ai(3)}}), "p must");

    // MVN over axis 1 only.
    Tensor m = f32({2, 2}, {1, 3, 5, 5});
    r = run_op("MeanVarianceNormalization", {m}, {false}, {{"axes", aints({1})}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_NEAR(r.outs[0].as<float>()[0], -1.0, 1e-6);
    EXPECT_NEAR(r.outs[0].as<float>()[3], 0.0, 1e-6);
    expect_error(run_op("MeanVarianceNormalization", {m}, {false}, {{"axes", aints({1, -1})}}),
                 "repeated");

    // LRN, size 2 over 3 channels: channel c sums c-0 .. c+1.
    Tensor l = f32({1, 3, 1}, {1, 2, 3});
    r = run_op("LRN", {l}, {false},
               {{"size", ai(2)}, {"alpha", af(2)}, {"beta", af(1)}, {"bias", af(1)}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_NEAR(r.outs[0].as<float>()[0], 1.0 / (1 + 1.0 * 5), 1e-6);
    EXPECT_NEAR(r.outs[0].as<float>()[2], 3.0 / (1 + 1.0 * 9), 1e-6);
    expect_error(run_op("LRN", {l}, {false}, {}), "size");
}

}  // namespace
