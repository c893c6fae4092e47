// The float32 fast paths of the elementwise ops through the engine (one-node graphs): PRelu's
// vector rows over every slope broadcast (per channel, scalar, full, trailing, the pre-opset-7
// per-channel [C]) against a direct loop, and Log / Sqrt / Elu / Selu / Softplus / Mish / Abs /
// Neg / Floor / Ceil / Round against float64 formulas written here (not the kernels' own reference), with the kernel
// each step chose.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ops/util.h"
#include "one_node.h"
#include "runtime/plan.h"

using namespace jiffy;

namespace {

struct Outcome {
    Status st;
    std::vector<Tensor> outs;
    std::string kernel;  // the step's describe()
};

Attr float_attr(float v) {
    Attr a;
    a.kind = Attr::kFloat;
    a.f = v;
    return a;
}

// One node over graph inputs (constants when `constant` says so), compiled and run once.
Outcome run_node(const std::string& op, const std::vector<Tensor>& ins, const std::vector<bool>& constant,
                 const std::map<std::string, Attr>& attrs, int64_t opset = 18) {
    testnode::NodeRun n = testnode::run_one_node(op, testnode::node_inputs(ins, constant), attrs, opset);
    return Outcome{n.st, std::move(n.outs), std::move(n.kernel)};
}

Tensor pattern(Shape s, uint32_t seed, float scale) {
    Tensor t(DType::kF32, std::move(s));
    uint32_t x = seed * 2654435761u + 1u;
    for (int64_t i = 0; i < t.numel(); ++i) {
        x = x * 1664525u + 1013904223u;
        t.as<float>()[i] = (float(x >> 8) / float(1 << 24) * 2.0f - 1.0f) * scale;
    }
    return t;
}

// y = x < 0 ? slope * x : x with slope indexed through its broadcast strides (the oracle).
std::vector<float> prelu_ref(const Tensor& x, const Tensor& slope, const Shape& slope_as) {
    const Shape& xs = x.shape();
    std::vector<float> y(size_t(x.numel()));
    const size_t r = xs.size(), off = r - slope_as.size();
    for (int64_t i = 0; i < x.numel(); ++i) {
        int64_t rem = i, si = 0, stride = 1;
        std::vector<int64_t> idx(r);
        for (size_t d = r; d-- > 0;) idx[d] = rem % xs[d], rem /= xs[d];
        for (size_t d = slope_as.size(); d-- > 0;) {
            if (slope_as[d] != 1) si += idx[d + off] * stride;
            stride *= slope_as[d];
        }
        const float v = x.as<float>()[i];
        y[size_t(i)] = v < 0 ? slope.as<float>()[si] * v : v;
    }
    return y;
}

TEST(ElementwiseFast, PReluEverySlopeBroadcast) {
    struct Case {
        Shape x, slope;
        int64_t opset;
        Shape slope_as;  // how the slope broadcasts (differs from `slope` for opset < 7)
        const char* mode;
    };
    const Case cases[] = {
        {{2, 5, 7, 9}, {5, 1, 1}, 18, {5, 1, 1}, "vs"},   // per channel: one row per plane
        {{1, 3, 1, 17}, {3, 1, 1}, 18, {3, 1, 1}, "vs"},  // H = 1 collapses
        {{2, 5, 7, 9}, {1}, 18, {1}, "vs"},               // one value
        {{2, 5, 7, 9}, {2, 5, 7, 9}, 18, {2, 5, 7, 9}, "vv"},
        {{2, 5, 7, 9}, {9}, 18, {9}, "vv"},               // trailing: vector rows repeated
        {{3, 4, 33}, {4, 1}, 9, {4, 1}, "vs"},
        {{2, 3, 4, 5}, {3}, 6, {3, 1, 1}, "vs"},          // opset 6: [C] is per channel
    };
    for (const Case& c : cases) {
        const Tensor x = pattern(c.x, 7, 3.0f);
        Tensor slope = pattern(c.slope, 11, 0.5f);
        const std::vector<float> want = prelu_ref(x, slope, c.slope_as);
        for (bool const_slope : {true, false}) {
            const Outcome r = run_node("PRelu", {x, slope}, {false, const_slope}, {}, c.opset);
            ASSERT_TRUE(r.st.ok()) << shape_str(c.x) << " " << r.st.message();
            EXPECT_NE(r.kernel.find(std::string("binary_prelu ") + c.mode), std::string::npos) << r.kernel;
            ASSERT_EQ(r.outs[0].shape(), c.x);
            for (int64_t i = 0; i < x.numel(); ++i)
                ASSERT_EQ(r.outs[0].as<float>()[i], want[size_t(i)]) << shape_str(c.x) << " slope " << shape_str(c.slope)
                                                                    << " at " << i;
        }
    }
    // NaN passes through, -inf scales, -0 stays -0.
    Tensor x(DType::kF32, {1, 2, 1, 3}), slope(DType::kF32, {2, 1, 1});
    const float xv[] = {NAN, -INFINITY, -0.0f, -2.0f, INFINITY, 1.0f};
    std::memcpy(x.data(), xv, sizeof(xv));
    slope.as<float>()[0] = 0.5f, slope.as<float>()[1] = -3.0f;
    const Outcome r = run_node("PRelu", {x, slope}, {false, true}, {});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    const float* y = r.outs[0].as<float>();
    EXPECT_TRUE(std::isnan(y[0]));
    EXPECT_EQ(y[1], -INFINITY);
    EXPECT_TRUE(y[2] == 0.0f && std::signbit(y[2]));
    EXPECT_EQ(y[3], 6.0f);
    EXPECT_EQ(y[4], INFINITY);
    EXPECT_EQ(y[5], 1.0f);
}

// Where selects without branching: a condition of the output's shape (one pass) and a broadcast
// condition (two passes), float and int64, against an index-by-index oracle; NaN and -0 are
// carried bit for bit.
TEST(ElementwiseFast, WhereSelectsEveryBroadcast) {
    struct Case {
        Shape c, x, y;
    };
    const Case cases[] = {
        {{2, 3, 4}, {2, 3, 4}, {1}},     // cond full, y scalar
        {{2, 3, 4}, {4}, {3, 1}},        // cond full, x and y broadcast
        {{3, 1}, {2, 3, 4}, {2, 3, 4}},  // cond broadcast
        {{1, 4}, {2, 1, 4}, {3, 4}},     // everything broadcast
    };
    auto at = [](const Shape& in, const Shape& out, int64_t i) {  // broadcast index of `in`
        int64_t rem = i, off = 0, stride = 1;
        for (size_t d = out.size(); d-- > 0;) {
            const int64_t k = rem % out[d];
            rem /= out[d];
            const size_t e = d + in.size() - out.size();
            if (d + in.size() < out.size()) continue;
            if (in[e] != 1) off += k * stride;
            stride *= in[e];
        }
        return off;
    };
    uint32_t seed = 5;
    for (const Case& k : cases) {
        Shape out;
        ASSERT_TRUE(broadcast_shapes(k.c, k.x, &out) && broadcast_shapes(out, k.y, &out));
        Tensor cond(DType::kBool, k.c);
        for (int64_t i = 0; i < cond.numel(); ++i) cond.as<bool>()[i] = ((seed = seed * 1664525u + 1013904223u) >> 20) & 1;
        Tensor x = pattern(k.x, 21, 2.0f), y = pattern(k.y, 22, 2.0f);
        x.as<float>()[0] = NAN;
        y.as<float>()[0] = -0.0f;
        const Outcome r = run_node("Where", {cond, x, y}, {false, false, false}, {});
        ASSERT_TRUE(r.st.ok()) << r.st.message();
        ASSERT_EQ(r.outs[0].shape(), out);
        for (int64_t i = 0; i < shape_numel(out); ++i) {
            const float want = cond.as<bool>()[at(k.c, out, i)] ? x.as<float>()[at(k.x, out, i)] : y.as<float>()[at(k.y, out, i)];
            ASSERT_EQ(0, std::memcmp(&r.outs[0].as<float>()[i], &want, sizeof(float))) << shape_str(k.c) << " at " << i;
        }
        Tensor xi(DType::kI64, k.x), yi(DType::kI64, k.y);
        for (int64_t i = 0; i < xi.numel(); ++i) xi.as<int64_t>()[i] = (int64_t(1) << 40) + i;
        for (int64_t i = 0; i < yi.numel(); ++i) yi.as<int64_t>()[i] = -i - 1;
        const Outcome ri = run_node("Where", {cond, xi, yi}, {false, false, false}, {});
        ASSERT_TRUE(ri.st.ok()) << ri.st.message();
        for (int64_t i = 0; i < shape_numel(out); ++i)
            ASSERT_EQ(ri.outs[0].as<int64_t>()[i], cond.as<bool>()[at(k.c, out, i)] ? xi.as<int64_t>()[at(k.x, out, i)]
                                                                                   : yi.as<int64_t>()[at(k.y, out, i)]);
    }
}

TEST(ElementwiseFast, PReluRejectsSlopesThatDoNotBroadcastToX) {
    for (const Shape& bad : {Shape{3}, Shape{5, 7, 9, 1}, Shape{2, 1, 1, 1, 1}}) {
        const Outcome r = run_node("PRelu", {pattern({2, 5, 7, 9}, 1, 1), pattern(bad, 2, 1)}, {false, true}, {});
        ASSERT_FALSE(r.st.ok()) << shape_str(bad);
        EXPECT_NE(r.st.message().find("slope shape"), std::string::npos) << r.st.message();
    }
    Tensor i64(DType::kI64, {5, 1, 1});
    const Outcome r = run_node("PRelu", {pattern({2, 5, 7, 9}, 1, 1), i64}, {false, true}, {});
    ASSERT_FALSE(r.st.ok());
    EXPECT_NE(r.st.message().find("different dtypes"), std::string::npos) << r.st.message();
}

double softplus_d(double x) { return x > 30 ? x + std::exp(-x) : std::log1p(std::exp(x)); }

TEST(ElementwiseFast, UnaryMathMatchesFloat64Formulas) {
    struct Case {
        const char* op;
        std::map<std::string, Attr> attrs;
        double (*f)(double);
        const char* kernel;
    };
    const Case cases[] = {
        {"Log", {}, [](double x) { return std::log(x); }, "act_log"},
        {"Sqrt", {}, [](double x) { return std::sqrt(x); }, "act_sqrt"},
        {"Elu", {{"alpha", float_attr(0.7f)}}, [](double x) { return x >= 0 ? x : 0.7 * (std::exp(x) - 1); }, "act_elu"},
        {"Selu", {}, [](double x) {
             return x > 0 ? 1.0507009873554805 * x : 1.0507009873554805 * 1.6732632423543772 * (std::exp(x) - 1);
         }, "act_selu"},
        {"Softplus", {}, softplus_d, "act_softplus"},
        {"Mish", {}, [](double x) { return x * std::tanh(softplus_d(x)); }, "act_mish"},
        {"Abs", {}, [](double x) { return std::fabs(x); }, "act_abs"},
        {"Neg", {}, [](double x) { return -x; }, "act_neg"},
        {"Floor", {}, [](double x) { return std::floor(x); }, "act_floor"},
        {"Ceil", {}, [](double x) { return std::ceil(x); }, "act_ceil"},
        {"Round", {}, [](double x) { return std::nearbyint(x); }, "act_round"},
    };
    // Odd length (vector tails), magnitudes from 1e-6 to 1e3 of both signs, the large-x regime
    // where a naive softplus overflows, and denormals / zeros / infinities / NaN.
    std::vector<float> xs;
    for (int i = -3000; i <= 3000; ++i) xs.push_back(float(i) * 0.01f + 0.0013f);
    for (float v = 1e-6f; v < 1e3f; v *= 1.9f) xs.push_back(v), xs.push_back(-v);
    for (float v : {100.0f, 95.0f, 500.0f, -95.0f, -500.0f, 1e-40f, 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 0.5f,
                    1.5f, 2.5f, -2.5f})
        xs.push_back(v);
    Tensor x(DType::kF32, {1, int64_t(xs.size())});
    std::memcpy(x.data(), xs.data(), xs.size() * sizeof(float));
    for (const Case& c : cases) {
        const Outcome r = run_node(c.op, {x}, {false}, c.attrs);
        ASSERT_TRUE(r.st.ok()) << c.op << ": " << r.st.message();
        EXPECT_NE(r.kernel.find(c.kernel), std::string::npos) << c.op << ": " << r.kernel;
        for (size_t i = 0; i < xs.size(); ++i) {
            const double want = c.f(double(xs[i])), got = r.outs[0].as<float>()[i];
            if (std::isnan(want)) {
                EXPECT_TRUE(std::isnan(got)) << c.op << "(" << xs[i] << ") = " << got;
            } else if (std::isinf(float(want))) {
                EXPECT_EQ(got, double(float(want))) << c.op << "(" << xs[i] << ")";
            } else {
                // 2e-6 relative: float inputs, the float exp-minus-one cancellation near 0 excepted
                // by the absolute term (Elu/Selu near 0 are computed with expm1, tighter still).
                ASSERT_NEAR(got, want, 2e-6 * std::fabs(want) + 1e-30) << c.op << "(" << xs[i] << ")";
            }
        }
    }
}

TEST(ElementwiseFast, Float64InputsTakeTheReferenceLoops) {
    Tensor x(DType::kF64, {4});
    const double xv[] = {1000.0, -1000.0, 0.5, -0.25};
    std::memcpy(x.data(), xv, sizeof(xv));
    const Outcome sp = run_node("Softplus", {x}, {false}, {});
    ASSERT_TRUE(sp.st.ok()) << sp.st.message();
    EXPECT_EQ(sp.outs[0].as<double>()[0], 1000.0);  // no overflow
    EXPECT_EQ(sp.outs[0].as<double>()[1], 0.0);
    EXPECT_NEAR(sp.outs[0].as<double>()[2], std::log1p(std::exp(0.5)), 1e-15);
    const Outcome elu = run_node("Elu", {x}, {false}, {});
    ASSERT_TRUE(elu.st.ok()) << elu.st.message();
    EXPECT_NEAR(elu.outs[0].as<double>()[3], std::expm1(-0.25), 1e-16);
    const Outcome lg = run_node("Log", {x}, {false}, {});
    ASSERT_TRUE(lg.st.ok());
    EXPECT_TRUE(std::isnan(lg.outs[0].as<double>()[1]));
    // Integer inputs to a float-only op: a clear error naming the dtype.
    Tensor i(DType::kI32, {4});
    const Outcome bad = run_node("Softplus", {i}, {false}, {});
    ASSERT_FALSE(bad.st.ok());
    EXPECT_NE(bad.st.message().find("int32"), std::string::npos) << bad.st.message();
}

}  // namespace

namespace {

// InstanceNormalization's float32 path through the engine (it lives in ops/conv.cpp): the
// kernel named in the plan, rank 3 and 4, against float64.
TEST(ElementwiseFast, InstanceNormalizationFloat32) {
    for (const Shape& xs : {Shape{2, 3, 37}, Shape{1, 4, 9, 11}}) {
        const Tensor x = pattern(xs, 3, 4.0f), scale = pattern({xs[1]}, 4, 2.0f), bias = pattern({xs[1]}, 5, 1.0f);
        const Outcome r = run_node("InstanceNormalization", {x, scale, bias}, {false, true, true},
                                   {{"epsilon", float_attr(1e-3f)}});
        ASSERT_TRUE(r.st.ok()) << r.st.message();
        EXPECT_NE(r.kernel.find("instnorm_f32"), std::string::npos) << r.kernel;
        const int64_t planes = xs[0] * xs[1], n = x.numel() / planes;
        for (int64_t p = 0; p < planes; ++p) {
            const float* xp = x.as<float>() + p * n;
            double m = 0, q = 0;
            for (int64_t i = 0; i < n; ++i) m += xp[i];
            m /= double(n);
            for (int64_t i = 0; i < n; ++i) q += (xp[i] - m) * (xp[i] - m);
            const int64_t c = p % xs[1];
            const double a = scale.as<float>()[c] / std::sqrt(q / double(n) + double(1e-3f));
            for (int64_t i = 0; i < n; ++i)
                ASSERT_NEAR(r.outs[0].as<float>()[p * n + i], (xp[i] - m) * a + bias.as<float>()[c], 1e-5)
                    << shape_str(xs) << " plane " << p << " at " << i;
        }
    }
}

}  // namespace
