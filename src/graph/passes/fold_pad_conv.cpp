// A zero Pad of the spatial dims read only by a Conv folds into the Conv's own pads: a conv pads
// with zeros itself, so Conv(Pad(x, p), pads q) == Conv(x, pads p + q) exactly. PyTorch exports
// of TF-style "same" strides (F.pad(x, (1, 2, 1, 2)) before a stride-2 conv: BlazeFace's
// blocks) and TF-converted models write such Pads; as separate steps each costs a copy of the
// tensor and, in a channels-last chain, two layout conversions around it (docs/layout.md).
// Asymmetric results (begin != end) are ordinary ONNX pads; every conv kernel takes them.
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"

namespace jiffy {
namespace passes {
namespace {

int fold_one(Graph& g, const Uses& u, int ci, std::vector<char>& dead) {
    const Node& c = g.nodes[size_t(ci)];
    if (!is_op(c, "Conv") || c.inputs.empty()) return 0;
    const std::string ap = attr_s(c, "auto_pad", "NOTSET");
    if (ap != "NOTSET" && ap != "") return 0;
    const int v = c.inputs[0];
    const int pi = sole_producer(g, u, v, ci);
    if (pi < 0 || !is_op(g.nodes[size_t(pi)], "Pad")) return 0;
    // A value read twice by this conv (as X and, e.g., a fused residual) is not the conv's alone.
    for (size_t s = 1; s < c.inputs.size(); ++s)
        if (c.inputs[s] == v) return 0;
    const Node& p = g.nodes[size_t(pi)];
    if (p.inputs.empty() || p.inputs[0] < 0) return 0;
    const std::vector<Dim>& xd = g.values[size_t(v)].dims;
    const size_t rank = xd.size();
    if (rank < 3) return 0;
    std::vector<int64_t> before, after;
    double value = 1;
    if (attr_s(p, "mode", "constant") != "constant" || !pad_value(g, p, &value) || value != 0.0 ||
        !pad_amounts(g, p, rank, &before, &after))
        return 0;
    if (before[0] || after[0] || before[1] || after[1]) return 0;  // batch or channels padded
    const size_t nd = rank - 2;
    std::vector<int64_t> pads(2 * nd, 0);
    auto cp = c.attrs.find("pads");
    if (cp != c.attrs.end()) {
        if (cp->second.kind != Attr::kInts || cp->second.ints.size() != 2 * nd) return 0;
        pads = cp->second.ints;
    }
    for (size_t i = 0; i < nd; ++i) {
        if (before[2 + i] < 0 || after[2 + i] < 0) return 0;  // a crop is not a conv padding
        pads[i] += before[2 + i];
        pads[i + nd] += after[2 + i];
    }
    Node& cn = g.nodes[size_t(ci)];
    cn.inputs[0] = p.inputs[0];
    set_ints(cn, "pads", std::move(pads));
    dead[size_t(pi)] = 1;
    return 1;
}

}  // namespace

int fold_pad_conv(Graph& g) { return rewrite_all(g, fold_one); }

}  // namespace passes
}  // namespace jiffy
