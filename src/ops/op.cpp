#include <algorithm>
#include <mutex>

#include "ops/util.h"
#include "runtime/plan.h"

namespace jiffy {

OpContext::OpContext(const Graph& g, int node, std::vector<TensorInfo> inputs,
                     const CompileOptions& opt)
    : graph_(g), node_(g.nodes[size_t(node)]), inputs_(std::move(inputs)), opt_(opt) {
    outputs_.resize(node_.outputs.size());
    for (size_t i = 0; i < node_.outputs.size(); ++i)
        if (node_.outputs[i] >= 0) outputs_[i].name = g.values[size_t(node_.outputs[i])].name;
    // Missing trailing optional inputs read as absent.
    if (inputs_.size() < size_t(node_.num_explicit_inputs)) inputs_.resize(size_t(node_.num_explicit_inputs));
}

std::string OpContext::label() const {
    std::string n = node_.name.empty() ? (outputs_.empty() || outputs_[0].name.empty()
                                              ? std::string("?")
                                              : "-> " + outputs_[0].name)
                                       : node_.name;
    return "node '" + n + "' (" + node_.op + ")";
}

Status OpContext::set_output(int i, DType t, Shape s) {
    if (i < 0 || i >= num_outputs()) return internal_error(label(), ": output index ", i);
    if (s.size() > size_t(kMaxRank)) return fail("output rank ", s.size(), " is too large");
    int64_t n = shape_numel(s);
    if (n < 0) return fail("output shape ", shape_str(s), " is invalid or overflows");
    if (uint64_t(n) * dtype_size(t) > opt_.max_bytes)
        return fail("output shape ", shape_str(s), " needs ", uint64_t(n) * dtype_size(t),
                    " bytes, over the memory limit of ", opt_.max_bytes);
    TensorInfo& o = outputs_[size_t(i)];
    o.present = true;
    o.dtype = t;
    o.shape = std::move(s);
    o.constant.reset();
    return {};
}

void OpContext::set_output_const(int i, std::shared_ptr<const Tensor> t) {
    TensorInfo& o = outputs_[size_t(i)];
    o.present = true;
    o.dtype = t->dtype();
    o.shape = t->shape();
    o.constant = std::move(t);
}

const Attr* OpContext::attr(const char* name) const {
    auto it = node_.attrs.find(name);
    return it == node_.attrs.end() ? nullptr : &it->second;
}
int64_t OpContext::attr_int(const char* name, int64_t def) const {
    const Attr* a = attr(name);
    return a ? a->i : def;
}
float OpContext::attr_float(const char* name, float def) const {
    const Attr* a = attr(name);
    return a ? a->f : def;
}
std::string OpContext::attr_str(const char* name, const std::string& def) const {
    const Attr* a = attr(name);
    return a ? a->s : def;
}
std::vector<int64_t> OpContext::attr_ints(const char* name, std::vector<int64_t> def) const {
    const Attr* a = attr(name);
    return a ? a->ints : def;
}
std::vector<float> OpContext::attr_floats(const char* name, std::vector<float> def) const {
    const Attr* a = attr(name);
    return a ? a->floats : def;
}

Status OpContext::need_value(int i) const {
    const std::string& n = inputs_[size_t(i)].name;
    return Status(Code::kNeedValue,
                  label() + ": the value of input '" + n + "' must be known at compile time")
        .with_detail(n);
}

Status OpContext::expect_dtype(int i, std::initializer_list<DType> allowed) const {
    if (!has_input(i)) return fail("input ", i, " is missing");
    for (DType t : allowed)
        if (in_dtype(i) == t) return {};
    return fail_unsupported("input ", i, " ('", inputs_[size_t(i)].name, "') has dtype ",
                            dtype_name(in_dtype(i)), ", which this op does not support");
}

Status OpContext::compile_subgraph(const Graph& body, const std::vector<TensorInfo>& formal,
                                   std::shared_ptr<const Plan>* out) const {
    if (formal.size() != body.inputs.size())
        return fail("subgraph '", body.name, "' has ", body.inputs.size(), " inputs, given ", formal.size());
    std::vector<TensorInfo> all = formal;
    for (int c : body.captures) {
        const std::string& cn = body.values[size_t(c)].name;
        const TensorInfo* found = nullptr;
        for (size_t k = size_t(node_.num_explicit_inputs); k < node_.inputs.size(); ++k)
            if (node_.inputs[k] >= 0 && graph_.values[size_t(node_.inputs[k])].name == cn)
                found = &inputs_[k];
        if (!found) return internal_error(label(), ": capture '", cn, "' not bound");
        all.push_back(*found);
    }
    Status st = compile_subgraph_plan(body, all, opt_, out);
    if (!st.ok()) st.prefix(label() + " subgraph '" + body.name + "': ");
    return st;
}

void OpRegistry::add(const char* name, PrepareFn fn, const char* domain) {
    ops_.emplace_back(std::string(domain) + ":" + name, fn);
}
PrepareFn OpRegistry::find(const std::string& domain, const std::string& name) const {
    std::string key = domain + ":" + name;
    for (const auto& [k, fn] : ops_)
        if (k == key) return fn;
    return nullptr;
}
std::vector<std::string> OpRegistry::names() const {
    std::vector<std::string> r;
    for (const auto& [k, fn] : ops_) r.push_back(k[0] == ':' ? k.substr(1) : k);
    std::sort(r.begin(), r.end());
    return r;
}

static const OpRegistry& registry() {
    static const OpRegistry r = [] {
        OpRegistry reg;
        register_elementwise_ops(reg);
        register_conv_ops(reg);
        register_linalg_ops(reg);
        register_shape_ops(reg);
        register_reduce_ops(reg);
        register_rnn_ops(reg);
        register_control_ops(reg);
        register_misc_ops(reg);
        return reg;
    }();
    return r;
}

PrepareFn find_op(const std::string& domain, const std::string& op) {
    return registry().find(domain, op);
}
std::vector<std::string> registered_ops() { return registry().names(); }

}  // namespace jiffy
