// RNN / GRU / LSTM and If / Loop / Scan: edge cases the ONNX conformance suite does not cover
// (directions, sequence_lens, layout, clip, activations, run-time control flow, captures) and
// clear errors for bad models.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "runtime/plan.h"

using namespace jiffy;

namespace {

// Builds a Graph (or a subgraph body) in memory.
struct Builder {
    Graph g;
    explicit Builder(int64_t opset = 14) { g.opset = opset; }

    int input(const std::string& name, DType t, Shape s) {
        int id = g.add_value(name);
        Value& v = g.values[size_t(id)];
        v.dtype = t;
        v.has_shape = true;
        for (int64_t d : s) v.dims.push_back(Dim{d, {}});
        g.inputs.push_back(id);
        return id;
    }
    // A value of an enclosing scope read here.
    int capture(const std::string& name) {
        int id = g.add_value(name);
        g.captures.push_back(id);
        return id;
    }
    int constant(const std::string& name, DType t, Shape s, const std::vector<double>& data) {
        auto ten = std::make_shared<Tensor>(t, s);
        for (size_t i = 0; i < data.size(); ++i) {
            switch (t) {
                case DType::kF32: ten->as<float>()[i] = float(data[i]); break;
                case DType::kF64: ten->as<double>()[i] = data[i]; break;
                case DType::kI64: ten->as<int64_t>()[i] = int64_t(data[i]); break;
                case DType::kI32: ten->as<int32_t>()[i] = int32_t(data[i]); break;
                case DType::kBool: ten->as<bool>()[i] = data[i] != 0; break;
                default: break;
            }
        }
        int id = g.add_value(name);
        Value& v = g.values[size_t(id)];
        v.dtype = t;
        v.has_shape = true;
        for (int64_t d : s) v.dims.push_back(Dim{d, {}});
        v.constant = ten;
        return id;
    }
    // Adds a node; output names "" are omitted outputs. Returns the node index.
    int node(const std::string& op, const std::vector<std::string>& ins, const std::vector<std::string>& outs,
             std::map<std::string, Attr> attrs = {}) {
        Node n;
        n.op = op;
        n.name = op + std::to_string(g.nodes.size());
        for (const std::string& s : ins) n.inputs.push_back(s.empty() ? -1 : g.find(s));
        n.num_explicit_inputs = int(n.inputs.size());
        int ni = int(g.nodes.size());
        for (const std::string& s : outs) {
            if (s.empty()) {
                n.outputs.push_back(-1);
                continue;
            }
            int id = g.add_value(s);
            g.values[size_t(id)].producer = ni;
            n.outputs.push_back(id);
        }
        n.attrs = std::move(attrs);
        // Captures of subgraph attributes become implicit inputs.
        for (auto& [an, a] : n.attrs)
            if (a.g)
                for (int c : a.g->captures) {
                    int id = g.find(a.g->values[size_t(c)].name);
                    if (std::find(n.inputs.begin() + n.num_explicit_inputs, n.inputs.end(), id) == n.inputs.end())
                        n.inputs.push_back(id);
                }
        g.nodes.push_back(std::move(n));
        return ni;
    }
    void output(const std::string& name) { g.outputs.push_back(g.find(name)); }
};

Attr ints(std::vector<int64_t> v) {
    Attr a;
    a.kind = Attr::kInts;
    a.ints = std::move(v);
    return a;
}
Attr i1(int64_t v) {
    Attr a;
    a.kind = Attr::kInt;
    a.i = v;
    return a;
}
Attr f1(float v) {
    Attr a;
    a.kind = Attr::kFloat;
    a.f = v;
    return a;
}
Attr floats(std::vector<float> v) {
    Attr a;
    a.kind = Attr::kFloats;
    a.floats = std::move(v);
    return a;
}
Attr str(const std::string& s) {
    Attr a;
    a.kind = Attr::kString;
    a.s = s;
    return a;
}
Attr strs(std::vector<std::string> v) {
    Attr a;
    a.kind = Attr::kStrings;
    a.strings = std::move(v);
    return a;
}
Attr graph(Builder& b) {
    Attr a;
    a.kind = Attr::kGraph;
    a.g = std::make_shared<Graph>(b.g);
    return a;
}

struct RunResult {
    Status st;
    std::vector<std::vector<double>> outs;
    std::vector<Shape> shapes;
};

double load(DType t, const void* p, size_t i) {
    switch (t) {
        case DType::kF32: return static_cast<const float*>(p)[i];
        case DType::kF64: return static_cast<const double*>(p)[i];
        case DType::kI64: return double(static_cast<const int64_t*>(p)[i]);
        case DType::kI32: return static_cast<const int32_t*>(p)[i];
        case DType::kBool: return static_cast<const bool*>(p)[i];
        default: return NAN;
    }
}
void store(DType t, void* p, size_t i, double v) {
    switch (t) {
        case DType::kF32: static_cast<float*>(p)[i] = float(v); break;
        case DType::kF64: static_cast<double*>(p)[i] = v; break;
        case DType::kI64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
        case DType::kI32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
        case DType::kBool: static_cast<bool*>(p)[i] = v != 0; break;
        default: break;
    }
}

// Compiles and runs with the given input values (in graph input order), possibly several times.
RunResult run(const Graph& g, const std::vector<std::vector<double>>& inputs, int times = 1,
              const CompileOptions& opt = CompileOptions{}, std::string* kernel = nullptr) {
    RunResult r;
    std::shared_ptr<const Plan> plan;
    r.st = compile_graph(g, opt, &plan);
    if (r.st.ok() && kernel) *kernel = plan->steps.at(0).kernel->describe();
    if (!r.st.ok()) return r;
    Session s(plan);
    for (int rep = 0; rep < times; ++rep) {
        for (size_t i = 0; i < inputs.size(); ++i) {
            const IoDesc& d = plan->inputs[i];
            for (size_t k = 0; k < inputs[i].size(); ++k) store(d.dtype, s.input_data(i), k, inputs[i][k]);
        }
        r.st = s.run();
        if (!r.st.ok()) return r;
    }
    for (size_t o = 0; o < plan->outputs.size(); ++o) {
        const IoDesc& d = plan->outputs[o];
        std::vector<double> v(size_t(shape_numel(d.shape)));
        for (size_t k = 0; k < v.size(); ++k) v[k] = load(d.dtype, s.output_data(o), k);
        r.outs.push_back(v);
        r.shapes.push_back(d.shape);
    }
    return r;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-5) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

double sigm(double x) { return 1 / (1 + std::exp(-x)); }

// ---------------------------------------------------------------- RNN family

// Deterministic pseudo-random values in [-1, 1).
std::vector<double> rnd(size_t n, uint32_t seed) {
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = double(seed >> 8) / double(1 << 24) * 2 - 1;
    }
    return v;
}

// An LSTM/GRU/RNN node over graph inputs X, W, R, B, sequence_lens, initial_h[, initial_c], all
// outputs present.
struct RecCase {
    std::string op = "LSTM";
    int64_t S = 3, B = 2, I = 2, H = 3;
    std::string dir = "forward";
    int64_t layout = 0;
    bool with_lens = false;
    std::map<std::string, Attr> extra;
    int64_t G() const { return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1; }
    int64_t D() const { return dir == "bidirectional" ? 2 : 1; }

    Graph build() const {
        Builder b;
        const bool l1 = layout == 1;
        b.input("X", DType::kF32, l1 ? Shape{B, S, I} : Shape{S, B, I});
        b.input("W", DType::kF32, {D(), G() * H, I});
        b.input("R", DType::kF32, {D(), G() * H, H});
        b.input("B", DType::kF32, {D(), 2 * G() * H});
        b.input("L", DType::kI32, {B});
        b.input("h0", DType::kF32, l1 ? Shape{B, D(), H} : Shape{D(), B, H});
        std::vector<std::string> ins{"X", "W", "R", "B", with_lens ? "L" : "", "h0"};
        std::vector<std::string> outs{"Y", "Yh"};
        if (op == "LSTM") {
            b.input("c0", DType::kF32, l1 ? Shape{B, D(), H} : Shape{D(), B, H});
            ins.push_back("c0");
            outs.push_back("Yc");
        }
        auto attrs = extra;
        attrs["direction"] = str(dir);
        attrs["hidden_size"] = i1(H);
        if (layout) attrs["layout"] = i1(layout);
        b.node(op, ins, outs, attrs);
        for (auto& o : outs) b.output(o);
        return b.g;
    }
    // The same node with W, R (and B unless !with_bias) as constants, X, sequence_lens, h0 (, c0)
    // as graph inputs: the packed fast paths. fast_inputs(in) picks those inputs from inputs().
    Graph build_const(const std::vector<std::vector<double>>& in, bool with_bias = true) const {
        Builder b;
        b.input("X", DType::kF32, {S, B, I});
        b.constant("W", DType::kF32, {D(), G() * H, I}, in[1]);
        b.constant("R", DType::kF32, {D(), G() * H, H}, in[2]);
        if (with_bias) b.constant("B", DType::kF32, {D(), 2 * G() * H}, in[3]);
        b.input("L", DType::kI32, {B});
        b.input("h0", DType::kF32, {D(), B, H});
        std::vector<std::string> ins{"X", "W", "R", with_bias ? "B" : "", "L", "h0"}, outs{"Y", "Yh"};
        if (op == "LSTM") {
            b.input("c0", DType::kF32, {D(), B, H});
            ins.push_back("c0");
            outs.push_back("Yc");
        }
        auto attrs = extra;
        attrs["direction"] = str(dir);
        attrs["hidden_size"] = i1(H);
        b.node(op, ins, outs, attrs);
        for (auto& o : outs) b.output(o);
        return b.g;
    }
    std::vector<std::vector<double>> fast_inputs(const std::vector<std::vector<double>>& in) const {
        std::vector<std::vector<double>> f{in[0], in[4], in[5]};
        if (op == "LSTM") f.push_back(in[6]);
        return f;
    }
    std::vector<std::vector<double>> inputs(uint32_t seed, std::vector<double> lens = {}) const {
        if (lens.empty()) lens.assign(size_t(B), double(S));
        std::vector<std::vector<double>> in{rnd(size_t(S * B * I), seed), rnd(size_t(D() * G() * H * I), seed + 1),
                                            rnd(size_t(D() * G() * H * H), seed + 2),
                                            rnd(size_t(D() * 2 * G() * H), seed + 3), lens,
                                            rnd(size_t(D() * B * H), seed + 4)};
        if (op == "LSTM") in.push_back(rnd(size_t(D() * B * H), seed + 5));
        return in;
    }
};

// The packed path (W, R, B constants: RecCase::build_const) against the reference path (the same
// node with W, R, B as graph inputs) on the same values, every output, each run twice; within
// 2e-5 of the magnitude (at least 1).
void check_packed(const RecCase& rc, const std::vector<std::vector<double>>& in, bool with_bias, const std::string& what) {
    SCOPED_TRACE(rc.op + " " + rc.dir + " steps " + std::to_string(rc.S) + " " + what);
    RunResult ref = run(rc.build(), in, 2);
    ASSERT_TRUE(ref.st.ok()) << ref.st.message();
    RunResult fast = run(rc.build_const(in, with_bias), rc.fast_inputs(in), 2);
    ASSERT_TRUE(fast.st.ok()) << fast.st.message();
    ASSERT_EQ(fast.outs.size(), ref.outs.size());
    for (size_t o = 0; o < ref.outs.size(); ++o) {
        SCOPED_TRACE("output " + std::to_string(o));
        double mag = 1;  // Relu states grow (to ~50 in the RNN test): relative to the magnitude
        for (double v : ref.outs[o]) mag = std::max(mag, std::abs(v));
        expect_near(fast.outs[o], ref.outs[o], 2e-5 * mag);
    }
}

TEST(RnnOps, LstmSingleStepMatchesEquations) {
    // One step, one unit: check peepholes, input_forget and the gate order (i, o, f, c).
    Builder b;
    b.input("X", DType::kF32, {1, 1, 1});
    b.constant("W", DType::kF32, {1, 4, 1}, {0.5, -0.3, 0.8, 0.2});
    b.constant("R", DType::kF32, {1, 4, 1}, {0.1, 0.2, -0.4, 0.3});
    b.constant("B", DType::kF32, {1, 8}, {0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08});
    b.constant("h0", DType::kF32, {1, 1, 1}, {0.7});
    b.constant("c0", DType::kF32, {1, 1, 1}, {-0.6});
    b.constant("P", DType::kF32, {1, 3}, {0.9, -0.5, 0.4});
    for (int input_forget = 0; input_forget < 2; ++input_forget) {
        Builder bb = b;
        bb.node("LSTM", {"X", "W", "R", "B", "", "h0", "c0", "P"}, {"Y", "Yh", "Yc"},
                {{"hidden_size", i1(1)}, {"input_forget", i1(input_forget)}});
        bb.output("Yh");
        bb.output("Yc");
        const double x = 1.5, h = 0.7, c = -0.6;
        const double i = sigm(0.5 * x + 0.1 * h + 0.01 + 0.05 + 0.9 * c);
        const double f = input_forget ? 1 - i : sigm(0.8 * x - 0.4 * h + 0.03 + 0.07 + 0.4 * c);
        const double g = std::tanh(0.2 * x + 0.3 * h + 0.04 + 0.08);
        const double cn = f * c + i * g;
        const double o = sigm(-0.3 * x + 0.2 * h + 0.02 + 0.06 - 0.5 * cn);
        RunResult r = run(bb.g, {{x}});
        ASSERT_TRUE(r.st.ok()) << r.st.message();
        expect_near(r.outs[0], {o * std::tanh(cn)});
        expect_near(r.outs[1], {cn});
    }
}

TEST(RnnOps, GruLinearBeforeResetMatchesEquations) {
    for (int lbr = 0; lbr < 2; ++lbr) {
        Builder b;
        b.input("X", DType::kF32, {1, 1, 1});
        b.constant("W", DType::kF32, {1, 3, 1}, {0.5, -0.3, 0.8});
        b.constant("R", DType::kF32, {1, 3, 1}, {0.1, 0.2, -0.4});
        b.constant("B", DType::kF32, {1, 6}, {0.01, 0.02, 0.03, 0.04, 0.05, 0.06});
        b.constant("h0", DType::kF32, {1, 1, 1}, {0.7});
        b.node("GRU", {"X", "W", "R", "B", "", "h0"}, {"", "Yh"},
               {{"hidden_size", i1(1)}, {"linear_before_reset", i1(lbr)}});
        b.output("Yh");
        const double x = -1.2, h = 0.7;
        const double z = sigm(0.5 * x + 0.1 * h + 0.01 + 0.04);
        const double r = sigm(-0.3 * x + 0.2 * h + 0.02 + 0.05);
        const double hh = lbr ? std::tanh(0.8 * x + 0.03 + r * (-0.4 * h + 0.06))
                              : std::tanh(0.8 * x + 0.03 + -0.4 * (r * h) + 0.06);
        RunResult res = run(b.g, {{x}});
        ASSERT_TRUE(res.st.ok()) << res.st.message();
        expect_near(res.outs[0], {(1 - z) * hh + z * h});
    }
}

TEST(RnnOps, ActivationsAlphaBetaAndClip) {
    // RNN f = Affine(alpha, beta) consumes the alpha/beta lists in order; clip bounds its input.
    auto make = [](std::map<std::string, Attr> attrs) {
        Builder b;
        b.input("X", DType::kF32, {2, 1, 1});
        b.constant("W", DType::kF32, {1, 1, 1}, {2.0});
        b.constant("R", DType::kF32, {1, 1, 1}, {0.5});
        attrs["hidden_size"] = i1(1);
        b.node("RNN", {"X", "W", "R"}, {"Y", "Yh"}, attrs);
        b.output("Y");
        return b.g;
    };
    RunResult r = run(make({{"activations", strs({"Affine"})}, {"activation_alpha", floats({3})},
                      {"activation_beta", floats({1})}}),
                {{1, 2}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    const double h1 = 3 * (2 * 1) + 1, h2 = 3 * (2 * 2 + 0.5 * h1) + 1;
    expect_near(r.outs[0], {h1, h2});
    r = run(make({{"activations", strs({"Affine"})}, {"clip", f1(1.5)}}), {{1, -2}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_near(r.outs[0], {1.5, -1.5});  // 2 -> 1.5; -4 + 0.75 -> -1.5
    r = run(make({{"activations", strs({"leakyrelu"})}, {"activation_alpha", floats({0.25})}}), {{-1, 1}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_near(r.outs[0], {-0.5, 2 - 0.25});
}

TEST(RnnOps, LayoutOneIsTransposedLayoutZero) {
    for (const char* op : {"LSTM", "GRU", "RNN"}) {
        RecCase c0;
        c0.op = op;
        c0.dir = "bidirectional";
        c0.with_lens = true;
        RecCase c1 = c0;
        c1.layout = 1;
        auto in0 = c0.inputs(7, {3, 1});
        RunResult r0 = run(c0.build(), in0);
        ASSERT_TRUE(r0.st.ok()) << r0.st.message();
        // Transpose X [S,B,I] -> [B,S,I] and states [D,B,H] -> [B,D,H].
        auto in1 = in0;
        const int64_t S = c0.S, B = c0.B, I = c0.I, H = c0.H, D = c0.D();
        for (int64_t s = 0; s < S; ++s)
            for (int64_t b = 0; b < B; ++b)
                for (int64_t i = 0; i < I; ++i) in1[0][size_t((b * S + s) * I + i)] = in0[0][size_t((s * B + b) * I + i)];
        for (size_t k = 5; k < in0.size(); ++k)
            for (int64_t d = 0; d < D; ++d)
                for (int64_t b = 0; b < B; ++b)
                    for (int64_t h = 0; h < H; ++h) in1[k][size_t((b * D + d) * H + h)] = in0[k][size_t((d * B + b) * H + h)];
        RunResult r1 = run(c1.build(), in1);
        ASSERT_TRUE(r1.st.ok()) << r1.st.message();
        for (int64_t s = 0; s < S; ++s)
            for (int64_t d = 0; d < D; ++d)
                for (int64_t b = 0; b < B; ++b)
                    for (int64_t h = 0; h < H; ++h)
                        EXPECT_NEAR(r1.outs[0][size_t(((b * S + s) * D + d) * H + h)],
                                    r0.outs[0][size_t(((s * D + d) * B + b) * H + h)], 1e-6)
                            << op;
        for (size_t o = 1; o < r0.outs.size(); ++o)
            for (int64_t d = 0; d < D; ++d)
                for (int64_t b = 0; b < B; ++b)
                    for (int64_t h = 0; h < H; ++h)
                        EXPECT_NEAR(r1.outs[o][size_t((b * D + d) * H + h)], r0.outs[o][size_t((d * B + b) * H + h)], 1e-6)
                            << op;
    }
}

TEST(RnnOps, SequenceLensAndReverse) {
    // Batch row 0 has length 2 of 3, row 1 has length 0. Row 0 must equal a run on the truncated
    // sequence; outputs past the length and the final states of the empty row are zero.
    for (const char* op : {"LSTM", "GRU", "RNN"}) {
        for (const char* dir : {"forward", "reverse", "bidirectional"}) {
            RecCase c;
            c.op = op;
            c.dir = dir;
            c.with_lens = true;
            auto in = c.inputs(11, {2, 0});
            RunResult r = run(c.build(), in);
            ASSERT_TRUE(r.st.ok()) << r.st.message();
            // Reference: S = 2, B = 1 on row 0 only.
            RecCase t = c;
            t.S = 2;
            t.B = 1;
            t.with_lens = false;
            auto tin = t.inputs(0);
            for (int64_t s = 0; s < 2; ++s)
                for (int64_t i = 0; i < c.I; ++i) tin[0][size_t(s * c.I + i)] = in[0][size_t((s * c.B + 0) * c.I + i)];
            tin[1] = in[1];
            tin[2] = in[2];
            tin[3] = in[3];
            for (size_t k = 5; k < in.size(); ++k)
                for (int64_t d = 0; d < c.D(); ++d)
                    for (int64_t h = 0; h < c.H; ++h) tin[k][size_t(d * c.H + h)] = in[k][size_t((d * c.B + 0) * c.H + h)];
            RunResult rt = run(t.build(), tin);
            ASSERT_TRUE(rt.st.ok()) << rt.st.message();
            const int64_t D = c.D(), B = c.B, H = c.H;
            for (int64_t s = 0; s < c.S; ++s)
                for (int64_t d = 0; d < D; ++d)
                    for (int64_t h = 0; h < H; ++h) {
                        double y0 = r.outs[0][size_t(((s * D + d) * B + 0) * H + h)];
                        double y1 = r.outs[0][size_t(((s * D + d) * B + 1) * H + h)];
                        EXPECT_EQ(y1, 0.0) << op << " " << dir;
                        if (s < 2) EXPECT_NEAR(y0, rt.outs[0][size_t((s * D + d) * H + h)], 1e-6) << op << " " << dir;
                        else EXPECT_EQ(y0, 0.0) << op << " " << dir;
                    }
            for (size_t o = 1; o < r.outs.size(); ++o)
                for (int64_t d = 0; d < D; ++d)
                    for (int64_t h = 0; h < H; ++h) {
                        EXPECT_NEAR(r.outs[o][size_t((d * B + 0) * H + h)], rt.outs[o][size_t(d * H + h)], 1e-6);
                        EXPECT_EQ(r.outs[o][size_t((d * B + 1) * H + h)], 0.0);
                    }
        }
    }
}

TEST(RnnOps, BidirectionalIsForwardPlusReverse) {
    RecCase bi;
    bi.op = "GRU";
    bi.dir = "bidirectional";
    bi.extra["linear_before_reset"] = i1(1);
    auto in = bi.inputs(21);
    RunResult rb = run(bi.build(), in);
    ASSERT_TRUE(rb.st.ok()) << rb.st.message();
    const int64_t S = bi.S, B = bi.B, H = bi.H, G = bi.G(), I = bi.I;
    for (int d = 0; d < 2; ++d) {
        RecCase one = bi;
        one.dir = d == 0 ? "forward" : "reverse";
        auto oin = one.inputs(0);
        oin[0] = in[0];
        auto part = [&](const std::vector<double>& v, size_t per) {
            return std::vector<double>(v.begin() + long(d * per), v.begin() + long((d + 1) * per));
        };
        oin[1] = part(in[1], size_t(G * H * I));
        oin[2] = part(in[2], size_t(G * H * H));
        oin[3] = part(in[3], size_t(2 * G * H));
        oin[5] = part(in[5], size_t(B * H));
        RunResult r1 = run(one.build(), oin);
        ASSERT_TRUE(r1.st.ok()) << r1.st.message();
        for (int64_t s = 0; s < S; ++s)
            for (int64_t b = 0; b < B; ++b)
                for (int64_t h = 0; h < H; ++h)
                    EXPECT_NEAR(rb.outs[0][size_t(((s * 2 + d) * B + b) * H + h)], r1.outs[0][size_t((s * B + b) * H + h)], 1e-6);
        for (int64_t k = 0; k < B * H; ++k) EXPECT_NEAR(rb.outs[1][size_t(d * B * H + k)], r1.outs[1][size_t(k)], 1e-6);
    }
}

// Compiled with a pool (threads 2), a bidirectional RNN / GRU / LSTM runs its two directions at
// once, one per thread, each on its own scratch: the same bits as one thread, on the packed paths
// (constant W, R, B) and the reference loops, with sequence lengths, over repeated runs (the
// session's threads choice moves between the pool and the caller alone); one direction stays on
// the caller.
TEST(RnnOps, BidirectionalRunsBothDirectionsAtOnceOnTwoThreads) {
    CompileOptions two;
    two.threads = 2;
    two.parallel_min_flops = 0;
    for (const char* op : {"LSTM", "GRU", "RNN"})
        for (const char* dir : {"bidirectional", "forward"})
            for (bool packed : {true, false}) {
                SCOPED_TRACE(std::string(op) + " " + dir + (packed ? " packed" : " reference"));
                RecCase rc;
                rc.op = op;
                rc.S = 7;
                rc.B = 2;
                rc.I = 33;
                rc.H = 24;
                rc.dir = dir;
                rc.with_lens = true;
                auto in = rc.inputs(55, {7, 4});
                for (double& v : in[0]) v *= 2;
                const Graph g = packed ? rc.build_const(in) : rc.build();
                const auto gin = packed ? rc.fast_inputs(in) : in;
                std::string k1, k2;
                RunResult r1 = run(g, gin, 3, CompileOptions{}, &k1);
                ASSERT_TRUE(r1.st.ok()) << r1.st.message();
                RunResult r2 = run(g, gin, 700, two, &k2);
                ASSERT_TRUE(r2.st.ok()) << r2.st.message();
                EXPECT_EQ(k1, "");
                EXPECT_EQ(k2, rc.D() == 2 ? "directions on 2 threads" : "");
                ASSERT_EQ(r2.outs.size(), r1.outs.size());
                for (size_t o = 0; o < r1.outs.size(); ++o)
                    for (size_t i = 0; i < r1.outs[o].size(); ++i)
                        ASSERT_EQ(r2.outs[o][i], r1.outs[o][i]) << "output " << o << " at " << i;
            }
}

// Float LSTMs with constant W, R (and B) take the packed-GEMV path (rnn.cpp LstmFast); the same
// node with W, R, B as graph inputs runs the reference loops. Odd sizes (not multiples of 16),
// both directions, sequence_lens, batch 2, with and without B, run twice (state must not leak).
TEST(RnnOps, LstmPackedGemvPathMatchesReference) {
    // Several steps: the input projections as one GEMM, then a GEMV over R per step; one step
    // (Silero's shape): one GEMV over [W; R].
    for (auto [steps, batch] : {std::pair<int64_t, int64_t>{4, 2}, {1, 1}})
    for (bool with_bias : {true, false})
        for (const char* dir : {"forward", "bidirectional"}) {
            RecCase rc;
            rc.S = steps;
            rc.B = batch;
            rc.I = 37;
            rc.H = 19;
            rc.dir = dir;
            rc.with_lens = true;
            auto in = rc.inputs(77, batch == 2 ? std::vector<double>{4, 3} : std::vector<double>{1});
            in[0] = rnd(in[0].size(), 5);
            for (double& v : in[0]) v *= 3;  // saturate some gates
            if (!with_bias) std::fill(in[3].begin(), in[3].end(), 0.0);
            check_packed(rc, in, with_bias, with_bias ? "bias" : "no bias");
        }
}

TEST(RnnOps, GruPackedPathMatchesReference) {
    // Constant W, R, B: the input projections as one GEMM, one GEMV over R per step
    // (linear_before_reset) or two (R_zr, then R_h over r * h); against the reference path (the
    // same graph with W, R, B as graph inputs), with sequence lengths, h0, both directions.
    for (int64_t lbr : {0, 1})
        for (const char* dir : {"forward", "bidirectional"})
            for (auto [steps, batch] : {std::pair<int64_t, int64_t>{5, 2}, {1, 1}}) {
                RecCase rc;
                rc.op = "GRU";
                rc.S = steps;
                rc.B = batch;
                rc.I = 37;
                rc.H = 21;
                rc.dir = dir;
                rc.with_lens = true;
                rc.extra["linear_before_reset"] = i1(lbr);
                auto in = rc.inputs(91, batch == 2 ? std::vector<double>{5, 3} : std::vector<double>{1});
                for (double& v : in[0]) v *= 3;  // saturate some gates
                check_packed(rc, in, true, "lbr " + std::to_string(lbr));
            }
}

TEST(RnnOps, RnnPackedPathMatchesReference) {
    // Constant W, R, B: the input projections as one GEMM, one GEMV over R per step and the
    // vector activation (Tanh, Relu, Sigmoid; a different one per direction too); against the
    // reference path (the same graph with W, R, B as graph inputs), with lengths and h0.
    const std::vector<std::vector<std::string>> acts = {{"Tanh"}, {"Relu"}, {"Sigmoid", "Tanh"}};
    for (const auto& act : acts)
        for (const char* dir : {"forward", "bidirectional"})
            for (auto [steps, batch] : {std::pair<int64_t, int64_t>{6, 2}, {1, 1}}) {
                if (act.size() == 2 && std::string(dir) == "forward") continue;
                RecCase rc;
                rc.op = "RNN";
                rc.S = steps;
                rc.B = batch;
                rc.I = 37;
                rc.H = 40;
                rc.dir = dir;
                rc.with_lens = true;
                rc.extra["activations"] = strs(act);
                auto in = rc.inputs(77, batch == 2 ? std::vector<double>{6, 4} : std::vector<double>{1});
                for (double& v : in[0]) v *= 2;
                check_packed(rc, in, true, act[0]);
            }
}

TEST(RnnOps, Float64AndRunTwice) {
    Builder b;
    b.input("X", DType::kF64, {2, 1, 1});
    b.constant("W", DType::kF64, {1, 1, 1}, {0.5});
    b.constant("R", DType::kF64, {1, 1, 1}, {0.25});
    b.node("RNN", {"X", "W", "R"}, {"", "Yh"}, {});
    b.output("Yh");
    RunResult r = run(b.g, {{1, 2}}, 2);  // the state must not leak between runs
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    const double h1 = std::tanh(0.5), h2 = std::tanh(1.0 + 0.25 * h1);
    expect_near(r.outs[0], {h2}, 1e-12);
}

Status compile_status(const Graph& g) {
    std::shared_ptr<const Plan> plan;
    return compile_graph(g, CompileOptions{}, &plan);
}

TEST(RnnOps, BadModelsGiveClearErrors) {
    auto lstm = [](std::map<std::string, Attr> attrs, Shape w = {1, 8, 2}, int64_t opset = 14) {
        Builder b(opset);
        b.input("X", DType::kF32, {3, 1, 2});
        b.input("W", DType::kF32, w);
        b.input("R", DType::kF32, {1, 8, 2});
        b.node("LSTM", {"X", "W", "R"}, {"Y"}, attrs);
        b.output("Y");
        return compile_status(b.g);
    };
    EXPECT_TRUE(lstm({}).ok());
    Status st = lstm({{"direction", str("sideways")}});
    EXPECT_EQ(st.code(), Code::kInvalid);
    EXPECT_NE(st.message().find("direction"), std::string::npos) << st.message();
    st = lstm({}, {1, 12, 2});
    EXPECT_NE(st.message().find("W has shape 1x12x2"), std::string::npos) << st.message();
    st = lstm({{"hidden_size", i1(3)}});
    EXPECT_EQ(st.code(), Code::kInvalid) << st.message();
    st = lstm({{"activations", strs({"Sigmoid", "Tanh", "Swish"})}});
    EXPECT_EQ(st.code(), Code::kUnsupported);
    EXPECT_NE(st.message().find("Swish"), std::string::npos) << st.message();
    st = lstm({{"activations", strs({"Sigmoid", "Tanh"})}});
    EXPECT_NE(st.message().find("activations"), std::string::npos) << st.message();
    st = lstm({{"layout", i1(1)}}, {1, 8, 2}, 13);
    EXPECT_NE(st.message().find("layout"), std::string::npos) << st.message();
    st = lstm({{"clip", f1(-1)}});
    EXPECT_NE(st.message().find("clip"), std::string::npos) << st.message();

    Builder g;
    g.input("X", DType::kF32, {3, 1, 2});
    g.input("W", DType::kF32, {1, 3, 2});
    g.input("R", DType::kF32, {1, 3, 1});
    g.input("L", DType::kI64, {1});
    g.node("GRU", {"X", "W", "R", "", "L"}, {"Y"});
    g.output("Y");
    st = compile_status(g.g);
    EXPECT_NE(st.message().find("sequence_lens must be int32"), std::string::npos) << st.message();

    Builder r;
    r.input("X", DType::kF32, {3, 2});
    r.input("W", DType::kF32, {1, 1, 2});
    r.input("R", DType::kF32, {1, 1, 1});
    r.node("RNN", {"X", "W", "R"}, {"Y"});
    r.output("Y");
    st = compile_status(r.g);
    EXPECT_NE(st.message().find("X must have rank 3"), std::string::npos) << st.message();
}

TEST(RnnOps, SequenceLensOutOfRangeIsARunTimeError) {
    RecCase c;
    c.op = "RNN";
    c.with_lens = true;
    RunResult r = run(c.build(), c.inputs(3, {4, 1}));
    EXPECT_EQ(r.st.code(), Code::kInvalid);
    EXPECT_NE(r.st.message().find("sequence_lens"), std::string::npos) << r.st.message();
}

// ---------------------------------------------------------------- If

// then: a + b; else: b * b - a (captures read in a different order).
Graph if_graph(bool bad_shapes = false) {
    Builder then_b;
    then_b.capture("a");
    then_b.capture("b");
    then_b.node("Add", {"a", "b"}, {"t"});
    then_b.output("t");
    Builder else_b;
    else_b.capture("b");
    else_b.capture("a");
    if (bad_shapes) {
        else_b.constant("k", DType::kF32, {3}, {1, 2, 3});
        else_b.node("Identity", {"k"}, {"e"});
    } else {
        else_b.node("Mul", {"b", "b"}, {"bb"});
        else_b.node("Sub", {"bb", "a"}, {"e"});
    }
    else_b.output("e");
    Builder b(13);
    b.input("cond", DType::kBool, {});
    b.input("a", DType::kF32, {2});
    b.input("b", DType::kF32, {2});
    b.node("If", {"cond"}, {"y"}, {{"then_branch", graph(then_b)}, {"else_branch", graph(else_b)}});
    b.output("y");
    return b.g;
}

TEST(ControlOps, IfRunTimeConditionWithCaptures) {
    Graph g = if_graph();
    RunResult r = run(g, {{1}, {1, 2}, {3, 4}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_near(r.outs[0], {4, 6});
    r = run(g, {{0}, {1, 2}, {3, 4}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_near(r.outs[0], {8, 14});
    // Alternating in one session (bindings cached per branch).
    std::shared_ptr<const Plan> plan;
    ASSERT_TRUE(compile_graph(g, CompileOptions{}, &plan).ok());
    Session s(plan);
    float a[2] = {1, 2}, bv[2] = {3, 4};
    std::memcpy(s.input_data(1), a, sizeof a);
    std::memcpy(s.input_data(2), bv, sizeof bv);
    for (int k = 0; k < 4; ++k) {
        *static_cast<bool*>(s.input_data(0)) = k % 2 == 0;
        ASSERT_TRUE(s.run().ok());
        const float* y = static_cast<const float*>(s.output_data(0));
        EXPECT_EQ(y[1], k % 2 == 0 ? 6.f : 14.f);
    }
}

TEST(ControlOps, IfBranchesWithDifferentShapesNeedAKnownCondition) {
    Graph g = if_graph(true);
    Status st = compile_status(g);
    EXPECT_EQ(st.code(), Code::kUnsupported) << st.message();
    EXPECT_NE(st.message().find("2 in then_branch but float32 3 in else_branch"), std::string::npos) << st.message();
    // With the condition frozen the compiler inlines a branch.
    CompileOptions opt;
    auto c = std::make_shared<Tensor>(DType::kBool, Shape{});
    *c->as<bool>() = false;
    opt.frozen_inputs["cond"] = c;
    std::shared_ptr<const Plan> plan;
    ASSERT_TRUE(compile_graph(g, opt, &plan).ok());
    EXPECT_EQ(plan->outputs[0].shape, Shape{3});
}

TEST(ControlOps, IfMissingBranchIsAnError) {
    Builder then_b;
    then_b.constant("k", DType::kF32, {1}, {1});
    then_b.node("Identity", {"k"}, {"t"});
    then_b.output("t");
    Builder b(13);
    b.input("cond", DType::kBool, {});
    b.node("If", {"cond"}, {"y"}, {{"then_branch", graph(then_b)}});
    b.output("y");
    Status st = compile_status(b.g);
    EXPECT_EQ(st.code(), Code::kInvalid);
    EXPECT_NE(st.message().find("else_branch"), std::string::npos) << st.message();
}

// ---------------------------------------------------------------- Loop

// Loop body: x_out = x_in * k (k captured); scan = x_out; cond_out = x_out < limit (captured) when
// `dynamic`, else cond_in.
Builder loop_body(bool dynamic, bool scan = true) {
    Builder body;
    body.input("i", DType::kI64, {});
    body.input("c_in", DType::kBool, {});
    body.input("x_in", DType::kF32, {2});
    body.capture("k");
    body.node("Mul", {"x_in", "k"}, {"x_out"});
    if (dynamic) {
        body.capture("limit");
        body.node("ReduceSum", {"x_out"}, {"s"}, {{"keepdims", i1(0)}});
        body.node("Less", {"s", "limit"}, {"c_out"});
    } else {
        body.node("Identity", {"c_in"}, {"c_out"});
    }
    body.output("c_out");
    body.output("x_out");
    if (scan) {
        body.node("Identity", {"x_out"}, {"sc"});
        body.output("sc");
    }
    return body;
}

TEST(ControlOps, LoopWithScanOutputs) {
    Builder body = loop_body(false);
    Builder b(13);
    b.constant("M", DType::kI64, {}, {3});
    b.input("x", DType::kF32, {2});
    b.input("k", DType::kF32, {2});
    b.node("Loop", {"M", "", "x"}, {"y", "ys"}, {{"body", graph(body)}});
    b.output("y");
    b.output("ys");
    RunResult r = run(b.g, {{1, 2}, {2, 3}}, 2);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_near(r.outs[0], {8, 54});
    EXPECT_EQ(r.shapes[1], (Shape{3, 2}));
    expect_near(r.outs[1], {2, 6, 4, 18, 8, 54});
}

TEST(ControlOps, LoopRunTimeConditionWithoutScanOutputs) {
    Builder body = loop_body(true, false);
    Builder b(13);
    b.constant("M", DType::kI64, {}, {100});
    b.input("x", DType::kF32, {2});
    b.input("k", DType::kF32, {2});
    b.input("limit", DType::kF32, {});
    b.input("cond", DType::kBool, {});
    b.node("Loop", {"M", "cond", "x"}, {"y"}, {{"body", graph(body)}});
    b.output("y");
    // Doubles until the sum reaches 50: 3 -> 6 -> 12 -> 24 -> 48 -> 96.
    RunResult r = run(b.g, {{1, 2}, {2, 2}, {50}, {1}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_near(r.outs[0], {32, 64});
    r = run(b.g, {{1, 2}, {2, 2}, {50}, {0}});  // initial condition false: no iteration
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_near(r.outs[0], {1, 2});
}

TEST(ControlOps, LoopScanOutputsWithRunTimeConditionAreRejected) {
    Builder body = loop_body(true);
    Builder b(13);
    b.constant("M", DType::kI64, {}, {4});
    b.input("x", DType::kF32, {2});
    b.input("k", DType::kF32, {2});
    b.input("limit", DType::kF32, {});
    b.node("Loop", {"M", "", "x"}, {"y", "ys"}, {{"body", graph(body)}});
    b.output("ys");
    Status st = compile_status(b.g);
    EXPECT_EQ(st.code(), Code::kUnsupported);
    EXPECT_NE(st.message().find("data-dependent"), std::string::npos) << st.message();
}

TEST(ControlOps, LoopTripCountMustBeKnownForScanOutputs) {
    Builder body = loop_body(false);
    Builder b(13);
    b.input("M", DType::kI64, {});
    b.input("x", DType::kF32, {2});
    b.input("k", DType::kF32, {2});
    b.node("Loop", {"M", "", "x"}, {"y", "ys"}, {{"body", graph(body)}});
    b.output("ys");
    Status st = compile_status(b.g);
    EXPECT_EQ(st.code(), Code::kNeedValue) << st.message();
    EXPECT_EQ(st.detail(), "M");
}

TEST(ControlOps, LoopCarriedShapeChangeIsAnError) {
    Builder body;
    body.input("i", DType::kI64, {});
    body.input("c_in", DType::kBool, {});
    body.input("x_in", DType::kF32, {2});
    body.node("Concat", {"x_in", "x_in"}, {"x_out"}, {{"axis", i1(0)}});
    body.node("Identity", {"c_in"}, {"c_out"});
    body.output("c_out");
    body.output("x_out");
    Builder b(13);
    b.constant("M", DType::kI64, {}, {2});
    b.input("x", DType::kF32, {2});
    b.node("Loop", {"M", "", "x"}, {"y"}, {{"body", graph(body)}});
    b.output("y");
    Status st = compile_status(b.g);
    EXPECT_EQ(st.code(), Code::kUnsupported);
    EXPECT_NE(st.message().find("keep their dtype and shape"), std::string::npos) << st.message();
}

TEST(ControlOps, LoopWithoutTripCountThatNeverEndsIsAnError) {
    Builder body = loop_body(false, false);
    Builder b(13);
    b.input("x", DType::kF32, {2});
    b.input("k", DType::kF32, {2});
    b.node("Loop", {"", "", "x"}, {"y"}, {{"body", graph(body)}});
    b.output("y");
    Status st = compile_status(b.g);
    EXPECT_EQ(st.code(), Code::kInvalid);
    EXPECT_NE(st.message().find("never terminates"), std::string::npos) << st.message();
}

TEST(ControlOps, LoopUnrolledWhenTheBodyNeedsTheIterationNumber) {
    // scan_i = Slice(x, [i], [i + 1]) needs i at compile time.
    Builder body;
    body.input("i", DType::kI64, {});
    body.input("c_in", DType::kBool, {});
    body.input("acc_in", DType::kF32, {1});
    body.capture("x");
    body.constant("one", DType::kI64, {}, {1});
    body.constant("ax", DType::kI64, {1}, {0});
    body.node("Unsqueeze", {"i", "ax"}, {"st"});
    body.node("Add", {"st", "one"}, {"en"});
    body.node("Slice", {"x", "st", "en"}, {"sl"});
    body.node("Add", {"acc_in", "sl"}, {"acc_out"});
    body.node("Identity", {"c_in"}, {"c_out"});
    body.output("c_out");
    body.output("acc_out");
    body.output("sl");
    Builder b(13);
    b.constant("M", DType::kI64, {}, {4});
    b.input("x", DType::kF32, {5});
    b.input("acc", DType::kF32, {1});
    b.node("Loop", {"M", "", "acc"}, {"y", "ys"}, {{"body", graph(body)}});
    b.output("y");
    b.output("ys");
    RunResult r = run(b.g, {{1, 2, 3, 4, 5}, {10}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_near(r.outs[0], {20});
    EXPECT_EQ(r.shapes[1], (Shape{4, 1}));
    expect_near(r.outs[1], {1, 2, 3, 4});
}

// ---------------------------------------------------------------- Scan

TEST(ControlOps, ScanAxesAndDirections) {
    // Running sum over axis 1 of x [2, 3], input reversed, output stacked on axis 1 reversed.
    Builder body(11);
    body.input("s_in", DType::kF32, {2});
    body.input("xi", DType::kF32, {2});
    body.node("Add", {"s_in", "xi"}, {"s_out"});
    body.node("Identity", {"s_out"}, {"sc"});
    body.output("s_out");
    body.output("sc");
    Builder b(11);
    b.input("s0", DType::kF32, {2});
    b.input("x", DType::kF32, {2, 3});
    b.node("Scan", {"s0", "x"}, {"s", "ys"},
           {{"body", graph(body)},
            {"num_scan_inputs", i1(1)},
            {"scan_input_axes", ints({1})},
            {"scan_input_directions", ints({1})},
            {"scan_output_axes", ints({-1})},
            {"scan_output_directions", ints({1})}});
    b.output("s");
    b.output("ys");
    RunResult r = run(b.g, {{0, 100}, {1, 2, 3, 4, 5, 6}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_near(r.outs[0], {6, 115});
    EXPECT_EQ(r.shapes[1], (Shape{2, 3}));
    // Iterations see columns 2, 1, 0: sums (3, 106), (5, 111), (6, 115), written at 2, 1, 0.
    expect_near(r.outs[1], {6, 5, 3, 115, 111, 106});
}

TEST(ControlOps, ScanOpset8BatchAndSequenceLens) {
    Builder body(8);
    body.input("s_in", DType::kF32, {1});
    body.input("xi", DType::kF32, {1});
    body.node("Add", {"s_in", "xi"}, {"s_out"});
    body.node("Identity", {"s_out"}, {"sc"});
    body.output("s_out");
    body.output("sc");
    Builder b(8);
    b.input("lens", DType::kI64, {2});
    b.input("s0", DType::kF32, {2, 1});
    b.input("x", DType::kF32, {2, 3, 1});
    b.node("Scan", {"lens", "s0", "x"}, {"s", "ys"}, {{"body", graph(body)}, {"num_scan_inputs", i1(1)}});
    b.output("s");
    b.output("ys");
    RunResult r = run(b.g, {{3, 2}, {0, 10}, {1, 2, 3, 4, 5, 6}});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_near(r.outs[0], {6, 19});
    EXPECT_EQ(r.shapes[1], (Shape{2, 3, 1}));
    expect_near(r.outs[1], {1, 3, 6, 14, 19, 0});
}

TEST(ControlOps, ScanBadModelsGiveClearErrors) {
    Builder body(11);
    body.input("a", DType::kF32, {2});
    body.input("b", DType::kF32, {2});
    body.node("Add", {"a", "b"}, {"c"});
    body.output("c");
    Builder b(11);
    b.input("x", DType::kF32, {3, 2});
    b.input("y", DType::kF32, {4, 2});
    b.node("Scan", {"x", "y"}, {"z"}, {{"body", graph(body)}, {"num_scan_inputs", i1(2)}});
    b.output("z");
    Status st = compile_status(b.g);
    EXPECT_EQ(st.code(), Code::kInvalid);
    EXPECT_NE(st.message().find("length 4"), std::string::npos) << st.message();

    Builder c(11);
    c.input("x", DType::kF32, {3, 2});
    c.input("y", DType::kF32, {3, 2});
    c.node("Scan", {"x", "y"}, {"z"},
           {{"body", graph(body)}, {"num_scan_inputs", i1(2)}, {"scan_input_axes", ints({0, 5})}});
    c.output("z");
    st = compile_status(c.g);
    EXPECT_NE(st.message().find("scan_input_axes[1]"), std::string::npos) << st.message();

    Builder d(11);
    d.input("x", DType::kF32, {3, 2});
    d.node("Scan", {"x"}, {"z"}, {{"body", graph(body)}});
    d.output("z");
    st = compile_status(d.g);
    EXPECT_NE(st.message().find("num_scan_inputs"), std::string::npos) << st.message();
}

}  // namespace
