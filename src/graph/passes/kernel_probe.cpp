// kernel_supports: does an op's kernel honour the fused-epilogue attributes (_fused_act,
// _fused_residual, _fused_bias)? Answered once per kind by compiling and running a few small
// single-node graphs (covering the kernels' code paths: 1x1, 3x3, depthwise, grouped, 1-D, batch;
// packed and plain GEMM) with the attributes, and comparing them with the unfused node's result
// followed by the epilogue computed here. A kernel that ignores or rejects them answers false.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "graph/passes/pass_util.h"
#include "runtime/plan.h"

namespace jiffy::passes {
namespace {

thread_local bool t_probing = false;

Tensor random_tensor(Shape s, uint32_t seed, float scale) {
    Tensor t(DType::kF32, std::move(s));
    uint32_t x = seed * 2654435761u + 12345u;
    float* p = t.as<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
        x = x * 1664525u + 1013904223u;
        p[i] = (float(x >> 8) / float(1 << 24) * 2.0f - 1.0f) * scale;
    }
    return t;
}

float act_ref(const std::string& act, float x, float a, float b) {
    if (act.empty()) return x;
    if (act == "Relu") return x > 0 ? x : 0.0f;
    if (act == "LeakyRelu") return x < 0 ? a * x : x;
    if (act == "Clip") return std::min(std::max(x, a), b);
    if (act == "HardSigmoid") return std::max(0.0f, std::min(1.0f, a * x + b));
    if (act == "HardSwish") return x * std::max(0.0f, std::min(1.0f, x / 6.0f + 0.5f));
    if (act == "Sigmoid") return 1.0f / (1.0f + std::exp(-x));
    if (act == "Tanh") return std::tanh(x);
    if (act == "Silu") return x / (1.0f + std::exp(-x));
    if (act == "Gelu") return 0.5f * x * (1.0f + std::erf(x * 0.70710678f));
    if (act == "GeluTanh") return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
    return x;
}

struct Case {
    Node node;                 // op + attributes (inputs/outputs filled by run_case)
    std::vector<Tensor> ins;   // empty Tensor: omitted input
    std::vector<bool> is_const;
};

bool run_case(const Case& c, Tensor* out) {
    Graph g;
    g.opset = 17;
    Node n = c.node;
    n.inputs.clear();
    for (size_t i = 0; i < c.ins.size(); ++i) {
        if (c.ins[i].empty()) {
            n.inputs.push_back(-1);
            continue;
        }
        int id = g.add_value("in" + std::to_string(i));
        Value& v = g.values[size_t(id)];
        v.dtype = c.ins[i].dtype();
        if (c.is_const[i]) {
            v.constant = std::make_shared<const Tensor>(c.ins[i]);
        } else {
            v.has_shape = true;
            for (int64_t d : c.ins[i].shape()) v.dims.push_back(Dim{d, {}});
            g.inputs.push_back(id);
        }
        n.inputs.push_back(id);
    }
    n.num_explicit_inputs = int(n.inputs.size());
    int y = g.add_value("y");
    g.values[size_t(y)].producer = 0;
    n.outputs = {y};
    g.outputs = {y};
    g.nodes.push_back(std::move(n));
    std::shared_ptr<const Plan> plan;
    if (!compile_graph(g, CompileOptions{}, &plan).ok() || plan->outputs.size() != 1) return false;
    Session s(plan);
    size_t k = 0;
    for (size_t i = 0; i < c.ins.size(); ++i)
        if (!c.ins[i].empty() && !c.is_const[i]) std::memcpy(s.input_data(k++), c.ins[i].data(), c.ins[i].nbytes());
    if (!s.run().ok()) return false;
    *out = Tensor(plan->outputs[0].dtype, plan->outputs[0].shape);
    std::memcpy(out->data(), s.output_data(0), plan->outputs[0].nbytes);
    return out->dtype() == DType::kF32;
}

Attr ints_attr(std::vector<int64_t> v) {
    Attr a;
    a.kind = Attr::kInts;
    a.ints = std::move(v);
    return a;
}
Attr int_attr(int64_t v) {
    Attr a;
    a.kind = Attr::kInt;
    a.i = v;
    return a;
}

std::vector<Case> base_cases(const FusionKind& k) {
    std::vector<Case> r;
    uint32_t seed = 1;
    if (k.op == "Conv" || k.op == "ConvTranspose") {
        struct S {
            int64_t N, C, M;
            Shape sp;
            int64_t kk, stride, pad, group;
            bool bias;
        };
        const S conv[] = {{1, 3, 5, {6, 7}, 3, 1, 1, 1, true},   {1, 8, 16, {9, 9}, 1, 1, 0, 1, false},
                          {1, 8, 8, {9, 9}, 3, 2, 1, 8, true},   {1, 32, 64, {14, 14}, 3, 1, 1, 1, true},
                          {1, 64, 32, {16, 16}, 1, 1, 0, 1, true}, {1, 4, 6, {20}, 3, 1, 1, 1, true},
                          {2, 4, 4, {5, 5}, 3, 1, 0, 2, false}};
        // ConvTranspose: non-overlapping taps (the banded kernel; 8 x 10x64 -> 64 x 20x128 in bands
        // of rows with a shorter last one), overlapping ones (col2im), 1-D.
        const S convt[] = {{1, 8, 64, {10, 64}, 2, 2, 0, 1, true}, {1, 5, 7, {6, 5}, 2, 2, 0, 1, true},
                           {1, 4, 6, {5, 7}, 3, 2, 1, 1, true},    {1, 3, 5, {6, 6}, 4, 2, 1, 1, false},
                           {1, 4, 3, {9}, 2, 2, 0, 1, true}};
        const bool tr = k.op == "ConvTranspose";
        for (const S& s : tr ? std::vector<S>(std::begin(convt), std::end(convt))
                             : std::vector<S>(std::begin(conv), std::end(conv))) {
            Case c;
            c.node.op = k.op;
            const size_t nd = s.sp.size();
            c.node.attrs["kernel_shape"] = ints_attr(std::vector<int64_t>(nd, s.kk));
            c.node.attrs["strides"] = ints_attr(std::vector<int64_t>(nd, s.stride));
            c.node.attrs["pads"] = ints_attr(std::vector<int64_t>(2 * nd, s.pad));
            c.node.attrs["group"] = int_attr(s.group);
            Shape xs = {s.N, s.C};
            Shape ws = tr ? Shape{s.C, s.M / s.group} : Shape{s.M, s.C / s.group};
            for (int64_t d : s.sp) xs.push_back(d);
            for (size_t i = 0; i < nd; ++i) ws.push_back(s.kk);
            int64_t fan = s.C / s.group;
            for (size_t i = 0; i < nd && !tr; ++i) fan *= s.kk;
            c.ins.push_back(random_tensor(xs, seed++, 1.0f));
            c.ins.push_back(random_tensor(ws, seed++, 2.0f / std::sqrt(float(fan))));
            c.ins.push_back(s.bias ? random_tensor({s.M}, seed++, 0.5f) : Tensor());
            c.is_const = {false, k.const_weight, true};
            r.push_back(std::move(c));
        }
    } else if (k.op == "Gemm") {
        struct S {
            int64_t M, K, N;
            int ta, tb, ckind;  // 0 none, 1 [N], 2 [1,N], 3 [M,N]
        };
        const S specs[] = {{1, 33, 40, 0, 1, 1}, {5, 17, 23, 0, 0, 0}, {3, 64, 64, 1, 1, 2},
                           {64, 128, 96, 0, 1, 1}, {7, 9, 11, 0, 0, 3}};
        for (const S& s : specs) {
            Case c;
            c.node.op = "Gemm";
            c.node.attrs["transA"] = int_attr(s.ta);
            c.node.attrs["transB"] = int_attr(s.tb);
            c.ins.push_back(random_tensor(s.ta ? Shape{s.K, s.M} : Shape{s.M, s.K}, seed++, 1.0f));
            c.ins.push_back(random_tensor(s.tb ? Shape{s.N, s.K} : Shape{s.K, s.N}, seed++,
                                          2.0f / std::sqrt(float(s.K))));
            const Shape cs = s.ckind == 1 ? Shape{s.N} : s.ckind == 2 ? Shape{1, s.N} : Shape{s.M, s.N};
            c.ins.push_back(s.ckind ? random_tensor(cs, seed++, 0.5f) : Tensor());
            c.is_const = {false, k.const_weight, true};
            r.push_back(std::move(c));
        }
    } else if (k.op == "MatMul") {
        const std::pair<Shape, Shape> specs[] = {{{1, 33}, {33, 40}},       {{7, 64}, {64, 48}},
                                                 {{2, 5, 17}, {17, 23}},    {{1, 64, 128}, {128, 96}},
                                                 {{1, 1, 16}, {16, 8}}};
        for (const auto& [as, bs] : specs) {
            Case c;
            c.node.op = "MatMul";
            c.ins.push_back(random_tensor(as, seed++, 1.0f));
            c.ins.push_back(random_tensor(bs, seed++, 2.0f / std::sqrt(float(bs[0]))));
            c.is_const = {false, k.const_weight};
            r.push_back(std::move(c));
        }
    }
    return r;
}

bool probe(const FusionKind& k) {
    std::vector<Case> cases = base_cases(k);
    if (cases.empty()) return false;
    // Parameters that differ from every default, so a kernel ignoring them is caught.
    float alpha = 0, beta = 0;
    if (k.act == "LeakyRelu") alpha = 0.1f;
    if (k.act == "Clip") alpha = -0.5f, beta = 0.7f;
    if (k.act == "HardSigmoid") alpha = 0.3f, beta = 0.4f;
    uint32_t seed = 1000;
    for (Case& c : cases) {
        Tensor plain;
        if (!run_case(c, &plain)) return false;
        Case f = c;
        Tensor bias, extra;
        if (k.bias) {  // MatMul: bias [N] on the last axis
            bias = random_tensor({plain.shape().back()}, seed++, 0.5f);
            f.ins.push_back(bias);
            f.is_const.push_back(true);
            f.node.attrs["_fused_bias"] = int_attr(1);
        }
        if (k.residual) {  // the output's shape, the last input (Conv, Gemm: input 3)
            extra = random_tensor(plain.shape(), seed++, 1.0f);
            f.ins.push_back(extra);
            f.is_const.push_back(false);
            f.node.attrs["_fused_residual"] = int_attr(1);
        }
        if (!k.act.empty()) {
            set_s(f.node, "_fused_act", k.act);
            set_f(f.node, "_fused_alpha", alpha);
            set_f(f.node, "_fused_beta", beta);
        }
        // Clamp bounds inside the activation's range, so both bind on some values.
        const float lo = -0.05f, hi = 0.3f;
        if (k.clamp) {
            set_f(f.node, "_fused_lo", lo);
            set_f(f.node, "_fused_hi", hi);
        }
        const float scale = 0.75f, shift = -0.2f;  // differ from the identity's 1, 0
        if (k.affine) {
            set_f(f.node, "_fused_scale", scale);
            set_f(f.node, "_fused_shift", shift);
        }
        Tensor fused;
        if (!run_case(f, &fused) || fused.shape() != plain.shape()) return false;
        const int64_t n = plain.numel();
        const int64_t last = plain.shape().empty() ? 1 : plain.shape().back();
        int moved = 0;
        for (int64_t i = 0; i < n; ++i) {
            float v = plain.as<float>()[i];
            if (k.bias) v += bias.as<float>()[i % last];
            if (k.residual) v += extra.as<float>()[i];
            float want = act_ref(k.act, v, alpha, beta);
            if (k.clamp) want = std::min(std::max(want, lo), hi);
            if (k.affine) want = std::fma(want, scale, shift);
            const float got = fused.as<float>()[i];
            if (!(std::abs(got - want) <= 1e-4f * (1.0f + std::abs(want)))) return false;
            if (want != plain.as<float>()[i]) ++moved;
        }
        if (moved == 0 && n > 4) return false;  // the case did not exercise the epilogue
    }
    return true;
}

}  // namespace

bool probing() { return t_probing; }

bool kernel_supports(const FusionKind& k) {
    static std::mutex mu;
    static std::map<std::string, bool> cache;
    const std::string key = k.op + "|" + k.act + "|" + (k.residual ? "r" : "") + (k.bias ? "b" : "") +
                            (k.const_weight ? "c" : "") + (k.clamp ? "k" : "") + (k.affine ? "a" : "");
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    t_probing = true;
    bool ok = probe(k);
    t_probing = false;
    cache[key] = ok;
    return ok;
}

}  // namespace jiffy::passes
