// LayerNormalization(Add(x, r)) with x and r of the same shape (a transformer's residual Add
// before its norm): the Add goes, the LayerNormalization gets r as a 4th input and
// `_fused_residual` = 1, and its row kernel adds r while reading x (one pass fewer over the rows,
// one step fewer). Not when the sum has another reader (pre-norm layers keep it for the next
// residual) or the norm returns its mean / inv-std outputs.
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

int fuse_one(Graph& g, const Uses& u, int li, std::vector<char>& dead) {
    const Node& ln = g.nodes[size_t(li)];
    if (!is_op(ln, "LayerNormalization") || ln.inputs.size() < 2 || ln.inputs.size() > 3 ||
        ln.num_explicit_inputs != int(ln.inputs.size()) || ln.attrs.count("_fused_residual"))
        return 0;
    for (size_t k = 1; k < ln.outputs.size(); ++k)
        if (ln.outputs[k] >= 0) return 0;
    const int s = ln.inputs[0];
    if (!is_f32(g, s) || !only_feeds(u, s, li)) return 0;
    const int ai = g.values[size_t(s)].producer;
    if (ai < 0) return 0;
    const Node& add = g.nodes[size_t(ai)];
    if (!is_op(add, "Add") || add.inputs.size() != 2 || add.outputs.size() != 1) return 0;
    const int x = add.inputs[0], r = add.inputs[1];
    if (!is_f32(g, x) || !is_f32(g, r) || !same_dims(g, x, s) || !same_dims(g, r, s)) return 0;
    Node& n = g.nodes[size_t(li)];
    n.inputs[0] = x;
    n.inputs.resize(3, -1);
    n.inputs.push_back(r);
    n.num_explicit_inputs = 4;
    set_i(n, "_fused_residual", 1);
    dead[size_t(ai)] = 1;
    return 1;
}

}  // namespace

int fuse_add_layernorm(Graph& g) { return rewrite_all(g, fuse_one); }

}  // namespace passes
}  // namespace jiffy
