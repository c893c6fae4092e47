// The public C++ and C APIs: thin wrappers over runtime/Model, Plan and Session.
#include <cstring>

#include "jiffy/jiffy.h"
#include "jiffy/jiffy.hpp"
#include "runtime/model.h"

namespace jiffy {
namespace api {
namespace {

Error to_error(const Status& st) {
    if (st.ok()) return {};
    return Error{int(st.code()), st.message()};
}

std::vector<TensorInfo> io_infos(const std::vector<IoDesc>& v) {
    std::vector<TensorInfo> r;
    for (const IoDesc& d : v) r.push_back(TensorInfo{d.name, dtype_name(d.dtype), d.shape, d.nbytes});
    return r;
}

TensorInfo declared(const Value& v) {
    TensorInfo t{v.name, dtype_name(v.dtype), {}, 0};
    for (const Dim& d : v.dims) t.shape.push_back(d.value);
    return t;
}

}  // namespace

Model Model::load(const std::string& path, Error* err, uint64_t max_bytes) {
    Model m;
    ImportOptions io;
    io.max_bytes = max_bytes;
    Status st = jiffy::Model::load(path, io, &m.m_);
    if (err) *err = to_error(st);
    m.max_bytes_ = max_bytes;
    return m;
}

std::vector<TensorInfo> Model::inputs() const {
    std::vector<TensorInfo> r;
    if (m_)
        for (int v : m_->graph().inputs) r.push_back(declared(m_->graph().values[size_t(v)]));
    return r;
}

std::vector<TensorInfo> Model::outputs() const {
    std::vector<TensorInfo> r;
    if (m_)
        for (int v : m_->graph().outputs) r.push_back(declared(m_->graph().values[size_t(v)]));
    return r;
}

Compiled Model::compile(const std::map<std::string, std::vector<int64_t>>& shapes, Error* err,
                        const FrozenInputs& frozen, int threads) const {
    Compiled c;
    if (threads < 1 || threads > 256) {
        if (err) *err = Error{2, "threads must be in 1..256, got " + std::to_string(threads)};
        return c;
    }
    if (!m_) {
        if (err) *err = Error{2, "model not loaded"};
        return c;
    }
    CompileOptions opt;
    opt.max_bytes = max_bytes_;
    opt.threads = threads;
    for (const auto& [n, s] : shapes) opt.input_shapes[n] = s;
    ValueMap values;
    for (const auto& [n, bytes] : frozen) {
        int v = m_->graph().find(n);
        auto it = shapes.find(n);
        if (v < 0 || it == shapes.end()) {
            if (err) *err = Error{2, "frozen input '" + n + "' needs its shape and must be a model input"};
            return c;
        }
        auto t = std::make_shared<Tensor>(m_->graph().values[size_t(v)].dtype, it->second);
        if (t->nbytes() != bytes.size()) {
            if (err) *err = Error{2, "frozen input '" + n + "': byte count does not match its shape"};
            return c;
        }
        std::memcpy(t->data(), bytes.data(), bytes.size());
        values[n] = t;
    }
    Status st = m_->compile(opt, values, &c.plan_);
    if (err) *err = to_error(st);
    if (!st.ok()) return Compiled{};
    c.inputs_ = io_infos(c.plan_->inputs);
    c.outputs_ = io_infos(c.plan_->outputs);
    return c;
}

size_t Compiled::arena_bytes() const { return plan_ ? plan_->arena_bytes : 0; }
int64_t Compiled::flops() const { return plan_ ? plan_->flops() : 0; }

Runner Compiled::runner() const {
    Runner r;
    if (plan_) r.s_ = std::make_unique<jiffy::Session>(plan_);
    return r;
}

Runner::Runner(Runner&&) noexcept = default;
Runner& Runner::operator=(Runner&&) noexcept = default;
Runner::~Runner() = default;
void* Runner::input(size_t i) { return s_->input_data(i); }
const void* Runner::output(size_t i) const { return s_->output_data(i); }
void Runner::bind_input(size_t i, const void* data) { s_->bind_input(i, data); }
void Runner::bind_output(size_t i, void* data) { s_->bind_output(i, data); }
Error Runner::run() {
    if (!s_) return Error{2, "runner has no plan"};
    // A plan compiled with frozen inputs is only valid for those values (a few bytes: memcmp).
    for (const auto& [idx, t] : s_->plan().frozen_values)
        if (std::memcmp(s_->input_data(idx), t->data(), t->nbytes()) != 0) [[unlikely]]
            return Error{2, "input '" + s_->plan().inputs[idx].name +
                                "' differs from the value the plan was compiled for; compile again with it"};
    Status st = s_->run();
    if (st.ok()) [[likely]]
        return {};
    return to_error(st);
}

}  // namespace api
}  // namespace jiffy

// ---------------------------------------------------------------- C API

struct jiffy_model {
    jiffy::api::Model m;
};
struct jiffy_plan {
    jiffy::api::Compiled c;
};
struct jiffy_runner {
    jiffy::api::Runner r;
};

static void set_err(char* err, size_t n, const std::string& msg) {
    if (!err || n == 0) return;
    std::snprintf(err, n, "%s", msg.c_str());
}

extern "C" {

jiffy_model* jiffy_model_load(const char* path, char* err, size_t err_size) {
    jiffy::api::Error e;
    auto m = jiffy::api::Model::load(path ? path : "", &e);
    if (e) {
        set_err(err, err_size, e.message);
        return nullptr;
    }
    return new jiffy_model{std::move(m)};
}
void jiffy_model_free(jiffy_model* m) { delete m; }

jiffy_plan* jiffy_compile(jiffy_model* m, int n, const char* const* names, const int* ranks,
                          const int64_t* dims, char* err, size_t err_size) {
    if (!m) {
        set_err(err, err_size, "null model");
        return nullptr;
    }
    std::map<std::string, std::vector<int64_t>> shapes;
    size_t off = 0;
    for (int i = 0; i < n; ++i) {
        shapes[names[i]] = std::vector<int64_t>(dims + off, dims + off + ranks[i]);
        off += size_t(ranks[i]);
    }
    jiffy::api::Error e;
    auto c = m->m.compile(shapes, &e);
    if (e) {
        set_err(err, err_size, e.message);
        return nullptr;
    }
    return new jiffy_plan{std::move(c)};
}
void jiffy_plan_free(jiffy_plan* p) { delete p; }
int jiffy_plan_num_inputs(const jiffy_plan* p) { return int(p->c.inputs().size()); }
int jiffy_plan_num_outputs(const jiffy_plan* p) { return int(p->c.outputs().size()); }
const char* jiffy_plan_input_name(const jiffy_plan* p, int i) { return p->c.inputs()[size_t(i)].name.c_str(); }
const char* jiffy_plan_output_name(const jiffy_plan* p, int i) { return p->c.outputs()[size_t(i)].name.c_str(); }
size_t jiffy_plan_input_nbytes(const jiffy_plan* p, int i) { return p->c.inputs()[size_t(i)].nbytes; }
size_t jiffy_plan_output_nbytes(const jiffy_plan* p, int i) { return p->c.outputs()[size_t(i)].nbytes; }
int jiffy_plan_output_shape(const jiffy_plan* p, int i, int64_t* dims, int max_dims) {
    const auto& s = p->c.outputs()[size_t(i)].shape;
    for (int k = 0; k < int(s.size()) && k < max_dims; ++k) dims[k] = s[size_t(k)];
    return int(s.size());
}
jiffy_runner* jiffy_runner_new(const jiffy_plan* p) { return new jiffy_runner{p->c.runner()}; }
void jiffy_runner_free(jiffy_runner* r) { delete r; }
void* jiffy_runner_input(jiffy_runner* r, int i) { return r->r.input(size_t(i)); }
const void* jiffy_runner_output(const jiffy_runner* r, int i) { return r->r.output(size_t(i)); }
void jiffy_runner_bind_input(jiffy_runner* r, int i, const void* d) { r->r.bind_input(size_t(i), d); }
void jiffy_runner_bind_output(jiffy_runner* r, int i, void* d) { r->r.bind_output(size_t(i), d); }
int jiffy_run(jiffy_runner* r, char* err, size_t err_size) {
    jiffy::api::Error e = r->r.run();
    if (e) set_err(err, err_size, e.message);
    return e.code;
}

}  // extern "C"
