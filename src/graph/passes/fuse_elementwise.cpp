// Elementwise-chain fusion: consecutive float32 elementwise nodes over one shape, where each
// intermediate has no other reader, become one jiffy::ElementwiseChain node (see
// src/ops/elementwise_chain.cpp) that makes one pass over memory. Fusable steps: Relu, LeakyRelu,
// Sigmoid, Tanh, HardSigmoid, HardSwish, Exp, Clip with constant bounds, and Add / Sub / Mul / Div /
// Max / Min whose other operand has the chain's shape, is per-channel (axis 1) or is one value.
// The fused node takes the later node's place in the order (its other operand may be computed
// between the two). Runs once after the other passes, so the Conv epilogue fusions and pattern
// passes see the original nodes first.
#include <cfloat>
#include <cmath>

#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"
#include "kernels/activation.h"
#include "kernels/binary.h"

namespace jiffy {
namespace passes {
namespace {

bool is_chain(const Node& n) { return n.domain == "jiffy" && n.op == "ElementwiseChain"; }

// Shape relation of operand b to the chain's dims (as ElementwiseChain's prepare checks it).
bool operand_ok(const Graph& g, int b, const std::vector<Dim>& o) {
    if (!is_f32(g, b)) return false;
    const auto& d = g.values[size_t(b)].dims;
    int64_t numel = 1;
    for (const Dim& x : d) numel *= x.value;
    if (numel == 1) return true;
    bool full = d.size() == o.size();
    for (size_t i = 0; full && i < d.size(); ++i) full = d[i].value == o[i].value;
    if (full) return true;
    if (o.size() < 2 || d.size() > o.size() || d.size() + 1 < o.size()) return false;
    const size_t lead = o.size() - d.size();
    for (size_t i = 0; i < d.size(); ++i)
        if (lead + i == 1 ? d[i].value != o[1].value : d[i].value != 1) return false;
    return true;
}

struct Step {
    int64_t code = 0;
    int operand = -1;  // value id
    float alpha = 0, beta = 0;
};

// The single step node n applies to `main` (one of its inputs), or false when n is not fusable.
bool step_of(const Graph& g, const Node& n, int main, Step* s) {
    if (!n.domain.empty() || n.outputs.size() != 1 || n.outputs[0] < 0) return false;
    if (n.num_explicit_inputs != int(n.inputs.size()) || n.inputs.empty()) return false;
    if (!is_f32(g, main) || !is_f32(g, n.outputs[0]) || !same_dims(g, main, n.outputs[0])) return false;
    using kernels::ActKind;
    const std::string& op = n.op;
    ActKind k = ActKind::kNone;
    if (op == "Relu") k = ActKind::kRelu;
    else if (op == "LeakyRelu") k = ActKind::kLeakyRelu, s->alpha = attr_f(n, "alpha", 0.01f);
    else if (op == "Sigmoid") k = ActKind::kSigmoid;
    else if (op == "Tanh") k = ActKind::kTanh;
    else if (op == "HardSwish") k = ActKind::kHardSwish;
    else if (op == "Exp") k = ActKind::kExp;
    else if (op == "HardSigmoid")
        k = ActKind::kHardSigmoid, s->alpha = attr_f(n, "alpha", 0.2f), s->beta = attr_f(n, "beta", 0.5f);
    else if (op == "Clip") {
        if (n.inputs[0] != main || !clip_bounds(g, n, &s->alpha, &s->beta)) return false;
        // clip_bounds reports absent bounds as -FLT_MAX / FLT_MAX; the activation wants +-inf.
        if (s->alpha == -FLT_MAX) s->alpha = -INFINITY;
        if (s->beta == FLT_MAX) s->beta = INFINITY;
        k = ActKind::kClip;
    }
    if (k != ActKind::kNone) {
        if (n.inputs[0] != main || (op != "Clip" && n.inputs.size() != 1)) return false;
        s->code = 100 + int(k);
        return true;
    }
    kernels::BinOp b;
    if (op == "Add") b = kernels::BinOp::kAdd;
    else if (op == "Sub") b = kernels::BinOp::kSub;
    else if (op == "Mul") b = kernels::BinOp::kMul;
    else if (op == "Div") b = kernels::BinOp::kDiv;
    else if (op == "Max") b = kernels::BinOp::kMax;
    else if (op == "Min") b = kernels::BinOp::kMin;
    else return false;
    if (n.inputs.size() != 2) return false;
    const bool first = n.inputs[0] == main;
    if (!first && n.inputs[1] != main) return false;
    s->operand = first ? n.inputs[1] : n.inputs[0];
    if (s->operand < 0 || !operand_ok(g, s->operand, g.values[size_t(n.outputs[0])].dims)) return false;
    s->code = (first ? 200 : 300) + int(b);
    return true;
}

// The steps of node p (a chain or a single fusable node) and its main input.
bool steps_of(const Graph& g, const Node& p, int* main, std::vector<Step>* steps) {
    if (is_chain(p)) {
        *main = p.inputs[0];
        auto ops = p.attrs.at("ops").ints, opn = p.attrs.at("operands").ints;
        auto al = p.attrs.at("alphas").floats, be = p.attrs.at("betas").floats;
        for (size_t i = 0; i < ops.size(); ++i)
            steps->push_back(Step{ops[i], opn[i] < 0 ? -1 : p.inputs[size_t(opn[i])], al[i], be[i]});
        return true;
    }
    // A binary node's main input is one with the output's shape (input 0 first).
    for (size_t i = 0; i < p.inputs.size() && i < 2; ++i) {
        Step s;
        if (step_of(g, p, p.inputs[i], &s)) {
            *main = p.inputs[i];
            steps->push_back(s);
            return true;
        }
    }
    return false;
}

int fuse_one(Graph& g, const Uses& u, int mi, std::vector<char>& dead) {
    const Node& m = g.nodes[size_t(mi)];
    if (!m.domain.empty() || m.inputs.empty() || m.inputs.size() > 3) return 0;
    for (size_t k = 0; k < m.inputs.size() && k < 2; ++k) {
        const int v = m.inputs[k];
        if (v < 0 || !only_feeds(u, v, mi)) continue;
        const int pi = g.values[size_t(v)].producer;
        if (pi < 0) continue;
        const Node& p = g.nodes[size_t(pi)];
        if (p.outputs.size() != 1 || p.outputs[0] != v) continue;
        Step last;
        if (!step_of(g, m, v, &last)) continue;
        int main = -1;
        std::vector<Step> steps;
        if (!steps_of(g, p, &main, &steps)) continue;
        steps.push_back(last);
        Node f;
        f.name = m.name;
        f.op = "ElementwiseChain";
        f.domain = "jiffy";
        f.inputs.push_back(main);
        std::vector<int64_t> ops, opn;
        std::vector<float> al, be;
        for (const Step& s : steps) {
            int idx = -1;
            if (s.operand >= 0) {
                for (size_t i = 0; i < f.inputs.size() && idx < 0; ++i)
                    if (f.inputs[i] == s.operand) idx = int(i);
                if (idx < 0) {
                    idx = int(f.inputs.size());
                    f.inputs.push_back(s.operand);
                }
            }
            ops.push_back(s.code);
            opn.push_back(idx);
            al.push_back(s.alpha);
            be.push_back(s.beta);
        }
        // Operand 0 is the main input: a step reading it again (x * s + x) names input 0 as
        // its operand, which the kernel reads as a full tensor like any other input.
        f.num_explicit_inputs = int(f.inputs.size());
        f.outputs = m.outputs;
        set_ints(f, "ops", ops);
        set_ints(f, "operands", opn);
        Attr fa;
        fa.kind = Attr::kFloats;
        fa.floats = al;
        f.attrs["alphas"] = fa;
        fa.floats = be;
        f.attrs["betas"] = fa;
        g.nodes[size_t(mi)] = std::move(f);
        dead[size_t(pi)] = 1;
        return 1;
    }
    return 0;
}

// An inference BatchNormalization no conv took (fold_batchnorm): over a Concat or an Add, as in
// DenseNet's and pre-activation ResNets' BN -> ReLU -> conv, becomes a two-step chain, x * s + t
// with s = scale / sqrt(var + eps) and t = B - mean * s per channel (axis 1), so that
// fuse_one then takes the ReLU after it into the same pass over memory.
int bn_to_chain(Graph& g, const Uses& u, int bi, std::vector<char>&) {
    const Node& bn = g.nodes[size_t(bi)];
    std::vector<double> s, t;
    if (!is_op(bn, "BatchNormalization") || bn.inputs.size() != 5 || !batchnorm_affine(g, u, bn, &s, &t)) return 0;
    const int x = bn.inputs[0];
    if (!is_f32(g, bn.outputs[0])) return 0;
    Shape cs(g.values[size_t(x)].dims.size() - 1, 1);
    cs[0] = int64_t(s.size());
    Tensor sc(DType::kF32, cs), sh(DType::kF32, cs);
    for (size_t c = 0; c < s.size(); ++c) {
        sc.as<float>()[c] = float(s[c]);
        sh.as<float>()[c] = float(t[c]);
    }
    const std::string base = bn.name.empty() ? g.values[size_t(bn.outputs[0])].name : bn.name;
    Node f;
    f.name = bn.name;
    f.op = "ElementwiseChain";
    f.domain = "jiffy";
    f.inputs = {x, add_const(g, base + "/bn_scale", std::move(sc)), add_const(g, base + "/bn_shift", std::move(sh))};
    f.num_explicit_inputs = 3;
    f.outputs = {g.nodes[size_t(bi)].outputs[0]};
    set_ints(f, "ops", {200 + int(kernels::BinOp::kMul), 200 + int(kernels::BinOp::kAdd)});
    set_ints(f, "operands", {1, 2});
    Attr fa;
    fa.kind = Attr::kFloats;
    fa.floats = {0.0f, 0.0f};
    f.attrs["alphas"] = fa;
    f.attrs["betas"] = fa;
    g.nodes[size_t(bi)] = std::move(f);
    return 1;
}

}  // namespace

int fuse_elementwise(Graph& g) {
    const int bns = rewrite_all(g, bn_to_chain);
    return bns + rewrite_all(g, fuse_one);
}

}  // namespace passes
}  // namespace jiffy
