// Transposes around a float32 MatMul (multi-head attention: the Q/K/V head splits and the merge of
// the heads) fold into the MatMul as strides, no copy: MatMul(Transpose(x, p), ...) reads x in
// place (`_perm_a` / `_perm_b` = p), Transpose(MatMul(...), p) writes the product in place
// (`_perm_y` = p). Only where the kernel can read or write rows in place (src/ops/linalg.cpp):
// A's and Y's last axis stays last; B's last axis stays last or becomes second-to-last (a
// transposed B, which the per-run packing transposes anyway). Not around a product with constant
// weights: there the Transpose stays a copy (rows x K floats) so that the product runs as one tall
// GEMM; folded, every batch of the permuted view is its own small product (a batch-2
// TransformerEncoderLayer's in-projection, [32, 2, 128] x [128, 384]: 32 GEMMs of 2 rows, 83 us
// against ~20 with the copy).
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

// The Transpose producing v (read only by node `mi`), or -1.
int transpose_into(const Graph& g, const Uses& u, int v, int mi) {
    if (v < 0 || !only_feeds(u, v, mi)) return -1;
    const int ti = g.values[size_t(v)].producer;
    if (ti < 0) return -1;
    const Node& t = g.nodes[size_t(ti)];
    if (!is_op(t, "Transpose") || t.inputs.size() != 1 || t.inputs[0] < 0 || t.outputs.size() != 1) return -1;
    return ti;
}

int rank_of(const Graph& g, int v) { return int(g.values[size_t(v)].dims.size()); }

int fold_one(Graph& g, const Uses& u, int mi, std::vector<char>& dead) {
    const Node& m = g.nodes[size_t(mi)];
    if (!is_op(m, "MatMul") || m.outputs.size() != 1 || m.outputs[0] < 0 || m.inputs.size() < 2) return 0;
    const int a = m.inputs[0], b = m.inputs[1], y = m.outputs[0];
    if (!is_f32(g, a) || !is_f32(g, b) || !is_f32(g, y) || rank_of(g, a) < 2 || rank_of(g, b) < 2) return 0;
    if (const_of(g, b)) return 0;  // constant weights: one tall GEMM (above)
    // Operands: A keeps its last axis last; B keeps either of its last two axes innermost.
    for (int slot = 0; slot < 2; ++slot) {
        const char* attr = slot == 0 ? "_perm_a" : "_perm_b";
        if (m.attrs.count(attr)) continue;
        const int ti = transpose_into(g, u, m.inputs[size_t(slot)], mi);
        if (ti < 0) continue;
        const int x = g.nodes[size_t(ti)].inputs[0];
        const size_t r = size_t(rank_of(g, m.inputs[size_t(slot)]));
        std::vector<int64_t> p;
        if (!g.values[size_t(x)].has_shape || size_t(rank_of(g, x)) != r || !perm_of(g.nodes[size_t(ti)], r, &p))
            continue;
        const bool ok = slot == 0 ? p[r - 1] == int64_t(r - 1) : (p[r - 1] == int64_t(r - 1) || p[r - 2] == int64_t(r - 1));
        if (!ok) continue;
        Node& mn = g.nodes[size_t(mi)];
        mn.inputs[size_t(slot)] = x;
        set_ints(mn, attr, p);
        dead[size_t(ti)] = 1;
        return 1;
    }
    // The product: a Transpose that keeps the last axis last.
    if (m.attrs.count("_perm_y") || !only_feeds(u, y, u.user[size_t(y)]) || u.user[size_t(y)] < 0) return 0;
    const int ti = u.user[size_t(y)];
    const Node& t = g.nodes[size_t(ti)];
    if (!is_op(t, "Transpose") || t.inputs.size() != 1 || t.outputs.size() != 1 || t.outputs[0] < 0) return 0;
    const size_t r = size_t(rank_of(g, y));
    std::vector<int64_t> p;
    if (!perm_of(t, r, &p) || p[r - 1] != int64_t(r - 1)) return 0;
    const int out = t.outputs[0];
    set_ints(g.nodes[size_t(mi)], "_perm_y", p);
    retarget_output(g, mi, out);
    dead[size_t(ti)] = 1;
    return 1;
}

}  // namespace

int fold_matmul_transpose(Graph& g) { return rewrite_all(g, fold_one); }

}  // namespace passes
}  // namespace jiffy
