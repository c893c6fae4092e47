// Reduction ops (Reduce*, ArgMax/ArgMin, TopK, CumSum, Det): edge cases the ONNX conformance
// suite does not cover (axis-set geometry, empty reductions, noop_with_empty_axes, opset
// variants, integer dtypes, ties and NaN) and error handling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "one_node.h"
#include "runtime/plan.h"

using namespace jiffy;

namespace {

// ---------------------------------------------------------------- helpers

using Attrs = std::map<std::string, Attr>;

Attr int_attr(int64_t v) {
    Attr a;
    a.kind = Attr::kInt;
    a.i = v;
    return a;
}
Attr ints_attr(std::vector<int64_t> v) {
    Attr a;
    a.kind = Attr::kInts;
    a.ints = std::move(v);
    return a;
}

template <typename T>
Tensor tensor_of(DType dt, Shape s, const std::vector<T>& v) {
    Tensor t(dt, std::move(s));
    EXPECT_EQ(size_t(t.numel()), v.size());
    for (size_t i = 0; i < v.size() && i < size_t(t.numel()); ++i) t.as<T>()[i] = v[i];
    return t;
}
Tensor F32(Shape s, const std::vector<float>& v) { return tensor_of<float>(DType::kF32, std::move(s), v); }
Tensor F64(Shape s, const std::vector<double>& v) { return tensor_of<double>(DType::kF64, std::move(s), v); }
Tensor I64(Shape s, const std::vector<int64_t>& v) { return tensor_of<int64_t>(DType::kI64, std::move(s), v); }
Tensor I32(Shape s, const std::vector<int32_t>& v) { return tensor_of<int32_t>(DType::kI32, std::move(s), v); }
Tensor Seq(Shape s) {  // 0, 1, 2, ... with a non-trivial pattern
    Tensor t(DType::kF32, std::move(s));
    for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = float((i * 7) % 11) - 3.0f;
    return t;
}

struct Outcome {
    Status st;
    std::vector<Tensor> outs;
};

// Input specification: a tensor, whether it is a compile-time constant, or absent.
struct In {
    Tensor t;
    bool constant = false;
    bool absent = false;
};
In data(Tensor t) { return In{std::move(t), false, false}; }
In cst(Tensor t) { return In{std::move(t), true, false}; }

// Builds a one-node graph, compiles it and runs it once.
Outcome run_node(const std::string& op, const std::vector<In>& ins, const Attrs& attrs, int64_t opset,
             int n_out = 1) {
    std::vector<testnode::NodeIn> in;
    for (const In& i : ins) in.push_back(testnode::NodeIn{i.t, i.constant, i.absent});
    testnode::NodeRun n = testnode::run_one_node(op, in, attrs, opset, std::vector<bool>(size_t(n_out), true));
    return Outcome{n.st, std::move(n.outs)};
}

// Checks output `o` has shape and values (NaN matches NaN; tol relative+absolute).
void expect_out(const Outcome& r, size_t o, Shape shape, const std::vector<double>& v, double tol = 0) {
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    ASSERT_LT(o, r.outs.size());
    const Tensor& t = r.outs[o];
    ASSERT_EQ(t.shape(), shape) << shape_str(t.shape()) << " vs " << shape_str(shape);
    ASSERT_EQ(size_t(t.numel()), v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        double got = t.get_f64(int64_t(i));
        if (std::isnan(v[i])) {
            EXPECT_TRUE(std::isnan(got)) << "element " << i << " = " << got;
        } else if (std::isinf(v[i])) {
            EXPECT_EQ(got, v[i]) << "element " << i;
        } else {
            EXPECT_NEAR(got, v[i], tol * (1 + std::abs(v[i]))) << "element " << i;
        }
    }
}

void expect_fail(const Outcome& r, const std::string& fragment, Code code = Code::kInvalid) {
    ASSERT_FALSE(r.st.ok()) << "expected an error containing '" << fragment << "'";
    EXPECT_EQ(int(r.st.code()), int(code)) << r.st.message();
    EXPECT_NE(r.st.message().find(fragment), std::string::npos) << r.st.message();
}

const float kInf = std::numeric_limits<double>::infinity();
const float kNaN = std::numeric_limits<double>::quiet_NaN();

const char* const kReduceOps[] = {"ReduceSum",  "ReduceMean",   "ReduceMax",       "ReduceMin",
                                  "ReduceProd", "ReduceL1",     "ReduceL2",        "ReduceLogSum",
                                  "ReduceLogSumExp", "ReduceSumSquare"};

// Runs a Reduce op the way its opset wants axes: attribute before `input_opset`, else input.
Outcome reduce(const std::string& op, const Tensor& x, const std::vector<int64_t>* axes, int64_t keepdims,
           int64_t opset = 18, int64_t noop = -1) {
    const int64_t input_opset = op == "ReduceSum" ? 13 : 18;
    Attrs at{{"keepdims", int_attr(keepdims)}};
    if (noop >= 0) at["noop_with_empty_axes"] = int_attr(noop);
    std::vector<In> ins{data(x)};
    if (axes) {
        if (opset >= input_opset) ins.push_back(cst(I64({int64_t(axes->size())}, *axes)));
        else at["axes"] = ints_attr(*axes);
    }
    return run_node(op, ins, at, opset);
}

// ---------------------------------------------------------------- Reduce*: geometry

// Naive oracle: every subset of axes of a 4-D shape (with a size-1 dim) for Sum, Max and Prod.
TEST(ReduceOps, AllAxisSubsetsMatchNaive) {
    const Shape shape{2, 3, 1, 4};
    const Tensor x = Seq(shape);
    for (int mask = 0; mask < 16; ++mask) {
        std::vector<int64_t> axes;
        for (int d = 0; d < 4; ++d)
            if (mask & (1 << d)) axes.push_back(d - (d % 2 ? 4 : 0));  // mix negative axes in
        for (int keep = 0; keep < 2; ++keep) {
            Shape out;
            for (int d = 0; d < 4; ++d) {
                if (!(mask & (1 << d))) out.push_back(shape[size_t(d)]);
                else if (keep) out.push_back(1);
            }
            if (mask == 0) out = shape;  // noop
            int64_t on = 1;
            for (int64_t d : out) on *= d;
            std::vector<double> sum(size_t(on), 0), mx(size_t(on), -kInf), prod(size_t(on), 1);
            int64_t idx = 0;
            for (int64_t a = 0; a < 2; ++a)
                for (int64_t b = 0; b < 3; ++b)
                    for (int64_t c = 0; c < 1; ++c)
                        for (int64_t d = 0; d < 4; ++d, ++idx) {
                            int64_t i4[4] = {a, b, c, d};
                            int64_t o = 0;
                            for (int k = 0; k < 4; ++k)
                                if (!(mask & (1 << k))) o = o * shape[size_t(k)] + i4[k];
                            double v = x.as<float>()[idx];
                            sum[size_t(o)] += v;
                            mx[size_t(o)] = std::max(mx[size_t(o)], v);
                            prod[size_t(o)] *= v;
                        }
            SCOPED_TRACE("mask " + std::to_string(mask) + " keepdims " + std::to_string(keep));
            // mask 0: empty axes with noop=1 (identity)
            expect_out(reduce("ReduceSum", x, &axes, keep, 18, mask == 0 ? 1 : 0), 0, out, sum, 1e-6);
            expect_out(reduce("ReduceMax", x, &axes, keep, 18, mask == 0 ? 1 : 0), 0, out, mx);
            if (mask != 0) {
                expect_out(reduce("ReduceProd", x, &axes, keep, 13), 0, out, prod, 1e-6);  // attr form
                expect_out(reduce("ReduceSum", x, &axes, keep, 11), 0, out, sum, 1e-6);
            }
        }
    }
}

TEST(ReduceOps, DefaultAxesReduceAll) {
    const Tensor x = F32({2, 2}, {1, 2, 3, 4});
    for (int64_t opset : {11, 13, 18}) {
        expect_out(reduce("ReduceSum", x, nullptr, 1, opset), 0, {1, 1}, {10});
        expect_out(reduce("ReduceMean", x, nullptr, 0, opset), 0, {}, {2.5});
    }
    // An empty axes input with noop_with_empty_axes=0 also reduces everything.
    std::vector<int64_t> empty;
    expect_out(reduce("ReduceSum", x, &empty, 0, 13, 0), 0, {}, {10});
    expect_out(reduce("ReduceMin", x, &empty, 1, 18, 0), 0, {1, 1}, {1});
}

TEST(ReduceOps, NoopWithEmptyAxesAppliesElementwisePart) {
    const Tensor x = F32({3}, {-2, 0.5f, 4});
    std::vector<int64_t> empty;
    expect_out(reduce("ReduceSum", x, &empty, 1, 13, 1), 0, {3}, {-2, 0.5, 4});
    expect_out(reduce("ReduceSum", x, nullptr, 0, 13, 1), 0, {3}, {-2, 0.5, 4});
    expect_out(reduce("ReduceSumSquare", x, nullptr, 1, 18, 1), 0, {3}, {4, 0.25, 16});
    expect_out(reduce("ReduceL1", x, nullptr, 1, 18, 1), 0, {3}, {2, 0.5, 4});
    expect_out(reduce("ReduceL2", x, nullptr, 1, 18, 1), 0, {3}, {2, 0.5, 4});
    expect_out(reduce("ReduceLogSumExp", x, nullptr, 1, 18, 1), 0, {3}, {-2, 0.5, 4}, 1e-6);
    expect_out(reduce("ReduceMean", x, nullptr, 1, 18, 1), 0, {3}, {-2, 0.5, 4});
}

TEST(ReduceOps, ScalarInput) {
    const Tensor x = F32({}, {-3});
    expect_out(reduce("ReduceL1", x, nullptr, 1, 17), 0, {}, {3});
    expect_out(reduce("ReduceSumSquare", x, nullptr, 0, 17), 0, {}, {9});
    expect_out(reduce("ReduceLogSumExp", x, nullptr, 0, 17), 0, {}, {-3}, 1e-6);
}

// ---------------------------------------------------------------- Reduce*: empty reductions

TEST(ReduceOps, EmptyReductionIdentities) {
    const Tensor x(DType::kF32, {2, 0, 3});
    std::vector<int64_t> ax{1};
    auto all = [](double v) { return std::vector<double>(6, v); };
    expect_out(reduce("ReduceSum", x, &ax, 0), 0, {2, 3}, all(0));
    expect_out(reduce("ReduceProd", x, &ax, 0), 0, {2, 3}, all(1));
    expect_out(reduce("ReduceMax", x, &ax, 0), 0, {2, 3}, all(-kInf));
    expect_out(reduce("ReduceMin", x, &ax, 1), 0, {2, 1, 3}, all(kInf));
    expect_out(reduce("ReduceL1", x, &ax, 0), 0, {2, 3}, all(0));
    expect_out(reduce("ReduceL2", x, &ax, 0), 0, {2, 3}, all(0));
    expect_out(reduce("ReduceSumSquare", x, &ax, 0), 0, {2, 3}, all(0));
    expect_out(reduce("ReduceLogSum", x, &ax, 0), 0, {2, 3}, all(-kInf));
    expect_out(reduce("ReduceLogSumExp", x, &ax, 0), 0, {2, 3}, all(-kInf));
    expect_out(reduce("ReduceMean", x, &ax, 0), 0, {2, 3}, all(kNaN));
    // Reduce-all of an empty tensor, and integer identities.
    expect_out(reduce("ReduceSum", x, nullptr, 0), 0, {}, {0});
    const Tensor xi(DType::kI32, {0, 2});
    std::vector<int64_t> ax0{0};
    expect_out(reduce("ReduceMax", xi, &ax0, 0), 0, {2}, {double(INT32_MIN), double(INT32_MIN)});
    expect_out(reduce("ReduceMin", xi, &ax0, 0), 0, {2}, {double(INT32_MAX), double(INT32_MAX)});
    expect_out(reduce("ReduceMean", xi, &ax0, 0), 0, {2}, {0, 0});
    // Kept dim of size 0: output is empty.
    expect_out(reduce("ReduceSum", x, &ax0, 0), 0, {0, 3}, {});
}

// ---------------------------------------------------------------- Reduce*: values and dtypes

TEST(ReduceOps, LogSumExpIsStable) {
    const Tensor x = F32({2, 2}, {1000, 1000, -1000, -kInf});
    std::vector<int64_t> ax{1};
    expect_out(reduce("ReduceLogSumExp", x, &ax, 0), 0, {2}, {1000 + std::log(2.0), -1000}, 1e-6);
    const Tensor y = F32({2}, {-kInf, -kInf});
    expect_out(reduce("ReduceLogSumExp", y, nullptr, 0), 0, {}, {-kInf});
}

TEST(ReduceOps, MaxMinPropagateNaN) {
    const Tensor x = F32({4}, {1, kNaN, 5, -2});
    expect_out(reduce("ReduceMax", x, nullptr, 0), 0, {}, {kNaN});
    expect_out(reduce("ReduceMin", x, nullptr, 0), 0, {}, {kNaN});
}

TEST(ReduceOps, IntegerDtypes) {
    std::vector<int64_t> ax{1};
    // int64 sums keep full precision (a double accumulator would not).
    const Tensor big = I64({1, 2}, {(int64_t(1) << 60) + 1, 2});
    expect_out(reduce("ReduceSum", big, &ax, 0), 0, {1}, {double((int64_t(1) << 60) + 3)});
    Outcome r = reduce("ReduceSum", big, &ax, 0);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_EQ(r.outs[0].as<int64_t>()[0], (int64_t(1) << 60) + 3);
    // int32 mean truncates toward zero; L1 of negatives; Prod.
    const Tensor xi = I32({2, 3}, {-7, 0, 0, 1, 2, 4});
    expect_out(reduce("ReduceMean", xi, &ax, 0), 0, {2}, {-2, 2});
    expect_out(reduce("ReduceL1", xi, &ax, 0), 0, {2}, {7, 7});
    expect_out(reduce("ReduceProd", xi, &ax, 0), 0, {2}, {0, 8});
    expect_out(reduce("ReduceSumSquare", xi, &ax, 0), 0, {2}, {49, 21});
    // uint8 / int8 max and min (opset 12+), f64.
    const Tensor u8 = tensor_of<uint8_t>(DType::kU8, {4}, {3, 250, 7, 0});
    expect_out(reduce("ReduceMax", u8, nullptr, 0, 13), 0, {}, {250});
    const Tensor i8 = tensor_of<int8_t>(DType::kI8, {3}, {-128, 5, 127});
    expect_out(reduce("ReduceMin", i8, nullptr, 0, 13), 0, {}, {-128});
    const Tensor d = F64({2}, {0.1, 0.2});
    Outcome rd = reduce("ReduceSum", d, nullptr, 0, 13);
    ASSERT_TRUE(rd.st.ok()) << rd.st.message();
    EXPECT_EQ(rd.outs[0].dtype(), DType::kF64);
    EXPECT_EQ(rd.outs[0].as<double>()[0], 0.1 + 0.2);  // not rounded through float
    // bool ReduceMax / ReduceMin (opset 20): any / all.
    Tensor b(DType::kBool, {2, 2});
    b.as<bool>()[0] = true;
    b.as<bool>()[1] = false;
    b.as<bool>()[2] = false;
    b.as<bool>()[3] = false;
    expect_out(reduce("ReduceMax", b, &ax, 0, 20), 0, {2}, {1, 0});
    expect_out(reduce("ReduceMin", b, &ax, 0, 20), 0, {2}, {0, 0});
}

TEST(ReduceOps, FloatVectorPathMatchesDoubleReference) {
    // float32 Sum / Mean / Max / Min over one run of adjacent axes take the vector path; float64
    // the reference loops. Blocks shorter and longer than the vector loops, a kept inner run
    // (reducing channels), NaN and -inf entries, keepdims both ways.
    struct Case {
        Shape shape;
        std::vector<int64_t> axes;
    };
    const Case cases[] = {{{2, 5, 7, 9}, {2, 3}}, {{3, 37}, {1}}, {{2, 3, 5}, {1}}, {{4, 6, 33}, {0, 1}},
                          {{1, 64, 5, 5}, {1}}, {{2, 3, 1, 17}, {1, 3}}, {{5}, {0}}, {{3, 300}, {1}}};
    for (const Case& c : cases)
        for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"})
            for (int64_t keep : {0, 1})
                for (int special : {0, 1}) {
                    SCOPED_TRACE(std::string(op) + " " + shape_str(c.shape) + " keep " + std::to_string(keep) +
                                 " special " + std::to_string(special));
                    Tensor xf(DType::kF32, c.shape), xd(DType::kF64, c.shape);
                    for (int64_t i = 0; i < xf.numel(); ++i) {
                        float v = std::sin(float(i) * 0.61f) * 5.0f;
                        if (special && i == xf.numel() / 3) v = kNaN;
                        if (special && i == xf.numel() / 2) v = -kInf;
                        xf.as<float>()[i] = v;
                        xd.as<double>()[i] = double(v);
                    }
                    const Outcome rf = reduce(op, xf, &c.axes, keep), rd = reduce(op, xd, &c.axes, keep);
                    ASSERT_TRUE(rd.st.ok()) << rd.st.message();
                    std::vector<double> want;
                    for (int64_t i = 0; i < rd.outs[0].numel(); ++i) want.push_back(double(float(rd.outs[0].get_f64(i))));
                    expect_out(rf, 0, rd.outs[0].shape(), want, 1e-6);
                }
}

TEST(ReduceOps, FloatSumAccumulatesInDouble) {
    // 2^24 then ones: a float accumulator would stall at 2^24; the exact sum 2^24 + n - 1
    // rounds to the nearest float (2^24 + n).
    const int64_t n = (int64_t(1) << 24) / 64;
    Tensor x(DType::kF32, {n});
    for (int64_t i = 0; i < n; ++i) x.as<float>()[i] = i == 0 ? float(1 << 24) : 1.0f;
    expect_out(reduce("ReduceSum", x, nullptr, 0, 13), 0, {}, {double(1 << 24) + double(n)});
}

// ---------------------------------------------------------------- Reduce*: errors

TEST(ReduceOps, BadAxesFailClearly) {
    const Tensor x = Seq({2, 3});
    for (const char* op : kReduceOps) {
        SCOPED_TRACE(op);
        std::vector<int64_t> bad{2};
        expect_fail(reduce(op, x, &bad, 1, 18), "axis 2 is out of range for input rank 2");
        expect_fail(reduce(op, x, &bad, 1, 11), "out of range");
        std::vector<int64_t> dup{1, -1};
        expect_fail(reduce(op, x, &dup, 1, 18), "repeated");
        expect_fail(reduce(op, x, nullptr, 2, 18), "keepdims must be 0 or 1");
    }
}

TEST(ReduceOps, AxesFormMustMatchOpset) {
    const Tensor x = Seq({2, 3});
    // Attribute where the opset wants an input.
    expect_fail(run_node("ReduceSum", {data(x)}, {{"axes", ints_attr({0})}}, 13), "is an input");
    expect_fail(run_node("ReduceMax", {data(x)}, {{"axes", ints_attr({0})}}, 18), "since opset 18");
    // Input where the opset wants an attribute.
    expect_fail(run_node("ReduceMax", {data(x), cst(I64({1}, {0}))}, {}, 17), "needs opset >= 18");
    // Wrong axes dtype / rank.
    expect_fail(run_node("ReduceSum", {data(x), cst(F32({1}, {0}))}, {}, 13), "axes must be int64");
    expect_fail(run_node("ReduceSum", {data(x), cst(I64({1, 1}, {0}))}, {}, 13), "1-D");
}

TEST(ReduceOps, AxesInputMustBeConstant) {
    const Tensor x = Seq({2, 3});
    Outcome r = run_node("ReduceSum", {data(x), data(I64({1}, {0}))}, {}, 13);
    ASSERT_FALSE(r.st.ok());
    EXPECT_EQ(int(r.st.code()), int(Code::kNeedValue)) << r.st.message();
    EXPECT_EQ(r.st.detail(), "x1");
}

TEST(ReduceOps, UnsupportedDtype) {
    Tensor x(DType::kBool, {2});
    expect_fail(reduce("ReduceSum", x, nullptr, 1, 13), "bool", Code::kUnsupported);
    Tensor h(DType::kF16, {2});
    expect_fail(reduce("ReduceMean", h, nullptr, 1, 13), "float16", Code::kUnsupported);
}

// ---------------------------------------------------------------- ArgMax / ArgMin

TEST(ReduceArg, TiesAndSelectLastIndex) {
    const Tensor x = F32({2, 4}, {1, 5, 5, 0, 2, 2, 2, 2});
    Attrs a{{"axis", int_attr(1)}, {"keepdims", int_attr(0)}};
    expect_out(run_node("ArgMax", {data(x)}, a, 13), 0, {2}, {1, 0});
    a["select_last_index"] = int_attr(1);
    expect_out(run_node("ArgMax", {data(x)}, a, 13), 0, {2}, {2, 3});
    expect_out(run_node("ArgMin", {data(x)}, a, 13), 0, {2}, {3, 3});
    // Middle axis with inner > 1, negative axis, keepdims default.
    const Tensor y = I32({2, 3, 2}, {0, 9, 5, 1, 3, 4, /**/ 7, 0, 7, 8, -1, 8});
    expect_out(run_node("ArgMax", {data(y)}, {{"axis", int_attr(-2)}}, 11), 0, {2, 1, 2}, {1, 0, 0, 1});
    expect_out(run_node("ArgMin", {data(y)}, {{"axis", int_attr(1)}}, 11), 0, {2, 1, 2}, {0, 1, 2, 0});
}

TEST(ReduceArg, NaNWins) {
    const Tensor x = F32({4}, {1, kNaN, 9, kNaN});
    expect_out(run_node("ArgMax", {data(x)}, {}, 13), 0, {1}, {1});
    expect_out(run_node("ArgMin", {data(x)}, {{"select_last_index", int_attr(1)}}, 13), 0, {1}, {3});
}

TEST(ReduceArg, InnerAxisRowPathMatchesNaive) {
    // ArgMax / ArgMin over a middle axis (the row path: 4-lane float body and scalar tail), with
    // ties, NaN entries and both select_last_index modes, against a naive loop (NaN wins; ties
    // to the first or last index).
    const int64_t O = 2, N = 5, I = 11;
    Tensor x(DType::kF32, {O, N, I});
    for (int64_t i = 0; i < x.numel(); ++i) x.as<float>()[i] = float((i * 7) % 5);  // many ties
    x.as<float>()[1 * I + 3] = kNaN;
    x.as<float>()[3 * I + 3] = kNaN;
    x.as<float>()[(N + 2) * I + 8] = kNaN;
    for (const char* op : {"ArgMax", "ArgMin"})
        for (int64_t last : {0, 1}) {
            SCOPED_TRACE(std::string(op) + " last " + std::to_string(last));
            const bool mx = std::string(op) == "ArgMax";
            std::vector<double> want;
            for (int64_t o = 0; o < O; ++o)
                for (int64_t i = 0; i < I; ++i) {
                    int64_t best = 0;
                    float bv = x.as<float>()[o * N * I + i];
                    for (int64_t t = 1; t < N; ++t) {
                        const float v = x.as<float>()[(o * N + t) * I + i];
                        bool take;
                        if (std::isnan(bv)) take = last && std::isnan(v);
                        else if (std::isnan(v)) take = true;
                        else take = mx ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv);
                        if (take) {
                            best = t;
                            bv = v;
                        }
                    }
                    want.push_back(double(best));
                }
            expect_out(run_node(op, {data(x)}, {{"axis", int_attr(1)}, {"keepdims", int_attr(0)},
                                               {"select_last_index", int_attr(last)}}, 13),
                       0, {O, I}, want);
        }
}

TEST(ReduceArg, Errors) {
    const Tensor x = Seq({2, 3});
    for (const char* op : {"ArgMax", "ArgMin"}) {
        SCOPED_TRACE(op);
        expect_fail(run_node(op, {data(x)}, {{"axis", int_attr(2)}}, 13), "out of range");
        expect_fail(run_node(op, {data(x)}, {{"keepdims", int_attr(5)}}, 13), "keepdims");
        expect_fail(run_node(op, {data(Tensor(DType::kF32, {2, 0}))}, {{"axis", int_attr(1)}}, 13),
                    "size 0");
        expect_fail(run_node(op, {data(F32({}, {1}))}, {}, 13), "rank >= 1");
    }
    // Arg over an empty axis with an empty output is fine.
    expect_out(run_node("ArgMax", {data(Tensor(DType::kF32, {0, 0}))}, {{"axis", int_attr(1)}}, 13), 0,
               {0, 1}, {});
}

// ---------------------------------------------------------------- TopK

TEST(ReduceTopK, TiesLowerIndexFirst) {
    const Tensor x = F32({1, 6}, {3, 1, 3, 2, 3, 1});
    Outcome r = run_node("TopK", {data(x), cst(I64({1}, {4}))}, {}, 11, 2);
    expect_out(r, 0, {1, 4}, {3, 3, 3, 2});
    expect_out(r, 1, {1, 4}, {0, 2, 4, 3});
    Outcome s = run_node("TopK", {data(x), cst(I64({1}, {3}))}, {{"largest", int_attr(0)}}, 11, 2);
    expect_out(s, 0, {1, 3}, {1, 1, 2});
    expect_out(s, 1, {1, 3}, {1, 5, 3});
}

TEST(ReduceTopK, MiddleAxisIntegerAndOpsetVariants) {
    // shape 2x4x2, axis 1 (inner = 2), int64 values.
    const Tensor x = I64({2, 4, 2}, {5, 0, 1, 9, 7, 9, 3, 2, /**/ -1, -1, -2, -1, -3, -1, -4, -1});
    Outcome r = run_node("TopK", {data(x), cst(I64({1}, {2}))}, {{"axis", int_attr(1)}}, 11, 2);
    expect_out(r, 0, {2, 2, 2}, {7, 9, 5, 9, -1, -1, -2, -1});
    expect_out(r, 1, {2, 2, 2}, {2, 1, 0, 2, 0, 0, 1, 1});
    // Opset 1-9: k is an attribute; opset 10: input, no `largest`.
    const Tensor y = F32({5}, {0.5f, 4, -1, 4, 2});
    Outcome a = run_node("TopK", {data(y)}, {{"k", int_attr(2)}}, 9, 2);
    expect_out(a, 0, {2}, {4, 4});
    expect_out(a, 1, {2}, {1, 3});
    Outcome b = run_node("TopK", {data(y), cst(I64({1}, {5}))}, {}, 10, 2);
    expect_out(b, 0, {5}, {4, 4, 2, 0.5, -1});
    expect_out(b, 1, {5}, {1, 3, 4, 0, 2});
    // K = 0: empty outputs.
    Outcome z = run_node("TopK", {data(y), cst(I64({1}, {0}))}, {}, 11, 2);
    expect_out(z, 0, {0}, {});
    expect_out(z, 1, {0}, {});
}

// K >= 32 on contiguous slices selects with nth_element and sorts the kept: the same order as
// sorting every element (NaN largest, ties by lower index), largest and smallest, several rows.
TEST(ReduceTopK, LargeKMatchesAFullSort) {
    const int64_t rows = 3, n = 500;
    std::vector<float> v(size_t(rows * n));
    uint32_t seed = 9;
    for (float& f : v) f = float(((seed = seed * 1664525u + 1013904223u) >> 24) % 40);  // many ties
    v[7] = kNaN;
    v[n + 100] = kNaN;
    v[n + 3] = kNaN;
    for (int64_t largest : {1, 0})
        for (int64_t k : {32, 200, 500}) {
            Outcome r = run_node("TopK", {data(F32({rows, n}, v)), cst(I64({1}, {k}))}, {{"largest", int_attr(largest)}}, 11, 2);
            ASSERT_TRUE(r.st.ok()) << r.st.message();
            for (int64_t o = 0; o < rows; ++o) {
                std::vector<int64_t> order(static_cast<size_t>(n));
                for (int64_t t = 0; t < n; ++t) order[size_t(t)] = t;
                const float* xs = v.data() + o * n;
                std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
                    const bool na = std::isnan(xs[a]), nb = std::isnan(xs[b]);
                    if (na || nb) return largest ? (na && !nb) : (nb && !na);
                    return largest ? xs[a] > xs[b] : xs[a] < xs[b];
                });
                for (int64_t s = 0; s < k; ++s) {
                    ASSERT_EQ(r.outs[1].as<int64_t>()[o * k + s], order[size_t(s)]) << "largest " << largest << " k " << k << " row " << o << " " << s;
                    const float got = r.outs[0].as<float>()[o * k + s], want = xs[order[size_t(s)]];
                    ASSERT_TRUE(got == want || (std::isnan(got) && std::isnan(want)));
                }
            }
        }
}

TEST(ReduceTopK, NaNIsLargest) {
    const Tensor x = F32({4}, {1, kNaN, 3, 2});
    Outcome r = run_node("TopK", {data(x), cst(I64({1}, {2}))}, {}, 11, 2);
    expect_out(r, 0, {2}, {kNaN, 3});
    expect_out(r, 1, {2}, {1, 2});
    Outcome s = run_node("TopK", {data(x), cst(I64({1}, {4}))}, {{"largest", int_attr(0)}}, 11, 2);
    expect_out(s, 1, {4}, {0, 3, 2, 1});
}

TEST(ReduceTopK, LargeKMatchesSort) {
    // Reverse-ordered input of 300 with duplicates: checks the heap on a big K.
    const int64_t n = 300;
    Tensor x(DType::kF32, {n});
    for (int64_t i = 0; i < n; ++i) x.as<float>()[i] = float((n - i) / 2);
    Outcome r = run_node("TopK", {data(x), cst(I64({1}, {n}))}, {}, 11, 2);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    const int64_t* idx = r.outs[1].as<int64_t>();
    for (int64_t i = 1; i < n; ++i) {
        float a = r.outs[0].as<float>()[i - 1], b = r.outs[0].as<float>()[i];
        ASSERT_TRUE(a > b || (a == b && idx[i - 1] < idx[i])) << "position " << i;
    }
}

TEST(ReduceTopK, Errors) {
    const Tensor x = Seq({2, 3});
    expect_fail(run_node("TopK", {data(x), cst(I64({1}, {4}))}, {}, 11, 2), "K=4 is out of range");
    expect_fail(run_node("TopK", {data(x), cst(I64({1}, {-1}))}, {}, 11, 2), "out of range");
    expect_fail(run_node("TopK", {data(x), cst(I64({1}, {1}))}, {{"axis", int_attr(2)}}, 11, 2),
                "axis 2 is out of range");
    expect_fail(run_node("TopK", {data(x), cst(I64({2}, {1, 1}))}, {}, 11, 2), "1-element");
    expect_fail(run_node("TopK", {data(x)}, {}, 9, 2), "'k' is required");
    expect_fail(run_node("TopK", {data(x), cst(I64({1}, {1}))}, {}, 11, 1), "both outputs");
    Outcome r = run_node("TopK", {data(x), data(I64({1}, {1}))}, {}, 11, 2);
    EXPECT_EQ(int(r.st.code()), int(Code::kNeedValue)) << r.st.message();
}

// ---------------------------------------------------------------- CumSum

TEST(ReduceCumSum, ExclusiveReverseMiddleAxis) {
    const Tensor x = F32({2, 3, 2}, {1, 2, 3, 4, 5, 6, /**/ 7, 8, 9, 10, 11, 12});
    const Tensor ax = I32({}, {1});
    expect_out(run_node("CumSum", {data(x), cst(ax)}, {}, 14), 0, {2, 3, 2},
               {1, 2, 4, 6, 9, 12, 7, 8, 16, 18, 27, 30});
    expect_out(run_node("CumSum", {data(x), cst(ax)}, {{"exclusive", int_attr(1)}, {"reverse", int_attr(1)}}, 14),
               0, {2, 3, 2}, {8, 10, 5, 6, 0, 0, 20, 22, 11, 12, 0, 0});
    expect_out(run_node("CumSum", {data(I64({4}, {1, -2, 3, 5})), cst(I64({1}, {-1}))},
                        {{"exclusive", int_attr(1)}}, 11),
               0, {4}, {0, 1, -1, 2});
}

TEST(ReduceCumSum, Errors) {
    const Tensor x = Seq({2, 3});
    expect_fail(run_node("CumSum", {data(x), cst(I64({}, {2}))}, {}, 14), "axis 2 is out of range");
    expect_fail(run_node("CumSum", {data(x), cst(F32({}, {0}))}, {}, 14), "axis must be an int32/int64 scalar");
    expect_fail(run_node("CumSum", {data(x), cst(I64({}, {0}))}, {{"reverse", int_attr(3)}}, 14), "reverse");
    expect_fail(run_node("CumSum", {data(x)}, {}, 14), "axis) is missing");
    Outcome r = run_node("CumSum", {data(x), data(I64({}, {0}))}, {}, 14);
    EXPECT_EQ(int(r.st.code()), int(Code::kNeedValue)) << r.st.message();
}

// ---------------------------------------------------------------- Det

TEST(ReduceDet, BatchedSingularAndEmpty) {
    const Tensor x = F64({3, 2, 2}, {1, 2, 3, 4, /**/ 2, 4, 1, 2, /**/ 0, 1, 1, 0});
    expect_out(run_node("Det", {data(x)}, {}, 11), 0, {3}, {-2, 0, -1}, 1e-12);
    const Tensor y = F32({3, 3}, {2, -1, 0, -1, 2, -1, 0, -1, 2});
    expect_out(run_node("Det", {data(y)}, {}, 11), 0, {}, {4}, 1e-6);
    expect_out(run_node("Det", {data(Tensor(DType::kF32, {2, 0, 0}))}, {}, 11), 0, {2}, {1, 1});
}

TEST(ReduceDet, Errors) {
    expect_fail(run_node("Det", {data(Seq({2, 3}))}, {}, 11), "square");
    expect_fail(run_node("Det", {data(Seq({3}))}, {}, 11), "rank >= 2");
    Outcome r = run_node("Det", {data(I32({1, 1}, {1}))}, {}, 11);
    ASSERT_FALSE(r.st.ok());
    EXPECT_NE(r.st.message().find("int32"), std::string::npos) << r.st.message();
}

}  // namespace
