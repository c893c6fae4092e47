// Control flow: If (run-time condition), Loop, Scan. Each body is compiled once at prepare into a
// sub-plan for static shapes and run through a Session owned by the kernel.
//
// Subgraph inputs: a sub-plan's inputs are the body's formal inputs followed by its captures
// (values of enclosing scopes, see Graph::captures). The kernel receives the node's explicit inputs
// followed by its implicit inputs (the captures of all of its bodies, deduplicated); each body's
// captures are mapped to those pointers by name at prepare and bound (zero copy) at run.
//
// NOTE: the kernels keep a Session per body (its arena and I/O bindings) in a mutable member
// created at prepare, so they are NOT reentrant: one kernel object must not run on two threads at
// once. (A later change moves this state into the plan's arena.)
#include <algorithm>
#include <cstring>
#include <limits>

#include "ops/util.h"
#include "runtime/plan.h"

namespace jiffy {
namespace {

// A compiled body and the Session that runs it.
struct Body {
    std::shared_ptr<const Plan> plan;
    std::unique_ptr<Session> sess;  // mutated at run (see the file comment)
    size_t num_formal = 0;
    std::vector<int> cap_in;                      // kernel input index of each capture
    mutable std::vector<const void*> cap_bound;   // pointer each capture is bound to now

    Status init(const OpContext& ctx, const Graph& g, const std::vector<TensorInfo>& formal) {
        JIFFY_RETURN_IF_ERROR(ctx.compile_subgraph(g, formal, &plan));
        num_formal = formal.size();
        const Node& n = ctx.node();
        for (int c : g.captures) {
            const std::string& cn = g.values[size_t(c)].name;
            int found = -1;
            for (size_t k = size_t(n.num_explicit_inputs); k < n.inputs.size(); ++k)
                if (n.inputs[k] >= 0 && ctx.graph().values[size_t(n.inputs[k])].name == cn) found = int(k);
            if (found < 0) return internal_error(ctx.label(), ": capture '", cn, "' is not an input of the node");
            cap_in.push_back(found);
        }
        cap_bound.assign(cap_in.size(), nullptr);
        sess = std::make_unique<Session>(plan);
        return {};
    }
    // Binds the captures to the outer pointers (rebinding only when they changed).
    void bind_captures(const void* const* in) const {
        for (size_t i = 0; i < cap_in.size(); ++i) {
            const void* p = in[cap_in[i]];
            if (p != cap_bound[i]) {
                sess->bind_input(num_formal + i, p);
                cap_bound[i] = p;
            }
        }
    }
    const IoDesc& out(size_t k) const { return plan->outputs[k]; }
};

const Graph* graph_attr(const OpContext& ctx, const char* name) {
    const Attr* a = ctx.attr(name);
    return a && a->g ? a->g.get() : nullptr;
}

// Reads a one-element condition of any numeric/bool dtype as a bool.
bool read_flag(DType t, const void* p) {
    bool r = false;
    (void)visit_all(t, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        r = *static_cast<const T*>(p) != T(0);
        return {};
    });
    return r;
}

Status expect_flag(const OpContext& ctx, int i, const char* what) {
    const TensorInfo& t = ctx.input(i);
    if (t.dtype != DType::kBool && !dtype_is_int(t.dtype) && t.dtype != DType::kF32 && t.dtype != DType::kF64)
        return ctx.fail(what, " must be bool, got ", dtype_name(t.dtype));
    if (shape_numel(t.shape) != 1)
        return ctx.fail(what, " must have one element, got shape ", shape_str(t.shape));
    return {};
}

std::string info_str(DType t, const Shape& s) { return std::string(dtype_name(t)) + " " + shape_str(s); }

// The value of output k of `plan` when it is a compile-time constant (a copy from a constant
// slot); `input_value[i]` gives known values of plan inputs passed through unchanged.
const void* plan_const_output(const Plan& plan, size_t k, const std::vector<const void*>& input_value) {
    for (size_t si = 0; si < plan.steps.size(); ++si) {
        const Step& st = plan.steps[si];
        for (uint16_t o = 0; o < st.num_out; ++o) {
            int32_t sid = plan.step_out[st.first_out + o];
            if (sid < 0) continue;
            const Slot& s = plan.slots[size_t(sid)];
            if (s.kind != Slot::kOutput || s.offset != k) continue;
            if (plan.step_info[si].op != "Copy" || st.num_in != 1) return nullptr;
            int32_t in = plan.step_in[st.first_in];
            if (in < 0) return nullptr;
            const Slot& src = plan.slots[size_t(in)];
            if (src.kind == Slot::kConst) return src.data;
            if (src.kind == Slot::kInput && src.offset < input_value.size()) return input_value[src.offset];
            return nullptr;
        }
    }
    return nullptr;
}

// ---------------------------------------------------------------- If

class IfKernel : public Kernel {
public:
    // A branch that cannot compile for these shapes has no session; `why` says why, and taking
    // it at run time is an error (the other branch still runs).
    IfKernel(DType cond_t, Body then_b, Body else_b, int nout, std::string why[2])
        : cond_t_(cond_t), b_{std::move(then_b), std::move(else_b)}, why_{why[0], why[1]} {
        for (auto& v : out_bound_) v.assign(size_t(nout), nullptr);
    }
    Status run(const void* const* in, void* const* out) const override {
        const int which = read_flag(cond_t_, in[0]) ? 0 : 1;
        const Body& b = b_[which];
        if (!b.sess) [[unlikely]]
            return invalid(why_[which]);
        b.bind_captures(in);
        std::vector<void*>& bound = out_bound_[which];
        for (size_t k = 0; k < bound.size(); ++k)
            if (out[k] != bound[k]) {
                b.sess->bind_output(k, out[k]);  // nullptr (omitted output) restores its own buffer
                bound[k] = out[k];
            }
        return b.sess->run();
    }

private:
    DType cond_t_;
    Body b_[2];
    std::string why_[2];
    mutable std::vector<void*> out_bound_[2];  // see the file comment
};

Status prep_If(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input 0 (cond) is missing");
    JIFFY_RETURN_IF_ERROR(expect_flag(ctx, 0, "cond"));
    const Graph* g[2] = {graph_attr(ctx, "then_branch"), graph_attr(ctx, "else_branch")};
    const char* names[2] = {"then_branch", "else_branch"};
    Body b[2];
    for (int i = 0; i < 2; ++i) {
        if (!g[i]) return ctx.fail("missing graph attribute '", names[i], "'");
        if (!g[i]->inputs.empty())
            return ctx.fail(names[i], " has ", g[i]->inputs.size(), " inputs; If branches take none");
        if (g[i]->outputs.size() != size_t(ctx.num_outputs()))
            return ctx.fail(names[i], " has ", g[i]->outputs.size(), " outputs but the node has ",
                            ctx.num_outputs());
    }
    // (A condition the caller can give, e.g. a sample-rate input, is frozen by the compiler before
    // this runs and the chosen branch inlined; here the condition is only known at run time.)
    // A branch that cannot run with these shapes (Silero's 8 kHz branch given 16 kHz frames) is
    // kept as a run-time error, so the other branch still serves.
    std::string why[2];
    Status st[2];
    for (int i = 0; i < 2; ++i) {
        st[i] = b[i].init(ctx, *g[i], {});
        if (!st[i].ok() && st[i].code() != Code::kInvalid && st[i].code() != Code::kUnsupported) return st[i];
        if (!st[i].ok()) {
            why[i] = st[i].message() + " (this branch was taken at run time)";
            b[i].sess.reset();
        }
    }
    if (!st[0].ok() && !st[1].ok()) return st[0];
    for (int k = 0; k < ctx.num_outputs(); ++k) {
        const IoDesc& t = b[st[0].ok() ? 0 : 1].out(size_t(k));
        const IoDesc& e = b[st[1].ok() ? 1 : 0].out(size_t(k));
        if (t.dtype != e.dtype || t.shape != e.shape)
            return ctx.fail_unsupported("output ", k, " is ", info_str(t.dtype, t.shape), " in then_branch but ",
                                        info_str(e.dtype, e.shape), " in else_branch, and the condition '",
                                        ctx.input(0).name, "' is only known at run time; Jiffy needs static "
                                        "shapes (both branches must give the same dtype and shape)");
        if (ctx.has_output(k)) JIFFY_RETURN_IF_ERROR(ctx.set_output(k, t.dtype, t.shape));
    }
    ctx.set_kernel(std::make_unique<IfKernel>(ctx.in_dtype(0), std::move(b[0]), std::move(b[1]),
                                              ctx.num_outputs(), why));
    return {};
}

// ---------------------------------------------------------------- Loop

// Bodies that need the iteration number at compile time (e.g. Slice(x, i, i + 1)) are compiled
// once per iteration ("unrolled") when the trip count is a small constant.
constexpr int64_t kMaxUnroll = 256;

struct LoopConfig {
    int n_carried = 0, n_scan = 0, n_out = 0;
    bool has_m = false, has_cond = false;
    bool unrolled = false;  // bodies[i] runs iteration i
    DType cond_t = DType::kBool;
    int64_t trips = -1;  // known trip count when there are scan outputs
    std::vector<size_t> carried_bytes, scan_bytes;
};

class LoopKernel : public Kernel {
public:
    LoopKernel(LoopConfig c, std::vector<Body> bodies) : c_(std::move(c)), bodies_(std::move(bodies)) {
        // Loop-carried state lives in one kernel-owned buffer that every body reads in place.
        size_t total = 0;
        for (size_t nb : c_.carried_bytes) {
            state_off_.push_back(total);
            total += (nb + kAlign - 1) / kAlign * kAlign;
        }
        state_ = aligned_buffer(total);
        for (Body& b : bodies_)
            for (int i = 0; i < c_.n_carried; ++i) b.sess->bind_input(size_t(2 + i), state_.get() + state_off_[size_t(i)]);
    }
    Status run(const void* const* in, void* const* out) const override {
        const LoopConfig& c = c_;
        int64_t max_trips = c.has_m ? *static_cast<const int64_t*>(in[0]) : std::numeric_limits<int64_t>::max();
        if (c.unrolled) max_trips = std::min<int64_t>(max_trips, int64_t(bodies_.size()));
        bool cond = c.has_cond ? read_flag(c.cond_t, in[1]) : true;
        uint8_t* state = state_.get();
        for (int i = 0; i < c.n_carried; ++i)
            if (c.carried_bytes[size_t(i)])
                std::memcpy(state + state_off_[size_t(i)], in[2 + i], c.carried_bytes[size_t(i)]);
        int64_t it = 0;
        for (; it < max_trips && cond; ++it) {
            if (c.n_scan > 0 && it >= c.trips) break;
            const Body& b = bodies_[c.unrolled ? size_t(it) : 0];
            Session& s = *b.sess;
            b.bind_captures(in);
            *static_cast<int64_t*>(s.input_data(0)) = it;
            *static_cast<bool*>(s.input_data(1)) = true;
            JIFFY_RETURN_IF_ERROR(s.run());
            cond = *static_cast<const bool*>(s.output_data(0));
            for (int i = 0; i < c.n_carried; ++i)
                if (c.carried_bytes[size_t(i)])
                    std::memcpy(state + state_off_[size_t(i)], s.output_data(size_t(1 + i)), c.carried_bytes[size_t(i)]);
            for (int k = 0; k < c.n_scan; ++k) {
                const int o = c.n_carried + k;
                const size_t nb = c.scan_bytes[size_t(k)];
                if (o < c.n_out && out[o] && nb)
                    std::memcpy(static_cast<uint8_t*>(out[o]) + size_t(it) * nb,
                                s.output_data(size_t(1 + c.n_carried + k)), nb);
            }
        }
        if (c.n_scan > 0 && it != c.trips)
            return invalid("Loop: ran ", it, " iterations but its scan outputs were sized at compile time for ",
                           c.trips);
        for (int i = 0; i < c.n_carried && i < c.n_out; ++i)
            if (out[i] && c.carried_bytes[size_t(i)])
                std::memcpy(out[i], state + state_off_[size_t(i)], c.carried_bytes[size_t(i)]);
        return {};
    }

private:
    LoopConfig c_;
    std::vector<Body> bodies_;
    std::shared_ptr<uint8_t> state_;  // written at run (see the file comment)
    std::vector<size_t> state_off_;
};

Status prep_Loop(OpContext& ctx) {
    const Graph* g = graph_attr(ctx, "body");
    if (!g) return ctx.fail("missing graph attribute 'body'");
    if (ctx.num_inputs() < 2)
        return ctx.fail("has ", ctx.num_inputs(), " inputs; expected at least 2 (M, cond; either may be empty)");
    LoopConfig c;
    c.n_carried = ctx.num_inputs() - 2;
    const size_t N = size_t(c.n_carried);
    if (g->inputs.size() != N + 2)
        return ctx.fail("body has ", g->inputs.size(), " inputs; expected ", N + 2,
                        " (iteration number, condition and ", N, " loop-carried values)");
    if (g->outputs.size() < N + 1)
        return ctx.fail("body has ", g->outputs.size(), " outputs; expected at least ", N + 1,
                        " (condition and ", N, " loop-carried values)");
    c.n_scan = int(g->outputs.size() - 1 - N);
    c.n_out = ctx.num_outputs();
    if (size_t(ctx.num_outputs()) > N + size_t(c.n_scan))
        return ctx.fail("has ", ctx.num_outputs(), " outputs; the body gives ", N + size_t(c.n_scan),
                        " (loop-carried values and scan outputs)");
    c.has_m = ctx.has_input(0);
    c.has_cond = ctx.has_input(1);
    if (c.has_m) {
        if (ctx.in_dtype(0) != DType::kI64) return ctx.fail("M must be int64, got ", dtype_name(ctx.in_dtype(0)));
        if (shape_numel(ctx.in_shape(0)) != 1)
            return ctx.fail("M must have one element, got shape ", shape_str(ctx.in_shape(0)));
    }
    if (c.has_cond) {
        JIFFY_RETURN_IF_ERROR(expect_flag(ctx, 1, "cond"));
        c.cond_t = ctx.in_dtype(1);
    }
    // The body only runs while the condition is true, so its condition input is the constant true.
    auto truth = std::make_shared<Tensor>(DType::kBool, Shape{});
    *truth->as<bool>() = true;
    std::vector<TensorInfo> formal(N + 2);
    formal[0].present = true;
    formal[0].dtype = DType::kI64;
    formal[1].present = true;
    formal[1].dtype = DType::kBool;
    formal[1].constant = truth;
    for (size_t i = 0; i < N; ++i) {
        if (!ctx.has_input(int(2 + i))) return ctx.fail("loop-carried input ", i, " is missing");
        formal[2 + i].present = true;
        formal[2 + i].dtype = ctx.in_dtype(int(2 + i));
        formal[2 + i].shape = ctx.in_shape(int(2 + i));  // not constant: it changes per iteration
    }
    int init_cond = 1;  // -1: known at run time only
    if (c.has_cond) init_cond = ctx.in_const(1) ? (ctx.in_const(1)->get_f64(0) != 0 ? 1 : 0) : -1;

    // Checks a compiled body; returns its condition output: 1 / 0 when constant, -1 when data-dependent.
    auto check_body = [&](const Body& b, int* cond_out) -> Status {
        const IoDesc& co = b.out(0);
        if (co.dtype != DType::kBool || shape_numel(co.shape) != 1)
            return ctx.fail("body output 0 (condition) must be a one-element bool, got ", info_str(co.dtype, co.shape));
        for (size_t i = 0; i < N; ++i) {
            const IoDesc& o = b.out(1 + i);
            if (o.dtype != formal[2 + i].dtype || o.shape != formal[2 + i].shape)
                return ctx.fail_unsupported("loop-carried value ", i, " ('", g->values[size_t(g->inputs[2 + i])].name,
                                            "') enters the body as ", info_str(formal[2 + i].dtype, formal[2 + i].shape),
                                            " but leaves it as ", info_str(o.dtype, o.shape),
                                            "; Jiffy needs loop-carried values to keep their dtype and shape");
        }
        std::vector<const void*> known(b.plan->inputs.size(), nullptr);
        known[1] = truth->data();
        const void* cv = plan_const_output(*b.plan, 0, known);
        *cond_out = cv ? (*static_cast<const bool*>(cv) ? 1 : 0) : -1;
        return {};
    };

    std::vector<Body> bodies;
    std::vector<int> cond_outs;
    {
        Body b;
        Status st = b.init(ctx, *g, formal);
        const std::string& iter_name = g->values[size_t(g->inputs[0])].name;
        if (st.ok()) {
            bodies.push_back(std::move(b));
        } else if (st.code() == Code::kNeedValue && st.detail() == iter_name) {
            // The body needs the iteration number at compile time: unroll a constant trip count.
            if (!c.has_m)
                return ctx.fail_unsupported("the body needs the iteration number at compile time and the loop has "
                                            "no trip count M to unroll it (", st.message(), ")");
            if (!ctx.in_const(0)) return ctx.need_value(0);
            if (init_cond < 0) return ctx.need_value(1);
            const int64_t m = init_cond == 0 ? 0 : std::max<int64_t>(0, ctx.in_const(0)->get_i64(0));
            if (m > kMaxUnroll)
                return ctx.fail_unsupported("the body needs the iteration number at compile time, so Jiffy compiles "
                                            "it once per iteration, but the trip count ", m, " is over the limit of ",
                                            kMaxUnroll, " (", st.message(), ")");
            c.unrolled = true;
            for (int64_t i = 0; i < std::max<int64_t>(m, 1); ++i) {
                auto iv = std::make_shared<Tensor>(DType::kI64, Shape{});
                *iv->as<int64_t>() = i;
                formal[0].constant = iv;
                Body bi;
                JIFFY_RETURN_IF_ERROR(bi.init(ctx, *g, formal));
                int co = -1;
                JIFFY_RETURN_IF_ERROR(check_body(bi, &co));
                bodies.push_back(std::move(bi));
                cond_outs.push_back(co);
                if (co == 0) break;  // the loop stops after this iteration
            }
            formal[0].constant.reset();
        } else {
            return st;
        }
    }
    if (!c.unrolled) {
        int co = -1;
        JIFFY_RETURN_IF_ERROR(check_body(bodies[0], &co));
        cond_outs.push_back(co);
    }
    for (size_t i = 0; i < N; ++i) c.carried_bytes.push_back(bodies[0].out(1 + i).nbytes);
    if (!c.has_m && !c.unrolled && cond_outs[0] == 1 && init_cond != 0)
        return ctx.fail("the loop never terminates: it has no trip count M and its condition is always true");

    // Scan outputs are stacked along a new first axis, whose length must be known now.
    if (c.n_scan > 0) {
        if (c.has_m && !ctx.in_const(0)) return ctx.need_value(0);
        if (init_cond < 0) return ctx.need_value(1);
        const int64_t m = c.has_m ? std::max<int64_t>(0, ctx.in_const(0)->get_i64(0))
                                  : std::numeric_limits<int64_t>::max();
        const char* dyn = "the loop has scan outputs but its condition is computed at run time, so their length "
                          "would be data-dependent; Jiffy needs static shapes";
        if (init_cond == 0) {
            c.trips = 0;
        } else if (c.unrolled) {
            c.trips = std::min<int64_t>(m, int64_t(bodies.size()));
            for (int64_t i = 0; i < c.trips; ++i)
                if (cond_outs[size_t(i)] < 0 && i + 1 < m) return ctx.fail_unsupported(dyn);
        } else if (cond_outs[0] == 0) {
            c.trips = std::min<int64_t>(m, 1);
        } else if (cond_outs[0] == 1) {
            c.trips = m;
        } else {
            if (m <= 1) c.trips = m;  // at most one iteration runs whatever the condition says
            else return ctx.fail_unsupported(dyn);
        }
    }
    for (size_t i = 0; i < N && i < size_t(ctx.num_outputs()); ++i)
        if (ctx.has_output(int(i))) JIFFY_RETURN_IF_ERROR(ctx.set_output(int(i), formal[2 + i].dtype, formal[2 + i].shape));
    for (int k = 0; k < c.n_scan; ++k) {
        const IoDesc& o = bodies[0].out(1 + N + size_t(k));
        for (const Body& b : bodies) {
            const IoDesc& ob = b.out(1 + N + size_t(k));
            if (ob.dtype != o.dtype || ob.shape != o.shape)
                return ctx.fail_unsupported("scan output ", k, " is ", info_str(o.dtype, o.shape),
                                            " in the first iteration but ", info_str(ob.dtype, ob.shape),
                                            " in a later one; Jiffy needs static shapes");
        }
        c.scan_bytes.push_back(o.nbytes);
        const int oi = int(N) + k;
        if (!ctx.has_output(oi)) continue;
        Shape s{c.trips};
        s.insert(s.end(), o.shape.begin(), o.shape.end());
        JIFFY_RETURN_IF_ERROR(ctx.set_output(oi, o.dtype, s));
    }
    ctx.set_kernel(std::make_unique<LoopKernel>(std::move(c), std::move(bodies)));
    return {};
}

// ---------------------------------------------------------------- Scan

// Slice t of a tensor viewed as [batch][outer][len][inner bytes] (batch stride in bytes).
struct SliceDesc {
    int64_t outer = 1;
    size_t inner = 0;       // bytes
    size_t batch_stride = 0;  // bytes
};

struct ScanConfig {
    bool v8 = false;  // opset 8: sequence_lens input, batch axis 0, scan axis 1
    int n_state = 0, n_in = 0, n_scan = 0, n_out = 0, first = 0;  // first: index of the first state input
    int64_t batch = 1, len = 0;
    std::vector<size_t> state_bytes;
    std::vector<SliceDesc> in_desc, out_desc;
    std::vector<bool> in_rev, out_rev;
    DType lens_t = DType::kI64;
};

class ScanKernel : public Kernel {
public:
    ScanKernel(ScanConfig c, Body body) : c_(std::move(c)), body_(std::move(body)) {}
    Status run(const void* const* in, void* const* out) const override {
        const ScanConfig& c = c_;
        Session& s = *body_.sess;
        body_.bind_captures(in);
        const void* lens = c.v8 ? in[0] : nullptr;
        auto len_of = [&](int64_t b) -> int64_t {
            if (!lens) return c.len;
            return c.lens_t == DType::kI32 ? int64_t(static_cast<const int32_t*>(lens)[b])
                                           : static_cast<const int64_t*>(lens)[b];
        };
        if (lens) {
            for (int64_t b = 0; b < c.batch; ++b)
                if (len_of(b) < 0 || len_of(b) > c.len)
                    return invalid("Scan: sequence_lens[", b, "] = ", len_of(b), " is outside [0, ", c.len, "]");
            for (int k = 0; k < c.n_scan; ++k) {
                const int o = c.n_state + k;
                if (o < c.n_out && out[o])
                    std::memset(out[o], 0, size_t(c.batch) * c.out_desc[size_t(k)].batch_stride);
            }
        }
        for (int64_t b = 0; b < c.batch; ++b) {
            for (int i = 0; i < c.n_state; ++i) {
                const size_t nb = c.state_bytes[size_t(i)];
                if (nb) std::memcpy(s.input_data(size_t(i)), static_cast<const uint8_t*>(in[c.first + i]) + size_t(b) * nb, nb);
            }
            const int64_t len = len_of(b);
            for (int64_t t = 0; t < len; ++t) {
                for (int j = 0; j < c.n_in; ++j) {
                    const SliceDesc& d = c.in_desc[size_t(j)];
                    const int64_t idx = c.in_rev[size_t(j)] ? len - 1 - t : t;
                    const uint8_t* src = static_cast<const uint8_t*>(in[c.first + c.n_state + j]) + size_t(b) * d.batch_stride;
                    uint8_t* dst = static_cast<uint8_t*>(s.input_data(size_t(c.n_state + j)));
                    for (int64_t o = 0; o < d.outer; ++o)
                        std::memcpy(dst + size_t(o) * d.inner, src + size_t(o * c.len + idx) * d.inner, d.inner);
                }
                JIFFY_RETURN_IF_ERROR(s.run());
                for (int i = 0; i < c.n_state; ++i)
                    if (c.state_bytes[size_t(i)])
                        std::memcpy(s.input_data(size_t(i)), s.output_data(size_t(i)), c.state_bytes[size_t(i)]);
                for (int k = 0; k < c.n_scan; ++k) {
                    const int o = c.n_state + k;
                    if (o >= c.n_out || !out[o]) continue;
                    const SliceDesc& d = c.out_desc[size_t(k)];
                    const int64_t idx = c.out_rev[size_t(k)] ? len - 1 - t : t;
                    const uint8_t* src = static_cast<const uint8_t*>(s.output_data(size_t(c.n_state + k)));
                    uint8_t* dst = static_cast<uint8_t*>(out[o]) + size_t(b) * d.batch_stride;
                    for (int64_t q = 0; q < d.outer; ++q)
                        std::memcpy(dst + size_t(q * c.len + idx) * d.inner, src + size_t(q) * d.inner, d.inner);
                }
            }
            for (int i = 0; i < c.n_state && i < c.n_out; ++i) {
                const size_t nb = c.state_bytes[size_t(i)];
                if (out[i] && nb) std::memcpy(static_cast<uint8_t*>(out[i]) + size_t(b) * nb, s.input_data(size_t(i)), nb);
            }
        }
        return {};
    }

private:
    ScanConfig c_;
    Body body_;
};

int64_t prod(const Shape& s, size_t from, size_t to) {
    int64_t p = 1;
    for (size_t i = from; i < to; ++i) p *= s[i];
    return p;
}

Status read_flags(const OpContext& ctx, const char* name, size_t n, std::vector<bool>* out) {
    std::vector<int64_t> v = ctx.attr_ints(name, std::vector<int64_t>(n, 0));
    if (v.size() != n) return ctx.fail("'", name, "' has ", v.size(), " entries; expected ", n);
    out->clear();
    for (int64_t x : v) {
        if (x != 0 && x != 1) return ctx.fail("'", name, "' entries must be 0 or 1, got ", x);
        out->push_back(x == 1);
    }
    return {};
}

Status prep_Scan(OpContext& ctx) {
    const Graph* g = graph_attr(ctx, "body");
    if (!g) return ctx.fail("missing graph attribute 'body'");
    if (!ctx.has_attr("num_scan_inputs")) return ctx.fail("missing attribute 'num_scan_inputs'");
    ScanConfig c;
    c.v8 = ctx.opset() < 9;
    c.first = c.v8 ? 1 : 0;
    const int64_t m = ctx.attr_int("num_scan_inputs", 0);
    if (m < 1 || m > ctx.num_inputs() - c.first)
        return ctx.fail("'num_scan_inputs' = ", m, " must be in [1, ", ctx.num_inputs() - c.first, "]");
    c.n_in = int(m);
    c.n_state = ctx.num_inputs() - c.first - c.n_in;
    const size_t N = size_t(c.n_state), M = size_t(c.n_in);
    if (g->inputs.size() != N + M)
        return ctx.fail("body has ", g->inputs.size(), " inputs; expected ", N + M, " (", N, " state values and ", M,
                        " scan slices)");
    if (g->outputs.size() < N)
        return ctx.fail("body has ", g->outputs.size(), " outputs; expected at least ", N, " (the state values)");
    c.n_scan = int(g->outputs.size() - N);
    c.n_out = ctx.num_outputs();
    if (size_t(c.n_out) > g->outputs.size())
        return ctx.fail("has ", c.n_out, " outputs; the body gives ", g->outputs.size());
    for (int i = c.first; i < ctx.num_inputs(); ++i)
        if (!ctx.has_input(i)) return ctx.fail("input ", i, " is missing");

    std::vector<int64_t> in_axes(M, 0), out_axes(size_t(c.n_scan), 0);
    if (c.v8) {
        JIFFY_RETURN_IF_ERROR(read_flags(ctx, "directions", M, &c.in_rev));
        c.out_rev.assign(size_t(c.n_scan), false);
        in_axes.assign(M, 1);
        if (ctx.has_input(0)) {
            if (ctx.in_dtype(0) != DType::kI64 && ctx.in_dtype(0) != DType::kI32)
                return ctx.fail("sequence_lens must be int64, got ", dtype_name(ctx.in_dtype(0)));
            c.lens_t = ctx.in_dtype(0);
        }
    } else {
        JIFFY_RETURN_IF_ERROR(read_flags(ctx, "scan_input_directions", M, &c.in_rev));
        JIFFY_RETURN_IF_ERROR(read_flags(ctx, "scan_output_directions", size_t(c.n_scan), &c.out_rev));
        in_axes = ctx.attr_ints("scan_input_axes", in_axes);
        out_axes = ctx.attr_ints("scan_output_axes", out_axes);
        if (in_axes.size() != M) return ctx.fail("'scan_input_axes' has ", in_axes.size(), " entries; expected ", M);
        if (out_axes.size() != size_t(c.n_scan))
            return ctx.fail("'scan_output_axes' has ", out_axes.size(), " entries; expected ", c.n_scan);
    }

    std::vector<TensorInfo> formal(N + M);
    // States.
    for (size_t i = 0; i < N; ++i) {
        const TensorInfo& t = ctx.input(c.first + int(i));
        Shape s = t.shape;
        if (c.v8) {
            if (s.empty()) return ctx.fail("state input ", i, " must have a batch axis, got a scalar");
            if (i == 0) c.batch = s[0];
            if (s[0] != c.batch)
                return ctx.fail("state input ", i, " has batch ", s[0], "; expected ", c.batch);
            s.erase(s.begin());
        }
        formal[i].present = true;
        formal[i].dtype = t.dtype;
        formal[i].shape = s;
    }
    // Scan inputs.
    c.len = -1;
    for (size_t j = 0; j < M; ++j) {
        const TensorInfo& t = ctx.input(c.first + int(N + j));
        const Shape& s = t.shape;
        int64_t ax = 0;
        if (c.v8) {
            if (s.size() < 2) return ctx.fail("scan input ", j, " must have batch and sequence axes, got shape ", shape_str(s));
            if (N == 0 && j == 0) c.batch = s[0];
            if (s[0] != c.batch) return ctx.fail("scan input ", j, " has batch ", s[0], "; expected ", c.batch);
            ax = 1;
        } else if (!normalize_axis(in_axes[j], int64_t(s.size()), &ax)) {
            return ctx.fail("scan_input_axes[", j, "] = ", in_axes[j], " is out of range for shape ", shape_str(s));
        }
        if (c.len < 0) c.len = s[size_t(ax)];
        if (s[size_t(ax)] != c.len)
            return ctx.fail("scan input ", j, " has length ", s[size_t(ax)], " on its scan axis; expected ", c.len);
        const size_t es = dtype_size(t.dtype);
        SliceDesc d;
        if (c.v8) {
            d.outer = 1;
            d.inner = size_t(prod(s, 2, s.size())) * es;
            d.batch_stride = size_t(c.len) * d.inner;
        } else {
            d.outer = prod(s, 0, size_t(ax));
            d.inner = size_t(prod(s, size_t(ax) + 1, s.size())) * es;
        }
        c.in_desc.push_back(d);
        Shape fs = s;
        fs.erase(fs.begin() + ax);
        if (c.v8) fs.erase(fs.begin());
        formal[N + j].present = true;
        formal[N + j].dtype = t.dtype;
        formal[N + j].shape = fs;
    }
    if (c.v8 && ctx.has_input(0) && ctx.in_shape(0) != Shape{c.batch})
        return ctx.fail("sequence_lens has shape ", shape_str(ctx.in_shape(0)), "; expected ", shape_str(Shape{c.batch}));

    Body body;
    JIFFY_RETURN_IF_ERROR(body.init(ctx, *g, formal));
    for (size_t i = 0; i < N; ++i) {
        const IoDesc& o = body.out(i);
        if (o.dtype != formal[i].dtype || o.shape != formal[i].shape)
            return ctx.fail_unsupported("state value ", i, " enters the body as ", info_str(formal[i].dtype, formal[i].shape),
                                        " but leaves it as ", info_str(o.dtype, o.shape),
                                        "; Jiffy needs state values to keep their dtype and shape");
        c.state_bytes.push_back(o.nbytes);
        if (ctx.has_output(int(i))) {
            Shape s = o.shape;
            if (c.v8) s.insert(s.begin(), c.batch);
            JIFFY_RETURN_IF_ERROR(ctx.set_output(int(i), o.dtype, s));
        }
    }
    for (int k = 0; k < c.n_scan; ++k) {
        const IoDesc& o = body.out(N + size_t(k));
        const Shape& ps = o.shape;
        const size_t es = dtype_size(o.dtype);
        SliceDesc d;
        Shape s;
        if (c.v8) {
            d.outer = 1;
            d.inner = size_t(shape_numel(ps)) * es;
            d.batch_stride = size_t(c.len) * d.inner;
            s = ps;
            s.insert(s.begin(), c.len);
            s.insert(s.begin(), c.batch);
        } else {
            int64_t ax = 0;
            if (!normalize_axis(out_axes[size_t(k)], int64_t(ps.size()) + 1, &ax))
                return ctx.fail("scan_output_axes[", k, "] = ", out_axes[size_t(k)], " is out of range for rank ",
                                ps.size() + 1);
            d.outer = prod(ps, 0, size_t(ax));
            d.inner = size_t(prod(ps, size_t(ax), ps.size())) * es;
            d.batch_stride = size_t(d.outer) * size_t(c.len) * d.inner;
            s = ps;
            s.insert(s.begin() + ax, c.len);
        }
        c.out_desc.push_back(d);
        if (ctx.has_output(int(N) + k)) JIFFY_RETURN_IF_ERROR(ctx.set_output(int(N) + k, o.dtype, s));
    }
    ctx.set_kernel(std::make_unique<ScanKernel>(std::move(c), std::move(body)));
    return {};
}

}  // namespace

void register_control_ops(OpRegistry& r) {
    r.add("If", prep_If);
    r.add("Loop", prep_Loop);
    r.add("Scan", prep_Scan);
}

}  // namespace jiffy
