// Transpose(Transpose(x, p1), p2) = Transpose(x, q) with q[i] = p1[p2[i]]; when q is the
// identity both go (readers see x), unless the result is pinned (then one Transpose stays).
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

int merge_one(Graph& g, const Uses& u, int t2, std::vector<char>& dead) {
    const Node& b = g.nodes[size_t(t2)];
    if (!is_op(b, "Transpose") || b.inputs.size() != 1 || b.outputs.size() != 1 || b.outputs[0] < 0) return 0;
    const int mid = b.inputs[0];
    if (mid < 0 || !only_feeds(u, mid, t2)) return 0;
    const int t1 = g.values[size_t(mid)].producer;
    if (t1 < 0) return 0;
    const Node& a = g.nodes[size_t(t1)];
    if (!is_op(a, "Transpose") || a.inputs.size() != 1 || a.outputs.size() != 1 || a.inputs[0] < 0) return 0;
    const int x = a.inputs[0];
    if (!g.values[size_t(x)].has_shape) return 0;
    const size_t rank = g.values[size_t(x)].dims.size();
    std::vector<int64_t> p1, p2;
    if (!perm_of(a, rank, &p1) || !perm_of(b, rank, &p2)) return 0;
    std::vector<int64_t> q(rank);
    bool identity = true;
    for (size_t i = 0; i < rank; ++i) {
        q[i] = p1[size_t(p2[i])];
        if (q[i] != int64_t(i)) identity = false;
    }
    const int out = b.outputs[0];
    if (identity && !u.pinned[size_t(out)]) {
        replace_uses(g, u, out, x);
        dead[size_t(t1)] = dead[size_t(t2)] = 1;
        return 2;
    }
    Node& nb = g.nodes[size_t(t2)];
    nb.inputs[0] = x;
    set_ints(nb, "perm", q);
    dead[size_t(t1)] = 1;
    return 1;
}

}  // namespace

int merge_transposes(Graph& g) { return rewrite_all(g, merge_one); }

}  // namespace passes
}  // namespace jiffy
