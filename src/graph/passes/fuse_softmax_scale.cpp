// Softmax(Mul(x, s)) or Softmax(Div(x, 1/s)) with s a positive constant scalar (attention's
// 1/sqrt(d) on the scores): the Mul goes, the Softmax gets `_fused_scale` = s and normalizes s * x
// itself (one pass over the scores instead of two). Also where the scale sits on an operand of the
// scores' MatMul, as PyTorch's attention exports it (Softmax(MatMul(Div(q, sqrt d), k^T))): the
// product is linear, so the scale moves into the Softmax the same way, and q's Transpose, which the
// Div kept apart, then folds into the MatMul (fold_matmul_transpose).
#include <cmath>

#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

// p = Mul(x, c), Mul(c, x) or Div(x, c) with c a constant scalar and x of v's shape: x, and in *f
// the factor p applies (c, or 1 / c for the Div); else -1.
int scaled_input(const Graph& g, const Node& p, int v, double* f) {
    const bool mul = is_op(p, "Mul"), div = is_op(p, "Div");
    if ((!mul && !div) || p.inputs.size() != 2 || p.outputs.size() != 1) return -1;
    double c = 0;
    for (int side = 0; side < (mul ? 2 : 1); ++side) {
        const int x = p.inputs[size_t(side)];
        if (x < 0 || !scalar_of(g, p.inputs[size_t(1 - side)], &c) || !same_dims(g, x, v)) continue;
        *f = div ? 1.0 / c : c;
        return x;
    }
    return -1;
}

// Softmax si takes factor f on top of its own _fused_scale; false (nothing changed) where the
// product is not a positive finite scale.
bool take_scale(Graph& g, int si, double f) {
    const double s = f * double(attr_f(g.nodes[size_t(si)], "_fused_scale", 1.0f));
    if (!(s > 0) || !std::isfinite(s)) return false;
    set_f(g.nodes[size_t(si)], "_fused_scale", float(s));
    return true;
}

// Softmax si of a plain float MatMul mi (read by the Softmax alone) one of whose operands is
// scaled by a constant: the MatMul reads the unscaled operand, the Softmax takes the factor.
int from_operand(Graph& g, const Uses& u, int si, int mi, std::vector<char>& dead) {
    const Node& m = g.nodes[size_t(mi)];
    if (m.inputs.size() != 2 || m.outputs.size() != 1 || m.attrs.count("_fused_act") || m.attrs.count("_fused_bias"))
        return 0;
    for (int side = 0; side < 2; ++side) {
        const int v = m.inputs[size_t(side)];
        if (v < 0 || !is_f32(g, v) || !only_feeds(u, v, mi)) continue;
        const int pi = g.values[size_t(v)].producer;
        double f = 0;
        const int x = pi < 0 ? -1 : scaled_input(g, g.nodes[size_t(pi)], v, &f);
        if (x < 0 || !take_scale(g, si, f)) continue;
        g.nodes[size_t(mi)].inputs[size_t(side)] = x;
        dead[size_t(pi)] = 1;
        return 1;
    }
    return 0;
}

int fuse_one(Graph& g, const Uses& u, int si, std::vector<char>& dead) {
    const Node& sm = g.nodes[size_t(si)];
    if (!is_op(sm, "Softmax") || sm.inputs.size() != 1 || sm.outputs.size() != 1) return 0;
    const int v = sm.inputs[0];
    if (!is_f32(g, v) || !only_feeds(u, v, si)) return 0;
    const int pi = g.values[size_t(v)].producer;
    if (pi < 0) return 0;
    if (is_op(g.nodes[size_t(pi)], "MatMul")) return from_operand(g, u, si, pi, dead);
    double f = 0;
    const int x = scaled_input(g, g.nodes[size_t(pi)], v, &f);
    if (x < 0 || !take_scale(g, si, f)) return 0;
    g.nodes[size_t(si)].inputs[0] = x;
    dead[size_t(pi)] = 1;
    return 1;
}

}  // namespace

int fuse_softmax_scale(Graph& g) { return rewrite_all(g, fuse_one); }

}  // namespace passes
}  // namespace jiffy
