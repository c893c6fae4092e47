// Channels-last layout for chains of pointwise and depthwise convs (docs/layout.md).
//
// A depthwise conv in NCHW vectorizes along the output row: short rows waste lanes (a 20-wide row
// is 16 + 4 of 32 lanes), every tap at a column offset is a load that straddles cache lines, and
// the borders need masks. Channels-last, each tap of each output pixel is one aligned vector load
// of 16 channels and one FMA. The 1x1 convs around it become a GEMM with the pixels as rows and
// the output channels on the vector axis, as fast as the NCHW one. So a connected chain of float32
// 1x1 (stride 1, no padding, one group) and depthwise convs with constant weights — MobileNet's
// and the face detector's blocks — moves to NHWC when it holds a depthwise conv and at least two
// convs: each becomes a jiffy::ConvNhwc, a Transpose (0, 2, 3, 1) converts each NCHW value the
// chain reads from outside, and a Transpose (0, 3, 1, 2) restores each value it hands back to NCHW
// readers or graph outputs (only where one reads it); merge_transposes then cancels a
// restore followed by the model's own Transpose to NHWC.
//
// Env JIFFY_NHWC=0 keeps every conv in NCHW (A/B timing).
#include <algorithm>
#include <numeric>

#include "core/env.h"
#include "graph/passes/pass_util.h"
#include "graph/passes/passes.h"
#include "kernels/conv.h"
#include "kernels/conv_nhwc.h"
#include "kernels/cpu.h"
#include "ops/conv_small.h"

namespace jiffy {
namespace passes {
namespace {

bool dims4(const Graph& g, int v, std::vector<int64_t>* d) { return f32_dims(g, v, d) && d->size() == 4; }

// 0: not a candidate; 1: pointwise; 2: depthwise; 3: an RGB stem (dense 3x3 stride 2 over a few
// channels where the direct stem kernel runs: it reads its NCHW X in place and writes channels-
// last); 4: a stride-1 depthwise on a large plane of few channels, a candidate only after a stem;
// 5 (kPool): a 2-D MaxPool / AveragePool (no Indices output) and 6 (kPad): a Pad (pads known,
// batch unpadded), which join the chains they read from or feed and move to channels-last with
// them, so that a chain is not cut in two by a pool or a channel pad (BlazeFace, YuNet); 7 (kDot):
// a dense conv with 1 to 15 outputs over >= 64 channels and >= 128 products per output (a
// detection head: 256 -> 12 3x3 on 4x5, 128 -> 8 1x1 on 15x20), run by the few-outputs kernel
// (kernels::NhwcDot) on the chain's channels-last values; it joins only the chains it reads from.
constexpr int kPool = 5, kPad = 6, kDot = 7;
bool is_conv_kind(int k) { return (k >= 1 && k <= 4) || k == kDot; }

int passthrough(const Graph& g, const Node& n) {
    const bool pool = is_op(n, "MaxPool") || is_op(n, "AveragePool");
    if ((!pool && !is_op(n, "Pad")) || n.inputs.empty() || n.outputs.empty() || n.outputs[0] < 0) return 0;
    for (size_t o = 1; o < n.outputs.size(); ++o)
        if (n.outputs[o] >= 0) return 0;  // MaxPool's Indices
    std::vector<int64_t> x, y;
    if (!dims4(g, n.inputs[0], &x) || !dims4(g, n.outputs[0], &y)) return 0;
    if (pool) {
        auto k = n.attrs.find("kernel_shape");
        return k != n.attrs.end() && k->second.kind == Attr::kInts && k->second.ints.size() == 2 ? kPool : 0;
    }
    std::vector<int64_t> before, after;
    if (!pad_amounts(g, n, 4, &before, &after) || before[0] != 0 || after[0] != 0) return 0;
    return kPad;
}

// JIFFY_NHWC_DOT=0: the few-output convs stay NCHW (A/B timing).
bool dot_off() {
    static const bool off = env_zero("JIFFY_NHWC_DOT");
    return off;
}

int candidate(const Graph& g, const Node& n) {
    if (const int k = passthrough(g, n)) return k;
    if (!is_op(n, "Conv") || n.outputs.size() != 1 || n.outputs[0] < 0) return 0;
    const int ni = num_explicit(n);
    if (ni < 2 || ni > 4) return 0;
    std::vector<int64_t> x, y, r;
    if (!dims4(g, n.inputs[0], &x) || !dims4(g, n.outputs[0], &y)) return 0;
    const Tensor* w = const_of(g, n.inputs[1]);
    if (!w || w->dtype() != DType::kF32 || w->shape().size() != 4) return 0;
    if (ni >= 3 && n.inputs[2] >= 0 && !const_of(g, n.inputs[2])) return 0;
    if (ni == 4) {
        if (attr_i(n, "_fused_residual", 0) == 0 || !dims4(g, n.inputs[3], &r) || r != y) return 0;
    }
    const std::string ap = attr_s(n, "auto_pad", "NOTSET");
    if (ap != "NOTSET" && ap != "") return 0;
    const Shape& ws = w->shape();
    const int64_t G = attr_i(n, "group", 1), C = x[1], M = ws[0];
    if (!ints_all(n, "dilations", 1) && !(G == C && M == C)) return 0;
    // Pointwise with fewer than 16 output channels (detection heads): channels-last the pointwise
    // kernel fills a fraction of its vector (30x40 64 -> 6: ~13 against ~6.5 us), so they stay
    // NCHW, or where their sums are long enough, join as kDot (below).
    if (G == 1 && ws[1] == C && ws[2] == 1 && ws[3] == 1 && ints_all(n, "strides", 1) && ints_all(n, "pads", 0) &&
        M >= 16)
        return 1;
    if (G == 1 && ws[1] == C && C >= 64 && C * ws[2] * ws[3] >= 128 && ni <= 3 && !dot_off()) {
        kernels::Conv2DGeom geo;  // the kernel's own limits (1 to 15 outputs, <= 64 taps)
        geo.C = C, geo.M = M, geo.kh = ws[2], geo.kw = ws[3];
        if (kernels::NhwcDot::supports(geo)) return kDot;
    }
    // A stride-1 depthwise with few channels (<= 32) whose input is past L2 (1 MiB: MobileNetV2's
    // 32 x 112x112, the face detector's 16 x 120x160, right after the stems) stays NCHW: there the
    // NCHW row kernel streams the planes faster (~76 against ~89 us, ~58 against ~62), and the
    // chain's conversion moves one layer down (same size). Wider ones (MobileNetV2's 144 x 56x56)
    // sit inside chains, where leaving them would add two conversions.
    // Right after a stem that writes channels-last (kind 3) no conversion is needed, and there the
    // NHWC kernel is faster since session 16 (16 x 120x160: ~50 against ~83 us): kind 4.
    const bool big_s1 = ints_all(n, "strides", 1) && C <= 32 && x[1] * x[2] * x[3] * 4 > (int64_t(1) << 20);
    if (G == C && M == C && ws[1] == 1 && C > 1) return big_s1 ? 4 : 2;
    if (G == 1 && ws[1] == C && ws[2] == 3 && ws[3] == 3 && ni <= 3 && ints_all(n, "strides", 2) &&
        ints_all(n, "dilations", 1)) {
        auto pads = n.attrs.find("pads");
        int64_t ph = 0, pw = 0;
        if (pads != n.attrs.end()) {
            if (pads->second.kind != Attr::kInts || pads->second.ints.size() != 4) return 0;
            ph = pads->second.ints[0], pw = pads->second.ints[1];
        }
        kernels::Conv2DGeom geo;
        geo.C = C, geo.H = x[2], geo.W = x[3], geo.M = M, geo.OH = y[2], geo.OW = y[3];
        geo.kh = geo.kw = 3, geo.sh = geo.sw = 2, geo.ph = ph, geo.pw = pw;
        static const bool stem_on = !env_zero("JIFFY_NHWC_STEM");
        return stem_on && stem_conv_preferred(kernels::active_isa(), geo) ? 3 : 0;
    }
    return 0;
}

// f(i, slot, v, p) for the X (slot 0) and residual (slot 3) input v of every node i with
// sel[i] != 0; p: v's producer (-1 for graph inputs and constants).
// (Pools and Pads: slot 0 only.)
template <typename T, typename F>
void conv_reads(const Graph& g, const std::vector<T>& sel, F&& f) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        if (!sel[i]) continue;
        const Node& nd = g.nodes[i];
        const bool conv = is_op(nd, "Conv");
        for (int slot : {0, 3}) {
            if (slot >= num_explicit(nd) || (slot == 3 && !conv)) continue;
            const int v = nd.inputs[size_t(slot)];
            f(i, slot, v, v >= 0 ? g.values[size_t(v)].producer : -1);
        }
    }
}

int find(std::vector<int>& p, int i) {
    while (p[size_t(i)] != i) i = p[size_t(i)] = p[size_t(p[size_t(i)])];
    return i;
}

}  // namespace

int layout_nhwc(Graph& g) {
    if (env_zero("JIFFY_NHWC")) return 0;
    const size_t n = g.nodes.size();
    std::vector<int> kind(n, 0);
    std::vector<int> parent(n);
    std::iota(parent.begin(), parent.end(), 0);
    bool any = false;
    for (size_t i = 0; i < n; ++i) any |= (kind[i] = candidate(g, g.nodes[i])) != 0;
    if (!any) return 0;
    // The producer of node i's X (-1: a graph input or constant), and its kind.
    auto producer_of = [&](size_t i) {
        const int v = g.nodes[i].inputs[0];
        return v >= 0 ? g.values[size_t(v)].producer : -1;
    };
    auto producer_kind = [&](size_t i) {
        const int p = producer_of(i);
        return p >= 0 ? kind[size_t(p)] : 0;
    };
    // Stems only as chain entries (X from outside the chains).
    for (size_t i = 0; i < n; ++i)
        if (kind[i] == 3 && producer_kind(i) != 0) kind[i] = 0;
    // Kind 4 stays a candidate after a stem, or after a pointwise conv that reads a stem (YuNet's
    // head: stem, 1x1 16 -> 16, depthwise): the values before it are channels-last already.
    for (size_t i = 0; i < n; ++i)
        if (kind[i] == 4) {
            const int p = producer_of(i);
            const bool after_stem = producer_kind(i) == 3 || (p >= 0 && kind[size_t(p)] == 1 && producer_kind(size_t(p)) == 3);
            kind[i] = after_stem ? 2 : 0;
        }
    // kDot only after another candidate (its X then comes channels-last; a Transpose of its X in
    // would cost more than it saves).
    for (size_t i = 0; i < n; ++i)
        if (kind[i] == kDot && producer_kind(i) == 0) kind[i] = 0;
    // Chains: a candidate reading (as X or residual) another candidate's output.
    conv_reads(g, kind, [&](size_t i, int, int, int p) {
        if (p >= 0 && kind[size_t(p)]) parent[size_t(find(parent, int(i)))] = find(parent, p);
    });
    std::vector<int> size(n, 0), dw(n, 0);
    for (size_t i = 0; i < n; ++i)
        if (is_conv_kind(kind[i])) {
            const int r = find(parent, int(i));
            ++size[size_t(r)];
            if (kind[i] == 2) ++dw[size_t(r)];
        }
    std::vector<char> convert(n, 0);
    int converted = 0;
    for (size_t i = 0; i < n; ++i)
        if (kind[i]) {
            const int r = find(parent, int(i));
            if (size[size_t(r)] < 2 || dw[size_t(r)] < 1) continue;
            // A pool or Pad moves only when what it reads is channels-last already: one reading
            // an NCHW value from outside stays, and the conversion comes after it (a pool's
            // output is the smaller tensor).
            if (!is_conv_kind(kind[i])) {
                const int p = producer_of(i);
                if (p < 0 || !convert[size_t(p)]) continue;
            }
            convert[i] = 1;
            if (is_conv_kind(kind[i])) ++converted;
        }
    if (!converted) return 0;

    // A converted conv's output keeps an NCHW restore when something other than a converted conv
    // after it in file order (reading it as X or residual, so through the NHWC twin) reads it, or
    // when it is pinned (graph output, subgraph capture).
    const Uses u = compute_uses(g);
    std::vector<int> twin_reads(g.values.size(), 0);
    conv_reads(g, convert, [&](size_t i, int, int v, int p) {
        if (p >= 0 && size_t(p) < i && convert[size_t(p)]) ++twin_reads[size_t(v)];
    });

    // An NCHW value from outside the chains that converted convs read only as the X of pointwise
    // convs is read in place (ConvNhwc _x_nchw = 1: the pointwise kernel's broadcasts read any
    // layout) instead of through a Transpose (face detector: 16 x 120x160, ~40 us).
    std::vector<char> direct(g.values.size(), 0);  // 1: pointwise X reads only; 2: another read
    conv_reads(g, convert, [&](size_t i, int slot, int v, int p) {
        if (v < 0 || (p >= 0 && convert[size_t(p)])) return;
        if (slot == 0 && kind[i] == 3) return;  // a stem always reads its X in place
        if (slot == 0 && kind[i] == 1 && direct[size_t(v)] != 2) direct[size_t(v)] = 1;
        else direct[size_t(v)] = 2;
    });

    // A converted depthwise whose output no converted conv reads (a detection head's separable
    // conv: depthwise, then an NCHW 1x1 of few channels) writes it NCHW itself (_y_nchw): no
    // Transpose after it (face detector: six, ~30 us). AVX-512 (the in-register transposing
    // store); JIFFY_NHWC_YNCHW=0 turns it off.
    static const bool ynchw_on = !env_zero("JIFFY_NHWC_YNCHW");
    auto writes_nchw = [&](size_t i) {
        const Node& nd = g.nodes[i];
        if (!ynchw_on || kernels::active_isa() != kernels::Isa::kAvx512) return false;
        if (kind[i] != 2 || num_explicit(nd) == 4 || twin_reads[size_t(nd.outputs[0])] != 0) return false;
        const Shape& ws = const_of(g, nd.inputs[1])->shape();
        kernels::Conv2DGeom geo;
        geo.kh = ws[2], geo.kw = ws[3];
        geo.sh = geo.sw = ints_all(nd, "strides", 1) ? 1 : ints_all(nd, "strides", 2) ? 2 : 0;
        return ints_all(nd, "dilations", 1) && kernels::nhwc_dw_writes_nchw(geo);
    };
    std::vector<char> y_nchw(n, 0);
    for (size_t i = 0; i < n; ++i) y_nchw[i] = convert[i] && writes_nchw(i);

    // Rewrite in file order: each converted conv preceded by the conversions of what it reads.
    std::vector<int> nhwc(g.values.size(), -1);  // NCHW value -> its NHWC twin
    std::vector<Node> out;
    out.reserve(n + 2 * size_t(converted));
    auto permuted = [&](int v, const int64_t* perm, const std::string& suffix) {
        const int id = g.add_value("");
        Value& nv = g.values[size_t(id)];
        const Value& src = g.values[size_t(v)];
        nv.name = src.name + suffix;
        nv.dtype = src.dtype;
        nv.has_shape = true;
        nv.dims.resize(4);
        for (size_t k = 0; k < 4; ++k) nv.dims[k] = src.dims[size_t(perm[k])];
        return id;
    };
    auto transpose = [&](int in, int outv, std::vector<int64_t> perm, const std::string& name) {
        Node t;
        t.op = "Transpose";
        t.name = name;
        t.inputs = {in};
        t.num_explicit_inputs = 1;
        t.outputs = {outv};
        set_ints(t, "perm", std::move(perm));
        out.push_back(std::move(t));
    };
    static const int64_t kToNhwc[4] = {0, 2, 3, 1};
    auto to_nhwc = [&](int v, const std::string& at) {
        if (nhwc[size_t(v)] < 0) {
            const int t = permuted(v, kToNhwc, "_nhwc");
            nhwc.resize(g.values.size(), -1);
            nhwc[size_t(v)] = t;
            transpose(v, t, {0, 2, 3, 1}, at + "_to_nhwc");
        }
        return nhwc[size_t(v)];
    };
    static const int64_t kNhwcOrder[4] = {0, 2, 3, 1};
    for (size_t i = 0; i < n; ++i) {
        Node nd = std::move(g.nodes[i]);
        if (!convert[i]) {
            out.push_back(std::move(nd));
            continue;
        }
        if (!is_conv_kind(kind[i])) {
            // The same op over the NHWC twin: a pool as jiffy::MaxPoolNhwc / AveragePoolNhwc
            // (same attributes), a Pad with its amounts reordered to N, H, W, C.
            nd.inputs[0] = to_nhwc(nd.inputs[0], nd.name);
            if (kind[i] == kPool) {
                nd.op = is_op(nd, "MaxPool") ? "MaxPoolNhwc" : "AveragePoolNhwc";
                nd.domain = "jiffy";
                nd.outputs.resize(1);
            } else {
                std::vector<int64_t> before, after, pads(8);
                pad_amounts(g, nd, 4, &before, &after);
                for (size_t d = 0; d < 4; ++d)
                    pads[d] = before[size_t(kNhwcOrder[d])], pads[d + 4] = after[size_t(kNhwcOrder[d])];
                if (nd.attrs.count("pads") || nd.attrs.count("paddings")) {
                    set_ints(nd, nd.attrs.count("pads") ? "pads" : "paddings", std::move(pads));
                } else {
                    Tensor t(DType::kI64, {8});
                    for (size_t d = 0; d < 8; ++d) t.as<int64_t>()[d] = pads[d];
                    nd.inputs[1] = add_const(g, nd.name + "/pads_nhwc", std::move(t));
                    if (num_explicit(nd) > 3) nd.inputs.resize(3), nd.num_explicit_inputs = 3;  // no axes
                }
            }
        } else if (kind[i] == 3 || direct[size_t(nd.inputs[0])] == 1)
            set_i(nd, "_x_nchw", 1);
        else
            nd.inputs[0] = to_nhwc(nd.inputs[0], nd.name);
        if (is_conv_kind(kind[i]) && num_explicit(nd) == 4) nd.inputs[3] = to_nhwc(nd.inputs[3], nd.name);
        if (y_nchw[i]) {
            set_i(nd, "_y_nchw", 1);
            nd.op = "ConvNhwc";
            nd.domain = "jiffy";
            out.push_back(std::move(nd));
            continue;
        }
        const int y = nd.outputs[0];
        const int yt = permuted(y, kToNhwc, "_nhwc");
        nhwc.resize(g.values.size(), -1);
        nhwc[size_t(y)] = yt;
        nd.outputs[0] = yt;
        if (is_conv_kind(kind[i])) nd.op = "ConvNhwc", nd.domain = "jiffy";
        const std::string name = nd.name;
        out.push_back(std::move(nd));
        if (u.pinned[size_t(y)] || u.count[size_t(y)] > twin_reads[size_t(y)])
            transpose(yt, y, {0, 3, 1, 2}, name + "_to_nchw");
    }
    g.nodes = std::move(out);
    g.index_producers();
    return converted;
}

// The model's exit from channels-last into a global mean: Transpose (0, 3, 1, 2) read only by a
// GlobalAveragePool or a ReduceMean over exactly H, W (axes 2, 3 in either sign, as an attribute
// before opset 18 or a constant input since) becomes one jiffy::GlobalAveragePoolNhwc reading the
// NHWC value in place: its N x C means are the same bytes either way. Keyword spotters end their
// depthwise-separable stacks so (DS-CNN: a 1.1 us Transpose and a 2.7 us NCHW ReduceMean of 64 x
// 25x5 become one ~0.3 us pass).
int mean_nhwc(Graph& g) {
    if (env_zero("JIFFY_NHWC")) return 0;
    return rewrite_all(g, [&](Graph& gr, const Uses& u, int mi, std::vector<char>& dead) -> int {
        Node& m = gr.nodes[size_t(mi)];
        const bool gap = is_op(m, "GlobalAveragePool");
        if ((!gap && !is_op(m, "ReduceMean")) || m.inputs.empty() || m.outputs.size() != 1) return 0;
        const int t = m.inputs[0];
        const int ti = sole_producer(gr, u, t, mi);
        if (ti < 0) return 0;
        const Node& tr = gr.nodes[size_t(ti)];
        std::vector<int64_t> perm, x;
        if (!is_op(tr, "Transpose") || !perm_of(tr, 4, &perm) || perm != std::vector<int64_t>{0, 3, 1, 2}) return 0;
        if (tr.inputs.empty() || !dims4(gr, tr.inputs[0], &x)) return 0;
        int64_t keep = 1;
        if (!gap) {
            std::vector<int64_t> axes;
            auto a = m.attrs.find("axes");
            if (a != m.attrs.end()) {
                if (a->second.kind != Attr::kInts) return 0;
                axes = a->second.ints;
            } else if (num_explicit(m) >= 2 && m.inputs[1] >= 0) {
                const Tensor* c = const_of(gr, m.inputs[1]);
                if (!c || c->dtype() != DType::kI64) return 0;
                axes = c->to_i64_vector();
            }
            for (int64_t& v : axes) v = v < 0 ? v + 4 : v;
            std::sort(axes.begin(), axes.end());
            if (axes != std::vector<int64_t>{2, 3}) return 0;
            keep = attr_i(m, "keepdims", 1);
            if (keep != 0 && keep != 1) return 0;
        }
        m.op = "GlobalAveragePoolNhwc";
        m.domain = "jiffy";
        m.inputs = {tr.inputs[0]};
        m.num_explicit_inputs = 1;
        m.attrs.clear();
        set_i(m, "_keepdims", keep);
        dead[size_t(ti)] = 1;
        return 1;
    });
}

}  // namespace passes
}  // namespace jiffy
