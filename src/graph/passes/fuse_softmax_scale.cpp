// Softmax(Mul(x, s)) or Softmax(Div(x, 1/s)) with s a positive constant scalar (attention's
// 1/sqrt(d) on the scores): the Mul goes, the Softmax gets `_fused_scale` = s and normalizes s * x
// itself (one pass over the scores instead of two).
#include <cmath>

#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

int fuse_one(Graph& g, const Uses& u, int si, std::vector<char>& dead) {
    const Node& sm = g.nodes[size_t(si)];
    if (!is_op(sm, "Softmax") || sm.inputs.size() != 1 || sm.outputs.size() != 1) return 0;
    const int v = sm.inputs[0];
    if (!is_f32(g, v) || !only_feeds(u, v, si)) return 0;
    const int pi = g.values[size_t(v)].producer;
    if (pi < 0) return 0;
    const Node& p = g.nodes[size_t(pi)];
    const bool mul = is_op(p, "Mul"), div = is_op(p, "Div");
    if ((!mul && !div) || p.inputs.size() != 2 || p.outputs.size() != 1) return 0;
    for (int side = 0; side < (mul ? 2 : 1); ++side) {
        const int x = p.inputs[size_t(side)];
        double c = 0;
        if (x < 0 || !scalar_of(g, p.inputs[size_t(1 - side)], &c) || !same_dims(g, x, v)) continue;
        const double s = (mul ? c : 1.0 / c) * double(attr_f(sm, "_fused_scale", 1.0f));
        if (!(s > 0) || !std::isfinite(s)) continue;
        Node& n = g.nodes[size_t(si)];
        n.inputs[0] = x;
        set_f(n, "_fused_scale", float(s));
        dead[size_t(pi)] = 1;
        return 1;
    }
    return 0;
}

}  // namespace

int fuse_softmax_scale(Graph& g) { return rewrite_all(g, fuse_one); }

}  // namespace passes
}  // namespace jiffy
