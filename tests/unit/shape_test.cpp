// Shape / data-movement ops: edge cases the ONNX conformance suite does not cover (opset
// variants, dtypes, clamping, reductions, constant folding of shape chains) and error handling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
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

Attr atensor(const Tensor& t) {
    Attr a;
    a.kind = Attr::kTensor;
    a.t = std::make_shared<Tensor>(t);
    return a;
}

template <typename T>
Tensor make(DType dt, Shape s, const std::vector<T>& v) {
    Tensor t(dt, std::move(s));
    EXPECT_EQ(size_t(t.numel()), v.size());
    for (size_t i = 0; i < v.size(); ++i) t.as<T>()[i] = v[i];
    return t;
}
Tensor f32(Shape s, const std::vector<float>& v) { return make<float>(DType::kF32, std::move(s), v); }
Tensor i64(Shape s, const std::vector<int64_t>& v) { return make<int64_t>(DType::kI64, std::move(s), v); }
Tensor i32(Shape s, const std::vector<int32_t>& v) { return make<int32_t>(DType::kI32, std::move(s), v); }
Tensor bools(Shape s, const std::vector<bool>& v) {
    Tensor t(DType::kBool, std::move(s));
    for (size_t i = 0; i < v.size(); ++i) t.as<bool>()[i] = v[i];
    return t;
}
Tensor iota_f32(Shape s) {
    Tensor t(DType::kF32, std::move(s));
    for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = float(i);
    return t;
}

struct Result {
    Status st;
    std::vector<Tensor> outs;
    std::shared_ptr<const Plan> plan;
};

// One-node graph. const_in[i]: input i is a constant; an undefined Tensor marks an omitted input.
Result run_op(const std::string& op, const std::vector<Tensor>& ins, std::vector<bool> const_in,
              const Attrs& attrs, int64_t opset = 17, int n_out = 1) {
    testnode::NodeRun n =
        testnode::run_one_node(op, testnode::node_inputs(ins, const_in), attrs, opset, std::vector<bool>(size_t(n_out), true));
    return Result{n.st, std::move(n.outs), n.plan};
}

// All inputs but the first constant (the usual shape-op pattern).
Result run1(const std::string& op, const std::vector<Tensor>& ins, const Attrs& attrs = {},
            int64_t opset = 17, int n_out = 1) {
    std::vector<bool> c(ins.size(), true);
    c[0] = false;
    return run_op(op, ins, c, attrs, opset, n_out);
}

void expect_values(const Result& r, size_t out, Shape shape, const std::vector<double>& v) {
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    ASSERT_LT(out, r.outs.size());
    const Tensor& t = r.outs[out];
    ASSERT_EQ(t.shape(), shape) << shape_str(t.shape()) << " vs " << shape_str(shape);
    ASSERT_EQ(size_t(t.numel()), v.size());
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(t.get_f64(int64_t(i)), v[i]) << "element " << i;
}

void expect_error(const Result& r, const std::string& fragment) {
    ASSERT_FALSE(r.st.ok()) << "expected an error mentioning '" << fragment << "'";
    EXPECT_NE(r.st.message().find(fragment), std::string::npos) << r.st.message();
}

// ---------------------------------------------------------------- Constant, Shape, Size

TEST(ShapeOps, ConstantAttrVariants) {
    Tensor none;
    expect_values(run_op("Constant", {}, {}, {{"value_ints", aints({3, -1})}}), 0, {2}, {3, -1});
    expect_values(run_op("Constant", {}, {}, {{"value_float", af(2.5f)}}), 0, {}, {2.5});
    expect_values(run_op("Constant", {}, {}, {{"value", atensor(i32({2}, {7, 8}))}}), 0, {2}, {7, 8});
    expect_error(run_op("Constant", {}, {}, {}), "exactly one value attribute");
    Result r = run_op("Constant", {}, {}, {{"value_string", as("x")}});
    EXPECT_EQ(r.st.code(), Code::kUnsupported);
}

TEST(ShapeOps, ShapeStartEndAndSize) {
    Tensor x = iota_f32({2, 3, 4, 5});
    expect_values(run1("Shape", {x}), 0, {4}, {2, 3, 4, 5});
    expect_values(run1("Shape", {x}, {{"start", ai(-3)}, {"end", ai(-1)}}), 0, {2}, {3, 4});
    expect_values(run1("Shape", {x}, {{"start", ai(-10)}, {"end", ai(100)}}), 0, {4}, {2, 3, 4, 5});
    expect_values(run1("Shape", {x}, {{"start", ai(3)}, {"end", ai(1)}}), 0, {0}, {});
    expect_values(run1("Size", {x}), 0, {}, {120});
    // Shape and Size of a run-time input are compile-time constants: no Shape step runs (only
    // the copy of the constant into the graph output).
    for (const char* op : {"Shape", "Size"}) {
        Result r = run1(op, {x});
        ASSERT_TRUE(r.st.ok());
        for (const StepInfo& si : r.plan->step_info) EXPECT_EQ(si.op, "Copy");
    }
    expect_error(run_op("Shape", {}, {}, {}), "input 0 is missing");
}

// A Silero/PaddleOCR-style chain: Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds to
// constants; only the final Reshape copy runs.
TEST(ShapeOps, ShapeChainFoldsToConstants) {
    Graph g;
    g.opset = 13;
    auto val = [&](const std::string& n) { return g.add_value(n); };
    auto cst = [&](const std::string& n, const Tensor& t) {
        int id = val(n);
        g.values[size_t(id)].constant = std::make_shared<Tensor>(t);
        return id;
    };
    auto node = [&](const std::string& op, std::vector<int> ins, int out, Attrs attrs = {}) {
        Node n;
        n.op = op;
        n.name = op + std::to_string(g.nodes.size());
        n.inputs = std::move(ins);
        n.num_explicit_inputs = int(n.inputs.size());
        n.outputs = {out};
        n.attrs = std::move(attrs);
        g.values[size_t(out)].producer = int(g.nodes.size());
        g.nodes.push_back(std::move(n));
    };
    int x = val("x");
    g.values[size_t(x)].dtype = DType::kF32;
    g.values[size_t(x)].has_shape = true;
    g.values[size_t(x)].dims = {Dim{2, ""}, Dim{3, ""}, Dim{4, ""}};
    g.inputs = {x};
    int shp = val("shp"), d0 = val("d0"), u0 = val("u0"), cat = val("cat"), y = val("y");
    node("Shape", {x}, shp);
    node("Gather", {shp, cst("zero", i64({}, {0}))}, d0, {{"axis", ai(0)}});
    node("Unsqueeze", {d0, cst("ax", i64({1}, {0}))}, u0);
    node("Concat", {u0, cst("m1", i64({1}, {-1}))}, cat, {{"axis", ai(0)}});
    node("Reshape", {x, cat}, y);
    g.outputs = {y};
    std::shared_ptr<const Plan> plan;
    Status st = compile_graph(g, CompileOptions{}, &plan);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(plan->steps.size(), 1u);
    EXPECT_EQ(plan->outputs[0].shape, (Shape{2, 12}));
}

// ---------------------------------------------------------------- reshaping

TEST(ShapeOps, ReshapeZeroMinusOneAllowZero) {
    Tensor x = iota_f32({2, 3, 4});
    Result r = run1("Reshape", {x, i64({2}, {0, -1})});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_EQ(r.outs[0].shape(), (Shape{2, 12}));
    EXPECT_EQ(r.outs[0].as<float>()[23], 23.0f);
    Tensor e(DType::kF32, {0, 3});
    r = run1("Reshape", {e, i64({2}, {3, 0})}, {{"allowzero", ai(1)}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_EQ(r.outs[0].shape(), (Shape{3, 0}));
    expect_error(run1("Reshape", {x, i64({2}, {-1, -1})}), "more than one -1");
    expect_error(run1("Reshape", {x, i64({2}, {5, -1})}), "cannot reshape");
    expect_error(run1("Reshape", {x, i64({2}, {7, 4})}), "cannot reshape");
    expect_error(run1("Reshape", {e, i64({2}, {0, -1})}, {{"allowzero", ai(1)}}), "both -1 and 0");
    // Shape computed at run time: the compiler asks for its value.
    Result nv = run_op("Reshape", {x, i64({2}, {6, 4})}, {false, false}, {});
    EXPECT_EQ(nv.st.code(), Code::kNeedValue) << nv.st.message();
}

TEST(ShapeOps, FlattenSqueezeUnsqueeze) {
    Tensor x = iota_f32({2, 1, 3});
    expect_values(run1("Flatten", {x}, {{"axis", ai(0)}}), 0, {1, 6}, {0, 1, 2, 3, 4, 5});
    Result r = run1("Flatten", {x}, {{"axis", ai(-1)}});
    ASSERT_TRUE(r.st.ok());
    EXPECT_EQ(r.outs[0].shape(), (Shape{2, 3}));
    expect_error(run1("Flatten", {x}, {{"axis", ai(4)}}), "axis 4 is out of range");

    r = run1("Squeeze", {x}, {{"axes", aints({1})}}, 11);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_EQ(r.outs[0].shape(), (Shape{2, 3}));
    r = run1("Squeeze", {x}, {}, 13);  // no axes: all size-1 dims
    ASSERT_TRUE(r.st.ok());
    EXPECT_EQ(r.outs[0].shape(), (Shape{2, 3}));
    r = run1("Squeeze", {x, i64({1}, {-2})}, {}, 13);
    ASSERT_TRUE(r.st.ok());
    EXPECT_EQ(r.outs[0].shape(), (Shape{2, 3}));
    expect_error(run1("Squeeze", {x, i64({1}, {0})}, {}, 13), "cannot squeeze axis 0 of size 2");

    r = run1("Unsqueeze", {x}, {{"axes", aints({0, -1})}}, 11);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_EQ(r.outs[0].shape(), (Shape{1, 2, 1, 3, 1}));
    r = run1("Unsqueeze", {x, i64({2}, {4, 1})}, {}, 13);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_EQ(r.outs[0].shape(), (Shape{2, 1, 1, 3, 1}));
    expect_error(run1("Unsqueeze", {x, i64({2}, {1, -4})}, {}, 13), "repeated");
    expect_error(run1("Unsqueeze", {x}, {}, 11), "'axes' is missing");
}

TEST(ShapeOps, IdentityBool) {
    expect_values(run1("Identity", {bools({3}, {true, false, true})}), 0, {3}, {1, 0, 1});
}

// ---------------------------------------------------------------- Transpose, Concat, Split

TEST(ShapeOps, TransposeDefaultAndErrors) {
    Tensor x = iota_f32({2, 3, 2});
    Result r = run1("Transpose", {x});
    ASSERT_TRUE(r.st.ok());
    EXPECT_EQ(r.outs[0].shape(), (Shape{2, 3, 2}));
    // y[i][j][k] = x[k][j][i]
    const float* y = r.outs[0].as<float>();
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j)
            for (int k = 0; k < 2; ++k) EXPECT_EQ(y[(i * 3 + j) * 2 + k], float((k * 3 + j) * 2 + i));
    expect_error(run1("Transpose", {x}, {{"perm", aints({0, 0, 1})}}), "repeated");
    expect_error(run1("Transpose", {x}, {{"perm", aints({0, 1})}}), "perm has 2 entries");
    // int64 data and a scalar.
    expect_values(run1("Transpose", {i64({}, {5})}), 0, {}, {5});
}

// Every permutation of odd-sized rank-2..4 inputs against index arithmetic: covers the row-copy
// path (last dim kept), the tiled path (input's last dim moved to the second-to-last place:
// tiles of 8 rows and the leftover rows) and the element-by-element path.
TEST(ShapeOps, TransposeEveryPermutationOddSizes) {
    const Shape shapes[] = {{9, 13}, {3, 17, 5}, {2, 5, 3, 11}, {1, 32, 4, 32}};
    for (const Shape& in : shapes) {
        const int r = int(in.size());
        std::vector<int64_t> perm(in.size(), 0);
        for (int i = 0; i < r; ++i) perm[size_t(i)] = i;
        Tensor x = iota_f32(in);
        do {
            Result res = run1("Transpose", {x}, {{"perm", aints(perm)}});
            ASSERT_TRUE(res.st.ok()) << res.st.message();
            Shape out;
            for (int64_t p : perm) out.push_back(in[size_t(p)]);
            ASSERT_EQ(res.outs[0].shape(), out);
            std::vector<int64_t> ist(size_t(r), 1);
            for (int d = r - 2; d >= 0; --d) ist[size_t(d)] = ist[size_t(d + 1)] * in[size_t(d + 1)];
            const float* y = res.outs[0].as<float>();
            std::vector<int64_t> idx(size_t(r), 0);
            for (int64_t o = 0; o < x.numel(); ++o) {
                int64_t src = 0;
                for (int d = 0; d < r; ++d) src += idx[size_t(d)] * ist[size_t(perm[size_t(d)])];
                ASSERT_EQ(y[o], float(src)) << "shape rank " << r << " at " << o;
                for (int d = r - 1; d >= 0; --d) {
                    if (++idx[size_t(d)] < out[size_t(d)]) break;
                    idx[size_t(d)] = 0;
                }
            }
        } while (std::next_permutation(perm.begin(), perm.end()));
    }
}

TEST(ShapeOps, ConcatAndErrors) {
    Result r = run_op("Concat", {i64({2, 1}, {1, 2}), i64({2, 2}, {3, 4, 5, 6}), i64({2, 0}, {})},
                      {false, true, false}, {{"axis", ai(-1)}});
    expect_values(r, 0, {2, 3}, {1, 3, 4, 2, 5, 6});
    expect_error(run_op("Concat", {iota_f32({2, 2}), iota_f32({3, 3})}, {false, false}, {{"axis", ai(0)}}),
                 "incompatible");
    expect_error(run_op("Concat", {iota_f32({2}), i64({2}, {1, 2})}, {false, false}, {{"axis", ai(0)}}),
                 "dtype");
    expect_error(run_op("Concat", {iota_f32({2})}, {false}, {}), "'axis' is missing");
}

TEST(ShapeOps, SplitVariants) {
    Tensor x = iota_f32({7});
    // opset 18: num_outputs with an uneven last chunk.
    Result r = run1("Split", {x}, {{"num_outputs", ai(3)}}, 18, 3);
    expect_values(r, 0, {3}, {0, 1, 2});
    expect_values(r, 1, {3}, {3, 4, 5});
    expect_values(r, 2, {1}, {6});
    // opset 11: split attribute.
    r = run1("Split", {x}, {{"split", aints({2, 5})}}, 11, 2);
    expect_values(r, 1, {5}, {2, 3, 4, 5, 6});
    // opset 13: split input.
    r = run1("Split", {x, i64({2}, {6, 1})}, {}, 13, 2);
    expect_values(r, 1, {1}, {6});
    expect_error(run1("Split", {x, i64({2}, {3, 3})}, {}, 13, 2), "sums to 6");
    expect_error(run1("Split", {x}, {}, 13, 2), "equal parts");
    expect_error(run1("Split", {x, i64({2}, {3, 4})}, {}, 13, 3), "split has 2 entries");
}

// ---------------------------------------------------------------- Slice

TEST(ShapeOps, SliceClampingAndNegativeSteps) {
    Tensor x = iota_f32({6});
    const int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
    expect_values(run1("Slice", {x, i64({1}, {kMax}), i64({1}, {kMin}), i64({1}, {0}), i64({1}, {-2})}), 0,
                  {3}, {5, 3, 1});
    expect_values(run1("Slice", {x, i64({1}, {-100}), i64({1}, {100})}), 0, {6}, {0, 1, 2, 3, 4, 5});
    expect_values(run1("Slice", {x, i64({1}, {4}), i64({1}, {1})}), 0, {0}, {});
    expect_values(run1("Slice", {x, i64({1}, {1}), i64({1}, {6}), i64({1}, {-1}), i64({1}, {3})}), 0, {2},
                  {1, 4});
    // opset 9 attributes, int32 starts at opset 13
    expect_values(run1("Slice", {x}, {{"starts", aints({-2})}, {"ends", aints({100})}}, 9), 0, {2}, {4, 5});
    expect_values(run1("Slice", {x, i32({1}, {2}), i32({1}, {4})}, {}, 13), 0, {2}, {2, 3});
    // 2-D with an axis subset
    Tensor m = iota_f32({3, 4});
    expect_values(run1("Slice", {m, i64({1}, {-1}), i64({1}, {-5}), i64({1}, {1}), i64({1}, {-2})}), 0,
                  {3, 2}, {3, 1, 7, 5, 11, 9});
    expect_error(run1("Slice", {x, i64({1}, {0}), i64({1}, {3}), i64({1}, {0}), i64({1}, {0})}), "step");
    expect_error(run1("Slice", {x, i64({1}, {0}), i64({1}, {3}), i64({1}, {1})}), "out of range");
    expect_error(run1("Slice", {x, i64({2}, {0, 0}), i64({1}, {3})}), "starts has 2 entries but ends has 1");
}

// Dims taken whole merge into the dim outside them when it steps by 1 (one contiguous copy for a
// channel range of an NCHW image); steps, ends inside a dim and negative steps keep their tables.
TEST(ShapeOps, SliceMergesWholeInnerDims) {
    const Tensor x = iota_f32({2, 3, 4, 5});
    struct Case {
        std::vector<int64_t> starts, ends, axes, steps;
    };
    const Case cases[] = {
        {{1}, {3}, {1}, {1}},              // channels [1, 3): one run per image
        {{1}, {2}, {0}, {1}},              // the second image: one run
        {{0, 1}, {3, 3}, {1, 2}, {1, 1}},  // rows [1, 3) of every channel
        {{0}, {4}, {2}, {2}},              // every other row (step 2: rows stay separate)
        {{1, 0}, {3, 5}, {1, 3}, {1, 1}},  // channels [1, 3), columns whole (given explicitly)
        {{1, 4}, {3, 0}, {1, 3}, {1, -1}}, // columns reversed: no merge into the channel dim
        {{1, 2}, {3, 5}, {1, 3}, {1, 1}},  // columns [2, 5): not whole
    };
    for (const Case& c : cases) {
        std::vector<int64_t> lo = {0, 0, 0, 0}, n = {2, 3, 4, 5}, st = {1, 1, 1, 1};
        for (size_t i = 0; i < c.axes.size(); ++i) {
            const size_t a = size_t(c.axes[i]);
            lo[a] = c.starts[i];
            st[a] = c.steps[i];
            n[a] = c.steps[i] > 0 ? (c.ends[i] - c.starts[i] + c.steps[i] - 1) / c.steps[i]
                                  : (c.starts[i] - c.ends[i] - c.steps[i] - 1) / -c.steps[i];
        }
        std::vector<double> want;
        for (int64_t i0 = 0; i0 < n[0]; ++i0)
            for (int64_t i1 = 0; i1 < n[1]; ++i1)
                for (int64_t i2 = 0; i2 < n[2]; ++i2)
                    for (int64_t i3 = 0; i3 < n[3]; ++i3)
                        want.push_back(double((((lo[0] + i0 * st[0]) * 3 + lo[1] + i1 * st[1]) * 4 + lo[2] + i2 * st[2]) * 5 +
                                             lo[3] + i3 * st[3]));
        const int64_t k = int64_t(c.axes.size());
        expect_values(run1("Slice", {x, i64({k}, c.starts), i64({k}, c.ends), i64({k}, c.axes), i64({k}, c.steps)}),
                      0, {n[0], n[1], n[2], n[3]}, want);
    }
}

// ---------------------------------------------------------------- Gather family

TEST(ShapeOps, GatherIndicesAndBounds) {
    Tensor x = iota_f32({5, 2});
    expect_values(run1("Gather", {x, i64({2}, {-1, 0})}), 0, {2, 2}, {8, 9, 0, 1});
    expect_values(run1("Gather", {x, i32({}, {1})}, {{"axis", ai(1)}}), 0, {5},
                  {1, 3, 5, 7, 9});
    // bool data, run-time indices
    Result r = run_op("Gather", {bools({3}, {false, true, false}), i64({2}, {1, 1})}, {false, false}, {});
    expect_values(r, 0, {2}, {1, 1});
    // Out-of-range index read at run time: a clear error, no out-of-bounds read.
    r = run_op("Gather", {x, i64({2}, {0, 7})}, {false, false}, {});
    ASSERT_FALSE(r.st.ok());
    EXPECT_EQ(r.st.message(), "Gather: index 7 out of range [-5, 5)");
    r = run_op("Gather", {x, i64({1}, {-6})}, {false, false}, {});
    expect_error(r, "index -6 out of range [-5, 5)");
    // ... and at compile time when the indices are constant.
    expect_error(run1("Gather", {x, i64({1}, {5})}), "index 5 out of range");
    expect_error(run1("Gather", {x, f32({1}, {0})}), "int32 or int64");
    expect_error(run1("Gather", {x, i64({1}, {0})}, {{"axis", ai(2)}}), "axis 2 is out of range");
}

TEST(ShapeOps, GatherElementsAndND) {
    Tensor x = iota_f32({2, 3});
    expect_values(run1("GatherElements", {x, i64({2, 2}, {-1, 0, 1, 2})}, {{"axis", ai(1)}}), 0, {2, 2},
                  {2, 0, 4, 5});
    Result r = run_op("GatherElements", {x, i64({1, 1}, {3})}, {false, false}, {{"axis", ai(1)}});
    expect_error(r, "GatherElements: index 3 out of range [-3, 3)");
    expect_error(run1("GatherElements", {x, i64({3}, {0, 0, 0})}), "different ranks");
    expect_error(run1("GatherElements", {x, i64({3, 1}, {0, 0, 0})}, {{"axis", ai(1)}}), "larger than data");

    // GatherND, batch_dims = 1: data [2, 2, 2], indices [2, 1] -> [2, 2]
    Tensor d = iota_f32({2, 2, 2});
    expect_values(run1("GatherND", {d, i64({2, 1}, {1, 0})}, {{"batch_dims", ai(1)}}), 0, {2, 2},
                  {2, 3, 4, 5});
    expect_values(run1("GatherND", {d, i64({1, 3}, {1, -1, 0})}), 0, {1}, {6});
    r = run_op("GatherND", {d, i64({1, 2}, {2, 0})}, {false, false}, {});
    expect_error(r, "GatherND: index 2 out of range [-2, 2)");
    expect_error(run1("GatherND", {d, i64({1, 4}, {0, 0, 0, 0})}), "last dim of indices");
    expect_error(run1("GatherND", {d, i64({2, 1}, {0, 0})}, {{"batch_dims", ai(2)}}), "batch_dims");
}

TEST(ShapeOps, ScatterReductions) {
    Tensor data = f32({1, 4}, {1, 2, 3, 4});
    Tensor ind = i64({1, 3}, {1, -1, 1});
    Tensor upd = f32({1, 3}, {10, 0.5f, 5});
    const Attrs ax1 = {{"axis", ai(1)}};
    auto with = [&](const char* red) {
        Attrs a = ax1;
        a["reduction"] = as(red);
        return a;
    };
    expect_values(run1("ScatterElements", {data, ind, upd}, with("add")), 0, {1, 4}, {1, 17, 3, 4.5});
    expect_values(run1("ScatterElements", {data, ind, upd}, with("mul")), 0, {1, 4}, {1, 100, 3, 2});
    expect_values(run1("ScatterElements", {data, ind, upd}, with("max")), 0, {1, 4}, {1, 10, 3, 4});
    expect_values(run1("ScatterElements", {data, ind, upd}, with("min")), 0, {1, 4}, {1, 2, 3, 0.5});
    expect_values(run1("ScatterElements", {data, ind, upd}, ax1), 0, {1, 4}, {1, 5, 3, 0.5});
    expect_values(run1("Scatter", {data, ind, upd}, ax1, 9), 0, {1, 4}, {1, 5, 3, 0.5});
    expect_error(run1("ScatterElements", {data, ind, upd}, with("avg")), "unknown reduction 'avg'");
    Result r = run_op("ScatterElements", {data, i64({1, 1}, {4}), f32({1, 1}, {0})}, {false, false, false}, ax1);
    expect_error(r, "ScatterElements: index 4 out of range [-4, 4)");
    expect_error(run1("ScatterElements", {data, ind, f32({1, 2}, {0, 0})}, ax1), "different shapes");

    // ScatterND: int64 data [2, 2], rows replaced / multiplied
    Tensor d = i64({2, 2}, {1, 2, 3, 4});
    expect_values(run1("ScatterND", {d, i64({2, 1}, {1, 1}), i64({2, 2}, {2, 3, 5, 7})}, {{"reduction", as("mul")}}),
                  0, {2, 2}, {1, 2, 30, 84});
    expect_values(run1("ScatterND", {d, i64({1, 2}, {-1, 0}), i64({1}, {9})}), 0, {2, 2}, {1, 2, 9, 4});
    r = run_op("ScatterND", {d, i64({1, 2}, {0, 2}), i64({1}, {9})}, {false, false, false}, {});
    expect_error(r, "ScatterND: index 2 out of range [-2, 2)");
    expect_error(run1("ScatterND", {d, i64({1, 1}, {0}), i64({1, 3}, {0, 0, 0})}), "updates have shape");
}

// ---------------------------------------------------------------- Pad

TEST(ShapeOps, PadModes) {
    Tensor x = f32({3}, {1, 2, 3});
    expect_values(run1("Pad", {x, i64({2}, {2, 2})}, {{"mode", as("reflect")}}, 13), 0, {7}, {3, 2, 1, 2, 3, 2, 1});
    expect_values(run1("Pad", {x, i64({2}, {2, 2})}, {{"mode", as("edge")}}, 13), 0, {7}, {1, 1, 1, 2, 3, 3, 3});
    expect_values(run1("Pad", {x, i64({2}, {4, 2})}, {{"mode", as("wrap")}}, 19), 0, {9}, {3, 1, 2, 3, 1, 2, 3, 1, 2});
    expect_values(run1("Pad", {x, i64({2}, {1, 0}), f32({}, {9})}, {}, 13), 0, {4}, {9, 1, 2, 3});
    // negative pads crop
    expect_values(run1("Pad", {x, i64({2}, {-1, 1})}, {}, 13), 0, {3}, {2, 3, 0});
    // opset 7: attributes, int64 data
    expect_values(run1("Pad", {i64({2}, {5, 6})}, {{"pads", aints({1, 1})}, {"value", af(-1)}}, 7), 0, {4},
                  {-1, 5, 6, -1});
    // opset 18 axes input: pad only the last axis of a 2x2
    Tensor m = f32({2, 2}, {1, 2, 3, 4});
    Tensor none;
    expect_values(run1("Pad", {m, i64({2}, {0, 1}), none, i64({1}, {-1})}, {}, 18), 0, {2, 3}, {1, 2, 0, 3, 4, 0});
    // constant value given at run time
    Result r = run_op("Pad", {x, i64({2}, {1, 1}), f32({}, {7})}, {false, true, false}, {}, 13);
    expect_values(r, 0, {5}, {7, 1, 2, 3, 7});
    expect_error(run1("Pad", {x, i64({2}, {1, 1})}, {{"mode", as("mirror")}}, 13), "unknown mode 'mirror'");
    expect_error(run1("Pad", {x, i64({3}, {1, 1, 1})}, {}, 13), "pads has 3 entries");
    expect_error(run1("Pad", {x, i64({2}, {-2, -2})}, {}, 13), "negative");
    expect_error(run1("Pad", {Tensor(DType::kF32, {0}), i64({2}, {1, 1})}, {{"mode", as("edge")}}, 13),
                 "empty axis");
}

// ---------------------------------------------------------------- Expand, Tile, ConstantOfShape

TEST(ShapeOps, ExpandTile) {
    Tensor x = f32({3, 1}, {1, 2, 3});
    // bidirectional: the shape may have 1 where the input is larger
    expect_values(run1("Expand", {x, i64({2}, {1, 2})}), 0, {3, 2}, {1, 1, 2, 2, 3, 3});
    expect_values(run1("Expand", {x, i64({3}, {2, 1, 1})}), 0, {2, 3, 1}, {1, 2, 3, 1, 2, 3});
    expect_error(run1("Expand", {x, i64({2}, {2, 2})}), "cannot broadcast");

    expect_values(run1("Tile", {i32({1, 2}, {1, 2}), i64({2}, {2, 2})}), 0, {2, 4}, {1, 2, 1, 2, 1, 2, 1, 2});
    expect_values(run1("Tile", {x, i64({2}, {0, 3})}), 0, {0, 3}, {});
    expect_error(run1("Tile", {x, i64({1}, {2})}), "repeats has 1 entries");
    expect_error(run1("Tile", {x, i64({2}, {-1, 1})}), "negative");
}

TEST(ShapeOps, ConstantOfShapeAndRange) {
    Result r = run_op("ConstantOfShape", {i64({2}, {2, 2})}, {true}, {{"value", atensor(i32({1}, {7}))}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_EQ(r.outs[0].dtype(), DType::kI32);
    expect_values(r, 0, {2, 2}, {7, 7, 7, 7});
    expect_values(run_op("ConstantOfShape", {i64({0}, {})}, {true}, {}), 0, {}, {0});
    expect_error(run_op("ConstantOfShape", {i64({1}, {-2})}, {true}, {}), "negative");
    EXPECT_EQ(run_op("ConstantOfShape", {i64({1}, {2})}, {false}, {}).st.code(), Code::kNeedValue);

    auto range = [](Tensor a, Tensor b, Tensor c) { return run_op("Range", {a, b, c}, {true, true, true}, {}); };
    expect_values(range(i64({}, {10}), i64({}, {1}), i64({}, {-3})), 0, {3}, {10, 7, 4});
    expect_values(range(i64({}, {1}), i64({}, {10}), i64({}, {-3})), 0, {0}, {});
    expect_values(range(f32({}, {0}), f32({}, {1}), f32({}, {0.25f})), 0, {4}, {0, 0.25, 0.5, 0.75});
    expect_values(range(i32({}, {-3}), i32({}, {3}), i32({}, {4})), 0, {2}, {-3, 1});
    expect_error(range(i64({}, {0}), i64({}, {3}), i64({}, {0})), "delta is 0");
    expect_error(range(i64({}, {0}), f32({}, {3}), i64({}, {1})), "different dtypes");
    EXPECT_EQ(run_op("Range", {i64({}, {0}), i64({}, {3}), i64({}, {1})}, {true, false, true}, {}).st.code(),
              Code::kNeedValue);
}

// ---------------------------------------------------------------- OneHot, Trilu, EyeLike

TEST(ShapeOps, OneHot) {
    Tensor vals = f32({2}, {0, 5});
    // negative index counts from the end; out-of-range gives all off; axis 0
    expect_values(run1("OneHot", {i64({3}, {-1, 0, 9}), i64({}, {3}), vals}, {{"axis", ai(0)}}), 0, {3, 3},
                  {0, 5, 0, 0, 0, 0, 5, 0, 0});
    expect_values(run1("OneHot", {f32({2}, {1.7f, 0}), f32({1}, {2.5f}), i32({2}, {-1, 1})}), 0, {2, 2},
                  {-1, 1, 1, -1});
    expect_error(run1("OneHot", {i64({1}, {0}), i64({}, {0}), vals}), "depth must be positive");
    expect_error(run1("OneHot", {i64({1}, {0}), i64({}, {3}), f32({3}, {0, 1, 2})}), "two elements");
    expect_error(run1("OneHot", {i64({1}, {0}), i64({}, {3}), vals}, {{"axis", ai(3)}}), "axis 3");
    EXPECT_EQ(run_op("OneHot", {i64({1}, {0}), i64({}, {3}), vals}, {false, false, true}, {}).st.code(),
              Code::kNeedValue);
}

TEST(ShapeOps, TriluEyeLike) {
    Tensor m = iota_f32({3, 3});
    expect_values(run1("Trilu", {m}), 0, {3, 3}, {0, 1, 2, 0, 4, 5, 0, 0, 8});
    expect_values(run1("Trilu", {m, i64({}, {-1})}, {{"upper", ai(0)}}), 0, {3, 3}, {0, 0, 0, 3, 0, 0, 6, 7, 0});
    // k at run time
    Result r = run_op("Trilu", {m, i64({}, {1})}, {false, false}, {});
    expect_values(r, 0, {3, 3}, {0, 1, 2, 0, 0, 5, 0, 0, 0});
    expect_error(run1("Trilu", {iota_f32({3})}), "rank >= 2");
    expect_error(run1("Trilu", {m, i32({}, {1})}), "int64 scalar");

    r = run1("EyeLike", {f32({2, 3}, {9, 9, 9, 9, 9, 9})}, {{"k", ai(1)}, {"dtype", ai(int64_t(DType::kI32))}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_EQ(r.outs[0].dtype(), DType::kI32);
    expect_values(r, 0, {2, 3}, {0, 1, 0, 0, 0, 1});
    expect_values(run1("EyeLike", {i64({3, 2}, {0, 0, 0, 0, 0, 0})}, {{"k", ai(-1)}}), 0, {3, 2}, {0, 0, 1, 0, 0, 1});
    expect_error(run1("EyeLike", {iota_f32({2, 2, 2})}), "2-D");
}

// ---------------------------------------------------------------- DepthToSpace, SpaceToDepth

TEST(ShapeOps, DepthToSpaceRoundTrip) {
    Tensor x = iota_f32({1, 8, 2, 3});
    Result s2d = run1("SpaceToDepth", {iota_f32({1, 2, 4, 6})}, {{"blocksize", ai(2)}});
    ASSERT_TRUE(s2d.st.ok()) << s2d.st.message();
    EXPECT_EQ(s2d.outs[0].shape(), (Shape{1, 8, 2, 3}));
    Result back = run1("DepthToSpace", {s2d.outs[0]}, {{"blocksize", ai(2)}});  // DCR inverts it
    ASSERT_TRUE(back.st.ok()) << back.st.message();
    EXPECT_EQ(back.outs[0].shape(), (Shape{1, 2, 4, 6}));
    for (int i = 0; i < 48; ++i) EXPECT_EQ(back.outs[0].as<float>()[i], float(i));
    // CRD: y[0][c][h*b+i][w*b+j] = x[0][c*b*b + i*b + j][h][w]
    Result crd = run1("DepthToSpace", {x}, {{"blocksize", ai(2)}, {"mode", as("CRD")}});
    ASSERT_TRUE(crd.st.ok());
    const float* y = crd.outs[0].as<float>();
    for (int c = 0; c < 2; ++c)
        for (int h = 0; h < 4; ++h)
            for (int w = 0; w < 6; ++w)
                EXPECT_EQ(y[(c * 4 + h) * 6 + w], float(((c * 4 + (h % 2) * 2 + w % 2) * 2 + h / 2) * 3 + w / 2));
    expect_error(run1("DepthToSpace", {iota_f32({1, 6, 2, 2})}, {{"blocksize", ai(2)}}), "not divisible");
    expect_error(run1("DepthToSpace", {x}, {{"blocksize", ai(2)}, {"mode", as("XYZ")}}), "unknown mode");
    expect_error(run1("SpaceToDepth", {iota_f32({1, 1, 3, 4})}, {{"blocksize", ai(2)}}), "not divisible");
    expect_error(run1("SpaceToDepth", {iota_f32({1, 1, 4})}, {{"blocksize", ai(2)}}), "4-D");
    expect_error(run1("SpaceToDepth", {iota_f32({1, 1, 4, 4})}), "blocksize must be positive");
}

// ---------------------------------------------------------------- ReverseSequence, Compress

TEST(ShapeOps, ReverseSequence) {
    // batch_axis 0, time_axis 1: x [2 batches, 3 steps]
    Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
    Attrs a = {{"batch_axis", ai(0)}, {"time_axis", ai(1)}};
    Result r = run_op("ReverseSequence", {x, i64({2}, {2, 3})}, {false, false}, a);
    expect_values(r, 0, {2, 3}, {2, 1, 3, 6, 5, 4});
    r = run_op("ReverseSequence", {x, i64({2}, {4, 1})}, {false, false}, a);
    expect_error(r, "sequence_lens[0] = 4 out of range [0, 3]");
    expect_error(run1("ReverseSequence", {x, i64({3}, {1, 1, 1})}, a), "sequence_lens has shape");
    expect_error(run1("ReverseSequence", {x, i64({2}, {1, 1})}, {{"batch_axis", ai(0)}, {"time_axis", ai(0)}}),
                 "time_axis");
}

TEST(ShapeOps, CompressNonZeroUnique) {
    Tensor x = iota_f32({2, 3});
    expect_values(run1("Compress", {x, bools({2}, {false, true})}), 0, {1}, {1});  // flattened
    expect_values(run1("Compress", {x, bools({3}, {true, false, true})}, {{"axis", ai(-1)}}), 0, {2, 2},
                  {0, 2, 3, 5});
    expect_error(run1("Compress", {x, bools({4}, {false, false, false, true})}, {{"axis", ai(1)}}),
                 "selects index 3");
    EXPECT_EQ(run_op("Compress", {x, bools({1}, {true})}, {false, false}, {}).st.code(), Code::kNeedValue);

    expect_values(run_op("NonZero", {i32({2, 2}, {0, 3, 4, 0})}, {true}, {}), 0, {2, 2}, {0, 1, 1, 0});
    Result nz = run_op("NonZero", {i32({2, 2}, {0, 3, 4, 0})}, {false}, {});
    EXPECT_FALSE(nz.st.ok());  // data-dependent shape of a run-time input

    Tensor u = f32({6}, {2, 1, 1, 3, 4, 3});
    Result r = run_op("Unique", {u}, {true}, {}, 17, 4);
    expect_values(r, 0, {4}, {1, 2, 3, 4});
    expect_values(r, 1, {4}, {1, 0, 3, 4});
    expect_values(r, 2, {6}, {1, 0, 0, 2, 3, 2});
    expect_values(r, 3, {4}, {2, 1, 2, 1});
    r = run_op("Unique", {u}, {true}, {{"sorted", ai(0)}}, 17, 4);
    expect_values(r, 0, {4}, {2, 1, 3, 4});
    expect_values(r, 2, {6}, {0, 1, 1, 2, 3, 2});
    // rows of a 3x2 matrix
    r = run_op("Unique", {i64({3, 2}, {1, 0, 1, 0, 0, 5})}, {true}, {{"axis", ai(0)}}, 17, 4);
    expect_values(r, 0, {2, 2}, {0, 5, 1, 0});
    expect_values(r, 3, {2}, {1, 2});
    expect_error(run_op("Unique", {u}, {true}, {{"axis", ai(1)}}), "axis 1 is out of range");
}

// ---------------------------------------------------------------- old opsets, huge sizes

TEST(ShapeOps, OldOpsetVariants) {
    Tensor x = iota_f32({2, 3});
    Result r = run1("Reshape", {x}, {{"shape", aints({3, -1})}}, 4);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_EQ(r.outs[0].shape(), (Shape{3, 2}));
    r = run_op("Concat", {x, x}, {false, false}, {}, 3);  // Concat-1: axis defaults to 1
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_EQ(r.outs[0].shape(), (Shape{2, 6}));
    expect_values(run1("Pad", {f32({2}, {1, 2})}, {{"paddings", aints({1, 0})}}, 1), 0, {3}, {0, 1, 2});
    // Tile-1: tiles and axis as scalar inputs
    expect_values(run1("Tile", {f32({2}, {1, 2}), i64({}, {2}), i64({}, {0})}, {}, 5), 0, {4}, {1, 2, 1, 2});
    // Split-1: split as an input
    r = run1("Split", {iota_f32({5}), i64({2}, {1, 4})}, {}, 1, 2);
    expect_values(r, 0, {1}, {0});
}

TEST(ShapeOps, HugeSizesFailCleanly) {
    Tensor x = iota_f32({2, 3});
    const int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
    expect_error(run1("Tile", {x, i64({2}, {kMax, 3})}), "overflow");
    expect_error(run1("Tile", {x, i64({2}, {int64_t(1) << 40, 1})}), "memory limit");
    expect_error(run1("Expand", {x, i64({3}, {int64_t(1) << 40, 2, 3})}), "memory limit");
    expect_error(run1("Pad", {x, i64({4}, {0, 0, kMax, 0})}, {}, 13), "overflow");
    expect_error(run1("DepthToSpace", {iota_f32({1, 4, 1, 1})}, {{"blocksize", ai(int64_t(1) << 40)}}), "too large");
    expect_error(run_op("ConstantOfShape", {i64({2}, {int64_t(1) << 40, 1 << 20})}, {true}, {}), "memory limit");
    expect_error(run_op("Range", {i64({}, {0}), i64({}, {kMax}), i64({}, {1})}, {true, true, true}, {}),
                 "overflows");
    // Zero-element outputs with huge other dims build no tables.
    Tensor e(DType::kF32, {0, 1});
    Result r = run1("Tile", {e, i64({2}, {1, int64_t(1) << 50})});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_EQ(r.outs[0].shape(), (Shape{0, int64_t(1) << 50}));
    expect_values(run1("Slice", {Tensor(DType::kF32, {0}), i64({1}, {-1}), i64({1}, {kMin}), i64({1}, {0}),
                                 i64({1}, {-1})}),
                  0, {0}, {});
    expect_error(run1("Pad", {x, i64({4}, {-3, 0, 5, 0})}, {}, 13), "remove more than");
    // Extreme steps.
    expect_values(run1("Slice", {iota_f32({4}), i64({1}, {-1}), i64({1}, {kMin}), i64({1}, {0}), i64({1}, {kMin})}),
                  0, {1}, {3});
    expect_values(run1("Slice", {iota_f32({4}), i64({1}, {1}), i64({1}, {kMax}), i64({1}, {0}), i64({1}, {kMax})}),
                  0, {1}, {1});
}

}  // namespace
