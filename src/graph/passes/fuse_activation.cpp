// Conv / Gemm / MatMul followed by an activation (Relu, LeakyRelu, Clip with constant bounds,
// HardSigmoid, HardSwish, Sigmoid, Tanh): the activation node goes and the producer carries
//   _fused_act (string), _fused_alpha / _fused_beta (floats: LeakyRelu alpha; Clip min, max;
//   HardSigmoid alpha, beta)
// and writes the activation's output value. Only where the producer's kernel honours the
// attributes (kernel_supports probes it), so the graph stays correct while kernels catch up.
#include <cfloat>

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

int fuse_one(Graph& g, const Uses& u, int ai, std::vector<char>& dead) {
    const Node& a = g.nodes[size_t(ai)];
    Act act;
    if (!parse_act(g, a, &act)) return 0;
    const int y = a.inputs[0];
    if (y < 0 || !is_f32(g, y) || !only_feeds(u, y, ai) || !same_dims(g, y, a.outputs[0])) return 0;
    const int pi = g.values[size_t(y)].producer;
    if (pi < 0) return 0;
    const Node& p = g.nodes[size_t(pi)];
    if (!is_op(p, "Conv") && !is_op(p, "Gemm") && !is_op(p, "MatMul")) return 0;
    if (p.outputs.size() != 1 || p.outputs[0] != y || p.attrs.count("_fused_act") || p.inputs.size() < 2)
        return 0;
    FusionKind k;
    k.op = p.op;
    k.act = act.name;
    k.residual = attr_i(p, "_fused_residual", 0) != 0;
    k.bias = attr_i(p, "_fused_bias", 0) != 0;
    k.const_weight = const_of(g, p.inputs[1]) != nullptr;
    if (!kernel_supports(k)) return 0;
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

}  // namespace

int fuse_activation(Graph& g) { return rewrite_all(g, fuse_one); }

}  // namespace passes
}  // namespace jiffy
