// A channels-last expand 1x1 (or an RGB stem conv) and the depthwise conv that is its only reader -> one
// jiffy::ConvNhwcBand, which runs them band by band (ops/conv.cpp; docs/layout.md): the expanded
// tensor, when it is larger than L2 (MobileNetV2's and EfficientNet-B0's 96 x 112x112, 4.8 MB),
// is written and read back a few rows at a time in a scratch band that stays in L2 instead of
// going out to L3 / DRAM and back.
//
// Runs after layout_nhwc (it matches the ConvNhwc nodes that pass makes). The 1x1: pointwise, no
// residual, its output read once (by the depthwise's X) and not pinned; the depthwise: no
// residual. Or an RGB stem (layout_nhwc's kind 3: 3x3 stride 2 over <= 4 channels of an NCHW X),
// its pads and strides kept as _pw_pads / _pw_strides. Only where the first conv's output is at
// least JIFFY_BAND_MIN_KB KiB (default 1024: below L2's size the two steps already meet in L2);
// JIFFY_BAND=0 turns the pass off, JIFFY_STEM_BAND=0 only for stems (A/B timing).
#include <cstdlib>

#include "core/env.h"
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

int64_t value_bytes(const Graph& g, int v) {
    const Value& val = g.values[size_t(v)];
    if (!val.has_shape) return 0;
    int64_t n = 4;
    for (const Dim& d : val.dims) {
        if (d.value < 0) return 0;
        n *= d.value;
    }
    return n;
}

// JIFFY_STEM_BAND=0: stems stay a step of their own (A/B timing).
bool stem_band_on() {
    static const bool on = !env_zero("JIFFY_STEM_BAND");
    return on;
}

}  // namespace

int fuse_conv_band(Graph& g) {
    if (env_zero("JIFFY_BAND")) return 0;
    const char* kb = std::getenv("JIFFY_BAND_MIN_KB");
    const int64_t min_bytes = (kb ? std::strtoll(kb, nullptr, 10) : 1024) * 1024;
    return rewrite_all(g, [&](Graph& gr, const Uses& u, int di, std::vector<char>& dead) -> int {
        const Node& d = gr.nodes[size_t(di)];
        if (!is_nhwc_conv(d) || num_explicit(d) > 3 || d.inputs[0] < 0 || attr_i(d, "_fused_residual", 0) != 0)
            return 0;
        const Shape wd = weight_dims(gr, d);
        if (wd.empty() || wd[1] != 1 || attr_i(d, "group", 1) != wd[0] || wd[0] < 2) return 0;
        const int v = d.inputs[0];
        const int pi = sole_producer(gr, u, v, di);
        if (pi < 0) return 0;
        const Node& p = gr.nodes[size_t(pi)];
        if (!is_nhwc_conv(p) || p.outputs[0] != v || num_explicit(p) > 3 || attr_i(p, "_fused_residual", 0) != 0)
            return 0;
        const Shape wp = weight_dims(gr, p);
        if (wp.empty() || wp[0] != wd[0] || attr_i(p, "group", 1) != 1) return 0;
        // The band step runs the 1x1 as stride 1 without padding (layout_nhwc's pointwise
        // candidates; a hand-written ConvNhwc may say otherwise), or an RGB stem (layout_nhwc's
        // kind 3: 3x3 stride 2 over <= 4 channels of an NCHW X) with its pads.
        const std::string ap = attr_s(p, "auto_pad", "NOTSET");
        if (!ints_all(p, "dilations", 1) || (!ap.empty() && ap != "NOTSET")) return 0;
        const bool stem = wp[2] == 3 && wp[3] == 3 && wp[1] <= 4 && attr_i(p, "_x_nchw", 0) != 0 &&
                          ints_all(p, "strides", 2) && stem_band_on();
        if (!stem && (wp[2] != 1 || wp[3] != 1 || !ints_all(p, "strides", 1) || !ints_all(p, "pads", 0)))
            return 0;
        if (num_explicit(p) == 3 && p.inputs[2] >= 0 && !const_of(gr, p.inputs[2])) return 0;
        if (num_explicit(d) == 3 && d.inputs[2] >= 0 && !const_of(gr, d.inputs[2])) return 0;
        if (value_bytes(gr, v) < min_bytes) return 0;
        // The 1x1's epilogue moves over under the _pw prefix.
        Node& dn = gr.nodes[size_t(di)];
        const Node& pn = gr.nodes[size_t(pi)];
        const int b1 = num_explicit(pn) >= 3 ? pn.inputs[2] : -1, b2 = num_explicit(dn) >= 3 ? dn.inputs[2] : -1;
        dn.inputs = {pn.inputs[0], pn.inputs[1], b1, dn.inputs[1], b2};
        dn.num_explicit_inputs = 5;
        for (const char* a : {"_fused_act", "_fused_alpha", "_fused_beta", "_fused_lo", "_fused_hi",
                              "_fused_scale", "_fused_shift"}) {
            auto it = pn.attrs.find(a);
            if (it != pn.attrs.end()) dn.attrs[std::string("_pw") + a] = it->second;
        }
        if (attr_i(pn, "_x_nchw", 0) != 0) set_i(dn, "_pw_x_nchw", 1);
        if (stem) {
            auto it = pn.attrs.find("pads");
            if (it != pn.attrs.end()) dn.attrs["_pw_pads"] = it->second;
            dn.attrs["_pw_strides"] = pn.attrs.at("strides");
        }
        dn.op = "ConvNhwcBand";
        dead[size_t(pi)] = 1;
        return 1;
    });
}

}  // namespace passes
}  // namespace jiffy
