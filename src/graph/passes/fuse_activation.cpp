// Conv / ConvTranspose / Gemm / MatMul followed by an activation (Relu, LeakyRelu, Clip with
// constant bounds, HardSigmoid, HardSwish, Sigmoid, Tanh, Gelu as "Gelu" / "GeluTanh"): the
// activation node goes and the producer carries
//   _fused_act (string), _fused_alpha / _fused_beta (floats: LeakyRelu alpha; Clip min, max;
//   HardSigmoid alpha, beta)
// and writes the activation's output value. Only where the producer's kernel honours the
// attributes (kernel_supports probes it), so the graph stays correct while kernels catch up.
// Mul(y, Sigmoid(y)) (SiLU / Swish, as PyTorch exports nn.SiLU: EfficientNet, YOLOv5/v8) with y
// read by nothing else fuses the same way, as _fused_act = "Silu".
// Then a Max / Min with a constant one-element operand after such a fused Conv (as in
// openWakeWord's Max(LeakyRelu(Conv(x)), -0.4)) becomes a clamp after the activation:
//   _fused_lo / _fused_hi (floats; y = min(max(act(...), lo), hi)).
// Last, a Mul / Add / Sub by a constant one-element operand after a fused Conv (PaddleOCR's
// learnable affine after each HardSwish: Mul(w_0), Add(w_1); its own pass over the tensor
// before) becomes an affine after the activation and the clamp:
//   _fused_scale / _fused_shift (floats; y = fma(clamp(act(...)), scale, shift)).
// Composed in place: a Mul by c after an affine (s, t) makes it (s c, t c).
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

struct Act {
    std::string name;
    bool params = false;
    float alpha = 0, beta = 0;
};

bool parse_act(const Graph& g, const Node& a, Act* act) {
    if (!a.domain.empty() || a.outputs.size() != 1 || a.outputs[0] < 0 || a.inputs.empty()) return false;
    const size_t max_in = a.op == "Clip" ? 3 : 1;
    if (a.inputs.size() > max_in || a.num_explicit_inputs != int(a.inputs.size())) return false;
    act->name = a.op;
    if (a.op == "Relu" || a.op == "HardSwish" || a.op == "Sigmoid" || a.op == "Tanh") return true;
    if (a.op == "Gelu") {  // ONNX Gelu (opset 20) or the fuse_gelu pattern's
        const std::string approx = attr_s(a, "approximate", "none");
        if (approx != "none" && approx != "tanh") return false;
        act->name = approx == "tanh" ? "GeluTanh" : "Gelu";
        return true;
    }
    act->params = true;
    if (a.op == "LeakyRelu") {
        act->alpha = attr_f(a, "alpha", 0.01f);
        return true;
    }
    if (a.op == "HardSigmoid") {
        act->alpha = attr_f(a, "alpha", 0.2f);
        act->beta = attr_f(a, "beta", 0.5f);
        return true;
    }
    if (a.op == "Clip") return clip_bounds(g, a, &act->alpha, &act->beta);
    return false;
}

// The Conv / Gemm / MatMul writing y (its only output, no activation fused yet) when its kernel
// honours `act` as a fused activation (kernel_supports), else -1.
int fusable_producer(const Graph& g, int y, const std::string& act) {
    const int pi = g.values[size_t(y)].producer;
    if (pi < 0) return -1;
    const Node& p = g.nodes[size_t(pi)];
    if (!is_op(p, "Conv") && !is_op(p, "ConvTranspose") && !is_op(p, "Gemm") && !is_op(p, "MatMul")) return -1;
    if (p.outputs.size() != 1 || p.outputs[0] != y || p.attrs.count("_fused_act") || p.inputs.size() < 2)
        return -1;
    FusionKind k;
    k.op = p.op;
    k.act = act;
    k.residual = attr_i(p, "_fused_residual", 0) != 0;
    k.bias = attr_i(p, "_fused_bias", 0) != 0;
    k.const_weight = const_of(g, p.inputs[1]) != nullptr;
    return kernel_supports(k) ? pi : -1;
}

int fuse_one(Graph& g, const Uses& u, int ai, std::vector<char>& dead) {
    const Node& a = g.nodes[size_t(ai)];
    Act act;
    if (!parse_act(g, a, &act)) return 0;
    const int y = a.inputs[0];
    if (y < 0 || !is_f32(g, y) || !only_feeds(u, y, ai) || !same_dims(g, y, a.outputs[0])) return 0;
    const int pi = fusable_producer(g, y, act.name);
    if (pi < 0) return 0;
    const int out = a.outputs[0];
    Node& pn = g.nodes[size_t(pi)];
    set_s(pn, "_fused_act", act.name);
    if (act.params) {
        set_f(pn, "_fused_alpha", act.alpha);
        set_f(pn, "_fused_beta", act.beta);
    }
    retarget_output(g, pi, out);
    dead[size_t(ai)] = 1;
    return 1;
}

// Mul(y, Sigmoid(y)) or Mul(Sigmoid(y), y), y a Conv / Gemm / MatMul output read only by the two.
int fuse_silu(Graph& g, const Uses& u, int mi, std::vector<char>& dead) {
    const Node& m = g.nodes[size_t(mi)];
    if (!is_op(m, "Mul") || m.inputs.size() != 2 || m.num_explicit_inputs != 2 || m.outputs.size() != 1 ||
        m.outputs[0] < 0)
        return 0;
    for (int side = 0; side < 2; ++side) {
        const int y = m.inputs[size_t(side)], sv = m.inputs[size_t(1 - side)];
        if (y < 0 || sv < 0 || y == sv || !is_f32(g, y) || !only_feeds(u, sv, mi)) continue;
        const int si = g.values[size_t(sv)].producer;
        if (si < 0) continue;
        const Node& sg = g.nodes[size_t(si)];
        if (!is_op(sg, "Sigmoid") || sg.inputs.size() != 1 || sg.inputs[0] != y || sg.outputs.size() != 1) continue;
        if (u.pinned[size_t(y)] || u.count[size_t(y)] != 2 || !same_dims(g, y, m.outputs[0])) continue;
        const int pi = fusable_producer(g, y, "Silu");
        if (pi < 0) continue;
        const int out = m.outputs[0];
        set_s(g.nodes[size_t(pi)], "_fused_act", "Silu");
        retarget_output(g, pi, out);
        dead[size_t(si)] = dead[size_t(mi)] = 1;
        return 2;
    }
    return 0;
}

bool has_affine(const Node& p) { return p.attrs.count("_fused_scale") || p.attrs.count("_fused_shift"); }

// The FusionKind of Conv p's epilogue as it stands (activation, residual, weights, clamp, affine).
FusionKind conv_kind(const Graph& g, const Node& p) {
    FusionKind k;
    k.op = "Conv";
    k.act = attr_s(p, "_fused_act", "");
    k.residual = attr_i(p, "_fused_residual", 0) != 0;
    k.const_weight = const_of(g, p.inputs[1]) != nullptr;
    k.clamp = p.attrs.count("_fused_lo") || p.attrs.count("_fused_hi");
    k.affine = has_affine(p);
    return k;
}

// For a node n (ni) of two explicit inputs and one output: the Conv carrying a fused activation
// whose output is input `side`, read by n alone, the other input a float32 one-element constant
// (its value in *c) that does not change that output's shape; -1 where n is not such a node.
int fused_conv_and_scalar(const Graph& g, const Uses& u, int ni, int side, double* c) {
    const Node& n = g.nodes[size_t(ni)];
    if (n.inputs.size() != 2 || n.num_explicit_inputs != 2 || n.outputs.size() != 1 || n.outputs[0] < 0) return -1;
    const int y = n.inputs[size_t(side)], k = n.inputs[size_t(1 - side)];
    if (y < 0 || k < 0 || y == k || !is_f32(g, y) || !is_f32(g, k) || !scalar_of(g, k, c)) return -1;
    if (!only_feeds(u, y, ni) || !same_dims(g, y, n.outputs[0])) return -1;
    const int pi = g.values[size_t(y)].producer;
    if (pi < 0) return -1;
    const Node& p = g.nodes[size_t(pi)];
    if (!is_op(p, "Conv") || p.outputs.size() != 1 || p.outputs[0] != y || !p.attrs.count("_fused_act")) return -1;
    return pi;
}

// Conv pi absorbs node ni (a one-input-value Max / Min / Mul / Add / Sub after it): two epilogue
// attributes set, ni's output written by pi.
int absorb(Graph& g, int pi, int ni, std::vector<char>& dead, const char* a, float av, const char* b, float bv) {
    const int out = g.nodes[size_t(ni)].outputs[0];
    Node& pn = g.nodes[size_t(pi)];
    set_f(pn, a, av);
    set_f(pn, b, bv);
    retarget_output(g, pi, out);
    dead[size_t(ni)] = 1;
    return 1;
}

// Max(y, c) / Min(y, c) (either order) with y the only-read output of a Conv carrying a fused
// activation and c a constant with one element that does not change y's shape.
int fuse_bound(Graph& g, const Uses& u, int mi, std::vector<char>& dead) {
    const Node& m = g.nodes[size_t(mi)];
    const bool is_max = is_op(m, "Max");
    if (!is_max && !is_op(m, "Min")) return 0;
    for (int side = 0; side < 2; ++side) {
        double cv = 0;
        const int pi = fused_conv_and_scalar(g, u, mi, side, &cv);
        if (pi < 0 || std::isnan(cv)) continue;
        const Node& p = g.nodes[size_t(pi)];
        if (has_affine(p)) continue;  // the clamp comes before the affine
        const float v = float(cv);
        float lo = attr_f(p, "_fused_lo", -INFINITY), hi = attr_f(p, "_fused_hi", INFINITY);
        // max(min(max(a, lo), hi), v) = min(max(a, max(lo, v)), hi) only while v <= hi;
        // min(min(max(a, lo), hi), v) = min(max(a, lo), min(hi, v)) always.
        if (is_max) {
            if (v > hi) continue;
            lo = std::max(lo, v);
        } else {
            hi = std::min(hi, v);
        }
        FusionKind k = conv_kind(g, p);
        k.clamp = true;
        if (!kernel_supports(k)) return 0;
        return absorb(g, pi, mi, dead, "_fused_lo", lo, "_fused_hi", hi);
    }
    return 0;
}

// Mul(y, c) / Add(y, c) (either order) or Sub(y, c), y the only-read output of a Conv carrying a
// fused activation and c a finite constant with one element that does not change y's shape.
int fuse_affine(Graph& g, const Uses& u, int ni, std::vector<char>& dead) {
    const Node& n = g.nodes[size_t(ni)];
    const bool mul = is_op(n, "Mul"), add = is_op(n, "Add"), sub = is_op(n, "Sub");
    if (!mul && !add && !sub) return 0;
    for (int side = 0; side < (sub ? 1 : 2); ++side) {
        double cv = 0;
        const int pi = fused_conv_and_scalar(g, u, ni, side, &cv);
        if (pi < 0 || !std::isfinite(cv)) continue;
        const Node& p = g.nodes[size_t(pi)];
        FusionKind k = conv_kind(g, p);
        k.affine = true;
        if (!kernel_supports(k)) return 0;
        float s = attr_f(p, "_fused_scale", 1.0f), t = attr_f(p, "_fused_shift", 0.0f);
        const float v = float(cv);
        if (mul) s *= v, t *= v;
        else if (add) t += v;
        else t -= v;
        if (!std::isfinite(s) || !std::isfinite(t)) continue;
        return absorb(g, pi, ni, dead, "_fused_scale", s, "_fused_shift", t);
    }
    return 0;
}

}  // namespace

int fuse_activation(Graph& g) {
    return rewrite_all(g, fuse_one) + rewrite_all(g, fuse_silu) + rewrite_all(g, fuse_bound) +
           rewrite_all(g, fuse_affine);
}

}  // namespace passes
}  // namespace jiffy
