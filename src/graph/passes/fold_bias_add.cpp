// Add (or Sub) of a constant per-channel vector right after Conv / ConvTranspose / Gemm / MatMul
// becomes the producer's bias: Conv's input 2 (created or added to), Gemm's C (beta set to 1),
// MatMul's 3rd input with _fused_bias = 1 (only when the MatMul kernel supports it).
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

int fold_one(Graph& g, const Uses& u, int ai, std::vector<char>& dead) {
    const Node& add = g.nodes[size_t(ai)];
    const bool sub = is_op(add, "Sub");
    if ((!is_op(add, "Add") && !sub) || add.inputs.size() != 2 || add.outputs.size() != 1) return 0;
    for (int side = 0; side < 2; ++side) {
        if (sub && side == 1) break;  // c - y is not a bias
        const int y = add.inputs[size_t(side)], cv = add.inputs[size_t(1 - side)];
        const Tensor* c = const_of(g, cv);
        if (!c || y < 0 || !is_f32(g, y) || !only_feeds(u, y, ai)) continue;
        const int pi = g.values[size_t(y)].producer;
        if (pi < 0) continue;
        const Node& p = g.nodes[size_t(pi)];
        if (p.outputs.size() != 1 || p.outputs[0] != y || p.attrs.count("_fused_act") ||
            p.attrs.count("_fused_residual") || p.attrs.count("_fused_bias"))
            continue;
        const std::vector<Dim> yd = g.values[size_t(y)].dims;
        const float sign = sub ? -1.0f : 1.0f;
        std::vector<float> v;
        const std::string base = p.name.empty() ? g.values[size_t(y)].name : p.name;
        if ((is_op(p, "Conv") || is_op(p, "ConvTranspose")) && yd.size() >= 3 && p.inputs.size() >= 2 &&
            p.inputs.size() <= 3 && p.num_explicit_inputs == int(p.inputs.size())) {
            if (!channel_vector(*c, yd, 1, &v)) continue;
            const bool has_b = p.inputs.size() == 3 && p.inputs[2] >= 0;
            const Tensor* b = has_b ? const_of(g, p.inputs[2]) : nullptr;
            if (has_b && (!b || b->dtype() != DType::kF32 || b->numel() != int64_t(v.size()))) continue;
            Tensor nb(DType::kF32, {int64_t(v.size())});
            for (size_t i = 0; i < v.size(); ++i)
                nb.as<float>()[i] = (b ? b->as<float>()[i] : 0.0f) + sign * v[i];
            const int bid = add_const(g, base + "/B_add", std::move(nb));
            Node& pn = g.nodes[size_t(pi)];
            pn.inputs.resize(3);
            pn.inputs[2] = bid;
            pn.num_explicit_inputs = 3;
        } else if (is_op(p, "Gemm") && yd.size() == 2) {
            if (!channel_vector(*c, yd, 1, &v)) continue;
            const int64_t N = int64_t(v.size());
            const bool has_c = p.inputs.size() >= 3 && p.inputs[2] >= 0;
            std::vector<float> old(size_t(N), 0.0f);
            if (has_c) {
                const Tensor* oc = const_of(g, p.inputs[2]);
                if (!oc || !channel_vector(*oc, yd, 1, &old)) continue;
                const float beta = attr_f(p, "beta", 1.0f);
                for (float& o : old) o *= beta;
            }
            Tensor nc(DType::kF32, {N});
            for (int64_t i = 0; i < N; ++i) nc.as<float>()[i] = old[size_t(i)] + sign * v[size_t(i)];
            const int cid = add_const(g, base + "/C_add", std::move(nc));
            Node& pn = g.nodes[size_t(pi)];
            pn.inputs.resize(3);
            pn.inputs[2] = cid;
            pn.num_explicit_inputs = 3;
            if (pn.attrs.count("beta")) set_f(pn, "beta", 1.0f);
        } else if (is_op(p, "MatMul") && yd.size() >= 1 && p.inputs.size() == 2 &&
                   p.num_explicit_inputs == 2) {
            if (!channel_vector(*c, yd, yd.size() - 1, &v)) continue;
            FusionKind k;
            k.op = "MatMul";
            k.bias = true;
            k.const_weight = const_of(g, p.inputs[1]) != nullptr;
            if (!kernel_supports(k)) continue;
            Tensor nb(DType::kF32, {int64_t(v.size())});
            for (size_t i = 0; i < v.size(); ++i) nb.as<float>()[i] = sign * v[i];
            const int bid = add_const(g, base + "/bias", std::move(nb));
            Node& pn = g.nodes[size_t(pi)];
            pn.inputs.push_back(bid);
            pn.num_explicit_inputs = 3;
            set_i(pn, "_fused_bias", 1);
        } else {
            continue;
        }
        retarget_output(g, pi, g.nodes[size_t(ai)].outputs[0]);
        dead[size_t(ai)] = 1;
        return 1;
    }
    return 0;
}

}  // namespace

int fold_bias_add(Graph& g) { return rewrite_all(g, fold_one); }

}  // namespace passes
}  // namespace jiffy
