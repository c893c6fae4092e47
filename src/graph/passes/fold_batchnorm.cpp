// BatchNormalization folded into the Conv / ConvTranspose before it:
//   s = scale / sqrt(var + eps);  W'[oc] = W[oc] * s[oc];  b' = (b - mean) * s + B.
// Needs constant W (and bias), constant BN parameters, float32, and the conv output read by the
// BN alone. ConvTranspose weights are [C_in, M/group, k...]: output channel g*(M/G) + j.
#include <cmath>

#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

int fold_one(Graph& g, const Uses& u, int bi, std::vector<char>& dead) {
    const Node& bn = g.nodes[size_t(bi)];
    if (!is_op(bn, "BatchNormalization")) return 0;
    std::vector<double> s, shift;  // y = x * s + shift per channel
    if (!batchnorm_affine(g, u, bn, &s, &shift)) return 0;
    const int x = bn.inputs[0];
    const int ci = g.values[size_t(x)].producer;
    if (ci < 0 || !only_feeds(u, x, bi)) return 0;
    const Node& conv = g.nodes[size_t(ci)];
    const bool transpose = is_op(conv, "ConvTranspose");
    if (!is_op(conv, "Conv") && !transpose) return 0;
    if (conv.outputs.size() != 1 || conv.outputs[0] != x || conv.num_explicit_inputs > 3) return 0;
    if (conv.inputs.size() < 2 || conv.inputs.size() > 3) return 0;
    if (conv.attrs.count("_fused_act") || conv.attrs.count("_fused_residual")) return 0;
    const Tensor* w = const_of(g, conv.inputs[1]);
    const Tensor* b = conv.inputs.size() > 2 ? const_of(g, conv.inputs[2]) : nullptr;
    const bool has_b = conv.inputs.size() > 2 && conv.inputs[2] >= 0;
    if (!w || w->dtype() != DType::kF32 || w->rank() < 3 || (has_b && (!b || b->dtype() != DType::kF32)))
        return 0;
    const int64_t M = int64_t(s.size());
    if (has_b && b->numel() != M) return 0;
    for (int64_t m = 0; m < M && has_b; ++m) shift[size_t(m)] += double(b->as<float>()[m]) * s[size_t(m)];
    // Output channel of each weight slice along dims 0 and 1.
    const int64_t d0 = w->shape()[0], d1 = w->shape()[1];
    const int64_t inner = w->numel() / std::max<int64_t>(1, d0 * d1);
    const int64_t G = attr_i(conv, "group", 1);
    if (G < 1) return 0;
    if (!transpose && d0 != M) return 0;
    if (transpose && (d0 % G != 0 || d1 * G != M)) return 0;
    Tensor nw(DType::kF32, w->shape());
    const float* src = w->as<float>();
    float* dst = nw.as<float>();
    for (int64_t i0 = 0; i0 < d0; ++i0)
        for (int64_t i1 = 0; i1 < d1; ++i1) {
            const int64_t oc = transpose ? (i0 / (d0 / G)) * d1 + i1 : i0;
            const double sc = s[size_t(oc)];
            const int64_t off = (i0 * d1 + i1) * inner;
            for (int64_t k = 0; k < inner; ++k) dst[off + k] = float(double(src[off + k]) * sc);
        }
    Tensor nb(DType::kF32, {M});
    for (int64_t m = 0; m < M; ++m) nb.as<float>()[m] = float(shift[size_t(m)]);
    const std::string base = conv.name.empty() ? g.values[size_t(x)].name : conv.name;
    const int wid = add_const(g, base + "/W_bn", std::move(nw));
    const int bid = add_const(g, base + "/B_bn", std::move(nb));
    const int out = bn.outputs[0];
    Node& c = g.nodes[size_t(ci)];
    c.inputs.resize(3);
    c.inputs[1] = wid;
    c.inputs[2] = bid;
    c.num_explicit_inputs = 3;
    retarget_output(g, ci, out);
    dead[size_t(bi)] = 1;
    return 1;
}

}  // namespace

int fold_batchnorm(Graph& g) { return rewrite_all(g, fold_one); }

}  // namespace passes
}  // namespace jiffy
