// Graph passes (src/graph/passes): each test builds a small graph, runs one pass and checks the
// rewritten graph, then checks that the outputs are unchanged: the graph compiled with all passes
// off, the rewritten graph, and the original compiled with all passes on agree within 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "attr_util.h"
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"
#include "kernels/amx.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "runtime/plan.h"
#include "scoped_env.h"

using namespace jiffy;
using namespace jiffy::testattr;

namespace {

Tensor rnd(Shape s, uint32_t seed, float scale = 1.0f) {
    Tensor t(DType::kF32, std::move(s));
    float* p = t.as<float>();
    uint32_t x = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < t.numel(); ++i) {
        x = x * 1664525u + 1013904223u;
        p[i] = (float(x >> 8) / float(1 << 24) * 2.0f - 1.0f) * scale;
    }
    return t;
}
Tensor scalar(float v, Shape s = {}) {
    Tensor t(DType::kF32, std::move(s));
    t.as<float>()[0] = v;
    return t;
}

// Builds a graph as compile leaves it before the passes: every value has concrete dims.
struct Builder {
    Graph g;
    std::map<std::string, Tensor> feeds;
    explicit Builder(int64_t opset = 17) { g.opset = opset; }
    int value(const std::string& name, const Shape& s, DType t = DType::kF32) {
        int id = g.add_value(name);
        Value& v = g.values[size_t(id)];
        v.dtype = t;
        v.has_shape = true;
        for (int64_t d : s) v.dims.push_back(Dim{d, {}});
        return id;
    }
    int input(const std::string& name, const Shape& s, uint32_t seed = 7) {
        int id = value(name, s);
        g.inputs.push_back(id);
        feeds[name] = rnd(s, seed, 2.0f);
        return id;
    }
    int constant(const std::string& name, Tensor t) {
        int id = value(name, t.shape(), t.dtype());
        g.values[size_t(id)].constant = std::make_shared<const Tensor>(std::move(t));
        return id;
    }
    int node(const std::string& op, std::vector<int> ins, const Shape& out, Attrs attrs = {}, int nout = 1) {
        Node n;
        n.op = op;
        n.name = op + std::to_string(g.nodes.size());
        n.inputs = std::move(ins);
        n.num_explicit_inputs = int(n.inputs.size());
        n.attrs = std::move(attrs);
        int first = -1;
        for (int k = 0; k < nout; ++k) {
            int id = value(n.name + "_out" + std::to_string(k), out);
            g.values[size_t(id)].producer = int(g.nodes.size());
            n.outputs.push_back(id);
            if (k == 0) first = id;
        }
        g.nodes.push_back(std::move(n));
        return first;
    }
    void output(int v) { g.outputs.push_back(v); }
};

struct ScopedPasses {
    explicit ScopedPasses(bool on) {
        if (on) unsetenv("JIFFY_PASSES");
        else setenv("JIFFY_PASSES", "0", 1);
    }
    ~ScopedPasses() { unsetenv("JIFFY_PASSES"); }
};

// Compiles and runs; outputs in order. Fails the test on error.
std::vector<Tensor> run(const Graph& g, const std::map<std::string, Tensor>& feeds, bool passes,
                        std::shared_ptr<const Plan>* plan_out = nullptr, const CompileOptions& opt = {}) {
    ScopedPasses sp(passes);
    std::shared_ptr<const Plan> plan;
    Status st = compile_graph(g, opt, &plan);
    EXPECT_TRUE(st.ok()) << st.message();
    if (!st.ok()) return {};
    Session s(plan);
    for (size_t i = 0; i < plan->inputs.size(); ++i) {
        const Tensor& t = feeds.at(plan->inputs[i].name);
        std::memcpy(s.input_data(i), t.data(), t.nbytes());
    }
    st = s.run();
    EXPECT_TRUE(st.ok()) << st.message();
    std::vector<Tensor> r;
    for (size_t i = 0; i < plan->outputs.size(); ++i) {
        Tensor t(plan->outputs[i].dtype, plan->outputs[i].shape);
        std::memcpy(t.data(), s.output_data(i), plan->outputs[i].nbytes);
        r.push_back(std::move(t));
    }
    if (plan_out) *plan_out = plan;
    return r;
}

void expect_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < got.size(); ++o) {
        ASSERT_EQ(got[o].shape(), want[o].shape());
        for (int64_t i = 0; i < got[o].numel(); ++i) {
            double a = got[o].get_f64(i), b = want[o].get_f64(i);
            ASSERT_NEAR(a, b, 1e-5 * (1 + std::abs(b))) << "output " << o << " element " << i;
        }
    }
}

std::vector<std::string> ops(const Graph& g) {
    std::vector<std::string> r;
    for (const Node& n : g.nodes) r.push_back(n.op);
    return r;
}

// Runs `pass` on a copy of b.g, expects it to remove `removed` nodes, checks outputs (rewritten
// graph and the full pipeline) against the unoptimized graph. Returns the rewritten graph.
Graph check_pass(const Builder& b, int (*pass)(Graph&), int removed) {
    auto want = run(b.g, b.feeds, false);
    Graph g = b.g;
    EXPECT_EQ(pass(g), removed);
    for (size_t i = 0; i < b.g.outputs.size(); ++i) {  // graph outputs keep ids and names
        EXPECT_EQ(g.outputs[i], b.g.outputs[i]);
        EXPECT_EQ(g.values[size_t(g.outputs[i])].name, b.g.values[size_t(b.g.outputs[i])].name);
    }
    expect_close(run(g, b.feeds, false), want);
    expect_close(run(b.g, b.feeds, true), want);
    return g;
}

passes::FusionKind kind(const std::string& op, const std::string& act, bool residual = false,
                        bool bias = false) {
    passes::FusionKind k;
    k.op = op;
    k.act = act;
    k.residual = residual;
    k.bias = bias;
    return k;
}

// Conv 3x3 pad 1 on [1,C,H,W] -> [1,M,H,W].
int conv(Builder& b, int x, int64_t C, int64_t M, int64_t H, int64_t W, bool bias, uint32_t seed) {
    int w = b.constant("W" + std::to_string(seed), rnd({M, C, 3, 3}, seed, 0.4f));
    std::vector<int> ins = {x, w};
    if (bias) ins.push_back(b.constant("B" + std::to_string(seed), rnd({M}, seed + 1)));
    return b.node("Conv", ins, {1, M, H, W}, {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}});
}

// ---------------------------------------------------------------- remove_identity

TEST(Passes, IdentityAndDropoutRemoved) {
    Builder b;
    int x = b.input("x", {2, 3});
    int r = b.node("Relu", {x}, {2, 3});
    int i = b.node("Identity", {r}, {2, 3});
    int d = b.node("Dropout", {i}, {2, 3});
    int y = b.node("Neg", {d}, {2, 3});
    b.output(y);
    Graph g = check_pass(b, passes::remove_identity, 2);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Relu", "Neg"}));
}

TEST(Passes, IdentityAsGraphOutputKeepsItsName) {
    Builder b;
    int x = b.input("x", {4});
    int r = b.node("Relu", {x}, {4});
    int y = b.node("Identity", {r}, {4});
    b.output(y);
    Graph g = check_pass(b, passes::remove_identity, 1);
    ASSERT_EQ(ops(g), (std::vector<std::string>{"Relu"}));
    EXPECT_EQ(g.nodes[0].outputs[0], y);
}

TEST(Passes, IdentityOfGraphInputToGraphOutputStays) {
    Builder b;
    int x = b.input("x", {4});
    b.output(b.node("Identity", {x}, {4}));
    check_pass(b, passes::remove_identity, 0);
}

TEST(Passes, DropoutWithUsedMaskStays) {
    Builder b(11);
    int x = b.input("x", {4});
    int d = b.node("Dropout", {x}, {4}, {}, 2);
    b.output(d);
    b.output(d + 1);  // the mask
    b.g.values[size_t(d + 1)].dtype = DType::kBool;
    check_pass(b, passes::remove_identity, 0);
}

// Dropout with training_mode = true passes the data through only with a ratio of exactly 0
// (torchvision 0.14's Swin attention exports F.dropout(p=0.0) with training=True).
TEST(Passes, TrainingDropoutRemovedOnlyWithRatioZero) {
    for (float ratio : {0.0f, 0.25f}) {
        Builder b;
        int x = b.input("x", {2, 3});
        Tensor tm(DType::kBool, {});
        tm.as<uint8_t>()[0] = 1;
        int d = b.node("Dropout", {x, b.constant("ratio", scalar(ratio)), b.constant("training", std::move(tm))},
                       {2, 3});
        b.output(b.node("Neg", {d}, {2, 3}));
        if (ratio == 0.0f) {
            Graph g = check_pass(b, passes::remove_identity, 1);
            EXPECT_EQ(ops(g), (std::vector<std::string>{"Neg"}));
        } else {
            Graph g = b.g;  // not run: training-mode dropout with a ratio is random
            EXPECT_EQ(passes::remove_identity(g), 0);
        }
    }
}

TEST(Passes, CapturedValueIsNotRewired) {
    Builder b;
    int x = b.input("x", {4});
    int r = b.node("Relu", {x}, {4});
    int i = b.node("Identity", {r}, {4});
    int y = b.node("Neg", {x}, {4});
    b.g.nodes.back().inputs.push_back(i);  // an implicit input: a subgraph reads `i` by name
    b.output(y);
    Graph g = b.g;
    EXPECT_EQ(passes::remove_identity(g), 1);  // Relu writes `i` directly instead
    EXPECT_EQ(g.nodes.back().inputs.back(), i);
    EXPECT_EQ(g.nodes[0].outputs[0], i);
}

// ---------------------------------------------------------------- transposes / reshapes

TEST(Passes, TransposesCancel) {
    Builder b;
    int x = b.input("x", {2, 3, 4});
    int t1 = b.node("Transpose", {x}, {2, 4, 3}, {{"perm", aints({0, 2, 1})}});
    int t2 = b.node("Transpose", {t1}, {2, 3, 4}, {{"perm", aints({0, 2, 1})}});
    b.output(b.node("Relu", {t2}, {2, 3, 4}));
    Graph g = check_pass(b, passes::merge_transposes, 2);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Relu"}));
}

TEST(Passes, TransposesCompose) {
    Builder b;
    int x = b.input("x", {2, 3, 4});
    int t1 = b.node("Transpose", {x}, {3, 4, 2}, {{"perm", aints({1, 2, 0})}});
    int t2 = b.node("Transpose", {t1}, {4, 2, 3}, {{"perm", aints({1, 2, 0})}});
    b.output(t2);
    Graph g = check_pass(b, passes::merge_transposes, 1);
    ASSERT_EQ(ops(g), (std::vector<std::string>{"Transpose"}));
    EXPECT_EQ(g.nodes[0].attrs["perm"].ints, (std::vector<int64_t>{2, 0, 1}));
}

TEST(Passes, TransposeWithDefaultPermAndSharedMiddleValue) {
    Builder b;
    int x = b.input("x", {2, 3});
    int t1 = b.node("Transpose", {x}, {3, 2});
    int t2 = b.node("Transpose", {t1}, {2, 3});
    b.output(t2);
    b.output(t1);  // middle value is an output: nothing to do
    check_pass(b, passes::merge_transposes, 0);
}

TEST(Passes, ReshapeChainsMerge) {
    Builder b;
    int x = b.input("x", {2, 3, 4});
    int u = b.node("Unsqueeze", {x, b.constant("ax", [] {
                       Tensor t(DType::kI64, {1});
                       t.as<int64_t>()[0] = 0;
                       return t;
                   }())}, {1, 2, 3, 4});
    int f = b.node("Flatten", {u}, {6, 4}, {{"axis", ai(3)}});
    b.output(b.node("Relu", {f}, {6, 4}));
    Graph g = check_pass(b, passes::merge_reshapes, 1);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Reshape", "Relu"}));
}

TEST(Passes, NoOpReshapeRemoved) {
    Builder b;
    int x = b.input("x", {2, 3});
    int f = b.node("Flatten", {x}, {2, 3}, {{"axis", ai(1)}});
    b.output(b.node("Relu", {f}, {2, 3}));
    Graph g = check_pass(b, passes::merge_reshapes, 1);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Relu"}));
}

// PyTorch's batch_first attention: [1, S, D] -> [S, 1, D] and back moves only an axis of size 1,
// a reshape; as a Reshape the MatMul behind it is one contiguous tall GEMM.
TEST(Passes, TransposeOfOnesBecomesReshape) {
    Builder b;
    int x = b.input("x", {1, 4, 3});
    int t = b.node("Transpose", {x}, {4, 1, 3}, {{"perm", aints({1, 0, 2})}});
    int m = b.node("MatMul", {t, b.constant("w", rnd({3, 5}, 3))}, {4, 1, 5});
    int back = b.node("Transpose", {m}, {1, 4, 5}, {{"perm", aints({1, 0, 2})}});
    b.output(b.node("Relu", {back}, {1, 4, 5}));
    Graph g = check_pass(b, passes::merge_reshapes, 2);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Reshape", "MatMul", "Reshape", "Relu"}));
}

TEST(Passes, TransposeMovingDataStays) {
    Builder b;
    int x = b.input("x", {2, 1, 3});
    int t = b.node("Transpose", {x}, {3, 1, 2}, {{"perm", aints({2, 1, 0})}});  // 2 and 3 swap
    int d = b.node("Transpose", {t}, {1, 3, 2}, {{"perm", aints({1, 0, 2})}});  // only the 1 moves
    b.output(b.node("Relu", {d}, {1, 3, 2}));
    Graph g = check_pass(b, passes::merge_reshapes, 1);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Transpose", "Reshape", "Relu"}));
}

// ---------------------------------------------------------------- fold_pad_conv

Tensor i64s(const std::vector<int64_t>& v) {
    Tensor t(DType::kI64, {int64_t(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.as<int64_t>()[i] = v[i];
    return t;
}

// BlazeFace's stride-2 blocks (F.pad(x, (1, 2, 1, 2)), then a 5x5 stride-2 depthwise without
// pads), and an asymmetric Pad with an explicit zero value before a 3x3 with pads of its own: each
// Pad goes, its amounts added to the conv's (ONNX order: begins, then ends), batch 2.
TEST(Passes, ZeroPadFoldsIntoTheConv) {
    Builder b;
    int x = b.input("x", {2, 8, 9, 11});
    int p1 = b.node("Pad", {x, b.constant("pads1", i64s({0, 0, 1, 1, 0, 0, 2, 2}))}, {2, 8, 12, 14});
    int w1 = b.constant("W1", rnd({8, 1, 5, 5}, 3, 0.4f));
    int d = b.node("Conv", {p1, w1}, {2, 8, 4, 5},
                   {{"kernel_shape", aints({5, 5})}, {"strides", aints({2, 2})}, {"group", ai(8)}});
    int p2 = b.node("Pad", {d, b.constant("pads2", i64s({0, 0, 0, 1, 0, 0, 2, 0})), b.constant("zero", scalar(0.0f))},
                    {2, 8, 6, 6});
    int w2 = b.constant("W2", rnd({6, 8, 3, 3}, 5, 0.3f));
    b.output(b.node("Conv", {p2, w2}, {2, 6, 6, 6}, {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}}));
    Graph g = check_pass(b, passes::fold_pad_conv, 2);
    ASSERT_EQ(ops(g), (std::vector<std::string>{"Conv", "Conv"}));
    EXPECT_EQ(g.nodes[0].attrs.at("pads").ints, (std::vector<int64_t>{1, 1, 2, 2}));
    EXPECT_EQ(g.nodes[1].attrs.at("pads").ints, (std::vector<int64_t>{1, 2, 3, 1}));
    EXPECT_EQ(g.nodes[0].inputs[0], x);

    // Pad-2 (opset 10): pads and value as attributes.
    Builder o(10);
    int xo = o.input("x", {1, 4, 7, 7});
    int po = o.node("Pad", {xo}, {1, 4, 9, 8}, {{"pads", aints({0, 0, 1, 0, 0, 0, 1, 1})}, {"value", af(0.0f)}});
    int wo = o.constant("W", rnd({4, 4, 3, 3}, 9, 0.3f));
    o.output(o.node("Conv", {po, wo}, {1, 4, 7, 6}, {{"kernel_shape", aints({3, 3})}}));
    Graph go = check_pass(o, passes::fold_pad_conv, 1);
    EXPECT_EQ(go.nodes[0].attrs.at("pads").ints, (std::vector<int64_t>{1, 0, 1, 1}));
}

// Pads that are not a conv's zero padding stay: a non-zero value, reflect mode, padded channels, a
// crop (negative amounts), a Pad whose output is also a graph output, a conv with auto_pad.
TEST(Passes, PadsThatAreNotAConvPaddingStay) {
    auto one = [](const std::vector<int64_t>& pads, const Shape& padded, Attrs pad_attrs, float value,
                  bool pad_is_output, Attrs conv_attrs) {
        Builder b;
        int x = b.input("x", {1, 4, 6, 6});
        std::vector<int> ins = {x, b.constant("pads", i64s(pads))};
        if (value != 0.0f) ins.push_back(b.constant("v", scalar(value)));
        int p = b.node("Pad", ins, padded, pad_attrs);
        int w = b.constant("W", rnd({4, padded[1], 3, 3}, 4, 0.3f));
        conv_attrs["kernel_shape"] = aints({3, 3});
        b.output(b.node("Conv", {p, w}, {1, 4, padded[2] - 2, padded[3] - 2}, conv_attrs));
        if (pad_is_output) b.output(p);
        Graph g = check_pass(b, passes::fold_pad_conv, 0);
        EXPECT_EQ(ops(g), (std::vector<std::string>{"Pad", "Conv"}));
    };
    const std::vector<int64_t> sp = {0, 0, 1, 1, 0, 0, 1, 1};
    one(sp, {1, 4, 8, 8}, {}, 0.5f, false, {});
    one(sp, {1, 4, 8, 8}, {{"mode", as("reflect")}}, 0.0f, false, {});
    one({0, 1, 0, 0, 0, 1, 0, 0}, {1, 6, 6, 6}, {}, 0.0f, false, {});
    one({0, 0, 1, -1, 0, 0, 1, 0}, {1, 4, 8, 5}, {}, 0.0f, false, {});
    one(sp, {1, 4, 8, 8}, {}, 0.0f, true, {});
    one(sp, {1, 4, 8, 8}, {}, 0.0f, false, {{"auto_pad", as("VALID")}});
}

// ---------------------------------------------------------------- fold_batchnorm

int batchnorm(Builder& b, int x, int64_t M, const Shape& out, uint32_t seed) {
    Tensor var = rnd({M}, seed + 3);
    for (int64_t i = 0; i < M; ++i) var.as<float>()[i] = std::abs(var.as<float>()[i]) + 0.1f;
    return b.node("BatchNormalization",
                  {x, b.constant("s" + std::to_string(seed), rnd({M}, seed)),
                   b.constant("b" + std::to_string(seed), rnd({M}, seed + 1)),
                   b.constant("m" + std::to_string(seed), rnd({M}, seed + 2)),
                   b.constant("v" + std::to_string(seed), var)},
                  out, {{"epsilon", af(1e-3f)}});
}

TEST(Passes, BatchNormFoldsIntoConv) {
    for (bool bias : {false, true}) {
        Builder b;
        int x = b.input("x", {1, 3, 5, 6});
        int c = conv(b, x, 3, 4, 5, 6, bias, 11);
        b.output(batchnorm(b, c, 4, {1, 4, 5, 6}, 20));
        Graph g = check_pass(b, passes::fold_batchnorm, 1);
        ASSERT_EQ(ops(g), (std::vector<std::string>{"Conv"}));
        EXPECT_EQ(g.nodes[0].inputs.size(), 3u);
    }
}

TEST(Passes, BatchNormFoldsIntoGroupedConvTranspose) {
    Builder b;
    int x = b.input("x", {1, 4, 3, 3});
    int w = b.constant("W", rnd({4, 3, 2, 2}, 5, 0.5f));  // C=4, M/G=3, G=2 -> M=6
    int c = b.node("ConvTranspose", {x, w}, {1, 6, 6, 6}, {{"strides", aints({2, 2})}, {"group", ai(2)}});
    b.output(batchnorm(b, c, 6, {1, 6, 6, 6}, 30));
    Graph g = check_pass(b, passes::fold_batchnorm, 1);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"ConvTranspose"}));
}

TEST(Passes, BatchNormNotFoldedWhenConvOutputShared) {
    Builder b;
    int x = b.input("x", {1, 3, 5, 6});
    int c = conv(b, x, 3, 4, 5, 6, true, 11);
    b.output(batchnorm(b, c, 4, {1, 4, 5, 6}, 20));
    b.output(c);
    check_pass(b, passes::fold_batchnorm, 0);
}

TEST(Passes, BadBatchNormStillGivesAClearError) {
    Builder b;
    int x = b.input("x", {1, 3, 5, 6});
    int c = conv(b, x, 3, 4, 5, 6, true, 11);
    int bn = batchnorm(b, c, 4, {1, 4, 5, 6}, 20);
    b.g.nodes.back().inputs[1] = b.constant("bad_scale", rnd({3}, 1));  // 3 != 4 channels
    b.output(bn);
    std::shared_ptr<const Plan> plan;
    Status st = compile_graph(b.g, CompileOptions{}, &plan);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("scale"), std::string::npos) << st.message();
}

// ---------------------------------------------------------------- fold_bias_add

TEST(Passes, ConstantAddFoldsIntoConvBias) {
    const Shape shapes[] = {{1, 4, 1, 1}, {4, 1, 1}, {1}};
    for (const Shape& cs : shapes)
        for (bool bias : {false, true})
            for (int op = 0; op < 3; ++op) {  // y + c, c + y, y - c
                Builder b;
                int x = b.input("x", {1, 3, 5, 6});
                int c = conv(b, x, 3, 4, 5, 6, bias, 11);
                int k = b.constant("c", rnd(cs, 3));
                int y = op == 0 ? b.node("Add", {c, k}, {1, 4, 5, 6})
                        : op == 1 ? b.node("Add", {k, c}, {1, 4, 5, 6})
                                  : b.node("Sub", {c, k}, {1, 4, 5, 6});
                b.output(y);
                Graph g = check_pass(b, passes::fold_bias_add, 1);
                ASSERT_EQ(ops(g), (std::vector<std::string>{"Conv"}));
            }
}

TEST(Passes, FullTensorAddIsNotABias) {
    Builder b;
    int x = b.input("x", {1, 3, 5, 6});
    int c = conv(b, x, 3, 4, 5, 6, true, 11);
    b.output(b.node("Add", {c, b.constant("c", rnd({1, 4, 5, 6}, 3))}, {1, 4, 5, 6}));
    check_pass(b, passes::fold_bias_add, 0);
    Builder b2;  // c - y is not a bias either
    x = b2.input("x", {1, 3, 5, 6});
    c = conv(b2, x, 3, 4, 5, 6, true, 11);
    b2.output(b2.node("Sub", {b2.constant("c", rnd({4, 1, 1}, 3)), c}, {1, 4, 5, 6}));
    check_pass(b2, passes::fold_bias_add, 0);
}

TEST(Passes, ConstantScaleMulFoldsIntoConvWeights) {
    for (bool bias : {false, true})
        for (int side = 0; side < 2; ++side) {
            Builder b;
            int x = b.input("x", {1, 3, 5, 6});
            int c = conv(b, x, 3, 4, 5, 6, bias, 11);
            int k = b.constant("s", rnd({1, 4, 1, 1}, 3));
            int m = b.node("Mul", side ? std::vector<int>{k, c} : std::vector<int>{c, k}, {1, 4, 5, 6});
            b.output(b.node("Add", {m, b.constant("t", rnd({1, 4, 1, 1}, 5))}, {1, 4, 5, 6}));
            Graph g = check_pass(b, passes::fold_scale_mul, 1);
            ASSERT_EQ(ops(g), (std::vector<std::string>{"Conv", "Add"}));
            g = b.g;
            EXPECT_TRUE(run_graph_passes(g));  // then the Add folds into the bias
            EXPECT_EQ(ops(g), (std::vector<std::string>{"Conv"}));
        }
}

TEST(Passes, FullTensorMulIsNotAScale) {
    Builder b;
    int x = b.input("x", {1, 3, 5, 6});
    int c = conv(b, x, 3, 4, 5, 6, true, 11);
    b.output(b.node("Mul", {c, b.constant("s", rnd({1, 4, 5, 1}, 3))}, {1, 4, 5, 6}));
    check_pass(b, passes::fold_scale_mul, 0);
}

TEST(Passes, ConstantAddFoldsIntoGemmC) {
    for (int withc = 0; withc < 2; ++withc) {
        Builder b;
        int x = b.input("x", {3, 5});
        std::vector<int> ins = {x, b.constant("B", rnd({5, 7}, 2))};
        Attrs at;
        if (withc) {
            ins.push_back(b.constant("C", rnd({1, 7}, 4)));
            at["beta"] = af(0.5f);
        }
        int y = b.node("Gemm", ins, {3, 7}, at);
        b.output(b.node("Add", {y, b.constant("c", rnd({7}, 3))}, {3, 7}));
        Graph g = check_pass(b, passes::fold_bias_add, 1);
        ASSERT_EQ(ops(g), (std::vector<std::string>{"Gemm"}));
    }
}

TEST(Passes, ConstantAddFoldsIntoMatMulWhenSupported) {
    Builder b;
    int x = b.input("x", {1, 3, 5});
    int y = b.node("MatMul", {x, b.constant("B", rnd({5, 7}, 2))}, {1, 3, 7});
    b.output(b.node("Add", {y, b.constant("c", rnd({7}, 3))}, {1, 3, 7}));
    const bool ok = passes::kernel_supports(kind("MatMul", "", false, true));
    Graph g = check_pass(b, passes::fold_bias_add, ok ? 1 : 0);
    if (ok) EXPECT_EQ(passes::attr_i(g.nodes[0], "_fused_bias", 0), 1);
}

// ---------------------------------------------------------------- fuse_hardswish

TEST(Passes, HardSigmoidTimesXBecomesHardSwish) {
    Builder b;
    int x = b.input("x", {2, 8});
    int r = b.node("Neg", {x}, {2, 8});
    int h = b.node("HardSigmoid", {r}, {2, 8}, {{"alpha", af(1.0f / 6)}, {"beta", af(0.5f)}});
    b.output(b.node("Mul", {r, h}, {2, 8}));
    Graph g = check_pass(b, passes::fuse_hardswish, 1);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Neg", "HardSwish"}));
}

TEST(Passes, OtherHardSigmoidIsNotHardSwish) {
    Builder b;
    int x = b.input("x", {2, 8});
    int h = b.node("HardSigmoid", {x}, {2, 8});  // alpha 0.2
    b.output(b.node("Mul", {x, h}, {2, 8}));
    check_pass(b, passes::fuse_hardswish, 0);
}

TEST(Passes, PaddleHardSwishPatterns) {
    for (int variant = 0; variant < 3; ++variant) {
        Builder b(11);
        int x = b.input("x", {2, 8});
        int r = b.node("Neg", {x}, {2, 8});
        int a = b.node("Add", {r, b.constant("three", scalar(3.0f, {1}))}, {2, 8});
        int c = b.node("Clip", {a, b.constant("lo", scalar(0.0f)), b.constant("hi", scalar(6.0f))}, {2, 8});
        int y;
        if (variant == 0) {  // x * clip / 6
            int m = b.node("Mul", {r, c}, {2, 8});
            y = b.node("Div", {m, b.constant("six", scalar(6.0f))}, {2, 8});
        } else if (variant == 1) {  // (clip * x) * (1/6)
            int m = b.node("Mul", {c, r}, {2, 8});
            y = b.node("Mul", {m, b.constant("sixth", scalar(1.0f / 6))}, {2, 8});
        } else {  // x * (clip / 6)
            int d = b.node("Div", {c, b.constant("six", scalar(6.0f))}, {2, 8});
            y = b.node("Mul", {r, d}, {2, 8});
        }
        b.output(y);
        Graph g = check_pass(b, passes::fuse_hardswish, 3);
        EXPECT_EQ(ops(g), (std::vector<std::string>{"Neg", "HardSwish"}));
    }
}

TEST(Passes, HardSwishPatternWithSharedMiddleStays) {
    Builder b(11);
    int x = b.input("x", {2, 8});
    int a = b.node("Add", {x, b.constant("three", scalar(3.0f))}, {2, 8});
    int c = b.node("Clip", {a, b.constant("lo", scalar(0.0f)), b.constant("hi", scalar(6.0f))}, {2, 8});
    int m = b.node("Mul", {x, c}, {2, 8});
    b.output(b.node("Div", {m, b.constant("six", scalar(6.0f))}, {2, 8}));
    b.output(a);
    check_pass(b, passes::fuse_hardswish, 0);
}

// ---------------------------------------------------------------- fuse_layernorm / fuse_gelu

// PyTorch's LayerNorm before opset 17: mean, centre, square, mean, + eps, sqrt, divide [* g] [+ b].
int decomposed_ln(Builder& b, int x, const Shape& s, bool affine, bool pow, bool axes_input) {
    Shape red = s;
    red.back() = 1;
    auto mean = [&](int v) {
        if (axes_input) {
            Tensor ax(DType::kI64, Shape{1});
            ax.as<int64_t>()[0] = -1;
            return b.node("ReduceMean", {v, b.constant("axes" + std::to_string(v), std::move(ax))}, red);
        }
        return b.node("ReduceMean", {v}, red, {{"axes", aints({-1})}});
    };
    int m = mean(x);
    int d = b.node("Sub", {x, m}, s);
    int sq = pow ? b.node("Pow", {d, b.constant("two", scalar(2.0f))}, s) : b.node("Mul", {d, d}, s);
    int v = mean(sq);
    int e = b.node("Add", {v, b.constant("eps", scalar(1e-5f))}, red);
    int r = b.node("Sqrt", {e}, red);
    int y = b.node("Div", {d, r}, s);
    if (affine) {
        y = b.node("Mul", {y, b.constant("gamma", rnd({s.back()}, 5))}, s);
        y = b.node("Add", {b.constant("beta", rnd({s.back()}, 6)), y}, s);
    }
    return y;
}

TEST(Passes, DecomposedLayerNormBecomesOneNode) {
    {  // with scale and bias, Pow, axes as an attribute
        Builder b(13);
        int x = b.input("x", {3, 16});
        int n = b.node("Neg", {x}, {3, 16});
        b.output(b.node("Relu", {decomposed_ln(b, n, {3, 16}, true, true, false)}, {3, 16}));
        Graph g = check_pass(b, passes::fuse_layernorm, 8);
        EXPECT_EQ(ops(g), (std::vector<std::string>{"Neg", "LayerNormalization", "Relu"}));
    }
    {  // bare, d * d, opset 18 axes input, 3-D
        Builder b(18);
        int x = b.input("x", {2, 5, 24});
        b.output(decomposed_ln(b, x, {2, 5, 24}, false, false, true));
        Graph g = check_pass(b, passes::fuse_layernorm, 6);
        EXPECT_EQ(ops(g), (std::vector<std::string>{"LayerNormalization"}));
    }
}

TEST(Passes, LayerNormLookalikesStay) {
    {  // the mean over another axis
        Builder b(13);
        int x = b.input("x", {4, 8});
        int m = b.node("ReduceMean", {x}, {1, 8}, {{"axes", aints({0})}});
        int d = b.node("Sub", {x, m}, {4, 8});
        int sq = b.node("Mul", {d, d}, {4, 8});
        int v = b.node("ReduceMean", {sq}, {4, 1}, {{"axes", aints({-1})}});
        int e = b.node("Add", {v, b.constant("eps", scalar(1e-5f))}, {4, 1});
        b.output(b.node("Div", {d, b.node("Sqrt", {e}, {4, 1})}, {4, 8}));
        check_pass(b, passes::fuse_layernorm, 0);
    }
    {  // the centred value is also a graph output
        Builder b(13);
        int x = b.input("x", {3, 16});
        b.output(decomposed_ln(b, x, {3, 16}, false, true, false));
        b.output(b.g.nodes[1].outputs[0]);
        check_pass(b, passes::fuse_layernorm, 0);
    }
    {  // a fourth power, not a square
        Builder b(13);
        int x = b.input("x", {3, 16});
        int m = b.node("ReduceMean", {x}, {3, 1}, {{"axes", aints({-1})}});
        int d = b.node("Sub", {x, m}, {3, 16});
        int sq = b.node("Pow", {d, b.constant("four", scalar(4.0f))}, {3, 16});
        int v = b.node("ReduceMean", {sq}, {3, 1}, {{"axes", aints({-1})}});
        int e = b.node("Add", {v, b.constant("eps", scalar(1e-5f))}, {3, 1});
        b.output(b.node("Div", {d, b.node("Sqrt", {e}, {3, 1})}, {3, 16}));
        check_pass(b, passes::fuse_layernorm, 0);
    }
}

// x * 0.5 * (1 + erf(x / sqrt 2)) in the groupings exporters write.
TEST(Passes, ErfGeluBecomesGelu) {
    for (int variant = 0; variant < 3; ++variant) {
        Builder b(13);
        const Shape s = {2, 3, 8};
        int x = b.input("x", s);
        int r = b.node("Neg", {x}, s);
        int sc = variant == 2 ? b.node("Mul", {r, b.constant("inv_sqrt2", scalar(float(1 / std::sqrt(2.0))))}, s)
                              : b.node("Div", {r, b.constant("sqrt2", scalar(float(std::sqrt(2.0))))}, s);
        int e = b.node("Erf", {sc}, s);
        int a = b.node("Add", {e, b.constant("one", scalar(1.0f))}, s);
        int y;
        if (variant == 0) {  // (x * 0.5) * (1 + erf)
            y = b.node("Mul", {b.node("Mul", {r, b.constant("half", scalar(0.5f))}, s), a}, s);
        } else if (variant == 1) {  // (1 + erf) * (0.5 * x)
            y = b.node("Mul", {a, b.node("Mul", {b.constant("half", scalar(0.5f)), r}, s)}, s);
        } else {  // (x * (1 + erf)) * 0.5
            y = b.node("Mul", {b.node("Mul", {r, a}, s), b.constant("half", scalar(0.5f))}, s);
        }
        b.output(y);
        Graph g = check_pass(b, passes::fuse_gelu, 4);
        EXPECT_EQ(ops(g), (std::vector<std::string>{"Neg", "Gelu"})) << variant;
    }
}

TEST(Passes, GeluLookalikeStays) {
    Builder b(13);
    const Shape s = {4, 8};
    int x = b.input("x", s);
    int e = b.node("Erf", {b.node("Div", {x, b.constant("sqrt2", scalar(1.5f))}, s)}, s);
    int a = b.node("Add", {e, b.constant("one", scalar(1.0f))}, s);
    b.output(b.node("Mul", {b.node("Mul", {x, b.constant("half", scalar(0.5f))}, s), a}, s));
    check_pass(b, passes::fuse_gelu, 0);
}

// ---------------------------------------------------------------- fuse_activation / residual

// The producer an activation test fuses into: a 3x3 Conv [1,3,5,6] -> [1,4,5,6], or a Gemm /
// MatMul [3,5] x [5,7]; its output value, shape in *out.
int act_producer(Builder& b, const std::string& op, Shape* out) {
    if (op == "Conv") {
        *out = {1, 4, 5, 6};
        return conv(b, b.input("x", {1, 3, 5, 6}), 3, 4, 5, 6, true, 11);
    }
    if (op == "ConvTranspose") {  // 2x2 stride 2 (the banded kernel): [1,3,5,6] -> [1,4,10,12]
        *out = {1, 4, 10, 12};
        return b.node(op, {b.input("x", {1, 3, 5, 6}), b.constant("W", rnd({3, 4, 2, 2}, 2, 0.8f))}, *out,
                      {{"kernel_shape", aints({2, 2})}, {"strides", aints({2, 2})}});
    }
    *out = {3, 7};
    const int x = b.input("x", {3, 5});
    return b.node(op, {x, b.constant("B", rnd({5, 7}, 2, 0.8f))}, {3, 7});
}

TEST(Passes, ActivationFusesIntoConvGemmMatMulWhenSupported) {
    const char* acts[] = {"Relu", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh"};
    for (const char* op : {"Conv", "ConvTranspose", "Gemm", "MatMul"})
        for (const char* act : acts) {
            Builder b(17);
            Shape out;
            const int y = act_producer(b, op, &out);
            std::vector<int> ins = {y};
            Attrs at;
            if (std::string(act) == "Clip") {
                ins.push_back(b.constant("lo", scalar(-0.5f)));
                ins.push_back(b.constant("hi", scalar(0.6f)));
            }
            if (std::string(act) == "LeakyRelu") at["alpha"] = af(0.2f);
            b.output(b.node(act, ins, out, at));
            const bool ok = passes::kernel_supports(kind(op, act));
            if (std::string(op) == "ConvTranspose") EXPECT_TRUE(ok) << act;  // every path applies it
            Graph g = check_pass(b, passes::fuse_activation, ok ? 1 : 0);
            if (ok) {
                ASSERT_EQ(g.nodes.size(), 1u) << op << " " << act;
                EXPECT_EQ(passes::attr_s(g.nodes[0], "_fused_act", ""), act);
            }
        }
}

// Gelu (ONNX opset 20, or fuse_gelu's) fuses into MatMul and Gemm as "Gelu" / "GeluTanh" (the
// products apply any activation after them); the conv epilogues have no GELU, so a Conv keeps it.
TEST(Passes, GeluFusesIntoMatMulAndGemm) {
    for (const char* op : {"MatMul", "Gemm", "Conv"})
        for (const char* approx : {"none", "tanh"}) {
            Builder b(17);
            Shape out;
            const int y = act_producer(b, op, &out);
            b.output(b.node("Gelu", {y}, out, {{"approximate", as(approx)}}));
            const bool conv_op = std::string(op) == "Conv";
            Graph g = check_pass(b, passes::fuse_activation, conv_op ? 0 : 1);
            if (!conv_op) {
                ASSERT_EQ(g.nodes.size(), 1u) << op << " " << approx;
                EXPECT_EQ(passes::attr_s(g.nodes[0], "_fused_act", ""),
                          std::string(approx) == "tanh" ? "GeluTanh" : "Gelu");
            }
        }
}

TEST(Passes, ActivationNotFusedAcrossSharedValue) {
    Builder b;
    int x = b.input("x", {3, 5});
    int y = b.node("Gemm", {x, b.constant("B", rnd({5, 7}, 2))}, {3, 7});
    b.output(b.node("Relu", {y}, {3, 7}));
    b.output(b.node("Neg", {y}, {3, 7}));
    check_pass(b, passes::fuse_activation, 0);
}

// SiLU as PyTorch exports nn.SiLU: Mul(y, Sigmoid(y)), either operand order.
TEST(Passes, SiluFusesIntoConvGemmMatMul) {
    for (const char* op : {"Conv", "Gemm", "MatMul"})
        for (bool sig_first : {false, true}) {
            Builder b(17);
            int y;
            Shape out;
            if (std::string(op) == "Conv") {
                y = conv(b, b.input("x", {1, 3, 5, 6}), 3, 4, 5, 6, true, 11);
                out = {1, 4, 5, 6};
            } else {
                y = b.node(op, {b.input("x", {3, 5}), b.constant("B", rnd({5, 7}, 2, 0.8f))}, {3, 7});
                out = {3, 7};
            }
            const int s = b.node("Sigmoid", {y}, out);
            b.output(b.node("Mul", sig_first ? std::vector<int>{s, y} : std::vector<int>{y, s}, out));
            ASSERT_TRUE(passes::kernel_supports(kind(op, "Silu"))) << op;
            Graph g = check_pass(b, passes::fuse_activation, 2);
            ASSERT_EQ(g.nodes.size(), 1u) << op;
            EXPECT_EQ(passes::attr_s(g.nodes[0], "_fused_act", ""), "Silu");
        }
}

TEST(Passes, SiluNotFusedWhenTheProductIsReadElsewhere) {
    for (int variant = 0; variant < 3; ++variant) {
        Builder b;
        int y = conv(b, b.input("x", {1, 3, 5, 6}), 3, 4, 5, 6, true, 11);
        const Shape out = {1, 4, 5, 6};
        const int s = b.node("Sigmoid", {y}, out);
        const int other = variant == 2 ? b.node("Neg", {y}, out) : y;
        b.output(b.node("Mul", {variant == 2 ? other : y, s}, out));
        if (variant == 0) b.output(y);  // the conv's own output is a graph output
        if (variant == 1) b.output(s);  // the Sigmoid is read elsewhere
        check_pass(b, passes::fuse_activation, 0);  // nothing to fuse in any of them
    }
}

// Conv -> LeakyRelu -> Max / Min with a one-element constant (openWakeWord's embedding model).
int leaky_conv(Builder& b) {
    int x = b.input("x", {1, 3, 5, 6});
    int y = conv(b, x, 3, 4, 5, 6, true, 11);
    Attrs at;
    at["alpha"] = af(0.2f);
    return b.node("LeakyRelu", {y}, {1, 4, 5, 6}, at);
}

TEST(Passes, MaxMinWithScalarFuseIntoConvClamp) {
    passes::FusionKind k = kind("Conv", "LeakyRelu");
    const bool act_ok = passes::kernel_supports(k);
    k.clamp = true;
    const bool ok = act_ok && passes::kernel_supports(k);
    EXPECT_TRUE(ok);  // every Conv path honours the clamp
    Builder b;
    int a = leaky_conv(b);
    int m = b.node("Max", {a, b.constant("lo", scalar(-0.1f, {1, 1, 1, 1}))}, {1, 4, 5, 6});
    b.output(b.node("Min", {b.constant("hi", scalar(0.3f)), m}, {1, 4, 5, 6}));
    Graph g = check_pass(b, passes::fuse_activation, ok ? 3 : 1);
    if (ok) {
        ASSERT_EQ(ops(g), (std::vector<std::string>{"Conv"}));
        EXPECT_FLOAT_EQ(passes::attr_f(g.nodes[0], "_fused_lo", 0), -0.1f);
        EXPECT_FLOAT_EQ(passes::attr_f(g.nodes[0], "_fused_hi", 0), 0.3f);
    }
    std::shared_ptr<const Plan> plan;
    expect_close(run(b.g, b.feeds, true, &plan), run(b.g, b.feeds, false));
}

// PaddleOCR's learnable affine after each HardSwish: Mul(y, w_0), Add(., w_1) with one-element
// constants (either operand order; Sub too) joins the conv's epilogue after the activation and the
// clamp: one Conv with _fused_scale / _fused_shift, the same outputs.
TEST(Passes, ScalarAffineAfterTheActivationJoinsTheConv) {
    passes::FusionKind k = kind("Conv", "HardSwish");
    k.affine = true;
    ASSERT_TRUE(passes::kernel_supports(k));  // every Conv path honours the affine
    for (int variant = 0; variant < 3; ++variant) {
        SCOPED_TRACE(variant);
        Builder b;
        int x = b.input("x", {1, 3, 5, 6});
        int y = conv(b, x, 3, 4, 5, 6, true, 11);
        int a = b.node("HardSwish", {y}, {1, 4, 5, 6});
        int removed = 3;  // the HardSwish, the Mul, the Add
        if (variant == 2) {  // a clamp first, then the affine
            a = b.node("Min", {a, b.constant("hi", scalar(0.3f))}, {1, 4, 5, 6});
            ++removed;
        }
        int m = variant == 1 ? b.node("Mul", {b.constant("w0", scalar(-1.5f, {1})), a}, {1, 4, 5, 6})
                             : b.node("Mul", {a, b.constant("w0", scalar(-1.5f, {1}))}, {1, 4, 5, 6});
        int t = variant == 1 ? b.node("Sub", {m, b.constant("w1", scalar(0.25f, {1}))}, {1, 4, 5, 6})
                             : b.node("Add", {b.constant("w1", scalar(0.25f, {1})), m}, {1, 4, 5, 6});
        b.output(b.node("Mul", {t, b.constant("w2", scalar(2.0f))}, {1, 4, 5, 6}));  // composes
        Graph g = check_pass(b, passes::fuse_activation, removed + 1);
        ASSERT_EQ(ops(g), (std::vector<std::string>{"Conv"}));
        EXPECT_FLOAT_EQ(passes::attr_f(g.nodes[0], "_fused_scale", 0), -3.0f);
        EXPECT_FLOAT_EQ(passes::attr_f(g.nodes[0], "_fused_shift", 0), variant == 1 ? -0.5f : 0.5f);
        if (variant == 2) EXPECT_FLOAT_EQ(passes::attr_f(g.nodes[0], "_fused_hi", 0), 0.3f);
    }
}

// Not joined: a Max / Min after the affine (the clamp runs before it), a per-channel operand, a
// value read elsewhere, a Sub with the constant first, a Conv without an activation (its Mul and
// Add fold into the weights instead).
TEST(Passes, AffineStaysWhereTheEpilogueCannotTakeIt) {
    auto base = [](Builder& b) {
        int y = conv(b, b.input("x", {1, 3, 5, 6}), 3, 4, 5, 6, true, 11);
        return b.node("Relu", {y}, {1, 4, 5, 6});
    };
    {
        Builder b;
        int m = b.node("Mul", {base(b), b.constant("s", scalar(0.5f))}, {1, 4, 5, 6});
        b.output(b.node("Max", {m, b.constant("lo", scalar(0.1f))}, {1, 4, 5, 6}));
        Graph g = check_pass(b, passes::fuse_activation, 2);
        EXPECT_EQ(ops(g), (std::vector<std::string>{"Conv", "Max"}));
    }
    {
        Builder b;
        b.output(b.node("Mul", {base(b), b.constant("s", rnd({1, 4, 1, 1}, 5, 0.5f))}, {1, 4, 5, 6}));
        Graph g = check_pass(b, passes::fuse_activation, 1);
        EXPECT_EQ(ops(g), (std::vector<std::string>{"Conv", "Mul"}));
    }
    {
        Builder b;
        int a = base(b);
        b.output(b.node("Add", {a, b.constant("t", scalar(0.5f))}, {1, 4, 5, 6}));
        b.output(a);
        Graph g = check_pass(b, passes::fuse_activation, 1);
        EXPECT_EQ(ops(g), (std::vector<std::string>{"Conv", "Add"}));
    }
    {
        Builder b;
        b.output(b.node("Sub", {b.constant("t", scalar(0.5f)), base(b)}, {1, 4, 5, 6}));
        Graph g = check_pass(b, passes::fuse_activation, 1);
        EXPECT_EQ(ops(g), (std::vector<std::string>{"Conv", "Sub"}));
    }
    {
        Builder b;
        int y = conv(b, b.input("x", {1, 3, 5, 6}), 3, 4, 5, 6, true, 11);
        b.output(b.node("Mul", {y, b.constant("s", scalar(0.5f))}, {1, 4, 5, 6}));
        check_pass(b, passes::fuse_activation, 0);
    }
}

TEST(Passes, MaxAboveAnEarlierMinIsNotFused) {
    Builder b;
    int a = leaky_conv(b);
    int m = b.node("Min", {a, b.constant("hi", scalar(0.1f))}, {1, 4, 5, 6});
    b.output(b.node("Max", {m, b.constant("lo", scalar(0.2f))}, {1, 4, 5, 6}));  // 0.2 > hi
    const bool ok = passes::kernel_supports(kind("Conv", "LeakyRelu"));
    Graph g = check_pass(b, passes::fuse_activation, ok ? 2 : 0);
    if (ok) EXPECT_EQ(ops(g), (std::vector<std::string>{"Conv", "Max"}));
}

TEST(Passes, MaxNotFusedWhenSharedOrNotScalar) {
    const bool ok = passes::kernel_supports(kind("Conv", "LeakyRelu"));
    {  // the activation's output has another reader
        Builder b;
        int a = leaky_conv(b);
        b.output(b.node("Max", {a, b.constant("lo", scalar(-0.1f))}, {1, 4, 5, 6}));
        b.output(b.node("Neg", {a}, {1, 4, 5, 6}));
        Graph g = check_pass(b, passes::fuse_activation, ok ? 1 : 0);
        if (ok) EXPECT_EQ(ops(g), (std::vector<std::string>{"Conv", "Max", "Neg"}));
    }
    {  // a per-channel constant
        Builder b;
        int a = leaky_conv(b);
        b.output(b.node("Max", {a, b.constant("lo", rnd({1, 4, 1, 1}, 5, 0.2f))}, {1, 4, 5, 6}));
        Graph g = check_pass(b, passes::fuse_activation, ok ? 1 : 0);
        if (ok) EXPECT_EQ(ops(g), (std::vector<std::string>{"Conv", "Max"}));
    }
    {  // a non-constant operand
        Builder b;
        int a = leaky_conv(b);
        int z = b.input("z", {1, 1, 1, 1}, 7);
        b.output(b.node("Max", {a, z}, {1, 4, 5, 6}));
        check_pass(b, passes::fuse_activation, ok ? 1 : 0);
    }
    {  // a Conv without a fused activation
        Builder b;
        int x = b.input("x", {1, 3, 5, 6});
        int y = conv(b, x, 3, 4, 5, 6, true, 11);
        b.output(b.node("Max", {y, b.constant("lo", scalar(-0.1f))}, {1, 4, 5, 6}));
        check_pass(b, passes::fuse_activation, 0);
    }
}

TEST(Passes, ResidualAddFusesIntoConvWhenSupported) {
    Builder b;
    int x = b.input("x", {1, 4, 5, 6});
    int c = conv(b, x, 4, 4, 5, 6, true, 11);
    int a = b.node("Add", {x, c}, {1, 4, 5, 6});
    b.output(b.node("Relu", {a}, {1, 4, 5, 6}));
    const bool ok = passes::kernel_supports(kind("Conv", "", true));
    Graph g = check_pass(b, passes::fuse_residual, ok ? 1 : 0);
    if (ok) {
        ASSERT_EQ(ops(g), (std::vector<std::string>{"Conv", "Relu"}));
        EXPECT_EQ(g.nodes[0].inputs.size(), 4u);
        EXPECT_EQ(g.nodes[0].inputs[3], x);
    }
    // The whole pipeline: Conv (+residual +Relu where supported) and same numbers.
    std::shared_ptr<const Plan> plan;
    expect_close(run(b.g, b.feeds, true, &plan), run(b.g, b.feeds, false));
}

// A transformer's residual Adds: after a MatMul (+ its folded bias), and after PyTorch's
// out-projection Gemm seen through the Reshape to [1, S, D]. Small products (the FP32 kernels) and
// ones AMX takes where the CPU has it (rows >= 16, K >= 64, N >= 32).
TEST(Passes, ResidualAddJoinsMatMulAndGemm) {
    for (const int64_t S : {int64_t(5), int64_t(32)}) {
        const int64_t D = S == 5 ? 8 : 96;
        Builder b;
        int x = b.input("x", {1, S, D});
        int mm = b.node("MatMul", {x, b.constant("w", rnd({D, D}, 3, 0.2f))}, {1, S, D});
        int mb = b.node("Add", {b.constant("bias", rnd({D}, 4)), mm}, {1, S, D});
        int r1 = b.node("Add", {x, mb}, {1, S, D});  // residual after MatMul + bias
        int flat = b.node("Reshape", {r1, b.constant("s2", [&] {
                              Tensor t(DType::kI64, {2});
                              t.as<int64_t>()[0] = S;
                              t.as<int64_t>()[1] = D;
                              return t;
                          }())}, {S, D});
        int gm = b.node("Gemm", {flat, b.constant("w2", rnd({D, D}, 5, 0.2f)), b.constant("c", rnd({D}, 6))}, {S, D},
                        {{"transB", ai(1)}});
        int back = b.node("Reshape", {gm, b.constant("s3", [&] {
                              Tensor t(DType::kI64, {3});
                              t.as<int64_t>()[0] = 1;
                              t.as<int64_t>()[1] = S;
                              t.as<int64_t>()[2] = D;
                              return t;
                          }())}, {1, S, D});
        int r2 = b.node("Add", {back, r1}, {1, S, D});  // residual after Gemm -> Reshape
        b.output(b.node("Relu", {r2}, {1, S, D}));
        Graph g = b.g;
        ASSERT_EQ(passes::fold_bias_add(g), 1);
        const bool mm_ok = passes::kernel_supports(kind("MatMul", "", true, true));
        const bool gemm_ok = passes::kernel_supports(kind("Gemm", "", true));
        EXPECT_TRUE(mm_ok && gemm_ok);
        EXPECT_EQ(passes::fuse_residual(g), 2);
        ASSERT_EQ(ops(g), (std::vector<std::string>{"MatMul", "Reshape", "Gemm", "Reshape", "Relu"})) << S;
        EXPECT_EQ(g.nodes[0].inputs.size(), 4u);  // A, B, bias, residual
        EXPECT_EQ(g.nodes[0].inputs[3], x);
        EXPECT_EQ(g.nodes[0].outputs[0], r1);
        EXPECT_EQ(g.nodes[2].inputs.size(), 4u);  // A, B, C, residual
        EXPECT_EQ(g.nodes[2].inputs[3], r1);
        EXPECT_EQ(g.nodes[3].outputs[0], r2);     // the Reshape writes the Add's output now
        // The whole pipeline: the same numbers, and no Add step left.
        std::shared_ptr<const Plan> plan;
        expect_close(run(b.g, b.feeds, true, &plan), run(b.g, b.feeds, false));
        ASSERT_EQ(plan->step_info.size(), 3u) << S;  // MatMul, Gemm, Relu (the Reshapes are views)
        for (const auto& st : plan->step_info) EXPECT_NE(st.op, "Add") << S;
    }
}

// The residual read elsewhere too (fused, the Add's other input stays live), an Add whose other
// input is the product's own input read after it, and a product read by another node: the
// last two keep their Add.
TEST(Passes, ResidualAddIntoMatMulOnlyWhereSafe) {
    Builder b;
    int x = b.input("x", {4, 16});
    int m1 = b.node("MatMul", {x, b.constant("w", rnd({16, 16}, 3, 0.3f))}, {4, 16});
    int a1 = b.node("Add", {m1, x}, {4, 16});
    b.output(a1);
    b.output(b.node("Relu", {x}, {4, 16}));  // x read again after the fused product
    int m2 = b.node("MatMul", {a1, b.constant("w2", rnd({16, 16}, 4, 0.3f))}, {4, 16});
    b.output(m2);  // the product is an output: its Add must stay
    b.output(b.node("Add", {m2, a1}, {4, 16}));
    Graph g = check_pass(b, passes::fuse_residual, 1);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"MatMul", "Relu", "MatMul", "Add"}));
}

TEST(Passes, BroadcastAddIsNotAResidual) {
    Builder b;
    int x = b.input("x", {1, 4, 1, 1});
    int x2 = b.input("x2", {1, 3, 5, 6}, 9);
    int c = conv(b, x2, 3, 4, 5, 6, true, 11);
    b.output(b.node("Add", {c, x}, {1, 4, 5, 6}));
    check_pass(b, passes::fuse_residual, 0);
}

TEST(Passes, ProbeRejectsUnknownOps) {
    EXPECT_FALSE(passes::kernel_supports(kind("Softmax", "Relu")));
    EXPECT_FALSE(passes::kernel_supports(kind("Conv", "NoSuchActivation")));
}

// ---------------------------------------------------------------- transformer patterns

// Multi-head attention on [1, S, H, D] head views (odd sizes: the per-run packing, tails).
struct Attention {
    int q, k, v, qt, kt, vt, s, sm, ctx, y;
};
Attention attention(Builder& b, int64_t S, int64_t H, int64_t D, bool scale) {
    Attention a;
    a.q = b.input("q", {1, S, H, D}, 1);
    a.k = b.input("k", {1, S, H, D}, 2);
    a.v = b.input("v", {1, S, H, D}, 3);
    a.qt = b.node("Transpose", {a.q}, {1, H, S, D}, {{"perm", aints({0, 2, 1, 3})}});
    a.kt = b.node("Transpose", {a.k}, {1, H, D, S}, {{"perm", aints({0, 2, 3, 1})}});
    a.vt = b.node("Transpose", {a.v}, {1, H, S, D}, {{"perm", aints({0, 2, 1, 3})}});
    a.s = b.node("MatMul", {a.qt, a.kt}, {1, H, S, S});
    int sc = scale ? b.node("Mul", {a.s, b.constant("scale", scalar(0.35f))}, {1, H, S, S}) : a.s;
    a.sm = b.node("Softmax", {sc}, {1, H, S, S}, {{"axis", ai(-1)}});
    a.ctx = b.node("MatMul", {a.sm, a.vt}, {1, H, S, D});
    a.y = b.node("Transpose", {a.ctx}, {1, S, H, D}, {{"perm", aints({0, 2, 1, 3})}});
    return a;
}

TEST(Passes, AttentionTransposesFoldIntoMatMulStrides) {
    Builder b;
    Attention a = attention(b, 7, 3, 5, false);
    b.output(a.y);
    Graph g = check_pass(b, passes::fold_matmul_transpose, 4);
    ASSERT_EQ(ops(g), (std::vector<std::string>{"MatMul", "Softmax", "MatMul"}));
    EXPECT_EQ(g.nodes[0].inputs[0], a.q);
    EXPECT_EQ(g.nodes[0].inputs[1], a.k);
    EXPECT_EQ(g.nodes[0].attrs["_perm_a"].ints, (std::vector<int64_t>{0, 2, 1, 3}));
    EXPECT_EQ(g.nodes[0].attrs["_perm_b"].ints, (std::vector<int64_t>{0, 2, 3, 1}));  // transposed B
    EXPECT_EQ(g.nodes[2].inputs[1], a.v);
    EXPECT_EQ(g.nodes[2].attrs["_perm_y"].ints, (std::vector<int64_t>{0, 2, 1, 3}));
    EXPECT_EQ(g.nodes[2].outputs[0], a.y);
}

// PyTorch's in-projection: one [S, 1, 3D] tensor sliced into Q, K and V on the last axis, each
// reshaped into heads [S, H, Dh] and transposed: the MatMuls read the slices in place (_view_*),
// the Slice copies and Reshapes go. Slices by a negative start, through axes = -1, and without
// a Reshape (a single head) too.
TEST(Passes, InProjectionSlicesFoldIntoMatMulViews) {
    for (int variant = 0; variant < 2; ++variant) {
        const int64_t S = 6, H = variant == 0 ? 2 : 1, Dh = 4, D = H * Dh;
        Builder b;
        int qkv = b.input("qkv", {S, 1, 3 * D}, 1);
        int parts[3];
        for (int i = 0; i < 3; ++i) {
            const std::string n = std::to_string(i);
            // V by a negative start and axes -1; Q and K by axis 2.
            int sl = b.node("Slice",
                            {qkv, b.constant("st" + n, i64s({i == 2 ? -D : i * D})),
                             b.constant("en" + n, i64s({i == 2 ? 3 * D : (i + 1) * D})),
                             b.constant("ax" + n, i64s({i == 2 ? -1 : 2}))},
                            {S, 1, D});
            parts[i] = variant == 0 ? b.node("Reshape", {sl, b.constant("sh" + n, i64s({S, H, Dh}))}, {S, H, Dh})
                                    : b.node("Reshape", {sl, b.constant("sh" + n, i64s({S, 1, Dh}))}, {S, 1, Dh});
        }
        int qt = b.node("Transpose", {parts[0]}, {H, S, Dh}, {{"perm", aints({1, 0, 2})}});
        int kt = b.node("Transpose", {parts[1]}, {H, Dh, S}, {{"perm", aints({1, 2, 0})}});
        int vt = b.node("Transpose", {parts[2]}, {H, S, Dh}, {{"perm", aints({1, 0, 2})}});
        int sc = b.node("MatMul", {qt, kt}, {H, S, S});
        int sm = b.node("Softmax", {sc}, {H, S, S}, {{"axis", ai(-1)}});
        int cx = b.node("MatMul", {sm, vt}, {H, S, Dh});
        b.output(b.node("Transpose", {cx}, {S, H, Dh}, {{"perm", aints({1, 0, 2})}}));
        Graph g = check_pass(b, passes::fold_matmul_transpose, 4 + 3);  // each view drops a Slice and a Reshape
        ASSERT_EQ(ops(g), (std::vector<std::string>{"MatMul", "Softmax", "MatMul"})) << variant;
        const Node& m1 = g.nodes[0];
        EXPECT_EQ(m1.inputs[0], qkv);
        EXPECT_EQ(m1.inputs[1], qkv);
        EXPECT_EQ(m1.attrs.at("_view_a").ints, (std::vector<int64_t>{S, H, Dh}));
        EXPECT_EQ(m1.attrs.at("_view_a_strides").ints, (std::vector<int64_t>{3 * D, H == 1 ? 0 : Dh, 1}));  // an axis of 1: any
        EXPECT_EQ(m1.attrs.at("_view_a_offset").i, 0);
        EXPECT_EQ(m1.attrs.at("_view_b_offset").i, D);
        EXPECT_EQ(g.nodes[2].inputs[1], qkv);
        EXPECT_EQ(g.nodes[2].attrs.at("_view_b_offset").i, 2 * D);
    }
}

// Slices that are no view of the last axis stay: step 2, another axis, a second reader, a
// Reshape that mixes the leading axes into the sliced one.
TEST(Passes, OtherSlicesStayCopies) {
    Builder b;
    int x = b.input("x", {6, 1, 16}, 1);
    int k = b.input("k", {6, 1, 4}, 2);
    auto slice = [&](std::vector<int64_t> st, std::vector<int64_t> en, std::vector<int64_t> ax, std::vector<int64_t> sp,
                     const Shape& out) {
        static int n = 0;
        const std::string s = std::to_string(n++);
        std::vector<int> ins{x, b.constant("s" + s, i64s(st)), b.constant("e" + s, i64s(en)),
                             b.constant("a" + s, i64s(ax))};
        if (!sp.empty()) ins.push_back(b.constant("p" + s, i64s(sp)));
        return b.node("Slice", ins, out);
    };
    // B = K^T per batch: MatMul([6, 1, 4] x ...) over batch 6 needs B [6, 4, n].
    const int stepped = slice({0}, {8}, {2}, {2}, {6, 1, 4});      // step 2
    const int leading = slice({0}, {3}, {0}, {}, {3, 1, 16});      // axis 0
    const int shared = slice({4}, {8}, {2}, {}, {6, 1, 4});        // also an output
    b.output(shared);
    const int mixed = slice({0}, {8}, {2}, {}, {6, 1, 8});
    int mixed_r = b.node("Reshape", {mixed, b.constant("ms", i64s({2, 3, 8}))}, {2, 3, 8});  // mixes axis 0
    int kt = b.node("Transpose", {k}, {6, 4, 1}, {{"perm", aints({0, 2, 1})}});
    b.output(b.node("MatMul", {stepped, kt}, {6, 1, 1}));
    b.output(b.node("MatMul", {b.node("Transpose", {leading}, {1, 3, 16}, {{"perm", aints({1, 0, 2})}}),
                               b.input("w", {1, 16, 2}, 3)},
                    {1, 3, 2}));
    b.output(b.node("MatMul", {shared, kt}, {6, 1, 1}));
    b.output(b.node("MatMul", {mixed_r, b.input("w2", {2, 8, 3}, 4)}, {2, 3, 3}));
    Graph g = b.g;
    passes::fold_matmul_transpose(g);
    for (const Node& n : g.nodes)
        if (n.op == "MatMul") EXPECT_FALSE(n.attrs.count("_view_a") || n.attrs.count("_view_b")) << n.name;
    std::shared_ptr<const Plan> plan;
    expect_close(run(b.g, b.feeds, true, &plan), run(b.g, b.feeds, false));
}

TEST(Passes, TransposeWithAnotherReaderOrMovedLastAxisStays) {
    Builder b;
    Attention a = attention(b, 6, 2, 4, false);
    b.output(a.y);
    b.output(b.node("Relu", {a.qt}, {1, 2, 6, 4}));  // Q's head view has a second reader
    // A whose last axis moves (A = Transpose(x, 0,1,3,2)) cannot be read in place.
    int x = b.input("x", {1, 2, 6, 6}, 4);
    int xt = b.node("Transpose", {x}, {1, 2, 6, 6}, {{"perm", aints({0, 1, 3, 2})}});
    b.output(b.node("MatMul", {xt, a.vt}, {1, 2, 6, 4}));  // V's head view is read twice too
    Graph g = check_pass(b, passes::fold_matmul_transpose, 2);  // K's and the output's only
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Transpose", "Transpose", "MatMul", "Softmax", "MatMul", "Relu",
                                                "Transpose", "MatMul"}));
    EXPECT_EQ(g.nodes[2].inputs[0], a.qt);
    EXPECT_EQ(g.nodes[4].inputs[1], a.vt);
}

// Around a product with constant weights the Transposes stay copies: folded, each batch of the
// permuted view would be its own small GEMM (a batch-2 encoder layer's in-projection).
TEST(Passes, TransposeAroundConstantWeightsStays) {
    Builder b;
    int x = b.input("x", {2, 6, 8}, 5);
    int xt = b.node("Transpose", {x}, {6, 2, 8}, {{"perm", aints({1, 0, 2})}});
    int m = b.node("MatMul", {xt, b.constant("w", rnd({8, 5}, 6))}, {6, 2, 5});
    b.output(b.node("Transpose", {m}, {2, 6, 5}, {{"perm", aints({1, 0, 2})}}));
    Graph g = check_pass(b, passes::fold_matmul_transpose, 0);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Transpose", "MatMul", "Transpose"}));
    EXPECT_FALSE(g.nodes[1].attrs.count("_perm_a"));
    EXPECT_FALSE(g.nodes[1].attrs.count("_perm_y"));
}

// PyTorch's attention scales q before the scores' MatMul: the factor moves into the Softmax (the
// product is linear); a Mul by a scalar on the other operand too; a scaled operand read twice stays.
TEST(Passes, SoftmaxScaleOnAMatMulOperandFolds) {
    for (int variant = 0; variant < 3; ++variant) {
        Builder b;
        const int64_t H = 2, S = 5, D = 4;
        int q = b.input("q", {1, H, S, D}, 1);
        int k = b.input("k", {1, H, D, S}, 2);
        int v = b.input("v", {1, H, S, D}, 3);
        int qs = variant == 1 ? q : b.node("Div", {q, b.constant("c", scalar(2.0f))}, {1, H, S, D});
        int ks = variant == 1 ? b.node("Mul", {b.constant("c", scalar(0.25f)), k}, {1, H, D, S}) : k;
        int sc = b.node("MatMul", {qs, ks}, {1, H, S, S});
        int sm = b.node("Softmax", {sc}, {1, H, S, S}, {{"axis", ai(-1)}});
        b.output(b.node("MatMul", {sm, v}, {1, H, S, D}));
        if (variant == 2) b.output(b.node("Relu", {qs}, {1, H, S, D}));  // the scaled q read again
        Graph g = check_pass(b, passes::fuse_softmax_scale, variant == 2 ? 0 : 1);
        if (variant == 2) continue;
        EXPECT_EQ(ops(g), (std::vector<std::string>{"MatMul", "Softmax", "MatMul"})) << variant;
        EXPECT_EQ(g.nodes[0].inputs[0], q);
        EXPECT_EQ(g.nodes[0].inputs[1], k);
        EXPECT_FLOAT_EQ(g.nodes[1].attrs["_fused_scale"].f, variant == 1 ? 0.25f : 0.5f);
    }
}

TEST(Passes, SoftmaxScaleFolds) {
    Builder b;
    Attention a = attention(b, 5, 2, 4, true);
    b.output(a.y);
    Graph g = check_pass(b, passes::fuse_softmax_scale, 1);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Transpose", "Transpose", "Transpose", "MatMul", "Softmax", "MatMul",
                                                "Transpose"}));
    EXPECT_FLOAT_EQ(g.nodes[4].attrs["_fused_scale"].f, 0.35f);
    EXPECT_EQ(g.nodes[4].inputs[0], a.s);
    // The whole pipeline: one step per MatMul and the Softmax.
    std::shared_ptr<const Plan> plan;
    expect_close(run(b.g, b.feeds, true, &plan), run(b.g, b.feeds, false));
    EXPECT_EQ(plan->steps.size(), 3u);
}

TEST(Passes, SoftmaxDivFoldsButNotNegativeOrShared) {
    Builder b;
    int x = b.input("x", {3, 9});
    int d = b.node("Div", {x, b.constant("two", scalar(2.5f))}, {3, 9});
    b.output(b.node("Softmax", {d}, {3, 9}, {{"axis", ai(1)}}));
    int n = b.node("Mul", {x, b.constant("neg", scalar(-0.5f))}, {3, 9});
    b.output(b.node("Softmax", {n}, {3, 9}));
    int m = b.node("Mul", {x, b.constant("half", scalar(0.5f))}, {3, 9});
    b.output(b.node("Softmax", {m}, {3, 9}));
    b.output(m);  // the scaled scores are an output too
    Graph g = check_pass(b, passes::fuse_softmax_scale, 1);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Softmax", "Mul", "Softmax", "Mul", "Softmax"}));
    EXPECT_FLOAT_EQ(g.nodes[0].attrs["_fused_scale"].f, 0.4f);
}

TEST(Passes, ResidualAddFusesIntoLayerNorm) {
    Builder b;
    int x = b.input("x", {2, 5, 24});
    int r = b.input("r", {2, 5, 24}, 8);
    int s = b.node("Add", {x, r}, {2, 5, 24});
    int ln = b.node("LayerNormalization", {s, b.constant("g", rnd({24}, 3)), b.constant("bb", rnd({24}, 4))}, {2, 5, 24},
                    {{"axis", ai(-1)}});
    // Without bias, over the last two axes.
    int s2 = b.node("Add", {ln, x}, {2, 5, 24});
    b.output(b.node("LayerNormalization", {s2, b.constant("g2", rnd({5, 24}, 5))}, {2, 5, 24}, {{"axis", ai(1)}}));
    Graph g = check_pass(b, passes::fuse_add_layernorm, 2);
    ASSERT_EQ(ops(g), (std::vector<std::string>{"LayerNormalization", "LayerNormalization"}));
    EXPECT_EQ(g.nodes[0].inputs, (std::vector<int>{x, g.nodes[0].inputs[1], g.nodes[0].inputs[2], r}));
    EXPECT_EQ(g.nodes[1].inputs[2], -1);
    EXPECT_EQ(g.nodes[1].inputs[3], x);
}

TEST(Passes, LayerNormAddWithAnotherReaderOrBroadcastStays) {
    Builder b;
    int x = b.input("x", {4, 16});
    int r = b.input("r", {4, 16}, 8);
    int s = b.node("Add", {x, r}, {4, 16});
    b.output(b.node("LayerNormalization", {s, b.constant("g", rnd({16}, 3))}, {4, 16}));
    b.output(s);  // pre-norm style: the sum is read again
    int c = b.input("c", {1, 16}, 9);
    int s2 = b.node("Add", {x, c}, {4, 16});  // a broadcast Add is no residual
    b.output(b.node("LayerNormalization", {s2, b.constant("g2", rnd({16}, 4))}, {4, 16}));
    check_pass(b, passes::fuse_add_layernorm, 0);
}

TEST(Passes, StridedMatMulGivesClearErrors) {
    Builder b;
    int x = b.input("x", {2, 3, 4});
    int w = b.input("w", {2, 3, 5}, 3);
    b.output(b.node("MatMul", {x, w}, {2, 4, 5}, {{"_perm_a", aints({0, 2, 1})}}));  // moves A's last axis
    std::shared_ptr<const Plan> plan;
    ScopedPasses sp(false);
    Status st = compile_graph(b.g, CompileOptions{}, &plan);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("_perm_a"), std::string::npos) << st.message();
}

// ---------------------------------------------------------------- whole pipeline

TEST(Passes, ConvBnBiasHardSwishChain) {
    Builder b(9);  // Clip bounds as attributes
    int x = b.input("x", {1, 3, 6, 6});
    int c = conv(b, x, 3, 4, 6, 6, false, 11);
    int bn = batchnorm(b, c, 4, {1, 4, 6, 6}, 20);
    int a = b.node("Add", {bn, b.constant("three", scalar(3.0f))}, {1, 4, 6, 6});
    int cl = b.node("Clip", {a}, {1, 4, 6, 6}, {{"min", af(0.0f)}, {"max", af(6.0f)}});
    int m = b.node("Mul", {bn, cl}, {1, 4, 6, 6});
    int y = b.node("Div", {m, b.constant("six", scalar(6.0f))}, {1, 4, 6, 6});
    b.output(y);
    Graph g = b.g;
    EXPECT_TRUE(run_graph_passes(g));
    const bool fused = passes::kernel_supports(kind("Conv", "HardSwish"));
    const std::vector<std::string> want = fused ? std::vector<std::string>{"Conv"}
                                                : std::vector<std::string>{"Conv", "HardSwish"};
    EXPECT_EQ(ops(g), want);
    std::shared_ptr<const Plan> plan;
    expect_close(run(b.g, b.feeds, true, &plan), run(b.g, b.feeds, false));
    EXPECT_EQ(plan->steps.size(), g.nodes.size());
}

}  // namespace

// ---------------------------------------------------------------- fuse_elementwise
namespace {
// x -> Neg -> [Mul scalar, Add scalar, Relu, Mul per-channel, Add(t, t * s) with t read twice,
// Sub (scalar - acc), Clip, Max per-channel const, Div by a full input, Sigmoid, HardSwish,
// LeakyRelu, Min scalar] on planes larger and smaller than the kernel's 512-element block.
Builder chain_graph(const Shape& s) {
    Builder b;
    const int64_t C = s[1];
    int x = b.input("x", s);
    int d = b.input("d", s, 11);  // divisor: Sigmoid(d) + 0.5 keeps it away from 0
    int dd = b.node("Sigmoid", {d}, s);
    int den = b.node("Add", {dd, b.constant("half", scalar(0.5f))}, s);
    int pc_in = b.input("pc", {1, C, 1, 1}, 5);  // per-channel, computed at run time
    int v = b.node("Neg", {x}, s);
    v = b.node("Mul", {b.constant("a", scalar(1.7f, {1})), v}, s);
    v = b.node("Add", {v, b.constant("b", scalar(-0.2f, {1}))}, s);
    v = b.node("Relu", {v}, s);
    v = b.node("Mul", {v, pc_in}, s);
    int t = b.node("Mul", {v, b.constant("pcc", rnd({C, 1, 1}, 3))}, s);
    v = b.node("Add", {v, t}, s);
    v = b.node("Sub", {b.constant("one", scalar(1.0f)), v}, s);
    v = b.node("Clip", {v, b.constant("lo", scalar(-1.5f)), b.constant("hi", scalar(1.5f))}, s);
    v = b.node("Max", {v, b.constant("m", rnd({1, C, 1, 1}, 4))}, s);
    v = b.node("Div", {v, den}, s);
    v = b.node("Sigmoid", {v}, s);
    v = b.node("HardSwish", {v}, s);
    v = b.node("LeakyRelu", {v}, s, {{"alpha", af(0.3f)}});
    v = b.node("Min", {v, b.constant("mn", scalar(0.4f))}, s);
    b.output(v);
    return b;
}
}  // namespace

TEST(Passes, ElementwiseChainFusesIntoOneNode) {
    for (const Shape& s : {Shape{1, 5, 7, 9}, Shape{2, 3, 23, 29}}) {
        Builder b = chain_graph(s);
        // The 14 nodes after Neg become two chains, split at the value read twice (the per-channel
        // Mul's output starts the second chain and is its operand too); Sigmoid(d) + 0.5 is a third.
        Graph g = check_pass(b, passes::fuse_elementwise, 13);
        EXPECT_EQ(ops(g), (std::vector<std::string>{"ElementwiseChain", "Neg", "ElementwiseChain",
                                                    "ElementwiseChain"}));
    }
}

// A 2-D [R, C] value (a Gemm output: one element per channel plane) whose per-column operands
// ([C] constant, [1, C] input) the kernel reads as rows; C above and below the 512-element block.
TEST(Passes, ElementwiseChainOnRowsOfChannels) {
    for (const Shape& s : {Shape{1, 128}, Shape{3, 700}, Shape{2, 5}}) {
        const int64_t C = s[1];
        Builder b;
        int x = b.input("x", s);
        int full = b.input("f", s, 9);
        int col_in = b.input("col", {1, C}, 5);
        int v = b.node("Sigmoid", {x}, s);
        v = b.node("Mul", {v, b.constant("g", rnd({C}, 3))}, s);
        v = b.node("Add", {col_in, v}, s);
        v = b.node("Div", {v, b.constant("d", scalar(1.5f, {1, 1}))}, s);
        v = b.node("Sub", {full, v}, s);
        v = b.node("Max", {v, b.constant("m", rnd({1, C}, 4))}, s);
        v = b.node("Relu", {v}, s);
        b.output(v);
        Graph g = check_pass(b, passes::fuse_elementwise, 6);
        EXPECT_EQ(ops(g), (std::vector<std::string>{"ElementwiseChain"})) << shape_str(s);
    }
}

// A BatchNormalization no conv can take (over a Concat, as in DenseNet's BN -> ReLU -> conv; and
// over a 2-D [N, C] value) becomes a per-channel chain x * s + t, and the ReLU after it joins:
// one pass. A BN whose mean output is read stays.
TEST(Passes, UnfoldedBatchNormJoinsTheChain) {
    Builder b;
    int x = b.input("x", {1, 3, 5, 6});
    int y = b.input("y", {1, 2, 5, 6}, 8);
    int cat = b.node("Concat", {x, y}, {1, 5, 5, 6}, {{"axis", ai(1)}});
    b.output(b.node("Relu", {batchnorm(b, cat, 5, {1, 5, 5, 6}, 20)}, {1, 5, 5, 6}));
    int r = b.input("r", {4, 7}, 9);
    b.output(batchnorm(b, r, 7, {4, 7}, 30));
    Graph g = check_pass(b, passes::fuse_elementwise, 3);  // two BNs rewritten, one Relu joined
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Concat", "ElementwiseChain", "ElementwiseChain"}));
    EXPECT_EQ(g.nodes[1].attrs.at("ops").ints.size(), 3u);  // mul, add, relu
    EXPECT_EQ(g.nodes[2].attrs.at("ops").ints.size(), 2u);

    Builder b2;
    int x2 = b2.input("x", {1, 3, 5, 6});
    int bn = batchnorm(b2, x2, 3, {1, 3, 5, 6}, 40);
    Node& n = b2.g.nodes.back();
    const int mean = b2.value("running_mean", {3});
    n.outputs.push_back(mean);
    b2.g.values[size_t(mean)].producer = int(b2.g.nodes.size()) - 1;
    b2.output(bn);
    b2.output(mean);
    Graph g2 = b2.g;
    EXPECT_EQ(passes::fuse_elementwise(g2), 0);
}

TEST(Passes, ElementwiseChainKeepsSharedAndBroadcastingValues) {
    Builder b;
    int x = b.input("x", {1, 4, 3, 5});
    int m = b.node("Mul", {x, b.constant("s", scalar(2.0f))}, {1, 4, 3, 5});
    b.output(m);  // a graph output: must stay
    b.output(b.node("Add", {m, b.constant("c", scalar(1.0f))}, {1, 4, 3, 5}));
    int p = b.input("p", {1, 4, 1, 1}, 3);
    int r = b.node("Relu", {p}, {1, 4, 1, 1});
    b.output(b.node("Add", {r, x}, {1, 4, 3, 5}));  // enlarges the chain's value: not fused
    int q = b.node("Sigmoid", {x}, {1, 4, 3, 5});
    b.output(b.node("Add", {q, b.constant("row", rnd({5}, 9))}, {1, 4, 3, 5}));  // per-column operand
    check_pass(b, passes::fuse_elementwise, 0);
}

TEST(Passes, MalformedElementwiseChainGivesAClearError) {
    auto compile_chain = [](std::vector<int64_t> ops, std::vector<int64_t> opn, const Shape& ps) {
        Builder b;
        int x = b.input("x", {1, 3, 4, 4});
        int p = b.input("p", ps);
        const size_t n = ops.size();
        int y = b.node("ElementwiseChain", {x, p}, {1, 3, 4, 4},
                       {{"ops", aints(std::move(ops))}, {"operands", aints(std::move(opn))},
                        {"alphas", afloats(std::vector<float>(n, 0.0f))},
                        {"betas", afloats(std::vector<float>(n, 0.0f))}});
        b.g.nodes.back().domain = "jiffy";
        b.output(y);
        ScopedPasses sp(false);
        std::shared_ptr<const Plan> plan;
        return compile_graph(b.g, CompileOptions{}, &plan);
    };
    EXPECT_TRUE(compile_chain({202, 101}, {1, -1}, {1, 3, 1, 1}).ok());
    Status st = compile_chain({202, 101}, {1}, {1, 3, 1, 1});
    EXPECT_NE(st.message().find("equal length"), std::string::npos) << st.message();
    st = compile_chain({999}, {-1}, {1, 3, 1, 1});
    EXPECT_NE(st.message().find("unknown op code"), std::string::npos) << st.message();
    st = compile_chain({200}, {5}, {1, 3, 1, 1});
    EXPECT_NE(st.message().find("is not an input"), std::string::npos) << st.message();
    st = compile_chain({200}, {1}, {1, 1, 4, 1});
    EXPECT_NE(st.message().find("nor is per-channel"), std::string::npos) << st.message();
}

// ---------------------------------------------------------------- layout_nhwc

// Depthwise 3x3 (stride s, pad 1, group C) on [1, C, H, W].
int dw_conv(Builder& b, int x, int64_t C, int64_t H, int64_t W, int64_t s, uint32_t seed, Attrs extra = {}) {
    int w = b.constant("Wd" + std::to_string(seed), rnd({C, 1, 3, 3}, seed, 0.5f));
    int bias = b.constant("Bd" + std::to_string(seed), rnd({C}, seed + 1));
    Attrs a = {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}, {"strides", aints({s, s})},
               {"group", ai(C)}};
    for (auto& [k, v] : extra) a[k] = v;
    return b.node("Conv", {x, w, bias}, {1, C, (H - 1) / s + 1, (W - 1) / s + 1}, a);
}
int pw_conv(Builder& b, int x, int64_t C, int64_t M, int64_t H, int64_t W, uint32_t seed, Attrs extra = {}) {
    int w = b.constant("Wp" + std::to_string(seed), rnd({M, C, 1, 1}, seed, 0.4f));
    return b.node("Conv", {x, w}, {1, M, H, W}, extra);
}

TEST(Passes, DepthwiseChainGoesChannelsLast) {
    Builder b;
    int x = b.input("x", {1, 16, 9, 11});
    int d1 = dw_conv(b, x, 16, 9, 11, 1, 3, {{"_fused_act", as("Relu")}});
    int p1 = pw_conv(b, d1, 16, 32, 9, 11, 5);
    int d2 = dw_conv(b, p1, 32, 9, 11, 2, 7);
    b.output(pw_conv(b, d2, 32, 24, 5, 6, 9, {{"_fused_act", as("Clip")}, {"_fused_alpha", af(0.0f)},
                                             {"_fused_beta", af(6.0f)}}));
    b.output(b.node("Relu", {p1}, {1, 32, 9, 11}));  // an NCHW reader inside the chain
    Graph g = check_pass(b, passes::layout_nhwc, 4);
    // One conversion in, the four convs, a restore for the Relu and one for the graph output.
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Transpose", "ConvNhwc", "ConvNhwc", "Transpose", "ConvNhwc",
                                                "ConvNhwc", "Transpose", "Relu"}));
    std::shared_ptr<const Plan> plan;
    run(b.g, b.feeds, true, &plan);
    int nhwc = 0;
    for (const auto& s : plan->step_info) nhwc += s.op == "ConvNhwc";
    EXPECT_EQ(nhwc, 4);
}

// Heads of 1 to 15 outputs over >= 64 channels and >= 128 products an output join the chain they
// read from as ConvNhwc (the few-outputs kernel, conv_nhwc_dot): a 1x1 128 -> 8 after a depthwise,
// a 3x3 128 -> 6 (pad 1) after a 1x1. A 1x1 64 -> 6 (64 products an output) and a 3x3 head
// reading a graph input stay NCHW. The outputs equal the unconverted graph's (check_pass).
TEST(Passes, FewOutputHeadsJoinTheChainTheyRead) {
    Builder b;
    int x = b.input("x", {1, 32, 6, 7});
    int x2 = b.input("x2", {1, 64, 6, 7});
    int p1 = pw_conv(b, x, 32, 128, 6, 7, 3, {{"_fused_act", as("Relu")}});
    int d1 = dw_conv(b, p1, 128, 6, 7, 1, 5);
    b.output(pw_conv(b, d1, 128, 8, 6, 7, 7));
    Attrs k3 = {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}};
    b.output(b.node("Conv", {p1, b.constant("W3", rnd({6, 128, 3, 3}, 9, 0.1f))}, {1, 6, 6, 7}, k3));
    int p2 = pw_conv(b, d1, 128, 64, 6, 7, 11);
    b.output(pw_conv(b, p2, 64, 6, 6, 7, 13));
    b.output(b.node("Conv", {x2, b.constant("W4", rnd({5, 64, 3, 3}, 15, 0.1f))}, {1, 5, 6, 7}, k3));
    Graph g = check_pass(b, passes::layout_nhwc, 5);
    int nhwc = 0, nchw = 0;
    for (const Node& n : g.nodes) nhwc += n.op == "ConvNhwc", nchw += n.op == "Conv";
    EXPECT_EQ(nhwc, 5);
    EXPECT_EQ(nchw, 2);
    std::shared_ptr<const Plan> plan;
    run(b.g, b.feeds, true, &plan);
    int dot = 0;
    for (const auto& k : plan->kernels) dot += k && k->describe().rfind("conv_nhwc_dot", 0) == 0;
    EXPECT_EQ(dot, 2);
}

// BlazeFace's blocks: a stride-2 block max-pools its skip and pads the skip's channels with
// zeros (24 -> 32) before the residual add; an AveragePool (3x3 stride 2, pad 1, ceil_mode,
// count_include_pad) sits inside the chain too. The pools become jiffy::MaxPoolNhwc /
// AveragePoolNhwc and the channel Pad a Pad of the channels-last tensor: one conversion in and one
// out, none around them (before: two around each). A pool reading an NCHW value from outside the
// chains stays NCHW, the conversion after it.
// The graph of ChannelsLastChainRunsThroughPoolsAndPads (two BlazeFace-like blocks and an AveragePool).
void build_blaze_blocks(Builder& b) {
    int x = b.input("x", {1, 24, 16, 16});
    auto dw5 = [&](int in, int64_t C, std::vector<int64_t> pads, int64_t s, Shape out, uint32_t seed) {
        int w = b.constant("Wd" + std::to_string(seed), rnd({C, 1, 5, 5}, seed, 0.3f));
        return b.node("Conv", {in, w}, out,
                      {{"kernel_shape", aints({5, 5})}, {"pads", aints(pads)}, {"strides", aints({s, s})}, {"group", ai(C)}});
    };
    Attrs res_relu = {{"_fused_residual", ai(1)}, {"_fused_act", as("Relu")}};
    int d1 = dw5(x, 24, {2, 2, 2, 2}, 1, {1, 24, 16, 16}, 3);
    int y1 = b.node("Conv", {d1, b.constant("Wp1", rnd({24, 24, 1, 1}, 5, 0.3f)), -1, x}, {1, 24, 16, 16}, res_relu);
    int d2 = dw5(y1, 24, {1, 1, 2, 2}, 2, {1, 24, 8, 8}, 7);
    int mp = b.node("MaxPool", {y1}, {1, 24, 8, 8}, {{"kernel_shape", aints({2, 2})}, {"strides", aints({2, 2})}});
    int pc = b.node("Pad", {mp, b.constant("pads", i64s({0, 0, 0, 0, 0, 8, 0, 0}))}, {1, 32, 8, 8});
    int y2 = b.node("Conv", {d2, b.constant("Wp2", rnd({32, 24, 1, 1}, 9, 0.3f)), -1, pc}, {1, 32, 8, 8}, res_relu);
    int ap = b.node("AveragePool", {y2}, {1, 32, 5, 5},
                    {{"kernel_shape", aints({3, 3})}, {"strides", aints({2, 2})}, {"pads", aints({1, 1, 1, 1})},
                     {"ceil_mode", ai(1)}, {"count_include_pad", ai(1)}});
    int d3 = dw_conv(b, ap, 32, 5, 5, 1, 11);
    b.output(pw_conv(b, d3, 32, 16, 5, 5, 13));
}

TEST(Passes, ChannelsLastChainRunsThroughPoolsAndPads) {
    Builder b;
    build_blaze_blocks(b);
    Graph g = check_pass(b, passes::layout_nhwc, 6);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Transpose", "ConvNhwc", "ConvNhwc", "ConvNhwc", "MaxPoolNhwc", "Pad",
                                                "ConvNhwc", "AveragePoolNhwc", "ConvNhwc", "ConvNhwc", "Transpose"}));
    for (const Node& n : g.nodes)
        if (n.op == "Pad") EXPECT_EQ(passes::const_of(g, n.inputs[1])->to_i64_vector(), (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 0, 8}));

    Builder o;
    int xo = o.input("x", {1, 16, 10, 10});
    int m = o.node("MaxPool", {xo}, {1, 16, 5, 5}, {{"kernel_shape", aints({2, 2})}, {"strides", aints({2, 2})}});
    int dd = dw_conv(o, m, 16, 5, 5, 1, 3);
    o.output(pw_conv(o, dd, 16, 16, 5, 5, 5));
    Graph go = check_pass(o, passes::layout_nhwc, 2);
    EXPECT_EQ(ops(go), (std::vector<std::string>{"MaxPool", "Transpose", "ConvNhwc", "ConvNhwc", "Transpose"}));
}

// A depthwise of a chain read only by NCHW nodes (the face detector's heads: depthwise, then a 1x1
// of fewer than 16 channels that stays NCHW) writes its output channels-first itself on AVX-512
// (_y_nchw): no Transpose after it, also where it is a graph output. Read by a converted conv too,
// it keeps the channels-last output and a restore. Elsewhere every reader gets a restore.
TEST(Passes, ChannelsLastDepthwiseReadByNchwHeadsWritesNchw) {
    const bool avx512 = kernels::active_isa() == kernels::Isa::kAvx512;
    Builder b;
    int x = b.input("x", {1, 16, 9, 11});
    int p1 = pw_conv(b, x, 16, 32, 9, 11, 3, {{"_fused_act", as("Relu")}});
    int d1 = dw_conv(b, p1, 32, 9, 11, 1, 5, {{"_fused_act", as("Relu")}});
    b.output(pw_conv(b, d1, 32, 6, 9, 11, 7));  // a head: stays NCHW
    int d2 = dw_conv(b, p1, 32, 9, 11, 2, 9);
    b.output(pw_conv(b, d2, 32, 12, 5, 6, 11));  // a second head, stride 2
    b.output(d2);                                 // and a graph output
    int d3 = dw_conv(b, p1, 32, 9, 11, 1, 13);   // read by a converted 1x1 and a head
    b.output(pw_conv(b, d3, 32, 4, 9, 11, 15));
    b.output(pw_conv(b, d3, 32, 16, 9, 11, 17));
    Graph g = check_pass(b, passes::layout_nhwc, 5);
    int y_nchw = 0, restores = 0;
    for (const Node& n : g.nodes) {
        y_nchw += n.op == "ConvNhwc" && passes::attr_i(n, "_y_nchw", 0) == 1;
        restores += n.op == "Transpose";
    }
    EXPECT_EQ(y_nchw, avx512 ? 2 : 0);
    // d3 for its head, the 1x1 16's graph output; without _y_nchw d1's and d2's too.
    EXPECT_EQ(restores, avx512 ? 2 : 4);
    if (!avx512) return;
    std::shared_ptr<const Plan> plan;
    run(b.g, b.feeds, true, &plan);
    int nchw_out = 0;
    for (const auto& st : plan->steps) nchw_out += st.kernel->describe() == "conv_nhwc_dw nchw-out avx512";
    EXPECT_EQ(nchw_out, 2);
}

TEST(Passes, ChannelsLastChainReadsAnNchwEntryInPlace) {
    // A chain entered through 1x1 convs only (the face detector's after its NCHW depthwise):
    // they read the NCHW value in place (_x_nchw), no Transpose before them. Batch 2 (per-image
    // planes), two 1x1 readers of the entry, 20 pixels per plane (a partial microkernel block).
    Builder b;
    int x = b.input("x", {2, 16, 4, 5});
    int w1 = b.constant("W1", rnd({32, 16, 1, 1}, 3, 0.4f));
    int p1 = b.node("Conv", {x, w1}, {2, 32, 4, 5}, {{"_fused_act", as("Relu")}});
    int wd = b.constant("Wd", rnd({32, 1, 3, 3}, 5, 0.5f));
    int d1 = b.node("Conv", {p1, wd}, {2, 32, 4, 5},
                    {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}, {"group", ai(32)}});
    int w2 = b.constant("W2", rnd({32, 16, 1, 1}, 7, 0.4f));
    int p2 = b.node("Conv", {x, w2}, {2, 32, 4, 5});  // the second 1x1 reader of x
    int w3 = b.constant("W3", rnd({32, 32, 1, 1}, 9, 0.4f));
    b.output(b.node("Conv", {d1, w3, -1, p2}, {2, 32, 4, 5}, {{"_fused_residual", ai(1)}}));
    Graph g = check_pass(b, passes::layout_nhwc, 4);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"ConvNhwc", "ConvNhwc", "ConvNhwc", "ConvNhwc", "Transpose"}));
    int in_place = 0;
    for (const Node& n : g.nodes)
        if (n.op == "ConvNhwc" && passes::attr_i(n, "_x_nchw", 0) == 1) {
            ++in_place;
            EXPECT_EQ(n.inputs[0], x);
        }
    EXPECT_EQ(in_place, 2);
    // Read as a residual too: converted once, read channels-last by both.
    Builder c;
    int y = c.input("y", {1, 16, 4, 5});
    int cw = c.constant("W1", rnd({16, 1, 3, 3}, 3, 0.5f));
    int cd = c.node("Conv", {y, cw}, {1, 16, 4, 5},
                    {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}, {"group", ai(16)}});
    int cw2 = c.constant("W2", rnd({16, 16, 1, 1}, 5, 0.4f));
    int cp = c.node("Conv", {y, cw2}, {1, 16, 4, 5});
    int cw3 = c.constant("W3", rnd({16, 16, 1, 1}, 7, 0.4f));
    c.output(c.node("Conv", {cd, cw3, -1, cp}, {1, 16, 4, 5}, {{"_fused_residual", ai(1)}}));
    Graph gc = check_pass(c, passes::layout_nhwc, 3);
    EXPECT_EQ(ops(gc), (std::vector<std::string>{"Transpose", "ConvNhwc", "ConvNhwc", "ConvNhwc", "Transpose"}));
}

// A chain's exit into a global mean (Transpose back to NCHW, then GlobalAveragePool or a ReduceMean
// over H, W, axes as attribute or opset-18 input, keepdims 0 or 1, batch 2) becomes one
// jiffy::GlobalAveragePoolNhwc reading the channels-last value: no Transpose left, the same means.
// A ReduceMean over other axes, or a transposed value another node also reads, keeps the Transpose.
TEST(Passes, ChannelsLastExitIntoAGlobalMeanReadsInPlace) {
    struct Case {
        const char* what;
        int64_t opset;
        int mean;  // 0: GlobalAveragePool, 1: ReduceMean axes attribute, 2: axes input
        std::vector<int64_t> axes;
        int64_t keep;
        bool second_reader;
        bool folds;
    };
    const Case cases[] = {{"gap", 17, 0, {}, 1, false, true},
                          {"reducemean attr keep 0", 13, 1, {2, 3}, 0, false, true},
                          {"reducemean attr negative keep 1", 13, 1, {-1, -2}, 1, false, true},
                          {"reducemean input keep 0", 18, 2, {3, 2}, 0, false, true},
                          {"reducemean over W only", 13, 1, {3}, 0, false, false},
                          {"gap and a second reader", 17, 0, {}, 1, true, false}};
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        Builder b(c.opset);
        int x = b.input("x", {2, 16, 5, 7});
        int p1 = pw_conv(b, x, 16, 32, 5, 7, 3, {{"_fused_act", as("Relu")}});
        int d1 = dw_conv(b, p1, 32, 5, 7, 1, 5, {{"_fused_act", as("Relu")}});
        int p2 = pw_conv(b, d1, 32, 48, 5, 7, 7);
        Shape out = {2, 48};
        if (c.mean == 0 || c.keep) out = c.axes.size() == 1 ? Shape{2, 48, 5, 1} : Shape{2, 48, 1, 1};
        if (c.axes.size() == 1 && !c.keep) out = {2, 48, 5};
        int m;
        if (c.mean == 0) {
            m = b.node("GlobalAveragePool", {p2}, out);
        } else if (c.mean == 1) {
            m = b.node("ReduceMean", {p2}, out, {{"axes", aints(c.axes)}, {"keepdims", ai(c.keep)}});
        } else {
            Tensor ax(DType::kI64, Shape{int64_t(c.axes.size())});
            for (size_t i = 0; i < c.axes.size(); ++i) ax.as<int64_t>()[i] = c.axes[i];
            m = b.node("ReduceMean", {p2, b.constant("axes", std::move(ax))}, out, {{"keepdims", ai(c.keep)}});
        }
        b.output(m);
        if (c.second_reader) b.output(b.node("Relu", {p2}, {2, 48, 5, 7}));
        Graph g = b.g;
        ASSERT_EQ(passes::layout_nhwc(g), 3);
        EXPECT_EQ(passes::mean_nhwc(g), c.folds ? 1 : 0);
        int transposes = 0, nhwc_means = 0;
        for (const Node& n : g.nodes) {
            transposes += n.op == "Transpose";
            nhwc_means += n.op == "GlobalAveragePoolNhwc";
        }
        EXPECT_EQ(nhwc_means, c.folds ? 1 : 0);
        EXPECT_EQ(transposes, c.folds ? 0 : 1);  // the chain reads x in place (_x_nchw)
        const auto want = run(b.g, b.feeds, false);
        expect_close(run(g, b.feeds, false), want);
        std::shared_ptr<const Plan> plan;
        expect_close(run(b.g, b.feeds, true, &plan), want);
        int steps = 0;
        for (const auto& st : plan->step_info) steps += st.op == "GlobalAveragePoolNhwc";
        EXPECT_EQ(steps, c.folds ? 1 : 0);
    }
}

// A malformed jiffy::GlobalAveragePoolNhwc (a hand-made or corrupted graph) gets a clear error.
TEST(Passes, MalformedGlobalAveragePoolNhwcGivesAClearError) {
    Builder b;
    int x = b.input("x", {2, 16, 5});
    b.output(b.node("GlobalAveragePoolNhwc", {x}, {2, 5}));
    b.g.nodes.back().domain = "jiffy";
    std::shared_ptr<const Plan> plan;
    ScopedPasses sp(false);
    const Status st = compile_graph(b.g, CompileOptions{}, &plan);
    EXPECT_NE(st.message().find("N x H x W x C"), std::string::npos) << st.message();
}

// jiffy::MaxPoolNhwc / AveragePoolNhwc given what the pass never writes: clear errors, no abort.
TEST(Passes, MalformedPoolNhwcGivesAClearError) {
    struct Bad {
        Shape x;
        Attrs attrs;
        const char* op;
        const char* message;
    };
    const Bad cases[] = {
        {{2, 16, 5}, {{"kernel_shape", aints({2, 2})}}, "MaxPoolNhwc", "N x H x W x C"},
        {{1, 8, 8, 4}, {}, "MaxPoolNhwc", "kernel_shape is required"},
        {{1, 8, 8, 4}, {{"kernel_shape", aints({2, 2, 2})}}, "AveragePoolNhwc", "kernel_shape must have 2 values"},
        {{1, 8, 8, 4}, {{"kernel_shape", aints({2, 2})}, {"pads", aints({2, 2, 0, 0})}}, "MaxPoolNhwc",
         "lies entirely in the padding"},
    };
    for (const Bad& c : cases) {
        Builder b;
        int x = b.input("x", c.x);
        b.output(b.node(c.op, {x}, {1, 4, 4, 4}, c.attrs));
        b.g.nodes.back().domain = "jiffy";
        std::shared_ptr<const Plan> plan;
        ScopedPasses sp(false);
        const Status st = compile_graph(b.g, CompileOptions{}, &plan);
        EXPECT_FALSE(st.ok()) << c.message;
        EXPECT_NE(st.message().find(c.message), std::string::npos) << st.message();
    }
}

// An RGB stem (3x3 stride 2, 3 -> 16, >= 1024 output pixels) in front of a depthwise chain joins it
// on AVX-512 (where the direct stem kernel runs): a ConvNhwc reading the NCHW image in place
// (_x_nchw) and writing channels-last, so no Transpose follows it; after such a stem, a stride-1
// depthwise on a plane past L2 (16 x 120x160) is channels-last too. Elsewhere, or with a residual,
// the stem stays an NCHW Conv.
TEST(Passes, ChannelsLastChainStartsAtAnRgbStem) {
    const bool avx512 = kernels::active_isa() == kernels::Isa::kAvx512;
    for (const int64_t H : {66, 240}) {
        const int64_t W = H == 66 ? 70 : 320, OH = H / 2, OW = W / 2;
        Builder b;
        int x = b.input("x", {1, 3, H, W});
        int ws = b.constant("Ws", rnd({16, 3, 3, 3}, 3, 0.4f));
        int bs = b.constant("Bs", rnd({16}, 4));
        int st = b.node("Conv", {x, ws, bs}, {1, 16, OH, OW},
                        {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}, {"strides", aints({2, 2})},
                         {"_fused_act", as("Relu")}});
        int d1 = dw_conv(b, st, 16, OH, OW, 1, 5, {{"_fused_act", as("Relu")}});
        b.output(pw_conv(b, d1, 16, 32, OH, OW, 7));
        Graph g = check_pass(b, passes::layout_nhwc, avx512 ? 3 : H == 66 ? 2 : 0);
        if (!avx512) continue;
        EXPECT_EQ(ops(g), (std::vector<std::string>{"ConvNhwc", "ConvNhwc", "ConvNhwc", "Transpose"})) << H;
        EXPECT_EQ(g.nodes[0].inputs[0], x);
        EXPECT_EQ(passes::attr_i(g.nodes[0], "_x_nchw", 0), 1);
        std::shared_ptr<const Plan> plan;
        run(b.g, b.feeds, true, &plan);
        ASSERT_FALSE(plan->steps.empty());
        // 16 x 120x160 (1.2 MB) runs band by band with the depthwise (fuse_conv_band).
        EXPECT_EQ(plan->steps[0].kernel->describe(),
                  H == 66 ? "conv_stem 3x3s2 direct nhwc-out avx512" : "conv_stem+dw band 23 rows avx512");
    }
    // With a residual the stem stays NCHW (the chain starts after it, through a Transpose).
    Builder c;
    int x = c.input("x", {1, 3, 66, 70});
    int r = c.input("r", {1, 16, 33, 35}, 9);
    int ws = c.constant("Ws", rnd({16, 3, 3, 3}, 3, 0.4f));
    int st = c.node("Conv", {x, ws, -1, r}, {1, 16, 33, 35},
                    {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}, {"strides", aints({2, 2})},
                     {"_fused_residual", ai(1)}});
    c.output(pw_conv(c, dw_conv(c, st, 16, 33, 35, 1, 5), 16, 32, 33, 35, 7));
    Graph gc = check_pass(c, passes::layout_nhwc, 2);
    EXPECT_EQ(ops(gc), (std::vector<std::string>{"Conv", "Transpose", "ConvNhwc", "ConvNhwc", "Transpose"}));
}

// YuNet's head: stem, a 1x1 16 -> 16, then the depthwise over the 1.2 MB plane of 16 channels.
// That depthwise (a stride-1 one of few channels past L2, which stays NCHW in general) joins the
// chain when the 1x1 before it reads a stem: the whole run stays channels-last, max pool included.
// Without the stem (an NCHW input) it stays NCHW and the chain is the lone 1x1: nothing moves.
TEST(Passes, ChannelsLastChainKeepsABigDepthwiseAfterStemAndOneByOne) {
    if (kernels::active_isa() != kernels::Isa::kAvx512) GTEST_SKIP() << "the stem kernel's channels-last store is AVX-512's";
    Builder b;
    int x = b.input("x", {1, 3, 240, 320});
    int st = b.node("Conv", {x, b.constant("Ws", rnd({16, 3, 3, 3}, 3, 0.4f))}, {1, 16, 120, 160},
                    {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}, {"strides", aints({2, 2})},
                     {"_fused_act", as("Relu")}});
    int p1 = pw_conv(b, st, 16, 16, 120, 160, 5);
    int d1 = dw_conv(b, p1, 16, 120, 160, 1, 7, {{"_fused_act", as("Relu")}});
    int mp = b.node("MaxPool", {d1}, {1, 16, 60, 80}, {{"kernel_shape", aints({2, 2})}, {"strides", aints({2, 2})}});
    b.output(pw_conv(b, mp, 16, 32, 60, 80, 9));
    Graph g = check_pass(b, passes::layout_nhwc, 4);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"ConvNhwc", "ConvNhwc", "ConvNhwc", "MaxPoolNhwc", "ConvNhwc", "Transpose"}));

    Builder c;
    int xc = c.input("x", {1, 16, 120, 160});
    int pc = pw_conv(c, xc, 16, 16, 120, 160, 5);
    c.output(dw_conv(c, pc, 16, 120, 160, 1, 7));
    Graph gc = check_pass(c, passes::layout_nhwc, 0);
    EXPECT_EQ(ops(gc), (std::vector<std::string>{"Conv", "Conv"}));
}

TEST(Passes, ChannelsLastNeedsADepthwiseChain) {
    Builder b;
    int x = b.input("x", {1, 16, 6, 7});
    int p1 = pw_conv(b, x, 16, 32, 6, 7, 3);
    b.output(pw_conv(b, p1, 32, 16, 6, 7, 5));  // 1x1 only: stays NCHW
    int y = b.input("y", {1, 16, 6, 7}, 9);
    b.output(dw_conv(b, y, 16, 6, 7, 1, 11));  // a lone depthwise: stays NCHW
    int z = b.input("z", {1, 32, 6, 7}, 13);
    b.output(pw_conv(b, dw_conv(b, z, 32, 6, 7, 1, 15), 32, 8, 6, 7, 17));  // 1x1 to 8 channels: not chained
    Graph g = b.g;
    EXPECT_EQ(passes::layout_nhwc(g), 0);
}

TEST(Passes, ChannelsLastChainWithBatchAndResidual) {
    // N = 2, a depthwise + 1x1 chain whose last 1x1 adds the chain's input back (MobileNetV2's
    // inverted residual), 24 channels (a masked tail on AVX-512).
    Builder b;
    int x = b.input("x", {2, 24, 7, 9});
    int w1 = b.constant("W1", rnd({24, 1, 3, 3}, 3, 0.5f));
    int d1 = b.node("Conv", {x, w1}, {2, 24, 7, 9},
                    {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}, {"group", ai(24)},
                     {"_fused_act", as("Relu")}});
    int w2 = b.constant("W2", rnd({24, 24, 1, 1}, 5, 0.3f));
    b.output(b.node("Conv", {d1, w2, -1, x}, {2, 24, 7, 9}, {{"_fused_residual", ai(1)}}));
    Graph g = check_pass(b, passes::layout_nhwc, 2);
    EXPECT_EQ(ops(g), (std::vector<std::string>{"Transpose", "ConvNhwc", "ConvNhwc", "Transpose"}));
}

// ---------------------------------------------------------------- fuse_conv_band

using testenv::ScopedEnv;

// Depthwise k x k (stride s, pad k / 2, group C) on [N, C, H, W].
int dw_k(Builder& b, int x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, uint32_t seed,
         Attrs extra = {}) {
    int w = b.constant("Wk" + std::to_string(seed), rnd({C, 1, k, k}, seed, 0.5f));
    int bias = b.constant("Bk" + std::to_string(seed), rnd({C}, seed + 1));
    const int64_t p = k / 2;
    Attrs a = {{"kernel_shape", aints({k, k})}, {"pads", aints({p, p, p, p})}, {"strides", aints({s, s})},
               {"group", ai(C)}};
    for (auto& [key, v] : extra) a[key] = v;
    return b.node("Conv", {x, w, bias}, {N, C, (H + 2 * p - k) / s + 1, (W + 2 * p - k) / s + 1}, a);
}

// Compiles (all passes) and runs with `threads`; the plan's step kernels' descriptions.
std::vector<Tensor> run_threads(const Builder& b, int threads, std::vector<std::string>* kernels) {
    CompileOptions opt;
    opt.threads = threads;
    opt.parallel_min_flops = 0;  // every op that can split does
    std::shared_ptr<const Plan> plan;
    std::vector<Tensor> r = run(b.g, b.feeds, true, &plan, opt);
    if (kernels && plan)
        for (const auto& step : plan->steps) kernels->push_back(step.kernel->describe());
    return r;
}

void expect_bitwise(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t o = 0; o < got.size(); ++o) {
        ASSERT_EQ(got[o].shape(), want[o].shape()) << what;
        ASSERT_EQ(std::memcmp(got[o].data(), want[o].data(), got[o].nbytes()), 0) << what << ", output " << o;
    }
}

// An expand 1x1 and its depthwise (MobileNet's inverted residual block) become one ConvNhwcBand
// once the expanded tensor reaches JIFFY_BAND_MIN_KB (0 here: every pair): the 1x1 writes a band
// of rows, the depthwise reads it, the band's overlap rows move to its front. Bands from one output
// row (1 KiB: every overlap moved) to the whole image, stride 1 and 2, 3x3 and 5x5, a channel count
// off the vector width (40), odd planes, batch 2, an NCHW entry read in place and a channels-first
// exit, one and two threads: the same outputs bit for bit as the two ConvNhwc steps.
TEST(Passes, ExpandAndDepthwiseRunBandByBand) {
    ScopedEnv min_kb("JIFFY_BAND_MIN_KB", "0");
    struct Case {
        int64_t k, s;
        bool x_nchw, head;  // the 1x1 reads the NCHW input in place; an NCHW head reads the depthwise
    };
    for (const Case c : {Case{3, 1, true, false}, Case{3, 2, false, false}, Case{5, 2, true, true},
                         Case{5, 1, false, true}, Case{3, 2, true, true}}) {
        const int64_t N = 2, K = 8, M = 40, H = 13, W = 11;
        Builder b;
        int x = b.input("x", {N, K, H, W});
        int e = x;
        if (!c.x_nchw) e = dw_k(b, x, N, K, H, W, 3, 1, 3);  // the chain starts channels-last
        int w1 = b.constant("W1", rnd({M, K, 1, 1}, 5, 0.4f));
        int b1 = b.constant("B1", rnd({M}, 6));
        int p1 = b.node("Conv", {e, w1, b1}, {N, M, H, W}, {{"_fused_act", as("Silu")}});
        int d1 = dw_k(b, p1, N, M, H, W, c.k, c.s, 7, {{"_fused_act", as("Relu")}});
        const int64_t OH = (H + 2 * (c.k / 2) - c.k) / c.s + 1, OW = (W + 2 * (c.k / 2) - c.k) / c.s + 1;
        int w2 = b.constant("W2", rnd({c.head ? 6 : 16, M, 1, 1}, 9, 0.3f));
        b.output(b.node("Conv", {d1, w2}, {N, c.head ? 6 : 16, OH, OW}));
        const std::string what = "k " + std::to_string(c.k) + " s " + std::to_string(c.s) +
                                 (c.x_nchw ? " nchw-in" : "") + (c.head ? " head" : "");
        std::vector<Tensor> want;
        {
            ScopedEnv off("JIFFY_BAND", "0");
            want = run_threads(b, 1, nullptr);
        }
        expect_close(want, run(b.g, b.feeds, false));  // the two ConvNhwc steps against the NCHW graph
        for (const char* kb : {"1", "4", "1024"}) {
            ScopedEnv band("JIFFY_BAND_KB", kb);
            // Two threads: the rows cut evenly and with the caller given 20% / 80% (the balanced
            // splits of the band step and of the ConvNhwc steps around it).
            for (const auto& [threads, share] : {std::pair{1, "0.5"}, {2, "0.5"}, {2, "0.2"}, {2, "0.8"}}) {
                ScopedEnv fixed("JIFFY_SPLIT_SHARE", share);
                std::vector<std::string> kernels;
                expect_bitwise(run_threads(b, threads, &kernels), want,
                               what + ", band " + kb + " KiB, threads " + std::to_string(threads) + ", share " + share);
                int banded = 0;
                for (const std::string& d : kernels) banded += d.rfind("conv_nhwc_1x1+dw band", 0) == 0;
                EXPECT_EQ(banded, 1) << what;
            }
        }
        // The pass itself: the 1x1 gone, its epilogue and entry layout on the ConvNhwcBand.
        Graph g = b.g;
        passes::layout_nhwc(g);
        EXPECT_EQ(passes::fuse_conv_band(g), 1) << what;
        int found = 0;
        for (const Node& n : g.nodes)
            if (n.op == "ConvNhwcBand") {
                ++found;
                EXPECT_EQ(passes::attr_s(n, "_pw_fused_act", ""), "Silu");
                EXPECT_EQ(passes::attr_s(n, "_fused_act", ""), "Relu");
                EXPECT_EQ(passes::attr_i(n, "_pw_x_nchw", 0), c.x_nchw ? 1 : 0);
                EXPECT_EQ(n.inputs[1], w1);
                EXPECT_EQ(n.inputs[2], b1);
            }
        EXPECT_EQ(found, 1);
    }
}

// The channels-last pools split by output rows at two threads: bitwise the one-thread result.
TEST(Passes, ChannelsLastPoolsSplitByRowsBitwise) {
    Builder b;
    build_blaze_blocks(b);
    std::vector<std::string> k1, k2;
    const std::vector<Tensor> one = run_threads(b, 1, &k1), two = run_threads(b, 2, &k2);
    expect_bitwise(two, one, "two threads");
    int split = 0;
    for (const std::string& k : k2) split += k.find("pool_nhwc") != std::string::npos && k.find("threads by rows") != std::string::npos;
    EXPECT_EQ(split, 2) << "both pools split";
}

// An RGB stem (3x3 stride 2 over 3 channels, written channels-last) and the depthwise reading it
// become one ConvNhwcBand on AVX-512: the direct stem conv writes the band's rows. 16, 24 (a last
// block of 8) and 32 output channels (one, two vectors per pixel), pads 1 and 0 (odd and even
// planes), depthwise stride 1 and 2, batch 2, a channels-first exit, bands from one output row to
// the whole image, one and two threads: bit for bit the two ConvNhwc steps (JIFFY_BAND=0).
TEST(Passes, StemAndDepthwiseRunBandByBand) {
    if (kernels::active_isa() != kernels::Isa::kAvx512) GTEST_SKIP() << "the stem conv is AVX-512 only";
    ScopedEnv min_kb("JIFFY_BAND_MIN_KB", "0");
    struct Case {
        int64_t M, pad, s;
        bool head;  // an NCHW head reads the depthwise
    };
    for (const Case c : {Case{16, 1, 1, false}, Case{32, 1, 2, true}, Case{24, 0, 1, true}, Case{32, 0, 1, false}}) {
        const int64_t N = 2, H = 67 - c.pad, W = 71;
        const int64_t SH = (H + 2 * c.pad - 3) / 2 + 1, SW = (W + 2 * c.pad - 3) / 2 + 1;
        Builder b;
        int x = b.input("x", {N, 3, H, W});
        int ws = b.constant("Ws", rnd({c.M, 3, 3, 3}, 3, 0.4f));
        int bs = b.constant("Bs", rnd({c.M}, 4));
        int st = b.node("Conv", {x, ws, bs}, {N, c.M, SH, SW},
                        {{"kernel_shape", aints({3, 3})},
                         {"pads", aints({c.pad, c.pad, c.pad, c.pad})},
                         {"strides", aints({2, 2})},
                         {"_fused_act", as("Relu")}});
        int d1 = dw_k(b, st, N, c.M, SH, SW, 3, c.s, 7, {{"_fused_act", as("Relu")}});
        const int64_t OH = (SH - 1) / c.s + 1, OW = (SW - 1) / c.s + 1;
        int w2 = b.constant("W2", rnd({c.head ? 6 : 16, c.M, 1, 1}, 9, 0.3f));
        b.output(b.node("Conv", {d1, w2}, {N, c.head ? 6 : 16, OH, OW}));
        const std::string what = "M " + std::to_string(c.M) + " pad " + std::to_string(c.pad) + " s " +
                                 std::to_string(c.s) + (c.head ? " head" : "");
        std::vector<Tensor> want;
        {
            ScopedEnv off("JIFFY_BAND", "0");
            std::vector<std::string> kernels;
            want = run_threads(b, 1, &kernels);
            ASSERT_FALSE(kernels.empty());
            EXPECT_EQ(kernels[0], "conv_stem 3x3s2 direct nhwc-out avx512") << what;
        }
        expect_close(want, run(b.g, b.feeds, false));  // the two steps against the NCHW graph
        for (const char* kb : {"1", "16", "4096"}) {
            ScopedEnv band("JIFFY_BAND_KB", kb);
            for (const auto& [threads, share] : {std::pair{1, "0.5"}, {2, "0.5"}, {2, "0.3"}}) {
                ScopedEnv fixed("JIFFY_SPLIT_SHARE", share);
                std::vector<std::string> kernels;
                expect_bitwise(run_threads(b, threads, &kernels), want,
                               what + ", band " + kb + " KiB, threads " + std::to_string(threads) + ", share " + share);
                ASSERT_FALSE(kernels.empty());
                EXPECT_EQ(kernels[0].rfind("conv_stem+dw band", 0), 0u) << what << ": " << kernels[0];
            }
        }
        Graph g = b.g;  // the pass: the stem's pads and strides on the band node
        passes::layout_nhwc(g);
        EXPECT_EQ(passes::fuse_conv_band(g), 1) << what;
        for (const Node& n : g.nodes)
            if (n.op == "ConvNhwcBand") {
                EXPECT_EQ(n.attrs.at("_pw_pads").ints, (Shape{c.pad, c.pad, c.pad, c.pad})) << what;
                EXPECT_EQ(n.attrs.at("_pw_strides").ints, (Shape{2, 2})) << what;
                EXPECT_EQ(passes::attr_i(n, "_pw_x_nchw", 0), 1) << what;
                EXPECT_EQ(passes::attr_s(n, "_pw_fused_act", ""), "Relu");
            }
    }
}

// Not fused: an expanded tensor below JIFFY_BAND_MIN_KB (default 1 MiB), one read by another node
// too, or a depthwise with a residual.
TEST(Passes, BandFusionNeedsALargeSoleReadExpansion) {
    Builder b;
    int x = b.input("x", {1, 16, 9, 11});
    int p1 = pw_conv(b, x, 16, 32, 9, 11, 3);
    b.output(pw_conv(b, dw_conv(b, p1, 32, 9, 11, 1, 5), 32, 16, 9, 11, 7));  // 12 KiB: small
    Graph g = b.g;
    ASSERT_GT(passes::layout_nhwc(g), 0);
    EXPECT_EQ(passes::fuse_conv_band(g), 0);
    ScopedEnv min_kb("JIFFY_BAND_MIN_KB", "0");
    Graph g2 = b.g;
    passes::layout_nhwc(g2);
    EXPECT_EQ(passes::fuse_conv_band(g2), 1);
    {
        ScopedEnv off("JIFFY_BAND", "0");
        Graph g3 = b.g;
        passes::layout_nhwc(g3);
        EXPECT_EQ(passes::fuse_conv_band(g3), 0);
    }
    Builder c;  // the expansion read by a second 1x1 too
    int y = c.input("y", {1, 16, 9, 11});
    int q1 = pw_conv(c, y, 16, 32, 9, 11, 3);
    c.output(pw_conv(c, dw_conv(c, q1, 32, 9, 11, 1, 5), 32, 16, 9, 11, 7));
    c.output(pw_conv(c, q1, 32, 16, 9, 11, 9));
    Graph gc = c.g;
    ASSERT_GT(passes::layout_nhwc(gc), 0);
    EXPECT_EQ(passes::fuse_conv_band(gc), 0);
    Builder d;  // a depthwise adding a residual
    int z = d.input("z", {1, 16, 9, 11});
    int r = d.input("r", {1, 32, 9, 11}, 11);
    int q = pw_conv(d, z, 16, 32, 9, 11, 3);
    int wd = d.constant("Wd", rnd({32, 1, 3, 3}, 5, 0.5f));
    int dr = d.node("Conv", {q, wd, -1, r}, {1, 32, 9, 11},
                    {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}, {"group", ai(32)},
                     {"_fused_residual", ai(1)}});
    d.output(pw_conv(d, dr, 32, 16, 9, 11, 7));
    Graph gd = d.g;
    ASSERT_GT(passes::layout_nhwc(gd), 0);
    EXPECT_EQ(passes::fuse_conv_band(gd), 0);
}

// A malformed jiffy::ConvNhwcBand node (written by hand: the pass only makes well-formed ones) gets
// a clear error naming what is wrong, at compile.
TEST(Passes, MalformedConvNhwcBandGivesAClearError) {
    auto compile_band = [](const Shape& w1s, const Shape& w2s, Attrs extra, bool w2_const = true) {
        Builder b;
        int x = b.input("x", {1, 6, 7, 8});  // N x H x W x K
        int w1 = b.constant("W1", rnd(w1s, 3, 0.4f));
        int w2 = w2_const ? b.constant("W2", rnd(w2s, 5, 0.4f)) : b.input("W2", w2s, 5);
        Attrs a = {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}, {"group", ai(w1s[0])}};
        for (auto& [k, v] : extra) a[k] = v;
        int y = b.node("ConvNhwcBand", {x, w1, -1, w2, -1}, {1, 6, 7, w1s[0]}, a);
        b.g.nodes.back().domain = "jiffy";
        b.output(y);
        ScopedPasses sp(false);
        std::shared_ptr<const Plan> plan;
        return compile_graph(b.g, CompileOptions{}, &plan);
    };
    Status st = compile_band({16, 8, 1, 1}, {16, 1, 3, 3}, {});
    EXPECT_TRUE(st.ok()) << st.message();
    st = compile_band({16, 8, 5, 5}, {16, 1, 3, 3}, {});
    EXPECT_NE(st.message().find("W1 must be M x 8 x 1 x 1"), std::string::npos) << st.message();
    // A 3x3 W1 is a stem conv: it reads an NCHW X (here 1 x 6 x 7 x 8: K = 6), with stride 2 and
    // four pads, over few enough channels for the stem kernel.
    st = compile_band({16, 8, 3, 3}, {16, 1, 3, 3}, {});
    EXPECT_NE(st.message().find("a 3x3 W1 (a stem conv) reads an NCHW X"), std::string::npos) << st.message();
    st = compile_band({16, 8, 3, 3}, {16, 1, 3, 3}, {{"_pw_x_nchw", ai(1)}});
    EXPECT_NE(st.message().find("W1 must be M x 6 x 3 x 3 (the stem)"), std::string::npos) << st.message();
    st = compile_band({16, 6, 3, 3}, {16, 1, 3, 3}, {{"_pw_x_nchw", ai(1)}, {"_pw_pads", aints({1, 1})}});
    EXPECT_NE(st.message().find("_pw_pads must be 4 non-negative ints"), std::string::npos) << st.message();
    st = compile_band({16, 6, 3, 3}, {16, 1, 3, 3}, {{"_pw_x_nchw", ai(1)}, {"_pw_strides", aints({1, 1})}});
    EXPECT_NE(st.message().find("stride 2, got _pw_strides"), std::string::npos) << st.message();
    st = compile_band({16, 6, 3, 3}, {16, 1, 3, 3}, {{"_pw_x_nchw", ai(1)}});  // 6 channels, 4 x 3 out
    EXPECT_NE(st.message().find("is not one the direct stem kernel runs here"), std::string::npos) << st.message();
    st = compile_band({16, 8, 1, 1}, {12, 1, 3, 3}, {});
    EXPECT_NE(st.message().find("W2 must be 16 x 1 x kh x kw"), std::string::npos) << st.message();
    st = compile_band({16, 8, 1, 1}, {16, 1, 3, 3}, {{"group", ai(2)}});
    EXPECT_NE(st.message().find("group must be 16"), std::string::npos) << st.message();
    st = compile_band({16, 8, 1, 1}, {16, 1, 3, 3}, {{"_pw_fused_act", as("Gelu")}});
    EXPECT_NE(st.message().find("_pw_fused_act must be"), std::string::npos) << st.message();
    st = compile_band({16, 8, 1, 1}, {16, 1, 3, 3}, {}, false);
    EXPECT_NE(st.message().find("must be a constant"), std::string::npos) << st.message();
}

// Squeeze-and-excite as EfficientNet and MobileNetV3 export it: expand 1x1, depthwise (SiLU),
// GlobalAveragePool, 1x1 (SiLU), 1x1 (Sigmoid), Mul(depthwise out, scale), project 1x1 (and the
// next block's depthwise). N images (the scale per image: N x C x 1 x 1) or one scale for all (a
// graph input of 1 x C x 1 x 1, either Mul operand order).
struct SeBlock {
    Builder b;
    SeBlock(int64_t N, int64_t C, int64_t M, int64_t H, int64_t W, bool shared_scale, bool scale_first,
            bool mul_read_elsewhere = false, bool residual = false) {
        auto pw = [&](int x, int64_t K, int64_t Mo, int64_t h, int64_t w, uint32_t seed, Attrs a = {}) {
            int wt = b.constant("Wp" + std::to_string(seed), rnd({Mo, K, 1, 1}, seed, 0.4f));
            int bias = b.constant("Bp" + std::to_string(seed), rnd({Mo}, seed + 1, 0.2f));
            return b.node("Conv", {x, wt, bias}, {N, Mo, h, w}, a);
        };
        auto dw = [&](int x, int64_t Cc, uint32_t seed, Attrs extra = {}) {
            int wt = b.constant("Wd" + std::to_string(seed), rnd({Cc, 1, 3, 3}, seed, 0.5f));
            Attrs a = {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}, {"group", ai(Cc)}};
            for (auto& [k, v] : extra) a[k] = v;
            return b.node("Conv", {x, wt}, {N, Cc, H, W}, a);
        };
        int x = b.input("x", {N, 8, H, W});
        int e = pw(x, 8, C, H, W, 3, {{"_fused_act", as("Silu")}});
        int d = dw(e, C, 5, {{"_fused_act", as("Silu")}});
        int s;
        if (shared_scale) {
            s = b.input("s", {1, C, 1, 1}, 9);
        } else {
            int gap = b.node("GlobalAveragePool", {d}, {N, C, 1, 1});
            int f1 = pw(gap, C, 4, 1, 1, 11, {{"_fused_act", as("Silu")}});
            s = pw(f1, 4, C, 1, 1, 13, {{"_fused_act", as("Sigmoid")}});
        }
        int m = scale_first ? b.node("Mul", {s, d}, {N, C, H, W}) : b.node("Mul", {d, s}, {N, C, H, W});
        int p = pw(m, C, M, H, W, 15);
        if (residual) p = b.node("Add", {p, b.input("r", {N, M, H, W}, 19)}, {N, M, H, W});  // fused into the 1x1
        b.output(dw(p, M, 17));
        if (mul_read_elsewhere) b.output(m);
    }
};

int count_ops(const Plan& plan, const char* op) {
    int n = 0;
    for (const auto& st : plan.step_info) n += st.op == op;
    return n;
}

// The Mul goes into the project 1x1 (ConvNhwc _x_scale): the same outputs as the graph without
// passes (within 1e-5), at one and two threads, per-image and shared scales, both operand orders,
// with and without a residual fused into the 1x1.
TEST(Passes, ChannelScaleFoldsIntoTheNextOneByOne) {
    for (int64_t N : {1, 2})
        for (bool shared : {false, true})
            for (bool first : {false, true}) {
                const bool res = first != shared;  // a residual (input 3) in half the cases
                SCOPED_TRACE(testing::Message() << "N " << N << " shared " << shared << " scale first " << first
                                                << " residual " << res);
                SeBlock se(N, 40, 24, 9, 7, shared, first, false, res);
                Graph g = se.b.g;
                if (res) ASSERT_EQ(passes::fuse_residual(g), 1);  // the Add into the 1x1, as the pipeline does
                ASSERT_GT(passes::layout_nhwc(g), 0);
                ASSERT_EQ(passes::fuse_channel_scale(g), 1);
                const std::vector<std::string> left = ops(g);
                EXPECT_EQ(std::count(left.begin(), left.end(), "Mul"), 0);
                const auto want = run(se.b.g, se.b.feeds, false);
                expect_close(run(g, se.b.feeds, false), want);
                for (int threads : {1, 2}) {
                    std::vector<std::string> kernels;
                    expect_close(run_threads(se.b, threads, &kernels), want);
                    EXPECT_TRUE(std::any_of(kernels.begin(), kernels.end(), [](const std::string& k) {
                        return k.find("x-scaled") != std::string::npos;
                    })) << threads << " threads";
                }
                std::shared_ptr<const Plan> plan;
                run(se.b.g, se.b.feeds, true, &plan);
                EXPECT_EQ(count_ops(*plan, "Mul"), 0);
                ScopedEnv off("JIFFY_SCALE_FUSE", "0");
                run(se.b.g, se.b.feeds, true, &plan);
                EXPECT_EQ(count_ops(*plan, "Mul"), 1);
            }
}

// A scaled 1x1 large enough for AMX (64 -> 96 on 10x11): X goes channels-last and scaled into the
// scratch, then the AMX product (exact weights here: the compare is at 1e-5). The same outputs as
// the graph without passes at one and two threads, per-image and shared scales.
TEST(Passes, ChannelScaledOneByOneRunsOnAmx) {
    ScopedEnv exact("JIFFY_AMX", "x3");
    const bool amx = kernels::amx_usable() && kernels::active_isa() == kernels::Isa::kAvx512;
    for (int64_t N : {1, 2})
        for (bool shared : {false, true}) {
            SCOPED_TRACE(testing::Message() << "N " << N << " shared " << shared);
            SeBlock se(N, 64, 96, 10, 11, shared, false);
            const auto want = run(se.b.g, se.b.feeds, false);
            for (int threads : {1, 2}) {
                std::vector<std::string> kernels;
                expect_close(run_threads(se.b, threads, &kernels), want);
                std::string all;
                for (const auto& k : kernels) all += k + "; ";
                if (amx) EXPECT_NE(all.find("x-scaled amx_bf16x3"), std::string::npos) << threads << ": " << all;
            }
            // An infinity in X: AMX refuses the split input and the AVX-512 kernel runs the image
            // (the same non-finite pattern as the graph without passes, finite values close).
            SeBlock bad(N, 64, 96, 10, 11, shared, false);
            bad.b.feeds["x"].as<float>()[17] = INFINITY;
            const auto ref = run(bad.b.g, bad.b.feeds, false);
            const auto got = run_threads(bad.b, 1, nullptr);
            ASSERT_EQ(got.size(), ref.size());
            int nonfinite = 0;
            for (int64_t i = 0; i < ref[0].numel(); ++i) {
                const double a = got[0].get_f64(i), b = ref[0].get_f64(i);
                if (std::isnan(b)) EXPECT_TRUE(std::isnan(a)) << i;
                else if (std::isinf(b)) EXPECT_EQ(a, b) << i;
                else ASSERT_NEAR(a, b, 1e-5 * (1 + std::abs(b))) << i;
                nonfinite += !std::isfinite(b);
            }
            EXPECT_GT(nonfinite, 0);
        }
}

// Not folded: the scaled X read elsewhere too, or weights larger than a channel's plane (M > H x
// W: scaling them would cost more than the Mul).
TEST(Passes, ChannelScaleStaysWhereFoldingDoesNotPay) {
    SeBlock read_twice(1, 40, 24, 9, 7, false, false, true);
    Graph g = read_twice.b.g;
    ASSERT_GT(passes::layout_nhwc(g), 0);
    EXPECT_EQ(passes::fuse_channel_scale(g), 0);
    SeBlock wide(1, 40, 72, 9, 7, false, false);  // 72 outputs > 63 pixels
    Graph g2 = wide.b.g;
    ASSERT_GT(passes::layout_nhwc(g2), 0);
    EXPECT_EQ(passes::fuse_channel_scale(g2), 0);
    std::shared_ptr<const Plan> plan;
    expect_close(run(wide.b.g, wide.b.feeds, true, &plan), run(wide.b.g, wide.b.feeds, false));
    EXPECT_EQ(count_ops(*plan, "Mul"), 1);
}

// A hand-written ConvNhwc with _x_scale and a malformed scale gets a clear error at compile.
TEST(Passes, MalformedChannelScaleGivesAClearError) {
    auto compile = [](const Shape& ss, Attrs extra, bool with_res_slot = true) {
        Builder b;
        int x = b.input("x", {2, 16, 5, 6});  // NCHW, read in place
        int w = b.constant("W", rnd({8, 16, 1, 1}, 3, 0.4f));
        int s = b.input("s", ss, 5);
        Attrs a = {{"_x_nchw", ai(1)}, {"_x_scale", ai(1)}};
        for (auto& [k, v] : extra) a[k] = v;
        std::vector<int> ins = with_res_slot ? std::vector<int>{x, w, -1, -1, s} : std::vector<int>{x, w, -1, s};
        int y = b.node("ConvNhwc", ins, {2, 5, 6, 8}, a);
        b.g.nodes.back().domain = "jiffy";
        b.output(y);
        ScopedPasses sp(false);
        std::shared_ptr<const Plan> plan;
        return compile_graph(b.g, CompileOptions{}, &plan);
    };
    Status st = compile({2, 16, 1, 1}, {});
    EXPECT_TRUE(st.ok()) << st.message();
    st = compile({1, 16, 1, 1}, {});
    EXPECT_TRUE(st.ok()) << st.message();
    st = compile({2, 8, 1, 1}, {});
    EXPECT_NE(st.message().find("_x_scale (input 4) must be 1 x 16 x 1 x 1 or 2 x 16 x 1 x 1, got shape 2x8x1x1"),
              std::string::npos) << st.message();
    st = compile({3, 16, 1, 1}, {});
    EXPECT_NE(st.message().find("_x_scale (input 4) must be"), std::string::npos) << st.message();
    st = compile({2, 16, 1, 1}, {}, false);
    EXPECT_NE(st.message().find("_x_scale needs 5 inputs"), std::string::npos) << st.message();
    st = compile({2, 16, 1, 1}, {{"_fused_residual", ai(1)}});
    EXPECT_NE(st.message().find("_x_scale needs 5 inputs"), std::string::npos) << st.message();
}

// A hand-written channels-last 1x1 (domain jiffy) with a stride or padding is not fused: the band
// step runs its 1x1 as stride 1 without padding.
TEST(Passes, BandFusionSkipsAStridedOrPaddedOneByOne) {
    ScopedEnv min_kb("JIFFY_BAND_MIN_KB", "0");
    for (const Attrs& extra : {Attrs{{"strides", aints({2, 2})}}, Attrs{{"pads", aints({1, 1, 1, 1})}}}) {
        Builder b;
        int x = b.input("x", {1, 9, 11, 16});  // N x H x W x C
        int w1 = b.constant("W1", rnd({32, 16, 1, 1}, 3, 0.4f));
        int p1 = b.node("ConvNhwc", {x, w1}, {1, 9, 11, 32}, extra);
        b.g.nodes.back().domain = "jiffy";
        int wd = b.constant("Wd", rnd({32, 1, 3, 3}, 5, 0.5f));
        int d1 = b.node("ConvNhwc", {p1, wd}, {1, 9, 11, 32},
                        {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}, {"group", ai(32)}});
        b.g.nodes.back().domain = "jiffy";
        b.output(d1);
        Graph g = b.g;
        EXPECT_EQ(passes::fuse_conv_band(g), 0);
        b.g.nodes[0].attrs.clear();  // the same pair as a plain 1x1: fused
        Graph g2 = b.g;
        EXPECT_EQ(passes::fuse_conv_band(g2), 1);
    }
}

// ---------------------------------------------------------------- weights to 17 bits
namespace {

// Compiles and runs b's graph as the default compiles it (the probe deciding) and with
// JIFFY_AMX=x3 (every product exact, no probe).
void run_both_modes(const Builder& b, std::shared_ptr<const Plan>* plan, std::vector<Tensor>* got,
                    std::shared_ptr<const Plan>* exact, std::vector<Tensor>* want) {
    {
        ScopedEnv m("JIFFY_AMX", nullptr);
        *got = run(b.g, b.feeds, true, plan);
    }
    ScopedEnv m("JIFFY_AMX", "x3");
    *want = run(b.g, b.feeds, true, exact);
}

int w17_kernels(const Plan& p) {
    int n = 0;
    for (const auto& k : p.kernels) n += k && k->describe().find("w17") != std::string::npos;
    return n;
}

double max_rel_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    double worst = 0;
    for (size_t o = 0; o < a.size(); ++o) {
        double mag = 0, d = 0;
        for (int64_t i = 0; i < a[o].numel(); ++i) {
            mag = std::max(mag, std::abs(b[o].get_f64(i)));
            d = std::max(d, std::abs(a[o].get_f64(i) - b[o].get_f64(i)));
        }
        worst = std::max(worst, d / mag);
    }
    return worst;
}

}  // namespace

// A feed-forward block (MatMul + bias + Relu, MatMul + bias + residual) as in a transformer
// layer: both products on AMX take the weights to 17 bits (the probe's outputs within 1e-5),
// and the outputs stay within 1e-5 of the exact plan's (JIFFY_AMX=x3, where nothing is probed).
TEST(FastWeights, FeedForwardTakesThem) {
    if (!kernels::amx_usable()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    if (kernels::amx_parts() != 3) GTEST_SKIP() << "JIFFY_AMX=x2";
    const int64_t S = 64, D = 256, F = 512;
    Builder b;
    int x = b.input("x", {1, S, D});
    int h = b.node("MatMul", {x, b.constant("w1", rnd({D, F}, 11, 0.06f))}, {1, S, F});
    h = b.node("Add", {h, b.constant("b1", rnd({F}, 12, 0.1f))}, {1, S, F});
    h = b.node("Relu", {h}, {1, S, F});
    int y = b.node("MatMul", {h, b.constant("w2", rnd({F, D}, 13, 0.04f))}, {1, S, D});
    y = b.node("Add", {y, b.constant("b2", rnd({D}, 14, 0.1f))}, {1, S, D});
    b.output(b.node("Add", {y, x}, {1, S, D}));
    std::shared_ptr<const Plan> fast, exact;
    std::vector<Tensor> got, want;
    run_both_modes(b, &fast, &got, &exact, &want);
    ASSERT_TRUE(fast && exact);
    EXPECT_EQ(fast->fast_weight_steps, 2);
    EXPECT_GT(fast->fast_weight_err, 0.0);
    EXPECT_LE(fast->fast_weight_err, kFastWeightsTol);
    EXPECT_EQ(w17_kernels(*fast), 2);
    EXPECT_EQ(exact->fast_weight_steps, 0);
    EXPECT_EQ(exact->fast_weight_err, -1.0);
    EXPECT_EQ(w17_kernels(*exact), 0);
    const double d = max_rel_diff(got, want);
    EXPECT_GT(d, 0.0);  // the modes differ: the fast one really ran
    EXPECT_LE(d, kFastWeightsTol);
}

// The difference of two products with nearly equal weights cancels all but ~1e-4 of their
// magnitude, so 17-bit weights would move it by far more than 1e-5: the probe keeps both products
// exact, and the plan gives the exact plan's bits.
TEST(FastWeights, CancellingModelStaysExact) {
    if (!kernels::amx_usable()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    if (kernels::amx_parts() != 3) GTEST_SKIP() << "JIFFY_AMX=x2";
    const int64_t M = 32, K = 128, N = 64;
    Tensor w1 = rnd({K, N}, 21, 0.1f), w2 = rnd({K, N}, 21, 0.1f), d = rnd({K, N}, 22, 1e-5f);  // (a Tensor copy shares its bytes)
    for (int64_t i = 0; i < w2.numel(); ++i) w2.as<float>()[i] += d.as<float>()[i];
    Builder b;
    int x = b.input("x", {M, K});
    int p1 = b.node("MatMul", {x, b.constant("w1", w1)}, {M, N});
    int p2 = b.node("MatMul", {x, b.constant("w2", w2)}, {M, N});
    b.output(b.node("Sub", {p1, p2}, {M, N}));
    std::shared_ptr<const Plan> plan, exact;
    std::vector<Tensor> got, want;
    run_both_modes(b, &plan, &got, &exact, &want);
    ASSERT_TRUE(plan && exact);
    EXPECT_EQ(plan->fast_weight_steps, 0);
    EXPECT_GT(plan->fast_weight_err, kFastWeightsTol);
    EXPECT_EQ(w17_kernels(*plan), 0);
    int amx = 0;
    for (const auto& k : plan->kernels) amx += k && k->describe().find("amx_bf16x3") != std::string::npos;
    EXPECT_EQ(amx, 2);  // both products on AMX (exact), so the probe had something to decide
    ASSERT_EQ(got.size(), 1u);
    for (int64_t i = 0; i < got[0].numel(); ++i) ASSERT_EQ(got[0].as<float>()[i], want[0].as<float>()[i]) << i;
    // With only the ArgMax of each row as output (no float32 output to measure), the probe
    // compares the indices: some move, so the products stay exact again.
    b.g.outputs.clear();
    b.output(b.node("ArgMax", {b.g.nodes.back().outputs[0]}, {M, 1}, {{"axis", ai(1)}}));
    b.g.values[size_t(b.g.outputs[0])].dtype = DType::kI64;
    run_both_modes(b, &plan, &got, &exact, &want);
    ASSERT_TRUE(plan && exact);
    EXPECT_EQ(plan->fast_weight_steps, 0);
    EXPECT_TRUE(std::isinf(plan->fast_weight_err));  // an index moved
    EXPECT_EQ(w17_kernels(*plan), 0);
    ASSERT_EQ(got.size(), 1u);
    for (int64_t i = 0; i < got[0].numel(); ++i) ASSERT_EQ(got[0].as<int64_t>()[i], want[0].as<int64_t>()[i]) << i;
}

// A plan whose convs cancel (the difference of two 1x1 convs with weights 1e-4 apart) and whose
// MatMul does not: all fast at once moves the conv output too much, so the probe goes group by
// group and keeps the MatMul's fast weights while both convs stay exact.
TEST(FastWeights, GroupsDecideApart) {
    if (!kernels::amx_usable()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    if (kernels::amx_parts() != 3) GTEST_SKIP() << "JIFFY_AMX=x2";
    const int64_t C = 64, M = 64, H = 16, S = 64, D = 256;
    Tensor w1 = rnd({M, C, 1, 1}, 31, 0.1f), w2 = rnd({M, C, 1, 1}, 31, 0.1f), d = rnd({M, C, 1, 1}, 32, 1e-5f);
    for (int64_t i = 0; i < w2.numel(); ++i) w2.as<float>()[i] += d.as<float>()[i];
    Builder b;
    int img = b.input("img", {1, C, H, H});
    int c1 = b.node("Conv", {img, b.constant("w1", w1)}, {1, M, H, H});
    int c2 = b.node("Conv", {img, b.constant("w2", w2)}, {1, M, H, H});
    b.output(b.node("Sub", {c1, c2}, {1, M, H, H}));
    int x = b.input("x", {S, D});
    b.output(b.node("MatMul", {x, b.constant("wm", rnd({D, D}, 33, 0.06f))}, {S, D}));
    std::shared_ptr<const Plan> plan, exact;
    std::vector<Tensor> got, want;
    run_both_modes(b, &plan, &got, &exact, &want);
    ASSERT_TRUE(plan && exact);
    int convs = 0, conv_fast = 0, mm_fast = 0;
    for (const auto& k : plan->kernels) {
        const std::string dk = k ? k->describe() : "";
        if (dk.find("conv") != std::string::npos && dk.find("amx") != std::string::npos) {
            ++convs;
            conv_fast += dk.find("w17") != std::string::npos;
        }
        if (dk.find("gemm amx") != std::string::npos) mm_fast += dk.find("w17") != std::string::npos;
    }
    EXPECT_EQ(convs, 2);  // both convs on AMX: the probe had them to decide on
    EXPECT_EQ(conv_fast, 0);
    EXPECT_EQ(mm_fast, 1);
    EXPECT_EQ(plan->fast_weight_steps, 1);
    EXPECT_GT(plan->fast_weight_err, 0.0);
    EXPECT_LE(plan->fast_weight_err, kFastWeightsTol);
    ASSERT_EQ(got.size(), 2u);
    for (int64_t i = 0; i < got[0].numel(); ++i) ASSERT_EQ(got[0].as<float>()[i], want[0].as<float>()[i]) << i;
    EXPECT_LE(max_rel_diff({got[1]}, {want[1]}), kFastWeightsTol);
}

// ---- GEMVs' less exact weights (docs/gemv.md): 24-bit, or on Intel's cores 20-bit blocks

bool w24_here() {
    return kernels::active_isa() == kernels::Isa::kAvx512 && kernels::gemv_w24_supported(kernels::Isa::kAvx512);
}

bool intel_tuned() { return kernels::tuning_vendor() == kernels::CpuVendor::kIntel; }

// `rows` of a K x `cols` weight, or on Intel's cores (24-bit weights offered only where a plan's
// constants overflow L2, ops/linalg.cpp choose_gemv_modes) enough rows, a multiple of 64, that
// such a weight alone is 1.25x this core's L2: the tests below then decide the same way everywhere.
int64_t rows_for_w24(int64_t rows, int64_t cols) {
    if (!intel_tuned()) return rows;
    const int64_t past = (kernels::l2_cache_bytes() * 5 / 4) / (4 * cols);
    return std::max(rows, (past + 63) / 64 * 64);
}

// As run_both_modes, the exact plan with JIFFY_GEMV_W24=0 (every GEMV on its float32 weights).
void run_gemv_modes(const Builder& b, std::shared_ptr<const Plan>* plan, std::vector<Tensor>* got,
                    std::shared_ptr<const Plan>* exact, std::vector<Tensor>* want) {
    *got = run(b.g, b.feeds, true, plan);
    ScopedEnv off("JIFFY_GEMV_W24", "0");
    *want = run(b.g, b.feeds, true, exact);
}

// The GEMVs on less exact weights (kernel column "... w24" or "... i20").
int fast_gemvs(const Plan& p) {
    int n = 0;
    for (const auto& k : p.kernels)
        n += k && (k->describe().find(" w24") != std::string::npos || k->describe().find(" i20") != std::string::npos);
    return n;
}

// A wake-word head (openWakeWord's 1536 -> 128 -> 128 -> 1 with Sigmoid, 850 KB of weights; `rows`
// inputs instead of 1536 where given): both 128-wide GEMVs take 24-bit weights (the last, one column, is a dot product: no mode), the
// probe's outputs within 1e-5 and its steps within 3e-5, and the outputs within 1e-5 of the
// float32 plan's. `logit_shift` added to the last bias: 100 saturates the Sigmoid at exactly 1,
// the probe sees no output move and keeps every GEMV exact (the plan's bits are the float32 plan's).
Builder wake_word_head(float logit_shift, int64_t rows = rows_for_w24(1536, 128)) {
    Builder b;
    int x = b.input("x", {1, rows});
    Tensor b3 = rnd({1}, 56, 0.1f);
    b3.as<float>()[0] += logit_shift;
    int h = b.node("Gemm", {x, b.constant("w1", rnd({rows, 128}, 51, 0.05f)), b.constant("b1", rnd({128}, 52, 0.1f))},
                   {1, 128});
    h = b.node("Relu", {h}, {1, 128});
    h = b.node("Gemm", {h, b.constant("w2", rnd({128, 128}, 53, 0.2f)), b.constant("b2", rnd({128}, 54, 0.1f))},
               {1, 128});
    h = b.node("Relu", {h}, {1, 128});
    h = b.node("Gemm", {h, b.constant("w3", rnd({128, 1}, 55, 0.2f)), b.constant("b3", b3)}, {1, 1});
    b.output(b.node("Sigmoid", {h}, {1, 1}));
    return b;
}

TEST(FastWeights, GemvTakes24BitWeights) {
    if (!w24_here()) GTEST_SKIP() << "no AVX-512 VBMI here (or JIFFY_GEMV_W24=0 / JIFFY_ISA)";
    std::shared_ptr<const Plan> fast, exact;
    std::vector<Tensor> got, want;
    run_gemv_modes(wake_word_head(0.0f), &fast, &got, &exact, &want);
    ASSERT_TRUE(fast && exact);
    EXPECT_EQ(fast_gemvs(*fast), 2);
    EXPECT_EQ(fast->fast_weight_steps, 2);
    EXPECT_GT(fast->fast_weight_err, 0.0);
    EXPECT_LE(fast->fast_weight_err, kFastWeightsTol);
    EXPECT_GT(fast->fast_weight_step_err, 0.0);
    EXPECT_LE(fast->fast_weight_step_err, kFastWeightsStepTol);
    EXPECT_EQ(fast_gemvs(*exact), 0);
    EXPECT_EQ(exact->fast_weight_err, -1.0);  // nothing to probe
    const double d = max_rel_diff(got, want);
    EXPECT_GT(d, 0.0);  // the 24-bit weights really ran
    EXPECT_LE(d, kFastWeightsTol);
}

TEST(FastWeights, GemvStaysExactWhereNoOutputMoves) {
    if (!w24_here()) GTEST_SKIP() << "no AVX-512 VBMI here (or JIFFY_GEMV_W24=0 / JIFFY_ISA)";
    std::shared_ptr<const Plan> plan, exact;
    std::vector<Tensor> got, want;
    run_gemv_modes(wake_word_head(100.0f), &plan, &got, &exact, &want);
    ASSERT_TRUE(plan && exact);
    EXPECT_EQ(plan->fast_weight_err, 0.0);      // the Sigmoid's 1.0 on every probe
    EXPECT_GT(plan->fast_weight_step_err, 0.0);  // while the logits moved
    EXPECT_EQ(plan->fast_weight_steps, 0);
    EXPECT_EQ(fast_gemvs(*plan), 0);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].as<float>()[0], want[0].as<float>()[0]);
}

// The difference of two GEMVs whose weights are 1e-5 apart: 24-bit weights would move it by far
// more than the bounds, so both stay float32 and the plan gives the float32 plan's bits.
TEST(FastWeights, CancellingGemvsStayExact) {
    if (!w24_here()) GTEST_SKIP() << "no AVX-512 VBMI here (or JIFFY_GEMV_W24=0 / JIFFY_ISA)";
    const int64_t K = rows_for_w24(512, 2 * 64), N = 64;
    Tensor w1 = rnd({K, N}, 61, 0.1f), w2 = rnd({K, N}, 61, 0.1f), d = rnd({K, N}, 62, 1e-6f);
    for (int64_t i = 0; i < w2.numel(); ++i) w2.as<float>()[i] += d.as<float>()[i];
    Builder b;
    int x = b.input("x", {1, K});
    int p1 = b.node("MatMul", {x, b.constant("w1", w1)}, {1, N});
    int p2 = b.node("MatMul", {x, b.constant("w2", w2)}, {1, N});
    b.output(b.node("Sub", {p1, p2}, {1, N}));
    std::shared_ptr<const Plan> plan, exact;
    std::vector<Tensor> got, want;
    run_gemv_modes(b, &plan, &got, &exact, &want);
    ASSERT_TRUE(plan && exact);
    EXPECT_GT(plan->fast_weight_err, kFastWeightsTol);
    EXPECT_EQ(plan->fast_weight_steps, 0);
    EXPECT_EQ(fast_gemvs(*plan), 0);
    int gemvs = 0;
    for (const auto& k : plan->kernels) gemvs += k && k->describe().find("gemv") != std::string::npos;
    EXPECT_EQ(gemvs, 2);  // both products GEMVs, so the probe had them to decide on
    ASSERT_EQ(got.size(), 1u);
    for (int64_t i = 0; i < got[0].numel(); ++i) ASSERT_EQ(got[0].as<float>()[i], want[0].as<float>()[i]) << i;
}

// A model whose weights stay in L1 between runs (64 x 64 and 64 x 10: 18 KB) keeps its float32
// GEMVs (the byte permute would cost more than the bytes it saves): nothing offered, no probe.
TEST(FastWeights, GemvInL1StaysFloat32) {
    if (!w24_here()) GTEST_SKIP() << "no AVX-512 VBMI here (or JIFFY_GEMV_W24=0 / JIFFY_ISA)";
    Builder b;
    int x = b.input("x", {1, 64});
    int h = b.node("Gemm", {x, b.constant("w1", rnd({64, 64}, 71, 0.2f))}, {1, 64});
    b.output(b.node("Gemm", {h, b.constant("w2", rnd({64, 10}, 72, 0.2f))}, {1, 10}));
    std::shared_ptr<const Plan> plan;
    run(b.g, b.feeds, true, &plan);
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->fast_weight_err, -1.0);
    EXPECT_EQ(fast_gemvs(*plan), 0);
}

// A GEMV whose weights are under 1/8 of the plan's constant bytes (256 KB, or on Intel past L2:
// rows_for_w24, beside a constant 9x as large that an Add reads): the bytes it would save are no
// visible share of a run, so nothing is probed and it stays float32; the same GEMV alone takes them.
TEST(FastWeights, GemvOfASmallShareStaysFloat32) {
    if (!w24_here()) GTEST_SKIP() << "no AVX-512 VBMI here (or JIFFY_GEMV_W24=0 / JIFFY_ISA)";
    const int64_t K = rows_for_w24(512, 128), big_n = std::max<int64_t>(600000, 9 * K * 128);
    for (bool big : {true, false}) {
        Builder b;
        int x = b.input("x", {1, K});
        b.output(b.node("Gemm", {x, b.constant("w", rnd({K, 128}, 81, 0.05f)), b.constant("c", rnd({128}, 82, 0.1f))},
                        {1, 128}));
        if (big) {
            int z = b.input("z", {1, big_n});
            b.output(b.node("Add", {z, b.constant("k", rnd({big_n}, 83))}, {1, big_n}));
        }
        std::shared_ptr<const Plan> plan;
        run(b.g, b.feeds, true, &plan);
        ASSERT_TRUE(plan);
        EXPECT_EQ(plan->fast_weight_err == -1.0, big) << "big " << big;
        EXPECT_EQ(fast_gemvs(*plan), big ? 0 : 1) << "big " << big;
    }
}

// On Intel's cores the 24-bit block runs from L2 at about half float32's rate: a wake-word head
// whose 850 KB stay in this core's L2 between runs is not offered them (no probe), the same head
// with a first layer past L2 takes them in both GEMVs.
TEST(FastWeights, GemvInL2StaysFloat32OnIntel) {
    if (!w24_here()) GTEST_SKIP() << "no AVX-512 VBMI here (or JIFFY_GEMV_W24=0 / JIFFY_ISA)";
    if (!intel_tuned()) GTEST_SKIP() << "Intel's rule (JIFFY_TUNE_VENDOR=intel to try it here)";
    if (kernels::l2_cache_bytes() < (1 << 20)) GTEST_SKIP() << "an L2 under 1 MiB holds no 850 KB head";
    for (const int64_t rows : {int64_t(1536), rows_for_w24(1536, 128)}) {
        const Builder b = wake_word_head(0.0f, rows);
        std::shared_ptr<const Plan> plan;
        run(b.g, b.feeds, true, &plan);
        ASSERT_TRUE(plan);
        const bool past = rows > 1536;
        EXPECT_EQ(plan->fast_weight_err == -1.0, !past) << rows << " rows";
        EXPECT_EQ(fast_gemvs(*plan), past ? 2 : 0) << rows << " rows";
    }
}

// On Intel's cores a Gather's table is not what a run streams: a GEMV of 1/4 of L2 beside an
// embedding table of 1.5x L2 that a Gather reads a row of stays float32 (not offered: its weights
// stay in L2), while beside such a constant that an Add reads whole it is offered and taken.
TEST(FastWeights, GemvBesideAGatherTableStaysFloat32OnIntel) {
    if (!w24_here()) GTEST_SKIP() << "no AVX-512 VBMI here (or JIFFY_GEMV_W24=0 / JIFFY_ISA)";
    if (!intel_tuned()) GTEST_SKIP() << "Intel's rule (JIFFY_TUNE_VENDOR=intel to try it here)";
    const int64_t l2 = kernels::l2_cache_bytes(), K = l2 / 4 / (4 * 128), rows = l2 * 3 / 2 / (4 * 512);
    for (bool gather : {true, false}) {
        Builder b;
        int x = b.input("x", {1, K});
        b.output(b.node("Gemm", {x, b.constant("w", rnd({K, 128}, 91, 0.05f)), b.constant("c", rnd({128}, 92, 0.1f))},
                        {1, 128}));
        const int t = b.constant("t", rnd({rows, 512}, 93));
        if (gather) {
            const int i = b.value("i", {1}, DType::kI64);  // a run's index: the table stays a table
            b.g.inputs.push_back(i);
            b.feeds["i"] = i64s({3});
            b.output(b.node("Gather", {t, i}, {1, 512}));
        } else {
            int z = b.input("z", {rows, 512});
            b.output(b.node("Add", {z, t}, {rows, 512}));
        }
        std::shared_ptr<const Plan> plan;
        run(b.g, b.feeds, true, &plan);
        ASSERT_TRUE(plan);
        EXPECT_EQ(fast_gemvs(*plan), gather ? 0 : 1) << "gather " << gather;
    }
}

// A 1x1 conv on AMX (weights are its A operand: W's lo parts left out) takes them too, within
// the bound of the exact plan.
TEST(FastWeights, ConvTakesThem) {
    if (!kernels::amx_usable()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    if (kernels::amx_parts() != 3) GTEST_SKIP() << "JIFFY_AMX=x2";
    const int64_t C = 64, M = 96, H = 16;
    Builder b;
    int img = b.input("img", {1, C, H, H});
    int c = b.node("Conv", {img, b.constant("w", rnd({M, C, 1, 1}, 41, 0.1f)), b.constant("b", rnd({M}, 42, 0.1f))},
                   {1, M, H, H});
    b.output(b.node("Relu", {c}, {1, M, H, H}));
    std::shared_ptr<const Plan> plan, exact;
    std::vector<Tensor> got, want;
    run_both_modes(b, &plan, &got, &exact, &want);
    ASSERT_TRUE(plan && exact);
    EXPECT_EQ(plan->fast_weight_steps, 1);
    EXPECT_EQ(w17_kernels(*plan), 1);
    const double d = max_rel_diff(got, want);
    EXPECT_GT(d, 0.0);
    EXPECT_LE(d, kFastWeightsTol);
}
