// Identity, and Dropout in inference (mask unused, training_mode absent or constant false, valid
// ratio; or training_mode true with a constant ratio of 0), are removed: readers are rewired to
// the input. When the output is pinned (a graph output or a subgraph capture), the input's
// producer is made to write it instead, if the input is private to this node.
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

bool is_passthrough(const Graph& g, const Uses& u, const Node& n) {
    if (n.inputs.empty() || n.outputs.empty() || n.outputs[0] < 0 || n.inputs[0] < 0) return false;
    if (n.num_explicit_inputs != int(n.inputs.size())) return false;
    if (is_op(n, "Identity")) return n.inputs.size() == 1 && n.outputs.size() == 1;
    if (!is_op(n, "Dropout") || n.outputs.size() > 2 || n.inputs.size() > 3) return false;
    if (n.outputs.size() == 2 && n.outputs[1] >= 0 &&
        (u.count[size_t(n.outputs[1])] > 0 || u.pinned[size_t(n.outputs[1])]))
        return false;
    if (g.opset >= 12) {
        // A ratio input (default 0.5) and a constant training_mode; in training mode only a
        // ratio of exactly 0 passes the data through (mask all true, scale 1): torchvision 0.14's
        // Swin attention calls F.dropout(p=0.0) with its default training=True.
        double r = 0.5;
        if (n.inputs.size() > 1 && n.inputs[1] >= 0) {
            if (!scalar_of(g, n.inputs[1], &r) || !(r >= 0 && r < 1)) return false;
        }
        if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
            const Tensor* tm = const_of(g, n.inputs[2]);
            if (!tm || tm->numel() != 1) return false;
            if (tm->get_i64(0) != 0 && r != 0.0) return false;
        }
    } else {
        float r = attr_f(n, "ratio", 0.5f);
        if (!(r >= 0 && r < 1)) return false;
    }
    return true;
}

int remove_one(Graph& g, const Uses& u, int ni, std::vector<char>& dead) {
    const Node& n = g.nodes[size_t(ni)];
    if (!is_passthrough(g, u, n)) return 0;
    const int in = n.inputs[0], out = n.outputs[0];
    if (g.values[size_t(in)].dtype != g.values[size_t(out)].dtype) return 0;
    if (!u.pinned[size_t(out)]) {
        replace_uses(g, u, out, in);
        dead[size_t(ni)] = 1;
        return 1;
    }
    const int pi = g.values[size_t(in)].producer;
    if (pi < 0 || !only_feeds(u, in, ni)) return 0;
    Node& p = g.nodes[size_t(pi)];
    for (int& o : p.outputs)
        if (o == in) o = out;
    g.values[size_t(in)].producer = -1;
    g.values[size_t(out)].producer = pi;
    dead[size_t(ni)] = 1;
    return 1;
}

}  // namespace

int remove_identity(Graph& g) { return rewrite_all(g, remove_one); }

}  // namespace passes
}  // namespace jiffy
