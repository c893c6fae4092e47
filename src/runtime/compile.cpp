// compile: Graph + input shapes -> Plan.
//   1. bind input shapes (symbolic dims resolved from the given inputs) and constants;
//   2. keep only nodes that reach a graph output; order them topologically (a cycle is an error);
//   3. prepare each node in order: shape inference + kernel; a node whose inputs are all constant
//      is run once here and becomes a constant (constant folding, incl. shape arithmetic);
//      an `If` with a constant condition is replaced by the chosen branch (and compile restarts);
//   4. lay out the arena by liveness (docs/memory.md) and emit the flat step list.
#include <algorithm>
#include <cstdlib>
#include <set>

#include "graph/passes/passes.h"
#include "ops/util.h"
#include "runtime/plan.h"

#include <cstdlib>

namespace jiffy {
namespace {

constexpr Code kRestart = Code(100);
// Kernels may test optional trailing inputs/outputs that the file omits (in[2] of a 2-input Clip):
// step pointer arrays are padded with nullptr to at least this many entries.
constexpr size_t kMinArity = 8;

std::vector<int> padded(const std::vector<int>& ids) {
    std::vector<int> r = ids;
    if (r.size() < kMinArity) r.resize(kMinArity, -1);
    return r;
}

struct PStep {
    int node;
    std::unique_ptr<Kernel> kernel;
    std::vector<int> ins, outs;  // value ids (-1 omitted)
};

class Compiler {
public:
    Compiler(Graph g, const CompileOptions& opt) : g_(std::move(g)), opt_(opt) {}

    Status run(const std::vector<TensorInfo>* formal, std::shared_ptr<const Plan>* out);

private:
    Status bind_inputs(const std::vector<TensorInfo>* formal);
    Status order_nodes(std::vector<int>* order);
    Status prepare_node(int ni);
    Status inline_if(int ni, const Tensor& cond);
    Status fold(int ni, OpContext& ctx);
    Status build_plan(std::shared_ptr<const Plan>* out);
    bool materialize_and_optimize();
    std::vector<int> inputs_upstream_of(int value) const;
    std::string join_names(const std::vector<int>& values) const;

    Graph g_;
    const CompileOptions& opt_;
    std::vector<TensorInfo> info_;
    std::vector<PStep> steps_;
    uint64_t folded_bytes_ = 0;
    std::vector<std::string> frozen_;
    bool optimized_ = false;
};

// After the first folding sweep: write what compile learned back into the graph (concrete shapes,
// folded values as constants, their producers dropped), then run the graph passes on it.
// Returns true when the graph changed, so compile restarts on it.
bool Compiler::materialize_and_optimize() {
    bool changed = false;
    std::vector<char> drop(g_.nodes.size(), 0);
    for (size_t v = 0; v < g_.values.size(); ++v) {
        const TensorInfo& t = info_[v];
        if (!t.present) continue;
        Value& val = g_.values[v];
        val.dtype = t.dtype;
        val.has_shape = true;
        val.dims.clear();
        for (int64_t d : t.shape) val.dims.push_back(Dim{d, {}});
        if (t.constant && !val.constant && val.producer >= 0) {
            const Node& n = g_.nodes[size_t(val.producer)];
            bool all = true;
            for (int o : n.outputs)
                if (o >= 0 && !info_[size_t(o)].constant) all = false;
            if (all) {
                val.constant = t.constant;
                drop[size_t(val.producer)] = 1;
            }
        }
    }
    std::vector<Node> kept;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
        if (drop[i]) {
            changed = true;
            continue;
        }
        kept.push_back(std::move(g_.nodes[i]));
    }
    g_.nodes = std::move(kept);
    g_.index_producers();
    if (run_graph_passes(g_)) changed = true;
    return changed;
}

Status Compiler::bind_inputs(const std::vector<TensorInfo>* formal) {
    info_.assign(g_.values.size(), TensorInfo{});
    for (size_t v = 0; v < g_.values.size(); ++v) {
        const Value& val = g_.values[v];
        info_[v].name = val.name;
        if (val.constant) {
            info_[v].present = true;
            info_[v].dtype = val.constant->dtype();
            info_[v].shape = val.constant->shape();
            info_[v].constant = val.constant;
        }
    }
    if (formal) {  // subgraph: inputs then captures, infos given by the caller
        size_t k = 0;
        for (int v : g_.inputs) {
            if (k >= formal->size()) return internal_error("subgraph input count mismatch");
            info_[size_t(v)] = (*formal)[k++];
            info_[size_t(v)].name = g_.values[size_t(v)].name;
        }
        for (int v : g_.captures) {
            if (k >= formal->size()) return internal_error("subgraph capture count mismatch");
            info_[size_t(v)] = (*formal)[k++];
            info_[size_t(v)].name = g_.values[size_t(v)].name;
        }
        return {};
    }
    for (const auto& [name, shape] : opt_.input_shapes) {
        int v = g_.find(name);
        if (v < 0 || std::find(g_.inputs.begin(), g_.inputs.end(), v) == g_.inputs.end()) {
            std::string names;
            for (int i : g_.inputs) names += (names.empty() ? "" : ", ") + g_.values[size_t(i)].name;
            return invalid("input '", name, "' is not an input of the model (inputs: ", names, ")");
        }
    }
    // Symbolic dims: learn their values from the shapes the caller gave.
    std::map<std::string, int64_t> sym;
    for (int v : g_.inputs) {
        const Value& val = g_.values[size_t(v)];
        auto it = opt_.input_shapes.find(val.name);
        if (it == opt_.input_shapes.end() || !val.has_shape) continue;
        const Shape& s = it->second;
        if (s.size() != val.dims.size())
            return invalid("input '", val.name, "': given shape ", shape_str(s), " has rank ", s.size(),
                           " but the model declares rank ", val.dims.size());
        for (size_t d = 0; d < s.size(); ++d) {
            const Dim& dim = val.dims[d];
            if (dim.value >= 0 && dim.value != s[d])
                return invalid("input '", val.name, "': given shape ", shape_str(s), " but dim ", d,
                               " is fixed to ", dim.value, " by the model");
            if (!dim.param.empty()) {
                auto [si, inserted] = sym.emplace(dim.param, s[d]);
                if (!inserted && si->second != s[d])
                    return invalid("input '", val.name, "': symbolic dim '", dim.param, "' = ", s[d],
                                   " but another input gives it ", si->second);
            }
        }
    }
    for (int v : g_.inputs) {
        const Value& val = g_.values[size_t(v)];
        TensorInfo& ti = info_[size_t(v)];
        ti.present = true;
        ti.dtype = val.dtype;
        if (val.dtype == DType::kUndefined || dtype_size(val.dtype) == 0)
            return unsupported("input '", val.name, "': element type ", dtype_name(val.dtype),
                               " is not supported");
        auto it = opt_.input_shapes.find(val.name);
        if (it != opt_.input_shapes.end()) {
            ti.shape = it->second;
        } else {
            if (!val.has_shape)
                return invalid("input '", val.name, "' has no declared shape; give one (--shape ",
                               val.name, "=...)");
            ti.shape.clear();
            for (const Dim& d : val.dims) {
                if (d.value >= 0) {
                    ti.shape.push_back(d.value);
                } else if (!d.param.empty() && sym.count(d.param)) {
                    ti.shape.push_back(sym[d.param]);
                } else {
                    return invalid("input '", val.name, "' has ",
                                   d.param.empty() ? "an unknown dim" : "symbolic dim '" + d.param + "'",
                                   "; give its shape (--shape ", val.name, "=...)");
                }
            }
        }
        for (int64_t d : ti.shape)
            if (d < 0) return invalid("input '", val.name, "': negative dim in shape ", shape_str(ti.shape));
        if (ti.shape.size() > size_t(kMaxRank))
            return invalid("input '", val.name, "': rank ", ti.shape.size(), " is too large");
        int64_t n = shape_numel(ti.shape);
        if (n < 0 || uint64_t(n) * dtype_size(ti.dtype) > opt_.max_bytes)
            return invalid("input '", val.name, "': shape ", shape_str(ti.shape),
                           " is larger than the memory limit");
        auto fz = opt_.frozen_inputs.find(val.name);
        if (fz != opt_.frozen_inputs.end()) {
            if (fz->second->dtype() != ti.dtype || fz->second->shape() != ti.shape)
                return invalid("input '", val.name, "': value given is ", dtype_name(fz->second->dtype()),
                               " ", shape_str(fz->second->shape()), " but the model expects ",
                               dtype_name(ti.dtype), " ", shape_str(ti.shape));
            ti.constant = fz->second;
            frozen_.push_back(val.name);
        }
    }
    return {};
}

Status Compiler::order_nodes(std::vector<int>* order) {
    const size_t n = g_.nodes.size();
    std::vector<char> needed(n, 0);
    std::vector<int> stack;
    for (int v : g_.outputs) stack.push_back(v);
    while (!stack.empty()) {
        int v = stack.back();
        stack.pop_back();
        int p = g_.values[size_t(v)].producer;
        if (p < 0 || needed[size_t(p)]) continue;
        needed[size_t(p)] = 1;
        for (int in : g_.nodes[size_t(p)].inputs)
            if (in >= 0) stack.push_back(in);
    }
    std::vector<int> indeg(n, 0);
    std::vector<std::vector<int>> users(n);
    for (size_t i = 0; i < n; ++i) {
        if (!needed[i]) continue;
        std::set<int> preds;
        for (int in : g_.nodes[i].inputs) {
            if (in < 0) continue;
            int p = g_.values[size_t(in)].producer;
            if (p >= 0 && preds.insert(p).second) {
                ++indeg[i];
                users[size_t(p)].push_back(int(i));
            }
        }
    }
    std::vector<int> ready;
    for (size_t i = n; i-- > 0;)
        if (needed[i] && indeg[i] == 0) ready.push_back(int(i));
    order->clear();
    while (!ready.empty()) {  // stable-ish: prefer file order
        auto it = std::min_element(ready.begin(), ready.end());
        int i = *it;
        ready.erase(it);
        order->push_back(i);
        for (int u : users[size_t(i)])
            if (--indeg[size_t(u)] == 0) ready.push_back(u);
    }
    for (size_t i = 0; i < n; ++i)
        if (needed[i] && indeg[i] > 0)
            return invalid(g_.node_label(int(i)), ": the graph has a cycle through this node");
    return {};
}

// Ancestors of `value` that are graph inputs (not frozen).
std::vector<int> Compiler::inputs_upstream_of(int value) const {
    std::set<int> seen;
    std::vector<int> stack{value};
    std::vector<int> r;
    while (!stack.empty()) {
        int v = stack.back();
        stack.pop_back();
        if (v < 0 || !seen.insert(v).second) continue;
        if (std::find(g_.inputs.begin(), g_.inputs.end(), v) != g_.inputs.end()) {
            if (!info_[size_t(v)].constant) r.push_back(v);
            continue;
        }
        int p = g_.values[size_t(v)].producer;
        if (p >= 0)
            for (int in : g_.nodes[size_t(p)].inputs) stack.push_back(in);
    }
    return r;
}

// Comma-separated names: the kNeedValue detail that Model::compile reads.
std::string Compiler::join_names(const std::vector<int>& values) const {
    std::string r;
    for (int v : values) r += (r.empty() ? "" : ",") + g_.values[size_t(v)].name;
    return r;
}

Status Compiler::inline_if(int ni, const Tensor& cond) {
    Node ifn = g_.nodes[size_t(ni)];
    const char* branch_name = cond.get_f64(0) != 0 ? "then_branch" : "else_branch";
    auto it = ifn.attrs.find(branch_name);
    if (it == ifn.attrs.end() || !it->second.g)
        return invalid(g_.node_label(ni), ": missing attribute ", branch_name);
    const Graph& b = *it->second.g;
    if (b.outputs.size() != ifn.outputs.size())
        return invalid(g_.node_label(ni), ": ", branch_name, " has ", b.outputs.size(),
                       " outputs but the node has ", ifn.outputs.size());
    // Map branch values into this graph. ONNX forbids shadowing, so names stay unique.
    std::vector<int> map(b.values.size(), -1);
    for (size_t v = 0; v < b.values.size(); ++v) {
        const Value& bv = b.values[v];
        if (std::find(b.captures.begin(), b.captures.end(), int(v)) != b.captures.end()) {
            map[v] = g_.find(bv.name);
            if (map[v] < 0) return internal_error("If capture '", bv.name, "' not found");
            continue;
        }
        if (g_.find(bv.name) >= 0)
            return unsupported(g_.node_label(ni), ": branch value '", bv.name, "' shadows an outer name");
        int id = g_.add_value(bv.name);
        Value nv = bv;
        nv.producer = -1;
        g_.values[size_t(id)] = nv;
        map[v] = id;
    }
    std::vector<Node> added;
    for (const Node& bn : b.nodes) {
        Node nn = bn;
        for (int& x : nn.inputs) x = x < 0 ? -1 : map[size_t(x)];
        for (int& x : nn.outputs) x = x < 0 ? -1 : map[size_t(x)];
        added.push_back(std::move(nn));
    }
    for (size_t k = 0; k < ifn.outputs.size(); ++k) {
        if (ifn.outputs[k] < 0) continue;
        Node id;
        id.name = ifn.name + "/out" + std::to_string(k);
        id.op = "Identity";
        id.inputs = {map[size_t(b.outputs[k])]};
        id.num_explicit_inputs = 1;
        id.outputs = {ifn.outputs[k]};
        added.push_back(std::move(id));
    }
    g_.nodes.erase(g_.nodes.begin() + ni);
    for (auto& n : added) g_.nodes.push_back(std::move(n));
    g_.index_producers();
    return Status(kRestart, "restart");
}

Status Compiler::fold(int ni, OpContext& ctx) {
    const Node& n = g_.nodes[size_t(ni)];
    std::vector<const void*> ins;
    for (int v : padded(n.inputs)) ins.push_back(v < 0 ? nullptr : info_[size_t(v)].constant->data());
    std::vector<std::shared_ptr<Tensor>> outs;
    std::vector<void*> outp;
    for (int i = 0; i < ctx.num_outputs(); ++i) {
        if (!ctx.has_output(i)) {
            outs.push_back(nullptr);
            outp.push_back(nullptr);
            continue;
        }
        const TensorInfo& o = ctx.outputs_[size_t(i)];
        uint64_t bytes = uint64_t(shape_numel(o.shape)) * dtype_size(o.dtype);
        folded_bytes_ += bytes;
        if (folded_bytes_ > opt_.max_bytes)
            return invalid(g_.node_label(ni), ": constant folding exceeds the memory limit of ",
                           opt_.max_bytes, " bytes");
        auto t = std::make_shared<Tensor>(o.dtype, o.shape);
        outp.push_back(t->data());
        outs.push_back(t);
    }
    outp.resize(std::max(outp.size(), kMinArity), nullptr);
    Status st = ctx.kernel_->run(ins.data(), outp.data());
    if (!st.ok()) return st.prefix(g_.node_label(ni) + ": ");
    for (int i = 0; i < ctx.num_outputs(); ++i)
        if (ctx.has_output(i)) info_[size_t(n.outputs[size_t(i)])].constant = outs[size_t(i)];
    return {};
}

Status Compiler::prepare_node(int ni) {
    const Node& n = g_.nodes[size_t(ni)];
    std::vector<TensorInfo> ins;
    for (int v : n.inputs) {
        if (v < 0) {
            ins.emplace_back();
            continue;
        }
        if (!info_[size_t(v)].present)
            return internal_error(g_.node_label(ni), ": input '", g_.values[size_t(v)].name,
                                  "' was not computed");
        ins.push_back(info_[size_t(v)]);
    }
    if (n.op == "If" && n.domain.empty() && !ins.empty() && ins[0].constant &&
        ins[0].constant->numel() == 1)
        return inline_if(ni, *ins[0].constant);
    if (n.op == "If" && n.domain.empty() && !ins.empty() && !ins[0].constant && n.inputs[0] >= 0) {
        // Prefer folding the branch away when the caller can give the inputs the condition uses.
        std::vector<int> ups = inputs_upstream_of(n.inputs[0]);
        // Only small integer/bool inputs (configuration such as a sample rate), never data.
        bool all = !ups.empty();
        for (int v : ups) {
            const TensorInfo& t = info_[size_t(v)];
            all = all && opt_.freezable_inputs.count(t.name) > 0 &&
                  (dtype_is_int(t.dtype) || t.dtype == DType::kBool) && shape_numel(t.shape) <= 64;
        }
        if (all)
            return Status(Code::kNeedValue, g_.node_label(ni) + ": condition needs input values")
                .with_detail(join_names(ups));
    }
    PrepareFn fn = find_op(n.domain, n.op);
    if (!fn)
        return unsupported(g_.node_label(ni), ": unknown op '", n.op, "'",
                           n.domain.empty() ? "" : " in domain '" + n.domain + "'");
    OpContext ctx(g_, ni, std::move(ins), opt_);
    Status st = fn(ctx);
    if (!st.ok()) {
        if (st.code() == Code::kNeedValue) {
            std::vector<int> ups = inputs_upstream_of(g_.find(st.detail()));
            if (ups.empty())
                return unsupported(st.message(), " (it is computed at run time, so the output shape is "
                                   "data-dependent; Jiffy needs static shapes)");
            st.with_detail(join_names(ups));
        }
        return st;
    }
    bool all_const = true;
    for (int i = 0; i < ctx.num_outputs(); ++i) {
        if (!ctx.has_output(i)) continue;
        const TensorInfo& o = ctx.outputs_[size_t(i)];
        if (!o.present) return internal_error(g_.node_label(ni), ": output ", i, " was not set");
        TensorInfo& dst = info_[size_t(n.outputs[size_t(i)])];
        std::string name = dst.name;
        dst = o;
        dst.name = name;
        if (!o.constant) all_const = false;
    }
    if (all_const) return {};
    if (!ctx.kernel_) return internal_error(g_.node_label(ni), ": prepare made no kernel");
    bool inputs_const = true;
    for (int v : n.inputs)
        if (v >= 0 && !info_[size_t(v)].constant) inputs_const = false;
    if (inputs_const) return fold(ni, ctx);
    PStep s;
    s.node = ni;
    s.kernel = std::move(ctx.kernel_);
    // Nodes with subgraph captures keep exact arity: their kernels index captures after inputs.
    bool captures = n.inputs.size() != size_t(n.num_explicit_inputs);
    s.ins = captures ? n.inputs : padded(n.inputs);
    s.outs = padded(n.outputs);
    steps_.push_back(std::move(s));
    return {};
}

Status Compiler::build_plan(std::shared_ptr<const Plan>* out) {
    auto plan = std::make_shared<Plan>();
    plan->frozen = frozen_;
    const size_t nv = g_.values.size();
    std::vector<int> slot_of(nv, -1);
    auto nbytes = [&](int v) {
        const TensorInfo& t = info_[size_t(v)];
        return size_t(shape_numel(t.shape)) * dtype_size(t.dtype);
    };
    auto add_slot = [&](Slot s) {
        plan->slots.push_back(s);
        return int(plan->slots.size() - 1);
    };
    // View ops only relabel their input's bytes: unless its output is a graph output, such a step
    // is dropped and its output reads the input's slot (root_of: the value that owns the bytes).
    std::vector<int> root_of(nv);
    for (size_t v = 0; v < nv; ++v) root_of[v] = int(v);
    {
        const std::set<int> graph_outs(g_.outputs.begin(), g_.outputs.end());
        std::vector<PStep> kept;
        for (PStep& s : steps_) {
            const Node& n = g_.nodes[size_t(s.node)];
            const int in = s.ins.empty() ? -1 : s.ins[0], o = s.outs.empty() ? -1 : s.outs[0];
            int outs = 0;
            for (int x : s.outs) outs += x >= 0;
            const bool view = n.domain.empty() &&
                              (n.op == "Reshape" || n.op == "Flatten" || n.op == "Squeeze" || n.op == "Unsqueeze" ||
                               n.op == "Identity") &&
                              in >= 0 && o >= 0 && outs == 1 && !info_[size_t(in)].constant && !graph_outs.count(o) &&
                              info_[size_t(in)].dtype == info_[size_t(o)].dtype &&
                              info_[size_t(in)].dtype != DType::kString && nbytes(in) == nbytes(o);
            if (view) {
                root_of[size_t(o)] = root_of[size_t(in)];
                continue;
            }
            kept.push_back(std::move(s));
        }
        steps_ = std::move(kept);
    }
    auto rt = [&](int v) { return v >= 0 ? root_of[size_t(v)] : v; };
    // Graph inputs (and subgraph captures) are bound by the caller.
    std::vector<int> in_values = g_.inputs;
    for (int c : g_.captures) in_values.push_back(c);
    // In-place Concat (docs/memory.md): a Concat whose inputs are each a contiguous stretch of its
    // output (nothing but size-1 dims before the axis) and are each written by a step, read by this
    // Concat once and neither graph inputs nor outputs, is dropped: its inputs ("parts") live at
    // their offsets inside its output's bytes, so their producers write the concatenation directly.
    // Concats are taken last to first, so that of a chain of Concats each of whose inputs is the
    // one before's plus more (DenseNet: [x], [x, y1], [x, y1, y2], ...) the last one owns the parts,
    // and each earlier one whose inputs are its first parts in order becomes a view: its bytes
    // are the first of the last one's (a "prefix" part at offset 0; its step dropped, no copy).
    std::vector<int> part_of(nv, -1);     // a part's Concat output
    std::vector<size_t> part_off(nv, 0);  // the part's byte offset in it
    std::vector<char> in_place_concat(nv, 0);
    std::vector<int> prefix_parts;  // Concat outputs that are views of a later Concat's first bytes
    {
        const std::set<int> graph_outs(g_.outputs.begin(), g_.outputs.end());
        const std::set<int> graph_ins(in_values.begin(), in_values.end());
        std::set<int> produced;
        for (const PStep& s : steps_)
            for (int o : s.outs)
                if (o >= 0) produced.insert(o);
        std::vector<char> drop(steps_.size(), 0);
        for (size_t si = steps_.size(); si-- > 0;) {
            const PStep& s = steps_[si];
            const Node& n = g_.nodes[size_t(s.node)];
            const int o = s.outs.empty() ? -1 : s.outs[0];
            // o must not be a part itself (a later Concat took it: its producer writes it there).
            bool ok = n.domain.empty() && n.op == "Concat" && o >= 0 && !info_[size_t(o)].constant &&
                      info_[size_t(o)].dtype != DType::kString && part_of[size_t(o)] < 0 &&
                      std::count(g_.outputs.begin(), g_.outputs.end(), o) <= 1;
            if (ok) {
                const Shape& sh = info_[size_t(o)].shape;
                auto it = n.attrs.find("axis");
                int64_t axis = it != n.attrs.end() ? it->second.i : 1;
                if (axis < 0) axis += int64_t(sh.size());
                ok = axis >= 0 && axis < int64_t(sh.size());
                for (int64_t d = 0; ok && d < axis; ++d) ok = sh[size_t(d)] == 1;
            }
            // A prefix view: every input a part of the same Concat c, at offsets 0, 1st's bytes, ...
            int c = -1;
            bool prefix = ok && !graph_outs.count(o);
            size_t off = 0;
            for (size_t i = 0; prefix && i < s.ins.size(); ++i) {
                const int in = s.ins[i];
                if (in < 0) continue;
                if (c < 0) c = part_of[size_t(in)];
                prefix = c >= 0 && part_of[size_t(in)] == c && part_off[size_t(in)] == off && part_of[size_t(c)] < 0;
                off += nbytes(in);
            }
            if (prefix && c >= 0 && off == nbytes(o)) {
                part_of[size_t(o)] = c;
                part_off[size_t(o)] = 0;
                prefix_parts.push_back(o);
                drop[si] = 1;
                continue;
            }
            off = 0;
            for (size_t i = 0; ok && i < s.ins.size(); ++i) {
                const int in = s.ins[i];
                if (in < 0) continue;
                ok = rt(in) == in && produced.count(in) && !info_[size_t(in)].constant && !graph_ins.count(in) &&
                     !graph_outs.count(in) && !in_place_concat[size_t(in)] && part_of[size_t(in)] < 0 &&
                     std::count(s.ins.begin(), s.ins.end(), in) == 1 && nbytes(in) > 0 && off % kAlign == 0;
                off += nbytes(in);
            }
            if (!ok || off != nbytes(o)) continue;
            off = 0;
            for (int in : s.ins) {
                if (in < 0) continue;
                part_of[size_t(in)] = o;
                part_off[size_t(in)] = off;
                off += nbytes(in);
            }
            in_place_concat[size_t(o)] = 1;
            drop[si] = 1;
        }
        std::vector<PStep> kept;
        for (size_t si = 0; si < steps_.size(); ++si)
            if (!drop[si]) kept.push_back(std::move(steps_[si]));
        steps_ = std::move(kept);
    }
    for (size_t i = 0; i < in_values.size(); ++i) {
        int v = in_values[i];
        const TensorInfo& t = info_[size_t(v)];
        plan->inputs.push_back(IoDesc{g_.values[size_t(v)].name, t.dtype, t.shape, nbytes(v)});
        if (t.constant && std::find(frozen_.begin(), frozen_.end(), t.name) != frozen_.end())
            plan->frozen_values.emplace_back(i, t.constant);
        Slot s;
        s.kind = Slot::kInput;
        s.offset = i;
        s.nbytes = nbytes(v);
        s.value = v;
        slot_of[size_t(v)] = add_slot(s);
    }
    // Outputs produced by a step write straight into the output buffer; others get a copy step.
    std::vector<int> out_slot_for_value(nv, -1);
    std::set<int> step_outputs;
    for (const PStep& s : steps_)
        for (int o : s.outs)
            if (o >= 0) step_outputs.insert(o);
    struct CopyOut {
        int value, out_slot;
    };
    std::vector<CopyOut> copies;
    for (size_t i = 0; i < g_.outputs.size(); ++i) {
        int v = g_.outputs[i];
        const TensorInfo& t = info_[size_t(v)];
        plan->outputs.push_back(IoDesc{g_.values[size_t(v)].name, t.dtype, t.shape, nbytes(v)});
        Slot s;
        s.kind = Slot::kOutput;
        s.offset = i;
        s.nbytes = nbytes(v);
        s.value = v;
        int sid = add_slot(s);
        if ((step_outputs.count(v) || in_place_concat[size_t(v)]) && out_slot_for_value[size_t(v)] < 0 &&
            slot_of[size_t(v)] < 0) {
            out_slot_for_value[size_t(v)] = sid;
            slot_of[size_t(v)] = sid;
        } else {
            copies.push_back(CopyOut{v, sid});
        }
    }
    // Constants referenced by steps or copies.
    auto const_slot = [&](int v) {
        if (slot_of[size_t(v)] >= 0) return slot_of[size_t(v)];
        Slot s;
        s.kind = Slot::kConst;
        s.data = info_[size_t(v)].constant->data();
        s.nbytes = nbytes(v);
        s.value = v;
        plan->constants.push_back(info_[size_t(v)].constant);
        plan->constant_bytes += s.nbytes;
        return slot_of[size_t(v)] = add_slot(s);
    };
    // Arena values: liveness [def, last use].
    struct Live {
        int value;
        int def, last;
        size_t bytes;
        size_t offset = 0;
    };
    std::vector<Live> lives;
    std::vector<int> live_of(nv, -1);
    struct PartSlot {
        int slot, concat;
    };
    std::vector<PartSlot> part_slots;  // arena parts: offset = their Concat output's + part_off
    // An arena value whose life starts at step si: its Live and its slot (offset set when placed).
    auto open_life = [&](int v, size_t si) {
        live_of[size_t(v)] = int(lives.size());
        lives.push_back(Live{v, int(si), int(si), (nbytes(v) + kAlign - 1) / kAlign * kAlign});
        Slot s;
        s.kind = Slot::kArena;
        s.nbytes = nbytes(v);
        s.value = v;
        slot_of[size_t(v)] = add_slot(s);
    };
    for (size_t si = 0; si < steps_.size(); ++si) {
        for (int o : steps_[si].outs) {
            if (o < 0 || slot_of[size_t(o)] >= 0) continue;
            const int c = part_of[size_t(o)];
            if (c < 0) {
                open_life(o, si);
                continue;
            }
            // A part of an in-place Concat: a stretch of c's output buffer or of c's arena bytes.
            const bool in_output =
                slot_of[size_t(c)] >= 0 && plan->slots[size_t(slot_of[size_t(c)])].kind == Slot::kOutput;
            if (!in_output && live_of[size_t(c)] < 0) open_life(c, si);  // the first part opens c's life
            Slot s = plan->slots[size_t(slot_of[size_t(c)])];  // kOutput: the same output index
            if (in_output) s.out_byte = part_off[size_t(o)];
            s.nbytes = nbytes(o);
            s.value = o;
            slot_of[size_t(o)] = add_slot(s);
            if (!in_output) {  // its offset is set once c is placed
                live_of[size_t(o)] = live_of[size_t(c)];
                part_slots.push_back(PartSlot{slot_of[size_t(o)], c});
            }
        }
        for (int in : steps_[si].ins)
            if (in >= 0 && info_[size_t(in)].constant && !info_[size_t(in)].constant->empty() &&
                slot_of[size_t(in)] < 0)
                const_slot(in);
    }
    // Prefix views: a stretch of their Concat's bytes from its start (its life opened by its parts).
    for (int o : prefix_parts) {
        const int c = part_of[size_t(o)];
        if (slot_of[size_t(c)] < 0) return internal_error("a prefix Concat's owner has no slot");
        const bool in_output = plan->slots[size_t(slot_of[size_t(c)])].kind == Slot::kOutput;
        Slot s = plan->slots[size_t(slot_of[size_t(c)])];
        if (in_output) s.out_byte = 0;
        s.nbytes = nbytes(o);
        s.value = o;
        slot_of[size_t(o)] = add_slot(s);
        if (!in_output) {
            live_of[size_t(o)] = live_of[size_t(c)];
            part_slots.push_back(PartSlot{slot_of[size_t(o)], c});
        }
    }
    for (size_t si = 0; si < steps_.size(); ++si)
        for (int in0 : steps_[si].ins) {
            const int in = rt(in0);
            if (in >= 0 && live_of[size_t(in)] >= 0)
                lives[size_t(live_of[size_t(in)])].last = std::max(lives[size_t(live_of[size_t(in)])].last, int(si));
        }
    int end = int(steps_.size());
    for (const CopyOut& c : copies)
        if (live_of[size_t(c.value)] >= 0) lives[size_t(live_of[size_t(c.value)])].last = end;
    // Greedy: largest first, into the lowest offset that does not overlap a placed value whose
    // lifetime intersects.
    std::vector<int> by_size(lives.size());
    for (size_t i = 0; i < lives.size(); ++i) by_size[i] = int(i);
    std::stable_sort(by_size.begin(), by_size.end(),
                     [&](int a, int b) { return lives[size_t(a)].bytes > lives[size_t(b)].bytes; });
    std::vector<int> placed;
    size_t arena = 0;
    for (int li : by_size) {
        Live& L = lives[size_t(li)];
        std::vector<std::pair<size_t, size_t>> busy;
        for (int pj : placed) {
            const Live& P = lives[size_t(pj)];
            if (P.last < L.def || L.last < P.def) continue;
            busy.emplace_back(P.offset, P.offset + P.bytes);
        }
        std::sort(busy.begin(), busy.end());
        size_t off = 0;
        for (auto [b, e] : busy) {
            if (off + L.bytes <= b) break;
            off = std::max(off, e);
        }
        L.offset = off;
        arena = std::max(arena, off + L.bytes);
        placed.push_back(li);
        plan->slots[size_t(slot_of[size_t(L.value)])].offset = off;
    }
    for (const PartSlot& p : part_slots)
        plan->slots[size_t(p.slot)].offset =
            plan->slots[size_t(slot_of[size_t(p.concat)])].offset + part_off[size_t(plan->slots[size_t(p.slot)].value)];
    plan->arena_bytes = arena;
    if (arena > opt_.max_bytes)
        return invalid("the plan needs an arena of ", arena, " bytes, over the memory limit of ",
                       opt_.max_bytes);
    // Steps.
    for (PStep& s : steps_) {
        Step st;
        st.kernel = s.kernel.get();
        st.first_in = uint32_t(plan->step_in.size());
        st.first_out = uint32_t(plan->step_out.size());
        st.num_in = uint16_t(s.ins.size());
        st.num_out = uint16_t(s.outs.size());
        StepInfo info;
        const Node& n = g_.nodes[size_t(s.node)];
        info.op = n.op;
        info.name = n.name;
        info.attrs = n.attrs;
        for (int in : s.ins) {
            int sid = -1;
            if (in >= 0) {
                sid = slot_of[size_t(rt(in))];
                if (sid < 0) sid = const_slot(in);  // empty constants
            }
            plan->step_in.push_back(sid);
            info.in_shapes.push_back(in >= 0 ? info_[size_t(in)].shape : Shape{});
            info.in_dtypes.push_back(in >= 0 ? info_[size_t(in)].dtype : DType::kUndefined);
            info.in_const.push_back(in >= 0 && info_[size_t(in)].constant != nullptr);
        }
        for (int o : s.outs) {
            plan->step_out.push_back(o >= 0 ? slot_of[size_t(o)] : -1);
            info.out_shapes.push_back(o >= 0 ? info_[size_t(o)].shape : Shape{});
            info.out_dtypes.push_back(o >= 0 ? info_[size_t(o)].dtype : DType::kUndefined);
        }
        plan->steps.push_back(st);
        plan->step_info.push_back(std::move(info));
        plan->kernels.push_back(std::move(s.kernel));
    }
    for (const CopyOut& c : copies) {
        int src = slot_of[size_t(c.value)];
        if (src < 0) src = const_slot(c.value);
        plan->kernels.push_back(std::make_unique<CopyKernel>(nbytes(c.value)));
        Step st;
        st.kernel = plan->kernels.back().get();
        st.first_in = uint32_t(plan->step_in.size());
        st.first_out = uint32_t(plan->step_out.size());
        st.num_in = 1;
        st.num_out = 1;
        plan->step_in.push_back(src);
        plan->step_out.push_back(c.out_slot);
        plan->steps.push_back(st);
        StepInfo info;
        info.op = "Copy";
        info.name = g_.values[size_t(c.value)].name;
        info.in_shapes.push_back(info_[size_t(c.value)].shape);
        info.in_dtypes.push_back(info_[size_t(c.value)].dtype);
        info.in_const.push_back(info_[size_t(c.value)].constant != nullptr);
        info.out_shapes.push_back(info_[size_t(c.value)].shape);
        info.out_dtypes.push_back(info_[size_t(c.value)].dtype);
        plan->step_info.push_back(std::move(info));
    }
    *out = std::move(plan);
    return {};
}

Status Compiler::run(const std::vector<TensorInfo>* formal, std::shared_ptr<const Plan>* out) {
    for (int attempt = 0; attempt < 10000; ++attempt) {
        steps_.clear();
        folded_bytes_ = 0;
        frozen_.clear();
        JIFFY_RETURN_IF_ERROR(bind_inputs(formal));
        std::vector<int> order;
        JIFFY_RETURN_IF_ERROR(order_nodes(&order));
        Status st;
        for (int ni : order) {
            st = prepare_node(ni);
            if (!st.ok()) break;
        }
        if (st.code() == kRestart) continue;
        JIFFY_RETURN_IF_ERROR(st);
        if (!optimized_) {
            optimized_ = true;
            if (materialize_and_optimize()) continue;
        }
        for (int v : g_.outputs)
            if (!info_[size_t(v)].present)
                return invalid("graph output '", g_.values[size_t(v)].name, "' is never computed");
        return build_plan(out);
    }
    return internal_error("compile did not converge");
}

}  // namespace

int parallel_chunks(const CompileOptions& opt, int64_t flops) {
    if (!opt.pool || opt.pool->threads() < 2 || flops < opt.parallel_min_flops) return 1;
    return opt.pool->threads();
}

int parallel_chunks_gemv(const CompileOptions& opt, int64_t flops, int64_t weight_bytes) {
    if (weight_bytes >= opt.parallel_min_gemv_bytes) flops = std::max(flops, opt.parallel_min_flops);
    return parallel_chunks(opt, flops);
}

// The plan owns what its kernels point to: the pool and the shared scratch.
static void keep_shared(const CompileOptions& opt, std::shared_ptr<const Plan>* out) {
    if (!*out) return;
    std::const_pointer_cast<Plan>(*out)->pool = opt.pool;
    std::const_pointer_cast<Plan>(*out)->scratch = opt.scratch;
}

Status compile_graph(const Graph& g, const CompileOptions& opt_in, std::shared_ptr<const Plan>* out) {
    CompileOptions opt = opt_in;
    if (const char* e = std::getenv("JIFFY_PAR_MIN_FLOPS"); e && *e) opt.parallel_min_flops = std::atoll(e);
    if (const char* e = std::getenv("JIFFY_PAR_MIN_GEMV_BYTES"); e && *e) opt.parallel_min_gemv_bytes = std::atoll(e);
    if (opt.threads > 1 && !opt.pool) opt.pool = std::make_shared<ThreadPool>(opt.threads);
    if (opt.threads <= 1) opt.pool.reset();
    opt.scratch = std::make_shared<SharedScratch>();  // never another plan's (they may run concurrently)
    Compiler c(g, opt);
    JIFFY_RETURN_IF_ERROR(c.run(nullptr, out));
    keep_shared(opt, out);
    choose_fast_weights(*out);
    return {};
}

Status compile_subgraph_plan(const Graph& body, const std::vector<TensorInfo>& inputs,
                             const CompileOptions& opt_in, std::shared_ptr<const Plan>* out) {
    CompileOptions opt = opt_in;
    if (!opt.scratch) opt.scratch = std::make_shared<SharedScratch>();
    Compiler c(body, opt);
    JIFFY_RETURN_IF_ERROR(c.run(&inputs, out));
    keep_shared(opt, out);
    return {};
}

}  // namespace jiffy
