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
// An operand that is Slice(x) along x's last axis, or a Reshape of that which only splits the
// sliced axis (PyTorch's in-projection [S, 1, 3D] sliced into Q, K, V of [S, 1, D], viewed as
// [S, H, D / H]), folds the same way: the MatMul reads x in place through `_view_a` / `_view_b`
// (the view's shape), `_view_*_strides` and `_view_*_offset` (elements of x), and the Slice copy
// goes (three per encoder layer: 64 x 768 -> 3 x 64 x 256, ~2.4 us each). Any _perm_* then
// applies to the view.
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

// The values of a constant 1-D integer input of n elements (n < 0: any), or false.
bool const_ints(const Graph& g, int v, int64_t n, std::vector<int64_t>* out) {
    const Tensor* t = const_of(g, v);
    if (!t || t->shape().size() != 1 || (n >= 0 && t->numel() != n)) return false;
    if (t->dtype() != DType::kI64 && t->dtype() != DType::kI32) return false;
    out->resize(size_t(t->numel()));
    for (int64_t i = 0; i < t->numel(); ++i)
        (*out)[size_t(i)] = t->dtype() == DType::kI64 ? t->as<int64_t>()[i] : t->as<int32_t>()[i];
    return true;
}

struct SliceView {
    int x = -1;                  // the sliced tensor
    std::vector<int64_t> shape;  // the operand's dims
    std::vector<int64_t> strides;
    int64_t offset = 0;
    int slice = -1, reshape = -1;  // the nodes that go
};

// v (read only by node `user`) as a view of x: v = Slice(x) on x's last axis with step 1, or
// Reshape(Slice(x)) whose dims are x's leading dims (up to axes of 1) followed by a split of the
// sliced range. False otherwise.
bool slice_view(const Graph& g, const Uses& u, int v, int user, SliceView* sv) {
    if (v < 0 || !only_feeds(u, v, user) || !g.values[size_t(v)].has_shape) return false;
    int si = g.values[size_t(v)].producer;
    if (si < 0) return false;
    if (is_op(g.nodes[size_t(si)], "Reshape")) {
        const Node& r = g.nodes[size_t(si)];
        const int w = r.inputs.empty() ? -1 : r.inputs[0];
        if (r.outputs.size() != 1 || w < 0 || !only_feeds(u, w, si)) return false;
        sv->reshape = si;
        si = g.values[size_t(w)].producer;
        if (si < 0) return false;
    }
    const Node& s = g.nodes[size_t(si)];
    if (!is_op(s, "Slice") || s.outputs.size() != 1 || s.inputs.size() < 3 || s.attrs.count("starts")) return false;
    const int x = s.inputs[0];
    std::vector<int64_t> xd, st, en, ax, sp;
    if (x < 0 || !is_f32(g, x) || !f32_dims(g, x, &xd) || xd.empty()) return false;
    const int64_t r = int64_t(xd.size()), dim = xd.back();
    if (!const_ints(g, s.inputs[1], 1, &st) || !const_ints(g, s.inputs[2], 1, &en)) return false;
    ax = {r - 1};
    if (s.inputs.size() > 3 && s.inputs[3] >= 0 && !const_ints(g, s.inputs[3], 1, &ax)) return false;
    if (s.inputs.size() > 4 && s.inputs[4] >= 0 && (!const_ints(g, s.inputs[4], 1, &sp) || sp[0] != 1)) return false;
    if (ax[0] != r - 1 && ax[0] != -1) return false;
    int64_t b = st[0] < 0 ? st[0] + dim : st[0], e = en[0] < 0 ? en[0] + dim : en[0];
    b = std::clamp<int64_t>(b, 0, dim);
    e = std::clamp<int64_t>(e, 0, dim);
    const int64_t len = e - b;
    std::vector<int64_t> vd;
    if (len <= 0 || !f32_dims(g, v, &vd) || vd.empty()) return false;
    // vd = L ++ S: S the smallest tail of vd whose product is len.
    size_t k = vd.size();
    int64_t prod = 1;
    while (k > 0 && prod < len) prod *= vd[--k];
    if (prod != len) return false;
    // L against x's leading dims, axes of 1 aside; x is contiguous.
    std::vector<int64_t> xs(xd.size(), 1);
    for (size_t i = xd.size() - 1; i-- > 0;) xs[i] = xs[i + 1] * xd[i + 1];
    sv->strides.assign(vd.size(), 0);
    size_t j = 0;
    for (size_t i = 0; i < k; ++i) {
        if (vd[i] == 1) continue;
        while (j + 1 < xd.size() && xd[j] == 1) ++j;
        if (j + 1 >= xd.size() || xd[j] != vd[i]) return false;
        sv->strides[i] = xs[j++];
    }
    while (j + 1 < xd.size() && xd[j] == 1) ++j;
    if (j + 1 != xd.size()) return false;  // a leading dim of x left over
    for (size_t i = vd.size(), run = 1; i-- > k;) {
        sv->strides[i] = int64_t(run);
        run *= size_t(vd[i]);
    }
    sv->x = x;
    sv->shape = vd;
    sv->offset = b;
    sv->slice = si;
    return true;
}

int fold_one(Graph& g, const Uses& u, int mi, std::vector<char>& dead) {
    const Node& m = g.nodes[size_t(mi)];
    if (!is_op(m, "MatMul") || m.outputs.size() != 1 || m.outputs[0] < 0 || m.inputs.size() < 2) return 0;
    const int a = m.inputs[0], b = m.inputs[1], y = m.outputs[0];
    if (!is_f32(g, a) || !is_f32(g, b) || !is_f32(g, y) || rank_of(g, a) < 2 || rank_of(g, b) < 2) return 0;
    if (const_of(g, b)) return 0;  // constant weights: one tall GEMM (above)
    // Operands that are slices of a larger tensor: read in place (above).
    for (int slot = 0; slot < 2; ++slot) {
        const std::string attr = slot == 0 ? "_view_a" : "_view_b";
        SliceView sv;
        if (m.attrs.count(attr) || !slice_view(g, u, m.inputs[size_t(slot)], mi, &sv)) continue;
        Node& mn = g.nodes[size_t(mi)];
        mn.inputs[size_t(slot)] = sv.x;
        set_ints(mn, attr.c_str(), sv.shape);
        set_ints(mn, (attr + "_strides").c_str(), sv.strides);
        set_i(mn, (attr + "_offset").c_str(), sv.offset);
        dead[size_t(sv.slice)] = 1;
        if (sv.reshape >= 0) dead[size_t(sv.reshape)] = 1;
        return 1;
    }
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
