// Compile pipeline, arena planning, plan cache, frozen inputs, I/O binding, public APIs, npy.
#include "../test_tmp.h"
#include <gtest/gtest.h>

#include <cstdlib>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/npy.h"
#include "jiffy/jiffy.h"
#include "jiffy/jiffy.hpp"
#include "runtime/model.h"

using namespace jiffy;

namespace {

// A tiny in-memory graph builder for runtime tests.
struct G {
    Graph g;
    G() { g.opset = 17; }
    int input(const std::string& n, DType t, std::vector<int64_t> dims, std::vector<std::string> params = {}) {
        int id = g.add_value(n);
        Value& v = g.values[size_t(id)];
        v.dtype = t;
        v.has_shape = true;
        for (size_t i = 0; i < dims.size(); ++i)
            v.dims.push_back(Dim{dims[i], i < params.size() ? params[i] : ""});
        g.inputs.push_back(id);
        return id;
    }
    int constant(const std::string& n, Tensor t) {
        int id = g.add_value(n);
        g.values[size_t(id)].dtype = t.dtype();
        g.values[size_t(id)].constant = std::make_shared<Tensor>(std::move(t));
        return id;
    }
    int node(const std::string& op, std::vector<int> ins, const std::string& out) {
        int o = g.add_value(out);
        Node n;
        n.op = op;
        n.name = out + "_node";
        n.inputs = std::move(ins);
        n.num_explicit_inputs = int(n.inputs.size());
        n.outputs = {o};
        g.values[size_t(o)].producer = int(g.nodes.size());
        g.nodes.push_back(std::move(n));
        return o;
    }
};

Tensor f32(Shape s, std::vector<float> v) {
    Tensor t(DType::kF32, std::move(s));
    std::memcpy(t.data(), v.data(), v.size() * 4);
    return t;
}

TEST(Compile, FoldsConstantSubgraphAndRuns) {
    G b;
    int x = b.input("x", DType::kF32, {4});
    int c1 = b.constant("c1", f32({4}, {1, 2, 3, 4}));
    int c2 = b.constant("c2", f32({4}, {1, 1, 1, 1}));
    int k = b.node("Add", {c1, c2}, "k");  // constant: folded
    int y = b.node("Mul", {x, k}, "y");
    b.g.outputs = {y};
    std::shared_ptr<const Plan> plan;
    ASSERT_TRUE(compile_graph(b.g, CompileOptions{}, &plan).ok());
    EXPECT_EQ(plan->steps.size(), 1u);  // only Mul remains
    Session s(plan);
    float in[4] = {1, 1, 2, -1};
    std::memcpy(s.input_data(0), in, 16);
    ASSERT_TRUE(s.run().ok());
    const float* out = static_cast<const float*>(s.output_data(0));
    EXPECT_FLOAT_EQ(out[0], 2);
    EXPECT_FLOAT_EQ(out[2], 8);
    EXPECT_FLOAT_EQ(out[3], -5);
}

// Reshape/Flatten/Squeeze/Unsqueeze/Identity read their input's slot instead of copying it (the
// step is dropped), except when their output is a graph output. The root value stays alive
// until the last reader of any of its views, so nothing else is placed over it.
TEST(Compile, ViewOpsShareTheirInputsSlot) {
    G b;
    int x = b.input("x", DType::kF32, {2, 3});
    int shp = b.constant("shp", [] {
        Tensor t(DType::kI64, Shape{1});
        t.as<int64_t>()[0] = 6;
        return t;
    }());
    int r = b.node("Relu", {x}, "r");                 // 2x3 in the arena
    int f = b.node("Reshape", {r, shp}, "f");         // view of r: dropped
    int id = b.node("Identity", {f}, "id");           // view of a view: dropped
    int n1 = b.node("Neg", {id}, "n1");               // reads r's slot
    int n2 = b.node("Neg", {n1}, "n2");               // may not land on r's slot while y reads it
    int y = b.node("Add", {n2, f}, "y");              // a late reader of the view keeps r alive
    int fx = b.node("Flatten", {x}, "fx");            // view of a graph input, also a graph output: kept
    b.g.outputs = {y, fx};
    std::shared_ptr<const Plan> plan;
    ASSERT_TRUE(compile_graph(b.g, CompileOptions{}, &plan).ok());
    std::vector<std::string> ops;
    for (const StepInfo& si : plan->step_info) ops.push_back(si.op);
    EXPECT_EQ(ops, (std::vector<std::string>{"Relu", "Neg", "Neg", "Add", "Flatten"}));
    Session s(plan);
    const float in[6] = {1, -2, 3, -4, 5, -6};
    std::memcpy(s.input_data(0), in, sizeof(in));
    for (int rep = 0; rep < 2; ++rep) {
        ASSERT_TRUE(s.run().ok());
        const float* out = static_cast<const float*>(s.output_data(0));
        const float* out2 = static_cast<const float*>(s.output_data(1));
        for (int i = 0; i < 6; ++i) {
            EXPECT_FLOAT_EQ(out[i], 2 * std::max(in[i], 0.0f)) << i;
            EXPECT_FLOAT_EQ(out2[i], in[i]) << i;
        }
    }
    EXPECT_EQ(plan->outputs[0].shape, (Shape{6}));
}

TEST(Compile, ArenaReusesDeadValues) {
    // A chain x -> r1 -> r2 -> r3 -> r4 -> y: at most two intermediates are alive at once.
    G b;
    int v = b.input("x", DType::kF32, {1024});
    for (int i = 0; i < 4; ++i) v = b.node("Relu", {v}, "r" + std::to_string(i));
    int y = b.node("Neg", {v}, "y");
    b.g.outputs = {y};
    std::shared_ptr<const Plan> plan;
    setenv("JIFFY_PASSES", "0", 1);  // the passes would fuse the chain into one step
    const bool ok = compile_graph(b.g, CompileOptions{}, &plan).ok();
    unsetenv("JIFFY_PASSES");
    ASSERT_TRUE(ok);
    EXPECT_EQ(plan->steps.size(), 5u);
    EXPECT_EQ(plan->arena_bytes, 2u * 4096u);  // ping-pong, not 4 buffers
}

// Compiles b without the graph passes (they would fuse the tests' small ops) and counts the
// plan's Concat steps; *plan stays null on a compile error (reported).
void compile_counting_concats(G& b, std::shared_ptr<const Plan>* plan, int* concats) {
    setenv("JIFFY_PASSES", "0", 1);
    const Status st = compile_graph(b.g, CompileOptions{}, plan);
    unsetenv("JIFFY_PASSES");
    ASSERT_TRUE(st.ok()) << st.message();
    *concats = 0;
    for (const StepInfo& si : (*plan)->step_info) *concats += si.op == "Concat";
}

// A Concat whose inputs are contiguous stretches of its output is dropped: their producers write
// into it (docs/memory.md "In-place Concat"). Results must not change, in the arena or in a graph
// output, and the cases it must leave alone keep their Concat step.
TEST(Compile, ConcatWritesItsPartsInPlace) {
    auto build = [](std::vector<int64_t> dims, int variant, bool cat_is_output) {
        G b;
        int x = b.input("x", DType::kF32, dims);
        int a = b.node("Relu", {x}, "a");
        int n = b.node("Neg", {x}, "n");
        int k = b.node("Abs", {x}, "k");
        std::vector<int> parts = {a, n, k};
        if (variant == 1) parts = {x, n, k};  // a graph input: no step writes it
        if (variant == 2) parts = {a, n, a};  // the same value twice
        int cat = b.node("Concat", parts, "cat");
        b.g.nodes.back().attrs["axis"].kind = Attr::kInt;
        b.g.nodes.back().attrs["axis"].i = 1;
        // `a` is read again after the Concat's last reader, with a new value `u` alive then (which
        // would take the Concat's bytes were a's life not extended to that read).
        int y = cat_is_output ? cat : b.node("Neg", {cat}, "y");
        int u = b.node("Neg", {x}, "u");
        b.g.outputs = {y, b.node("Add", {a, u}, "tail")};
        return b;
    };
    auto check = [&](std::vector<int64_t> dims, int variant, bool cat_is_output, bool expect_in_place) {
        SCOPED_TRACE(::testing::Message() << "dims " << dims.size() << " batch " << dims[0] << " variant "
                                          << variant << " output " << cat_is_output);
        G b = build(dims, variant, cat_is_output);
        std::shared_ptr<const Plan> plan;
        int concats = -1;
        compile_counting_concats(b, &plan, &concats);
        ASSERT_TRUE(plan);
        EXPECT_EQ(concats, expect_in_place ? 0 : 1);
        const int64_t per = dims[1] * dims[2] * dims[3], batch = dims[0];
        std::vector<float> in(size_t(batch * per));
        for (size_t i = 0; i < in.size(); ++i) in[i] = float(int(i * 37 % 23) - 11) * 0.25f;
        std::vector<float> bound(size_t(3 * batch * per), -99.f);
        for (int pass = 0; pass < 2; ++pass) {  // the session's own output buffer, then the caller's
            Session s(plan);
            if (pass == 1) s.bind_output(0, bound.data());
            std::memcpy(s.input_data(0), in.data(), in.size() * 4);
            ASSERT_TRUE(s.run().ok());
            const float* y = static_cast<const float*>(s.output_data(0));
            if (pass == 1) y = bound.data();
            const float* tail = static_cast<const float*>(s.output_data(1));
            for (int64_t bi = 0; bi < batch; ++bi)
                for (int64_t j = 0; j < 3; ++j)
                    for (int64_t i = 0; i < per; ++i) {
                        const float v = in[size_t(bi * per + i)];
                        const int which = variant == 1 && j == 0 ? 3 : variant == 2 && j == 2 ? 0 : int(j);
                        const float want = which == 0 ? std::max(v, 0.f) : which == 1 ? -v : which == 2 ? std::fabs(v) : v;
                        const float got = y[size_t((bi * 3 + j) * per + i)];
                        ASSERT_EQ(got, cat_is_output ? want : -want) << "batch " << bi << " part " << j << " at " << i;
                    }
            for (int64_t i = 0; i < batch * per; ++i) ASSERT_EQ(tail[i], std::max(in[size_t(i)], 0.f) - in[size_t(i)]);
        }
    };
    for (bool out : {false, true}) {
        check({1, 4, 4, 4}, 0, out, true);    // 256-byte parts
        check({1, 1, 3, 5}, 0, out, false);   // 60 bytes: a part would start off a 64-byte line
        check({2, 4, 4, 4}, 0, out, false);   // batch 2: parts are strided in the output
        check({1, 4, 4, 4}, 1, out, false);
        check({1, 4, 4, 4}, 2, out, false);
    }
}

// DenseNet's chain of Concats ([x0], [x0, y1], [x0, y1, y2]: each the one before's inputs plus
// one) needs no copy at all: the last owns the parts and each earlier one is a view of its first
// bytes (docs/memory.md). Each layer's y reads the Concat before it, so every view is read after
// later parts were written into the same buffer. With the last Concat in the arena or a graph
// output; a prefix that is itself a graph output keeps its step (its bytes are the caller's).
TEST(Compile, ConcatChainIsViewsOfTheLastConcat) {
    auto build = [](bool last_is_output, bool prefix_is_output) {
        G b;
        int x = b.input("x", DType::kF32, {1, 16, 1, 1});
        int x0 = b.node("Relu", {x}, "x0");
        std::vector<int> parts = {x0}, cats;
        for (int l = 1; l <= 3; ++l) {
            int cat = b.node("Concat", parts, "cat" + std::to_string(l));
            b.g.nodes.back().attrs["axis"].kind = Attr::kInt;
            b.g.nodes.back().attrs["axis"].i = 1;
            cats.push_back(cat);
            // y_l = -(sum of the layer's input) per channel of the first 16: a Slice-free reader
            // of the whole view: ReduceSum over the channels, broadcast back by Add with x0.
            int s = b.node("ReduceSum", {cat}, "s" + std::to_string(l));
            b.g.nodes.back().attrs["keepdims"].kind = Attr::kInt;
            b.g.nodes.back().attrs["keepdims"].i = 1;
            parts.push_back(b.node("Sub", {x0, s}, "y" + std::to_string(l)));
        }
        int last = b.node("Concat", parts, "cat4");
        b.g.nodes.back().attrs["axis"].kind = Attr::kInt;
        b.g.nodes.back().attrs["axis"].i = 1;
        b.g.outputs = {last_is_output ? last : b.node("Neg", {last}, "out")};
        if (prefix_is_output) b.g.outputs.push_back(cats[1]);
        return b;
    };
    for (bool last_out : {false, true})
        for (bool prefix_out : {false, true}) {
            SCOPED_TRACE(::testing::Message() << "last output " << last_out << " prefix output " << prefix_out);
            G b = build(last_out, prefix_out);
            std::shared_ptr<const Plan> plan;
            int concats = -1;
            compile_counting_concats(b, &plan, &concats);
            ASSERT_TRUE(plan);
            EXPECT_EQ(concats, prefix_out ? 1 : 0);
            // Reference: x0 = relu(x); y_l = x0 - sum(cat_l) (sum over all of cat_l's channels).
            std::vector<float> in(16);
            for (int i = 0; i < 16; ++i) in[size_t(i)] = float(i % 5) - 1.5f;
            std::vector<std::vector<float>> cat(4);
            std::vector<float> x0(16);
            for (int i = 0; i < 16; ++i) x0[size_t(i)] = std::max(in[size_t(i)], 0.f);
            cat[0] = x0;
            for (int l = 1; l <= 3; ++l) {
                double sum = 0;
                for (float v : cat[size_t(l - 1)]) sum += v;
                cat[size_t(l)] = cat[size_t(l - 1)];
                for (int i = 0; i < 16; ++i) cat[size_t(l)].push_back(x0[size_t(i)] - float(sum));
            }
            Session s(plan);
            for (int rep = 0; rep < 2; ++rep) {
                std::memcpy(s.input_data(0), in.data(), in.size() * 4);
                ASSERT_TRUE(s.run().ok());
                const float* y = static_cast<const float*>(s.output_data(0));
                for (size_t i = 0; i < cat[3].size(); ++i)
                    ASSERT_NEAR(y[i], last_out ? cat[3][i] : -cat[3][i], 1e-4) << "rep " << rep << " at " << i;
                if (prefix_out) {
                    const float* p = static_cast<const float*>(s.output_data(1));
                    for (size_t i = 0; i < cat[1].size(); ++i) ASSERT_EQ(p[i], cat[1][i]) << "prefix at " << i;
                }
            }
        }
}

TEST(Compile, SymbolicDimsResolvedFromOtherInputs) {
    G b;
    int a = b.input("a", DType::kF32, {-1, 3}, {"N", ""});
    int c = b.input("b", DType::kF32, {-1, 3}, {"N", ""});
    b.g.outputs = {b.node("Add", {a, c}, "y")};
    CompileOptions opt;
    opt.input_shapes["a"] = {5, 3};
    std::shared_ptr<const Plan> plan;
    Status st = compile_graph(b.g, opt, &plan);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(plan->inputs[1].shape, (Shape{5, 3}));
    EXPECT_EQ(plan->outputs[0].shape, (Shape{5, 3}));
    // Contradicting a fixed dim is an error naming the input.
    opt.input_shapes["a"] = {5, 4};
    st = compile_graph(b.g, opt, &plan);
    EXPECT_EQ(st.code(), Code::kInvalid);
    EXPECT_NE(st.message().find("'a'"), std::string::npos) << st.message();
}

TEST(Compile, UnknownOpInDeadCodeIsIgnored) {
    G b;
    int x = b.input("x", DType::kF32, {2});
    b.node("NoSuchOp", {x}, "dead");
    b.g.outputs = {b.node("Relu", {x}, "y")};
    std::shared_ptr<const Plan> plan;
    EXPECT_TRUE(compile_graph(b.g, CompileOptions{}, &plan).ok());
}

TEST(Compile, OutputThatIsAnInputOrConstantIsCopied) {
    G b;
    int x = b.input("x", DType::kF32, {2});
    int c = b.constant("c", f32({2}, {7, 8}));
    b.g.outputs = {x, c};
    std::shared_ptr<const Plan> plan;
    ASSERT_TRUE(compile_graph(b.g, CompileOptions{}, &plan).ok());
    Session s(plan);
    float in[2] = {3, 4};
    std::memcpy(s.input_data(0), in, 8);
    ASSERT_TRUE(s.run().ok());
    EXPECT_FLOAT_EQ(static_cast<const float*>(s.output_data(0))[1], 4);
    EXPECT_FLOAT_EQ(static_cast<const float*>(s.output_data(1))[0], 7);
}

TEST(Compile, MemoryLimitIsEnforced) {
    G b;
    int x = b.input("x", DType::kF32, {1 << 20});
    b.g.outputs = {b.node("Relu", {x}, "y")};
    CompileOptions opt;
    opt.max_bytes = 1 << 20;  // the 4 MiB input alone exceeds it
    std::shared_ptr<const Plan> plan;
    Status st = compile_graph(b.g, opt, &plan);
    EXPECT_EQ(st.code(), Code::kInvalid);
    EXPECT_NE(st.message().find("memory limit"), std::string::npos) << st.message();
}

TEST(Session, BindsCallerBuffersZeroCopy) {
    G b;
    int x = b.input("x", DType::kF32, {3});
    b.g.outputs = {b.node("Neg", {x}, "y")};
    std::shared_ptr<const Plan> plan;
    ASSERT_TRUE(compile_graph(b.g, CompileOptions{}, &plan).ok());
    Session s(plan);
    float in[3] = {1, 2, 3}, out[3] = {0, 0, 0};
    s.bind_input(0, in);
    s.bind_output(0, out);
    ASSERT_TRUE(s.run().ok());
    EXPECT_FLOAT_EQ(out[2], -3);
    in[2] = 10;
    ASSERT_TRUE(s.run().ok());
    EXPECT_FLOAT_EQ(out[2], -10);
    EXPECT_EQ(s.output_data(0), out);
}

TEST(Npy, RoundTripsEveryDtypeAndScalars) {
    for (DType t : {DType::kF32, DType::kF64, DType::kI64, DType::kI32, DType::kU8, DType::kI8, DType::kBool,
                    DType::kF16, DType::kI16, DType::kU16}) {
        for (Shape s : {Shape{}, Shape{3}, Shape{2, 0}, Shape{2, 3, 1}}) {
            Tensor a(t, s);
            for (size_t i = 0; i < a.nbytes(); ++i) static_cast<uint8_t*>(a.data())[i] = uint8_t(i * 7 + 1);
            if (t == DType::kBool)
                for (size_t i = 0; i < a.nbytes(); ++i) static_cast<uint8_t*>(a.data())[i] &= 1;
            std::string p = jiffy::testing::scratch("rt.npy");
            ASSERT_TRUE(write_npy(p, t, s, a.data()).ok());
            Tensor b;
            Status st = read_npy(p, &b);
            ASSERT_TRUE(st.ok()) << st.message();
            EXPECT_EQ(b.dtype(), t);
            EXPECT_EQ(b.shape(), s);
            EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
        }
    }
}

TEST(DType, HalfConversions) {
    for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f})
        EXPECT_EQ(f16_to_f32(f32_to_f16(f)), f) << f;
    EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
    EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.5f)), 1.5f);
    EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // ties to even
}

// The public APIs on a model written to disk.
class ApiTest : public ::testing::Test {
protected:
    void SetUp() override {
        path_ = jiffy::testing::scratch("api_relu.onnx");
        // Relu(x: float[N,2]) -> y, opset 13 (written by python3-onnx, committed: 74 bytes).
        std::string src = std::string(JIFFY_SOURCE_DIR) + "/tests/unit/data/relu_n2.onnx";
        std::filesystem::copy_file(src, path_, std::filesystem::copy_options::overwrite_existing);
    }
    std::string path_;
};

TEST_F(ApiTest, CppApiLoadCompileRun) {
    jiffy::api::Error err;
    auto m = jiffy::api::Model::load(path_, &err);
    ASSERT_FALSE(err) << err.message;
    ASSERT_EQ(m.inputs().size(), 1u);
    EXPECT_EQ(m.inputs()[0].shape, (std::vector<int64_t>{-1, 2}));
    auto c = m.compile({{"x", {3, 2}}}, &err);
    ASSERT_FALSE(err) << err.message;
    EXPECT_EQ(c.outputs()[0].shape, (std::vector<int64_t>{3, 2}));
    auto r = c.runner();
    float in[6] = {-1, 2, -3, 4, -5, 6};
    std::memcpy(r.input(0), in, sizeof in);
    ASSERT_FALSE(r.run());
    const float* y = static_cast<const float*>(r.output(0));
    EXPECT_FLOAT_EQ(y[0], 0);
    EXPECT_FLOAT_EQ(y[5], 6);
    auto bad = m.compile({{"nope", {1}}}, &err);
    EXPECT_TRUE(err);
    EXPECT_FALSE(bad);
    EXPECT_NE(err.message.find("nope"), std::string::npos);
}

TEST_F(ApiTest, CApiLoadCompileRun) {
    char err[256] = "";
    jiffy_model* m = jiffy_model_load(path_.c_str(), err, sizeof err);
    ASSERT_NE(m, nullptr) << err;
    const char* names[] = {"x"};
    int ranks[] = {2};
    int64_t dims[] = {1, 2};
    jiffy_plan* p = jiffy_compile(m, 1, names, ranks, dims, err, sizeof err);
    ASSERT_NE(p, nullptr) << err;
    EXPECT_EQ(jiffy_plan_input_nbytes(p, 0), 8u);
    jiffy_runner* r = jiffy_runner_new(p);
    float in[2] = {-1, 5}, out[2] = {9, 9};
    jiffy_runner_bind_input(r, 0, in);
    jiffy_runner_bind_output(r, 0, out);
    EXPECT_EQ(jiffy_run(r, err, sizeof err), 0) << err;
    EXPECT_FLOAT_EQ(out[0], 0);
    EXPECT_FLOAT_EQ(out[1], 5);
    jiffy_runner_free(r);
    jiffy_plan_free(p);
    jiffy_model_free(m);
    EXPECT_EQ(jiffy_model_load("/nonexistent.onnx", err, sizeof err), nullptr);
    EXPECT_NE(std::string(err).find("not found"), std::string::npos) << err;
}

}  // namespace

namespace {

TEST(Model, PlansAreCachedByShapeSignature) {
    std::shared_ptr<jiffy::Model> m;
    ASSERT_TRUE(jiffy::Model::load(std::string(JIFFY_SOURCE_DIR) + "/tests/unit/data/relu_n2.onnx",
                                   ImportOptions{}, &m)
                    .ok());
    CompileOptions a, b;
    a.input_shapes["x"] = {3, 2};
    b.input_shapes["x"] = {4, 2};
    std::shared_ptr<const Plan> p1, p2, p3;
    ASSERT_TRUE(m->compile(a, {}, &p1).ok());
    ASSERT_TRUE(m->compile(b, {}, &p2).ok());
    ASSERT_TRUE(m->compile(a, {}, &p3).ok());
    EXPECT_EQ(p1, p3);  // same signature: the cached plan
    EXPECT_NE(p1, p2);
    EXPECT_EQ(p2->outputs[0].shape, (Shape{4, 2}));
}

}  // namespace

namespace {

// If with a run-time condition whose else branch cannot compile for these shapes: the then
// branch still runs; taking the else branch is a run-time error naming the branch's problem.
TEST(Compile, IfBranchThatCannotCompileIsARunTimeError) {
    G b;
    int x = b.input("x", DType::kF32, {4});
    int cond = b.input("c", DType::kBool, {});
    auto branch = [](const char* name, bool bad) {
        auto g = std::make_shared<Graph>();
        g->opset = 17;
        g->name = name;
        int cx = g->add_value("x");
        g->captures.push_back(cx);
        int w = g->add_value(std::string(name) + "_w");
        Tensor t(DType::kF32, bad ? Shape{3} : Shape{4});  // [3] does not broadcast with [4]
        g->values[size_t(w)].constant = std::make_shared<Tensor>(t);
        int o = g->add_value(std::string(name) + "_y");
        Node n;
        n.op = "Add";
        n.inputs = {cx, w};
        n.num_explicit_inputs = 2;
        n.outputs = {o};
        g->values[size_t(o)].producer = 0;
        g->nodes.push_back(n);
        g->outputs = {o};
        return g;
    };
    int y = b.g.add_value("y");
    Node n;
    n.op = "If";
    n.name = "if";
    n.inputs = {cond, x};  // x is the branches' capture
    n.num_explicit_inputs = 1;
    n.outputs = {y};
    n.attrs["then_branch"].kind = Attr::kGraph;
    n.attrs["then_branch"].g = branch("then", false);
    n.attrs["else_branch"].kind = Attr::kGraph;
    n.attrs["else_branch"].g = branch("else", true);
    b.g.values[size_t(y)].producer = int(b.g.nodes.size());
    b.g.nodes.push_back(n);
    b.g.outputs = {y};
    std::shared_ptr<const Plan> plan;
    Status st = compile_graph(b.g, CompileOptions{}, &plan);
    ASSERT_TRUE(st.ok()) << st.message();
    Session s(plan);
    float in[4] = {1, 2, 3, 4};
    std::memcpy(s.input_data(0), in, 16);
    *static_cast<bool*>(s.input_data(1)) = true;
    ASSERT_TRUE(s.run().ok());
    EXPECT_FLOAT_EQ(static_cast<const float*>(s.output_data(0))[3], 4);
    *static_cast<bool*>(s.input_data(1)) = false;
    st = s.run();
    EXPECT_EQ(st.code(), Code::kInvalid);
    EXPECT_NE(st.message().find("broadcast"), std::string::npos) << st.message();
}

}  // namespace
