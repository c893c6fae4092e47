// LayerNorm and GELU written out by exporters (PyTorch before opset 17/20) become one node each:
//
//   m = ReduceMean(x, axes=[-1]); d = x - m; v = ReduceMean(d^2, axes=[-1])
//   y = d / Sqrt(v + eps) [* gamma] [+ beta]        -> LayerNormalization(x, gamma, beta; axis=-1)
//   (d^2 as Pow(d, 2) or Mul(d, d); gamma, beta constants varying along the last axis only)
//
//   y = x * 0.5 * (1 + Erf(x / sqrt(2)))            -> Gelu(x)   (any order of the outer products;
//   also 0.5 * x * (...), (x * (...)) * 0.5, and Erf(x * (1 / sqrt(2))))
//
// The openWakeWord heads carry two such LayerNorms each (7 steps -> 1); BERT-style encoder layers
// exported without the fused ops carry both.
#include <cmath>

#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

// A one-element constant of rank <= 1 (so it never raises the rank of what it multiplies).
bool scalar1(const Graph& g, int v, double* c) {
    const Tensor* t = const_of(g, v);
    return t && t->shape().size() <= 1 && scalar_of(g, v, c);
}

// Node ni is ReduceMean over the last axis only, keeping dims: returns its data input, else -1.
int reduce_mean_last(const Graph& g, int ni) {
    if (ni < 0) return -1;
    const Node& n = g.nodes[size_t(ni)];
    if (!is_op(n, "ReduceMean") || n.inputs.empty() || n.inputs[0] < 0) return -1;
    if (attr_i(n, "keepdims", 1) != 1) return -1;
    std::vector<int64_t> axes;
    auto it = n.attrs.find("axes");
    if (it != n.attrs.end()) {
        axes = it->second.ints;
    } else if (n.inputs.size() >= 2 && n.inputs[1] >= 0) {  // opset 18: axes as an input
        const Tensor* t = const_of(g, n.inputs[1]);
        if (!t || t->dtype() != DType::kI64) return -1;
        const int64_t* p = t->as<int64_t>();
        axes.assign(p, p + t->numel());
    }
    if (axes.size() != 1) return -1;
    const int x = n.inputs[0];
    const Value& xv = g.values[size_t(x)];
    const bool last = axes[0] == -1 || (xv.has_shape && axes[0] == int64_t(xv.dims.size()) - 1);
    return last ? x : -1;
}

// A float32 constant whose dims are all 1 but the last, of rank <= 1 or <= x's known rank (so it
// cannot raise the rank of the result): its values as a 1-D tensor, else null.
std::shared_ptr<const Tensor> last_axis_vector(const Graph& g, int v, int x) {
    const Tensor* t = const_of(g, v);
    if (!t || t->dtype() != DType::kF32 || t->numel() < 1) return nullptr;
    const Shape& s = t->shape();
    const Value& xv = g.values[size_t(x)];
    if (s.size() > 1 && !(xv.has_shape && s.size() <= xv.dims.size())) return nullptr;
    for (size_t i = 0; i + 1 < s.size(); ++i)
        if (s[i] != 1) return nullptr;
    auto r = std::make_shared<Tensor>(DType::kF32, Shape{t->numel()});
    std::copy(t->as<float>(), t->as<float>() + t->numel(), r->as<float>());
    return r;
}

// Node ni (binary, commutative) has a constant operand accepted by `ok`: returns the other operand.
template <typename F>
int other_than_const(const Graph& g, const Node& n, F ok, int* cv) {
    if (n.inputs.size() != 2) return -1;
    for (int side = 0; side < 2; ++side)
        if (n.inputs[size_t(side)] >= 0 && const_of(g, n.inputs[size_t(side)]) && ok(n.inputs[size_t(side)])) {
            if (cv) *cv = n.inputs[size_t(side)];
            return n.inputs[size_t(1 - side)];
        }
    return -1;
}

// Matches at the Div node.
int fuse_layernorm_at(Graph& g, const Uses& u, int di, std::vector<char>& dead) {
    const Node& dv = g.nodes[size_t(di)];
    if (!is_op(dv, "Div") || dv.inputs.size() != 2 || dv.outputs.size() != 1) return 0;
    const int d = dv.inputs[0], s = dv.inputs[1];
    if (d < 0 || s < 0 || !is_f32(g, d) || g.values[size_t(d)].producer < 0) return 0;
    // s = Sqrt(v + eps)
    const int sq = sole_producer(g, u, s, di);
    if (sq < 0 || !is_op(g.nodes[size_t(sq)], "Sqrt")) return 0;
    const int ai = sole_producer(g, u, g.nodes[size_t(sq)].inputs[0], sq);
    if (ai < 0 || !is_op(g.nodes[size_t(ai)], "Add")) return 0;
    double eps = 0;
    int eps_v = -1;
    const int v = other_than_const(g, g.nodes[size_t(ai)], [&](int c) { return scalar1(g, c, &eps); }, &eps_v);
    if (v < 0 || !(eps >= 0) || !std::isfinite(eps)) return 0;
    // v = ReduceMean(d^2)
    const int r2 = sole_producer(g, u, v, ai);
    const int sqd = reduce_mean_last(g, r2);
    if (sqd < 0) return 0;
    const int pi = sole_producer(g, u, sqd, r2);
    if (pi < 0) return 0;
    const Node& p = g.nodes[size_t(pi)];
    double e2 = 0;
    const bool square = (is_op(p, "Pow") && p.inputs.size() == 2 && p.inputs[0] == d && scalar1(g, p.inputs[1], &e2) &&
                         e2 == 2.0) ||
                        (is_op(p, "Mul") && p.inputs.size() == 2 && p.inputs[0] == d && p.inputs[1] == d);
    if (!square) return 0;
    // d = x - ReduceMean(x), read only by the square and the Div
    if (u.pinned[size_t(d)] || u.count[size_t(d)] != (is_op(p, "Mul") ? 3 : 2)) return 0;
    const int sb = g.values[size_t(d)].producer;
    const Node& sub = g.nodes[size_t(sb)];
    if (!is_op(sub, "Sub") || sub.inputs.size() != 2) return 0;
    const int x = sub.inputs[0];
    const int r1 = sole_producer(g, u, sub.inputs[1], sb);
    if (x < 0 || reduce_mean_last(g, r1) != x) return 0;
    // Optional * gamma, + beta after the Div.
    int last = di, out = dv.outputs[0];
    std::shared_ptr<const Tensor> gamma, beta;
    if (!u.pinned[size_t(out)] && u.count[size_t(out)] == 1 && u.user[size_t(out)] >= 0) {
        const int mi = u.user[size_t(out)];
        const Node& m = g.nodes[size_t(mi)];
        int gv = -1;
        if (is_op(m, "Mul") && m.outputs.size() == 1 &&
            other_than_const(g, m, [&](int c) { return last_axis_vector(g, c, x) != nullptr; }, &gv) == out) {
            gamma = last_axis_vector(g, gv, x);
            last = mi, out = m.outputs[0];
        }
    }
    if (!u.pinned[size_t(out)] && u.count[size_t(out)] == 1 && u.user[size_t(out)] >= 0) {
        const int bi = u.user[size_t(out)];
        const Node& b = g.nodes[size_t(bi)];
        int bv = -1;
        if (is_op(b, "Add") && b.outputs.size() == 1 &&
            other_than_const(g, b, [&](int c) { return last_axis_vector(g, c, x) != nullptr; }, &bv) == out) {
            beta = last_axis_vector(g, bv, x);
            last = bi, out = b.outputs[0];
        }
    }
    if (gamma && beta && gamma->numel() != beta->numel() && gamma->numel() != 1 && beta->numel() != 1) return 0;
    if (!gamma) {
        auto one = std::make_shared<Tensor>(DType::kF32, Shape{1});
        one->as<float>()[0] = 1.0f;
        gamma = one;
    }
    const std::string base = g.nodes[size_t(last)].name.empty() ? "layernorm" : g.nodes[size_t(last)].name;
    const int gid = add_const(g, base + "_scale", Tensor(*gamma));
    const int bid = beta ? add_const(g, base + "_bias", Tensor(*beta)) : -1;
    std::vector<int> gone = {r1, sb, pi, r2, ai, sq};
    for (int n = di; n != last; n = u.user[size_t(g.nodes[size_t(n)].outputs[0])]) gone.push_back(n);
    for (int n : gone) dead[size_t(n)] = 1;
    Node& ln = g.nodes[size_t(last)];
    ln.op = "LayerNormalization";
    ln.domain.clear();
    ln.attrs.clear();
    set_i(ln, "axis", -1);
    set_f(ln, "epsilon", float(eps));
    ln.inputs = {x, gid};
    if (bid >= 0) ln.inputs.push_back(bid);
    ln.num_explicit_inputs = int(ln.inputs.size());
    ln.outputs = {out};
    return int(gone.size());
}

// ---- GELU ----

// Node ni computes Erf(x / sqrt(2)) or Erf(x * (1/sqrt(2))) privately for `user`: returns x.
int erf_of_scaled(const Graph& g, const Uses& u, int v, int user, std::vector<int>* chain) {
    const int ei = sole_producer(g, u, v, user);
    if (ei < 0 || !is_op(g.nodes[size_t(ei)], "Erf")) return -1;
    const int si = sole_producer(g, u, g.nodes[size_t(ei)].inputs[0], ei);
    if (si < 0) return -1;
    const Node& s = g.nodes[size_t(si)];
    double c = 0;
    int x = -1;
    if (is_op(s, "Div") && s.inputs.size() == 2 && scalar1(g, s.inputs[1], &c) && near_value(c, std::sqrt(2.0)))
        x = s.inputs[0];
    else if (is_op(s, "Mul"))
        x = other_than_const(g, s, [&](int cv) { return scalar1(g, cv, &c) && near_value(c, 1.0 / std::sqrt(2.0)); }, nullptr);
    if (x < 0) return -1;
    chain->push_back(ei);
    chain->push_back(si);
    return x;
}

// v = 1 + Erf(x / sqrt 2) privately for `user`: returns x.
int one_plus_erf(const Graph& g, const Uses& u, int v, int user, std::vector<int>* chain) {
    const int ai = sole_producer(g, u, v, user);
    if (ai < 0 || !is_op(g.nodes[size_t(ai)], "Add")) return -1;
    double c = 0;
    const int e = other_than_const(g, g.nodes[size_t(ai)], [&](int cv) { return scalar1(g, cv, &c) && c == 1.0; }, nullptr);
    if (e < 0) return -1;
    const int x = erf_of_scaled(g, u, e, ai, chain);
    if (x >= 0) chain->push_back(ai);
    return x;
}

// Matches at the outermost Mul: the product of x, 0.5 and (1 + erf(x / sqrt 2)) in any grouping.
int fuse_gelu_at(Graph& g, const Uses& u, int fi, std::vector<char>& dead) {
    const Node& f = g.nodes[size_t(fi)];
    if (!is_op(f, "Mul") || f.inputs.size() != 2 || f.outputs.size() != 1 || !is_f32(g, f.outputs[0])) return 0;
    double c = 0;
    auto half = [&](int cv) { return scalar1(g, cv, &c) && c == 0.5; };
    for (int side = 0; side < 2; ++side) {
        const int a = f.inputs[size_t(side)], b = f.inputs[size_t(1 - side)];
        if (a < 0 || b < 0) continue;
        std::vector<int> chain;
        int x = -1;
        // (x * 0.5) * (1 + erf) or (0.5 * x) * (1 + erf)
        const int hi = sole_producer(g, u, a, fi);
        if (hi >= 0 && is_op(g.nodes[size_t(hi)], "Mul")) {
            const int xa = other_than_const(g, g.nodes[size_t(hi)], half, nullptr);
            if (xa >= 0) {
                std::vector<int> ch;
                const int xb = one_plus_erf(g, u, b, fi, &ch);
                if (xb == xa) x = xa, chain = ch, chain.push_back(hi);
            }
            // (x * (1 + erf)) * 0.5
            if (x < 0 && half(b)) {
                const Node& m = g.nodes[size_t(hi)];
                for (int s2 = 0; s2 < 2 && x < 0 && m.inputs.size() == 2; ++s2) {
                    std::vector<int> ch;
                    const int xb = one_plus_erf(g, u, m.inputs[size_t(1 - s2)], hi, &ch);
                    if (xb >= 0 && xb == m.inputs[size_t(s2)]) x = xb, chain = ch, chain.push_back(hi);
                }
            }
        }
        if (x < 0) continue;
        for (int n : chain) dead[size_t(n)] = 1;
        Node& n = g.nodes[size_t(fi)];
        n.op = "Gelu";
        n.domain.clear();
        n.attrs.clear();
        n.inputs = {x};
        n.num_explicit_inputs = 1;
        return int(chain.size());
    }
    return 0;
}

}  // namespace

int fuse_layernorm(Graph& g) { return rewrite_all(g, fuse_layernorm_at); }
int fuse_gelu(Graph& g) { return rewrite_all(g, fuse_gelu_at); }

}  // namespace passes
}  // namespace jiffy
