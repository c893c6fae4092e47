#include "graph/passes/pass_util.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace jiffy::passes {

Uses compute_uses(const Graph& g) {
    Uses u;
    const size_t nv = g.values.size();
    u.count.assign(nv, 0);
    u.user.assign(nv, -1);
    u.pinned.assign(nv, 0);
    for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
        const Node& n = g.nodes[ni];
        for (size_t k = 0; k < n.inputs.size(); ++k) {
            int v = n.inputs[k];
            if (v < 0 || size_t(v) >= nv) continue;
            u.count[size_t(v)]++;
            u.user[size_t(v)] = u.count[size_t(v)] == 1 ? int(ni) : -1;
            if (int(k) >= n.num_explicit_inputs) u.pinned[size_t(v)] = 1;
        }
    }
    for (int v : g.outputs)
        if (v >= 0 && size_t(v) < nv) u.pinned[size_t(v)] = 1;
    return u;
}

bool only_feeds(const Uses& u, int v, int node) {
    return v >= 0 && u.count[size_t(v)] == 1 && u.user[size_t(v)] == node && !u.pinned[size_t(v)];
}

int sole_producer(const Graph& g, const Uses& u, int v, int user) {
    if (v < 0 || !only_feeds(u, v, user)) return -1;
    return g.values[size_t(v)].producer;
}

bool near_value(double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(1.0, std::abs(b)); }

bool is_op(const Node& n, const char* op) { return n.domain.empty() && n.op == op; }

bool is_f32(const Graph& g, int v) {
    return v >= 0 && g.values[size_t(v)].dtype == DType::kF32 && g.values[size_t(v)].has_shape;
}

const Tensor* const_of(const Graph& g, int v) {
    if (v < 0 || size_t(v) >= g.values.size()) return nullptr;
    return g.values[size_t(v)].constant.get();
}

bool scalar_of(const Graph& g, int v, double* out) {
    const Tensor* t = const_of(g, v);
    if (!t || t->numel() != 1 || t->empty()) return false;
    if (t->dtype() != DType::kF32 && t->dtype() != DType::kF64) return false;
    *out = t->get_f64(0);
    return true;
}

bool pad_amounts(const Graph& g, const Node& p, size_t rank, std::vector<int64_t>* before,
                 std::vector<int64_t>* after) {
    std::vector<int64_t> pads, axes;
    auto pa = p.attrs.find(p.attrs.count("pads") ? "pads" : "paddings");
    if (pa != p.attrs.end()) {  // Pad-1 / Pad-2
        if (pa->second.kind != Attr::kInts) return false;
        pads = pa->second.ints;
    } else {
        const int ni = num_explicit(p);
        const Tensor* t = ni >= 2 ? const_of(g, p.inputs[1]) : nullptr;
        if (!t || t->dtype() != DType::kI64) return false;
        pads = t->to_i64_vector();
        if (ni >= 4 && p.inputs[3] >= 0) {
            const Tensor* a = const_of(g, p.inputs[3]);
            if (!a || (a->dtype() != DType::kI64 && a->dtype() != DType::kI32)) return false;
            axes = a->to_i64_vector();
        }
    }
    if (axes.empty())
        for (size_t d = 0; d < rank; ++d) axes.push_back(int64_t(d));
    if (pads.size() != 2 * axes.size()) return false;
    before->assign(rank, 0);
    after->assign(rank, 0);
    for (size_t i = 0; i < axes.size(); ++i) {
        const int64_t a = axes[i] < 0 ? axes[i] + int64_t(rank) : axes[i];
        if (a < 0 || a >= int64_t(rank)) return false;
        (*before)[size_t(a)] += pads[i];
        (*after)[size_t(a)] += pads[i + axes.size()];
    }
    return true;
}

bool pad_value(const Graph& g, const Node& p, double* v) {
    *v = 0;
    if (p.attrs.count("pads") || p.attrs.count("paddings")) {
        *v = attr_f(p, "value", 0.0f);
        return true;
    }
    if (num_explicit(p) < 3 || p.inputs[2] < 0) return true;
    return scalar_of(g, p.inputs[2], v);
}

bool perm_of(const Node& t, size_t rank, std::vector<int64_t>* p) {
    auto it = t.attrs.find("perm");
    if (it == t.attrs.end()) {
        p->resize(rank);
        for (size_t i = 0; i < rank; ++i) (*p)[i] = int64_t(rank - 1 - i);
        return true;
    }
    if (it->second.kind != Attr::kInts || it->second.ints.size() != rank) return false;
    std::vector<char> seen(rank, 0);
    for (int64_t v : it->second.ints) {
        if (v < 0 || v >= int64_t(rank) || seen[size_t(v)]) return false;
        seen[size_t(v)] = 1;
    }
    *p = it->second.ints;
    return true;
}

bool f32_dims(const Graph& g, int v, std::vector<int64_t>* d) {
    if (v < 0) return false;
    const Value& val = g.values[size_t(v)];
    if (!val.has_shape || val.dtype != DType::kF32) return false;
    d->clear();
    for (const Dim& x : val.dims) {
        if (x.value < 0) return false;
        d->push_back(x.value);
    }
    return true;
}

bool is_nhwc_conv(const Node& n) { return n.op == "ConvNhwc" && n.domain == "jiffy" && n.outputs.size() == 1; }

Shape weight_dims(const Graph& g, const Node& n) {
    if (num_explicit(n) < 2) return {};
    const Tensor* w = const_of(g, n.inputs[1]);
    return w && w->dtype() == DType::kF32 && w->shape().size() == 4 ? w->shape() : Shape{};
}

bool same_dims(const Graph& g, int a, int b) {
    const auto& da = g.values[size_t(a)].dims;
    const auto& db = g.values[size_t(b)].dims;
    if (!g.values[size_t(a)].has_shape || !g.values[size_t(b)].has_shape || da.size() != db.size()) return false;
    for (size_t i = 0; i < da.size(); ++i)
        if (da[i].value != db[i].value || da[i].value < 0) return false;
    return true;
}

// If constant c broadcast against a value of dims `out` only varies along `axis` (length n) and
// never enlarges the result, returns true and fills v[n] with its per-position values.
bool channel_vector(const Tensor& c, const std::vector<Dim>& out, size_t axis, std::vector<float>* v) {
    if (c.dtype() != DType::kF32 || c.rank() > int(out.size())) return false;
    const int64_t n = out[axis].value;
    const size_t lead = out.size() - size_t(c.rank());
    int64_t stride_along = 0;
    for (size_t j = 0; j < size_t(c.rank()); ++j) {
        const size_t a = lead + j;
        const int64_t d = c.shape()[j];
        if (a == axis) {
            if (d != 1 && d != n) return false;
            if (d == n && n != 1) stride_along = 1;
        } else if (d != 1) {
            return false;
        }
    }
    v->assign(size_t(n), 0.0f);
    for (int64_t i = 0; i < n; ++i) (*v)[size_t(i)] = c.as<float>()[stride_along ? i : 0];
    return true;
}

bool clip_bounds(const Graph& g, const Node& n, float* lo, float* hi) {
    *lo = attr_f(n, "min", -FLT_MAX);
    *hi = attr_f(n, "max", FLT_MAX);
    for (int k = 1; k < 3; ++k) {
        if (int(n.inputs.size()) <= k || n.inputs[size_t(k)] < 0) continue;
        double v;
        if (!scalar_of(g, n.inputs[size_t(k)], &v)) return false;
        (k == 1 ? *lo : *hi) = float(v);
    }
    return true;
}

int add_const(Graph& g, const std::string& base, Tensor t) {
    std::string name = base;
    for (int k = 1; g.find(name) >= 0; ++k) name = base + "/" + std::to_string(k);
    int id = g.add_value(name);
    Value& v = g.values[size_t(id)];
    v.dtype = t.dtype();
    v.has_shape = true;
    for (int64_t d : t.shape()) v.dims.push_back(Dim{d, {}});
    v.constant = std::make_shared<const Tensor>(std::move(t));
    return id;
}

float attr_f(const Node& n, const char* name, float def) {
    auto it = n.attrs.find(name);
    if (it == n.attrs.end()) return def;
    if (it->second.kind == Attr::kFloat) return it->second.f;
    if (it->second.kind == Attr::kInt) return float(it->second.i);
    return def;
}
int64_t attr_i(const Node& n, const char* name, int64_t def) {
    auto it = n.attrs.find(name);
    return it == n.attrs.end() || it->second.kind != Attr::kInt ? def : it->second.i;
}
std::string attr_s(const Node& n, const char* name, const std::string& def) {
    auto it = n.attrs.find(name);
    return it == n.attrs.end() || it->second.kind != Attr::kString ? def : it->second.s;
}
bool ints_all(const Node& n, const char* name, int64_t want) {
    auto it = n.attrs.find(name);
    if (it == n.attrs.end()) return true;
    if (it->second.kind != Attr::kInts) return false;
    for (int64_t v : it->second.ints)
        if (v != want) return false;
    return true;
}

void set_f(Node& n, const char* name, float v) {
    Attr a;
    a.kind = Attr::kFloat;
    a.f = v;
    n.attrs[name] = a;
}
void set_i(Node& n, const char* name, int64_t v) {
    Attr a;
    a.kind = Attr::kInt;
    a.i = v;
    n.attrs[name] = a;
}
void set_s(Node& n, const char* name, const std::string& v) {
    Attr a;
    a.kind = Attr::kString;
    a.s = v;
    n.attrs[name] = a;
}
void set_ints(Node& n, const char* name, std::vector<int64_t> v) {
    Attr a;
    a.kind = Attr::kInts;
    a.ints = std::move(v);
    n.attrs[name] = a;
}

void retarget_output(Graph& g, int keep, int out) {
    Node& n = g.nodes[size_t(keep)];
    int old = n.outputs[0];
    if (old >= 0) g.values[size_t(old)].producer = -1;
    n.outputs[0] = out;
    g.values[size_t(out)].producer = keep;
}

bool replace_uses(Graph& g, const Uses& u, int from, int to) {
    if (from < 0 || u.pinned[size_t(from)]) return false;
    for (Node& n : g.nodes)
        for (int k = 0; k < n.num_explicit_inputs && size_t(k) < n.inputs.size(); ++k)
            if (n.inputs[size_t(k)] == from) n.inputs[size_t(k)] = to;
    return true;
}

bool batchnorm_affine(const Graph& g, const Uses& u, const Node& bn, std::vector<double>* s, std::vector<double>* t) {
    if (!is_op(bn, "BatchNormalization") || bn.num_explicit_inputs < 5 || bn.inputs.size() < 5) return false;
    if (attr_i(bn, "training_mode", 0) != 0 || (g.opset < 9 && attr_i(bn, "spatial", 1) == 0)) return false;
    for (size_t o = 1; o < bn.outputs.size(); ++o)  // statistics outputs must be unused
        if (bn.outputs[o] >= 0 && (u.count[size_t(bn.outputs[o])] > 0 || u.pinned[size_t(bn.outputs[o])]))
            return false;
    const int x = bn.inputs[0];
    if (x < 0 || !is_f32(g, x) || bn.outputs.empty() || bn.outputs[0] < 0) return false;
    const auto& xd = g.values[size_t(x)].dims;
    if (xd.size() < 2) return false;
    const int64_t C = xd[1].value;
    const Tensor* p[4];
    for (int k = 0; k < 4; ++k) {
        p[k] = const_of(g, bn.inputs[size_t(k + 1)]);
        if (!p[k] || p[k]->numel() != C || (p[k]->dtype() != DType::kF32 && p[k]->dtype() != DType::kF64))
            return false;
    }
    const double eps = attr_f(bn, "epsilon", 1e-5f);
    s->assign(size_t(C), 0.0);
    t->assign(size_t(C), 0.0);
    for (int64_t c = 0; c < C; ++c) {
        const double var = p[3]->get_f64(c);
        if (!(var + eps > 0)) return false;
        (*s)[size_t(c)] = p[0]->get_f64(c) / std::sqrt(var + eps);
        (*t)[size_t(c)] = p[1]->get_f64(c) - p[2]->get_f64(c) * (*s)[size_t(c)];
    }
    return true;
}

int rewrite_all(Graph& g, const Rewrite& rewrite) {
    int removed = 0;
    for (int guard = 0; guard < 100000; ++guard) {
        Uses u = compute_uses(g);
        std::vector<char> dead(g.nodes.size(), 0);
        int got = 0;
        for (size_t ni = 0; ni < g.nodes.size() && !got; ++ni) got = rewrite(g, u, int(ni), dead);
        if (!got) break;
        removed += got;
        std::vector<Node> kept;
        kept.reserve(g.nodes.size());
        for (size_t i = 0; i < g.nodes.size(); ++i)
            if (!dead[i]) kept.push_back(std::move(g.nodes[i]));
        g.nodes = std::move(kept);
        g.index_producers();
    }
    return removed;
}

}  // namespace jiffy::passes
