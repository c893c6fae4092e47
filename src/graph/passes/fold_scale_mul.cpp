// Mul of a constant per-channel vector right after a Conv with constant weights (PaddleOCR's
// affine "BN": Conv -> Mul(scale) -> Add(shift)) folds into the weights and bias:
//   W'[m] = W[m] * s[m],  b'[m] = b[m] * s[m].
// The Add after it then folds into the bias (fold_bias_add), exposing activation fusion.
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

int fold_one(Graph& g, const Uses& u, int mi, std::vector<char>& dead) {
    const Node& mul = g.nodes[size_t(mi)];
    if (!is_op(mul, "Mul") || mul.inputs.size() != 2 || mul.outputs.size() != 1 || mul.outputs[0] < 0) return 0;
    for (int side = 0; side < 2; ++side) {
        const int y = mul.inputs[size_t(side)];
        const Tensor* c = const_of(g, mul.inputs[size_t(1 - side)]);
        if (!c || y < 0 || !is_f32(g, y) || !only_feeds(u, y, mi)) continue;
        const int pi = g.values[size_t(y)].producer;
        if (pi < 0) continue;
        const Node& p = g.nodes[size_t(pi)];
        if (!is_op(p, "Conv") || p.outputs.size() != 1 || p.outputs[0] != y || p.attrs.count("_fused_act") ||
            p.attrs.count("_fused_residual") || p.inputs.size() < 2 || p.inputs.size() > 3 ||
            p.num_explicit_inputs != int(p.inputs.size()))
            continue;
        const std::vector<Dim> yd = g.values[size_t(y)].dims;
        std::vector<float> s;
        if (yd.size() < 3 || !channel_vector(*c, yd, 1, &s)) continue;
        const Tensor* w = const_of(g, p.inputs[1]);
        const bool has_b = p.inputs.size() == 3 && p.inputs[2] >= 0;
        const Tensor* b = has_b ? const_of(g, p.inputs[2]) : nullptr;
        const int64_t M = int64_t(s.size());
        if (!w || w->dtype() != DType::kF32 || w->rank() < 1 || w->shape()[0] != M) continue;
        if (has_b && (!b || b->dtype() != DType::kF32 || b->numel() != M)) continue;
        const int64_t per = w->numel() / M;
        Tensor nw(DType::kF32, w->shape());
        for (int64_t m = 0; m < M; ++m)
            for (int64_t k = 0; k < per; ++k) nw.as<float>()[m * per + k] = w->as<float>()[m * per + k] * s[size_t(m)];
        const std::string base = p.name.empty() ? g.values[size_t(y)].name : p.name;
        const int wid = add_const(g, base + "/W_scaled", std::move(nw));
        int bid = -1;
        if (has_b) {
            Tensor nb(DType::kF32, {M});
            for (int64_t m = 0; m < M; ++m) nb.as<float>()[m] = b->as<float>()[m] * s[size_t(m)];
            bid = add_const(g, base + "/B_scaled", std::move(nb));
        }
        Node& pn = g.nodes[size_t(pi)];
        pn.inputs[1] = wid;
        if (has_b) pn.inputs[2] = bid;
        retarget_output(g, pi, g.nodes[size_t(mi)].outputs[0]);
        dead[size_t(mi)] = 1;
        return 1;
    }
    return 0;
}

}  // namespace

int fold_scale_mul(Graph& g) { return rewrite_all(g, fold_one); }

}  // namespace passes
}  // namespace jiffy
