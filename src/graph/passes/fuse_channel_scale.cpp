// Squeeze-and-excite's channel scale folded into the 1x1 conv that reads it: Mul(X, S) with S one
// value per channel (N x C x 1 x 1 or 1 x C x 1 x 1, computed at run time: GlobalAveragePool ->
// 1x1 -> act -> 1x1 -> Sigmoid / HardSigmoid), read only by a channels-last pointwise conv, becomes
// that conv with _x_scale = 1 and S as its input 4 (ops/conv.cpp ConvNhwc): W . (S * X) is
// (W diag(S)) . X, so each run scales the K x M weights instead of writing and re-reading X
// (EfficientNet-B0's and MobileNetV3's blocks: the Mul step goes, ~4% of EfficientNet-B0).
//
// Runs after layout_nhwc (it matches the ConvNhwc nodes that pass makes: the Mul's output is the
// conv's NCHW X, _x_nchw, read in place). Only where the weights are not larger than X's share the Mul
// touched per channel (M <= H x W: the late 7x7 blocks of 1152 -> 192 keep their Mul) and the
// conv is a plain pointwise one (no _x_scale yet; its residual moves to input 3 as it was).
// JIFFY_SCALE_FUSE=0 turns the pass off (A/B timing).
#include "core/env.h"
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
int fuse_channel_scale(Graph& g) {
    if (env_zero("JIFFY_SCALE_FUSE")) return 0;
    return rewrite_all(g, [&](Graph& gr, const Uses& u, int ci, std::vector<char>& dead) -> int {
        const Node& c = gr.nodes[size_t(ci)];
        if (!is_nhwc_conv(c) || num_explicit(c) > 4 || c.inputs[0] < 0 || attr_i(c, "_x_scale", 0) != 0) return 0;
        const Shape ws = weight_dims(gr, c);
        if (ws.empty() || ws[2] != 1 || ws[3] != 1 || attr_i(c, "group", 1) != 1 || !ints_all(c, "strides", 1) ||
            !ints_all(c, "pads", 0))
            return 0;
        const std::string ap = attr_s(c, "auto_pad", "NOTSET");
        if (!ap.empty() && ap != "NOTSET") return 0;
        if (attr_i(c, "_x_nchw", 0) == 0 || c.inputs.size() != size_t(num_explicit(c))) return 0;
        const int mi = sole_producer(gr, u, c.inputs[0], ci);
        if (mi < 0) return 0;
        const Node& m = gr.nodes[size_t(mi)];
        if (!is_op(m, "Mul") || num_explicit(m) != 2 || m.outputs.size() != 1 || m.outputs[0] != c.inputs[0])
            return 0;
        // Which Mul operand is X (the conv input's dims) and which the per-channel scale.
        std::vector<int64_t> xd, a0, a1;
        if (!f32_dims(gr, c.inputs[0], &xd) || xd.size() != 4) return 0;
        if (!f32_dims(gr, m.inputs[0], &a0) || !f32_dims(gr, m.inputs[1], &a1)) return 0;
        const int64_t N = xd[0], K = xd[1], HW = xd[2] * xd[3];
        if (K != ws[1]) return 0;
        auto is_scale = [&](const std::vector<int64_t>& d) {
            return d.size() == 4 && (d[0] == 1 || d[0] == N) && d[1] == K && d[2] == 1 && d[3] == 1;
        };
        int xi = -1;
        if (a0 == xd && is_scale(a1)) xi = 0;
        else if (a1 == xd && is_scale(a0)) xi = 1;
        if (xi < 0 || ws[0] > HW) return 0;
        const int x = m.inputs[size_t(xi)], s = m.inputs[size_t(1 - xi)];
        Node& cn = gr.nodes[size_t(ci)];
        cn.inputs.resize(5, -1);
        cn.inputs[0] = x;
        cn.inputs[4] = s;
        cn.num_explicit_inputs = 5;
        set_i(cn, "_x_scale", 1);
        dead[size_t(mi)] = 1;
        return 1;
    });
}

}  // namespace passes
}  // namespace jiffy
