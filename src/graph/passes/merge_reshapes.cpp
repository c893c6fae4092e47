// Chains of shape-only ops (Reshape, Flatten, Squeeze, Unsqueeze) collapse into one Reshape to
// the final (concrete) shape; one that does not change the shape at all is removed. A Transpose
// that moves only axes of size 1 (PyTorch's batch_first attention: [1, S, D] -> [S, 1, D] and
// back) is such an op too: it becomes a Reshape (no copy), so the MatMul behind it sees one
// contiguous [S, D] operand (one tall GEMM instead of S GEMVs through a strided view).
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

bool is_reshape_like(const Node& n) {
    return (is_op(n, "Reshape") || is_op(n, "Flatten") || is_op(n, "Squeeze") || is_op(n, "Unsqueeze")) &&
           n.outputs.size() == 1 && n.outputs[0] >= 0 && !n.inputs.empty() && n.inputs[0] >= 0 &&
           n.num_explicit_inputs == int(n.inputs.size());
}

bool known_dims(const Graph& g, int v, std::vector<int64_t>* d) {
    const Value& val = g.values[size_t(v)];
    if (!val.has_shape) return false;
    d->clear();
    for (const Dim& x : val.dims) {
        if (x.value < 0) return false;
        d->push_back(x.value);
    }
    return true;
}

// Rewrites node ni into Reshape(x, dims) (a new constant shape input).
void make_reshape(Graph& g, int ni, int x, const std::vector<int64_t>& dims) {
    Tensor shape(DType::kI64, {int64_t(dims.size())});
    for (size_t i = 0; i < dims.size(); ++i) shape.as<int64_t>()[i] = dims[i];
    const Node& n = g.nodes[size_t(ni)];
    const std::string base = n.name.empty() ? g.values[size_t(n.outputs[0])].name : n.name;
    const int sid = add_const(g, base + "/shape", std::move(shape));
    Node& r = g.nodes[size_t(ni)];
    r.op = "Reshape";
    r.attrs.clear();
    r.inputs = {x, sid};
    r.num_explicit_inputs = 2;
}

// A Transpose whose perm keeps every axis of size > 1 in its order: a reshape to its output dims.
int transpose_of_ones(Graph& g, int ni) {
    const Node& n = g.nodes[size_t(ni)];
    if (!is_op(n, "Transpose") || n.inputs.size() != 1 || n.inputs[0] < 0 || n.outputs.size() != 1 ||
        n.outputs[0] < 0)
        return 0;
    std::vector<int64_t> din, dout;
    if (!known_dims(g, n.inputs[0], &din) || !known_dims(g, n.outputs[0], &dout) || din.size() != dout.size())
        return 0;
    std::vector<int64_t> perm;
    if (!perm_of(n, din.size(), &perm)) return 0;
    int64_t last = -1;
    for (int64_t a : perm) {
        if (din[size_t(a)] == 1) continue;
        if (a < last) return 0;
        last = a;
    }
    make_reshape(g, ni, n.inputs[0], dout);
    return 1;
}

int merge_one(Graph& g, const Uses& u, int ni, std::vector<char>& dead) {
    if (transpose_of_ones(g, ni)) return 1;
    const Node& n = g.nodes[size_t(ni)];
    if (!is_reshape_like(n)) return 0;
    const int in = n.inputs[0], out = n.outputs[0];
    std::vector<int64_t> din, dout;
    if (!known_dims(g, in, &din) || !known_dims(g, out, &dout)) return 0;
    if (g.values[size_t(in)].dtype != g.values[size_t(out)].dtype) return 0;
    if (din == dout && !u.pinned[size_t(out)]) {  // no-op reshape
        replace_uses(g, u, out, in);
        dead[size_t(ni)] = 1;
        return 1;
    }
    const int pi = g.values[size_t(in)].producer;
    if (pi < 0 || !only_feeds(u, in, ni) || !is_reshape_like(g.nodes[size_t(pi)])) return 0;
    for (int64_t d : dout)
        if (d == 0) return 0;  // a 0 in Reshape's shape means "copy": keep the chain
    make_reshape(g, ni, g.nodes[size_t(pi)].inputs[0], dout);
    dead[size_t(pi)] = 1;
    return 1;
}

}  // namespace

int merge_reshapes(Graph& g) { return rewrite_all(g, merge_one); }

}  // namespace passes
}  // namespace jiffy
