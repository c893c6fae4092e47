// Add(y, other) with `other` of exactly the Add output's shape, where y is a Conv's output, or a
// MatMul's / Gemm's seen through Reshapes (PyTorch's batch_first encoder: Gemm [S, D] ->
// Reshape [S, 1, D] -> Add(x [1, S, D], .)): the Add goes, the producer gets `other` as its
// last input (Conv: 4th; MatMul: after A, B and any _fused_bias; Gemm: 4th, C's slot kept) and
// _fused_residual = 1 (y = product + bias + other, before any fused activation), and the last
// Reshape of the chain (or the producer) now writes the Add's output. A Reshape is a view of the
// same contiguous values, so the residual is read in the producer's element order. Only where
// the kernel honours it (kernel_supports probes it), for MatMul / Gemm only with constant
// weights (their float32 kernels). `other` cannot depend on the producer (its output reaches only
// the Add), so the compiler's topological order puts it first.
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

int64_t numel_of(const Graph& g, int v) {
    std::vector<int64_t> d;
    return f32_dims(g, v, &d) ? shape_numel(d) : -1;
}

// The product kinds a residual may join, with the FusionKind to probe; false for any other node.
bool product_kind(const Graph& g, const Node& p, FusionKind* k) {
    if (p.outputs.size() != 1 || p.attrs.count("_fused_act") || p.attrs.count("_fused_residual") ||
        p.num_explicit_inputs != int(p.inputs.size()))
        return false;
    k->residual = true;
    if (is_op(p, "Conv")) {
        if (p.inputs.size() < 2 || p.inputs.size() > 3) return false;
        k->op = "Conv";
        k->const_weight = const_of(g, p.inputs[1]) != nullptr;
        return true;
    }
    const bool matmul = is_op(p, "MatMul"), gemm = is_op(p, "Gemm");
    if (!matmul && !gemm) return false;
    const bool bias = matmul && attr_i(p, "_fused_bias", 0) != 0;
    if (p.inputs.size() < 2 || p.inputs.size() > (matmul ? (bias ? 3u : 2u) : 3u)) return false;
    const Tensor* w = const_of(g, p.inputs[1]);
    if (!w || w->numel() == 0 || numel_of(g, p.outputs[0]) <= 0) return false;
    k->op = matmul ? "MatMul" : "Gemm";
    k->bias = bias;
    k->const_weight = true;
    return true;
}

int fuse_one(Graph& g, const Uses& u, int ai, std::vector<char>& dead) {
    const Node& add = g.nodes[size_t(ai)];
    if (!is_op(add, "Add") || add.inputs.size() != 2 || add.outputs.size() != 1 || add.outputs[0] < 0) return 0;
    for (int side = 0; side < 2; ++side) {
        const int y = add.inputs[size_t(side)], other = add.inputs[size_t(1 - side)];
        if (y < 0 || other < 0 || y == other || !is_f32(g, y) || !is_f32(g, other)) continue;
        if (!only_feeds(u, y, ai) || !same_dims(g, y, other) || !same_dims(g, y, add.outputs[0])) continue;
        // Back through Reshapes (each the only reader of its input) to the producer.
        int v = y, last_reshape = -1, pi = g.values[size_t(y)].producer;
        while (pi >= 0 && is_op(g.nodes[size_t(pi)], "Reshape") && g.nodes[size_t(pi)].outputs.size() == 1) {
            const Node& r = g.nodes[size_t(pi)];
            if (last_reshape < 0) last_reshape = pi;
            v = r.inputs.empty() ? -1 : r.inputs[0];
            if (v < 0 || !only_feeds(u, v, pi)) break;
            pi = g.values[size_t(v)].producer;
        }
        if (pi < 0 || v < 0) continue;
        const Node& p = g.nodes[size_t(pi)];
        FusionKind k;
        if (!product_kind(g, p, &k) || p.outputs[0] != v) continue;
        if (last_reshape >= 0 && (k.op == "Conv" || numel_of(g, v) != numel_of(g, y))) continue;
        if (!kernel_supports(k)) return 0;
        const int out = add.outputs[0];
        Node& pn = g.nodes[size_t(pi)];
        if (k.op != "MatMul") pn.inputs.resize(3, -1);
        pn.inputs.push_back(other);
        pn.num_explicit_inputs = int(pn.inputs.size());
        set_i(pn, "_fused_residual", 1);
        retarget_output(g, last_reshape >= 0 ? last_reshape : pi, out);
        dead[size_t(ai)] = 1;
        return 1;
    }
    return 0;
}

}  // namespace

int fuse_residual(Graph& g) { return rewrite_all(g, fuse_one); }

}  // namespace passes
}  // namespace jiffy
