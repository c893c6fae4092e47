// HardSwish written out by exporters becomes one HardSwish node (which fuse_activation may then
// fold into the Conv before it):
//   x * HardSigmoid(x; alpha=1/6, beta=0.5)            (MobileNetV3 exports)
//   x * Clip(x + 3, 0, 6) / 6,  x * (Clip(x + 3, 0, 6) / 6), with / 6 or * (1/6)   (PaddleOCR)
#include <cmath>

#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

// The other operand of binary node n when one operand is a scalar constant equal to c.
int operand_with_const(const Graph& g, const Node& n, double c, bool commutative) {
    if (n.inputs.size() != 2) return -1;
    double v;
    if (scalar_of(g, n.inputs[1], &v) && near_value(v, c)) return n.inputs[0];
    if (commutative && scalar_of(g, n.inputs[0], &v) && near_value(v, c)) return n.inputs[1];
    return -1;
}

// v = x / 6 or x * (1/6) computed by node ni: returns x.
int div6(const Graph& g, int ni) {
    const Node& n = g.nodes[size_t(ni)];
    if (is_op(n, "Div")) return operand_with_const(g, n, 6.0, false);
    if (is_op(n, "Mul")) return operand_with_const(g, n, 1.0 / 6.0, true);
    return -1;
}

// Node ci computes Clip(x + 3, 0, 6) and its add is private: returns x, marks nodes in `chain`.
int relu6_shift(const Graph& g, const Uses& u, int ci, std::vector<int>* chain) {
    if (ci < 0) return -1;
    const Node& c = g.nodes[size_t(ci)];
    float lo, hi;
    if (!is_op(c, "Clip") || c.inputs.empty() || !clip_bounds(g, c, &lo, &hi) || lo != 0.0f || hi != 6.0f)
        return -1;
    const int ai = sole_producer(g, u, c.inputs[0], ci);
    if (ai < 0 || !is_op(g.nodes[size_t(ai)], "Add")) return -1;
    const int x = operand_with_const(g, g.nodes[size_t(ai)], 3.0, true);
    if (x < 0) return -1;
    chain->push_back(ci);
    chain->push_back(ai);
    return x;
}

void make_hardswish(Graph& g, int ni, int x) {
    Node& n = g.nodes[size_t(ni)];
    n.op = "HardSwish";
    n.domain.clear();
    n.attrs.clear();
    n.inputs = {x};
    n.num_explicit_inputs = 1;
}

int fuse_one(Graph& g, const Uses& u, int fi, std::vector<char>& dead) {
    const Node& f = g.nodes[size_t(fi)];
    if (f.inputs.size() != 2 || f.outputs.size() != 1 || !is_f32(g, f.outputs[0])) return 0;
    if (!is_op(f, "Mul") && !is_op(f, "Div")) return 0;
    for (int x : f.inputs)
        if (x < 0) return 0;
    // x * HardSigmoid(x)
    if (is_op(f, "Mul")) {
        for (int side = 0; side < 2; ++side) {
            const int x = f.inputs[size_t(side)], h = f.inputs[size_t(1 - side)];
            const int hi = sole_producer(g, u, h, fi);
            if (hi < 0) continue;
            const Node& hs = g.nodes[size_t(hi)];
            if (!is_op(hs, "HardSigmoid") || hs.inputs.size() != 1 || hs.inputs[0] != x) continue;
            if (!near_value(attr_f(hs, "alpha", 0.2f), 1.0 / 6.0) || !near_value(attr_f(hs, "beta", 0.5f), 0.5)) continue;
            if (!same_dims(g, x, f.outputs[0])) continue;
            make_hardswish(g, fi, x);
            dead[size_t(hi)] = 1;
            return 1;
        }
        // x * (Clip(x + 3, 0, 6) / 6)
        for (int side = 0; side < 2; ++side) {
            const int x = f.inputs[size_t(side)];
            const int di = sole_producer(g, u, f.inputs[size_t(1 - side)], fi);
            if (di < 0) continue;
            const int cl = div6(g, di);
            std::vector<int> chain{di};
            if (cl < 0 || relu6_shift(g, u, sole_producer(g, u, cl, di), &chain) != x) continue;
            if (!is_f32(g, x) || !same_dims(g, x, f.outputs[0])) continue;
            make_hardswish(g, fi, x);
            for (int k : chain) dead[size_t(k)] = 1;
            return int(chain.size());
        }
    }
    // (x * Clip(x + 3, 0, 6)) / 6
    const int m = div6(g, fi);
    const int mi = sole_producer(g, u, m, fi);
    if (mi < 0 || !is_op(g.nodes[size_t(mi)], "Mul") || g.nodes[size_t(mi)].inputs.size() != 2) return 0;
    for (int side = 0; side < 2; ++side) {
        const Node& mn = g.nodes[size_t(mi)];
        const int x = mn.inputs[size_t(side)];
        std::vector<int> chain{mi};
        if (relu6_shift(g, u, sole_producer(g, u, mn.inputs[size_t(1 - side)], mi), &chain) != x) continue;
        if (!is_f32(g, x) || !same_dims(g, x, g.nodes[size_t(fi)].outputs[0])) continue;
        make_hardswish(g, fi, x);
        for (int k : chain) dead[size_t(k)] = 1;
        return int(chain.size());
    }
    return 0;
}

}  // namespace

int fuse_hardswish(Graph& g) { return rewrite_all(g, fuse_one); }

}  // namespace passes
}  // namespace jiffy
