// Conv + Add(conv_out, other) with `other` of exactly the conv output's shape: the Add goes, the
// Conv gets `other` as a 4th input and _fused_residual = 1 (y = conv + bias + other, before any
// fused activation). Only where the Conv kernel honours it (kernel_supports probes it).
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

int fuse_one(Graph& g, const Uses& u, int ai, std::vector<char>& dead) {
    const Node& add = g.nodes[size_t(ai)];
    if (!is_op(add, "Add") || add.inputs.size() != 2 || add.outputs.size() != 1 || add.outputs[0] < 0) return 0;
    for (int side = 0; side < 2; ++side) {
        const int y = add.inputs[size_t(side)], other = add.inputs[size_t(1 - side)];
        if (y < 0 || other < 0 || y == other || !is_f32(g, y) || !is_f32(g, other)) continue;
        if (!only_feeds(u, y, ai) || !same_dims(g, y, other) || !same_dims(g, y, add.outputs[0])) continue;
        const int pi = g.values[size_t(y)].producer;
        if (pi < 0) continue;
        const Node& p = g.nodes[size_t(pi)];
        if (!is_op(p, "Conv") || p.outputs.size() != 1 || p.outputs[0] != y || p.attrs.count("_fused_act") ||
            p.attrs.count("_fused_residual") || p.inputs.size() < 2 || p.inputs.size() > 3 ||
            p.num_explicit_inputs != int(p.inputs.size()))
            continue;
        FusionKind k;
        k.op = "Conv";
        k.residual = true;
        k.const_weight = const_of(g, p.inputs[1]) != nullptr;
        if (!kernel_supports(k)) return 0;
        const int out = add.outputs[0];
        Node& pn = g.nodes[size_t(pi)];
        pn.inputs.resize(3, -1);
        pn.inputs.push_back(other);
        pn.num_explicit_inputs = 4;
        set_i(pn, "_fused_residual", 1);
        retarget_output(g, pi, out);
        dead[size_t(ai)] = 1;
        return 1;
    }
    return 0;
}

}  // namespace

int fuse_residual(Graph& g) { return rewrite_all(g, fuse_one); }

}  // namespace passes
}  // namespace jiffy
