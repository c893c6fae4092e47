#include "agent/agent.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace jiffy::agent {

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ---------------------------------------------------------------- Stage / Pipeline

void Stage::alloc_out(std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    out_buf_.assign(size_t(n > 0 ? n : 1), 0.0f);
    out_.data = out_buf_.data();
    out_.shape = std::move(shape);
    out_.numel = n;
}

Status Stage::value(const std::string& sub, int index, const float** p) const {
    if (!sub.empty()) return invalid("stage '", name, "' (", type, ") has no value '", sub, "'");
    int i = index < 0 ? 0 : index;
    if (i >= out_.numel) return invalid("index ", i, " is out of range: stage '", name, "' outputs ", out_.numel, " values");
    *p = out_.data + i;
    return {};
}

Stage* Pipeline::find(const std::string& n) const {
    for (size_t i = 0; i < prepared && i < stages.size(); ++i)
        if (stages[i]->name == n) return stages[i].get();
    return nullptr;
}

Status Pipeline::resolve(const std::string& name, int index, const float** p) const {
    // The longest prefix (at a '.') naming a stage, a source, or "input".
    std::string head = name, sub;
    for (;;) {
        if (Stage* s = find(head)) return s->value(sub, index, p);
        for (size_t k = 0; k < sources.size(); ++k) {
            if (sources[k]->name != head) continue;
            if (sub.empty()) {
                int i = index < 0 ? 0 : index;
                if (i >= input_.numel) return invalid("index ", i, " is out of range: source '", head, "' frames hold ", input_.numel, " values");
                *p = input_.data + i;
                return {};
            }
            std::vector<std::string> ch = sources[k]->channels();
            for (size_t c = 0; c < ch.size(); ++c)
                if (ch[c] == sub) {  // the newest row's column
                    if (index > 0) return invalid("'", name, "' is one value; it takes no index");
                    *p = input_.data + (input_.numel - int64_t(ch.size()) + int64_t(c));
                    return {};
                }
            std::string list;
            for (const auto& c : ch) list += (list.empty() ? "" : ", ") + c;
            return invalid("source '", head, "' has no channel '", sub, "'", list.empty() ? "" : " (channels: " + list + ")");
        }
        if (head == "input" && sub.empty()) {
            int i = index < 0 ? 0 : index;
            if (i >= input_.numel) return invalid("index ", i, " is out of range: input frames hold ", input_.numel, " values");
            *p = input_.data + i;
            return {};
        }
        size_t dot = head.rfind('.');
        if (dot == std::string::npos) break;
        sub = head.substr(dot + 1) + (sub.empty() ? "" : "." + sub);
        head = head.substr(0, dot);
    }
    std::string known;
    for (size_t i = 0; i < prepared && i < stages.size(); ++i) known += (known.empty() ? "" : ", ") + stages[i]->name;
    for (const auto& s : sources) known += (known.empty() ? "" : ", ") + s->name;
    return invalid("unknown value '", name, "' (names before this point: ", known.empty() ? "none" : known, ")");
}

// ---------------------------------------------------------------- Agent

class Agent::QueueSink : public FrameSink {
public:
    explicit QueueSink(Agent* a) : a_(a) {}
    void push(const float* data, const FrameMeta& m) override {
        FrameMeta mm = m;
        mm.enqueue_us = now_ns() / 1000;
        if (mm.event_us == 0) mm.event_us = mm.enqueue_us;
        a_->h_source.record_ns((mm.enqueue_us - mm.event_us) * 1000);
        if (!a_->inline_exec_) {
            a_->queue_->push(data, mm);
            return;
        }
        // execution: inline — run the stages here, on the source's delivering thread.
        if (a_->stop_.load(std::memory_order_relaxed)) return;
        if (!a_->rt_applied_) {
            a_->apply_rt();
            a_->rt_applied_ = true;
        }
        std::vector<float>& in = a_->pipe_.input_buf_;
        mm.n = mm.n < in.size() ? mm.n : in.size();
        std::memcpy(in.data(), data, mm.n * sizeof(float));
        a_->process(mm, a_->opt_.deadline_us > 0 ? mm.event_us * 1000 + a_->opt_.deadline_us * 1000 : 0);
    }
    void bad_input(const std::string& what) override {
        a_->bad_input.fetch_add(1, std::memory_order_relaxed);
        std::lock_guard<std::mutex> g(mu_);
        if (last_.empty() || ++n_ % 1000 == 0) std::fprintf(stderr, "jiffy agent: warning: %s: %s\n", a_->opt_.name.c_str(), what.c_str());
        last_ = what;
    }
    std::string last() {
        std::lock_guard<std::mutex> g(mu_);
        return last_;
    }

private:
    Agent* a_;
    std::mutex mu_;
    std::string last_;
    uint64_t n_ = 0;
};

std::string Agent::last_bad_input() const { return qsink_ ? qsink_->last() : ""; }

Agent::~Agent() {
    stop();
    join();
}

Status Agent::create(AgentOptions opt, Pipeline pipe, std::vector<std::unique_ptr<Sink>> sinks,
                     std::vector<std::pair<std::string, std::string>> emit, std::unique_ptr<Agent>* out) {
    std::unique_ptr<Agent> a(new Agent());
    a->opt_ = std::move(opt);
    a->pipe_ = std::move(pipe);
    a->sinks_ = std::move(sinks);
    Pipeline& p = a->pipe_;
    const std::string who = "agent '" + a->opt_.name + "'";

    // The input buffer: the largest frame of any source.
    size_t frame = 0;
    std::vector<int64_t> shape;
    for (const auto& s : p.sources) {
        if (s->frame_size() > frame) {
            frame = s->frame_size();
            shape = s->frame_shape();
        }
    }
    for (const auto& s : p.sources)
        if (s->frame_size() != frame)
            return invalid(who, ": sources deliver frames of different sizes (", s->name, ": ", s->frame_size(), ", others ",
                           frame, "); give them the same chunk");
    if (p.sources.empty()) {
        if (a->opt_.period_us <= 0) return invalid(who, ": has no sources; give it a source or a trigger period");
        frame = 1;
        shape = {1, 1};
    }
    p.input_buf_.assign(frame, 0.0f);
    p.input_.data = p.input_buf_.data();
    p.input_.shape = shape;
    p.input_.numel = int64_t(frame);

    // Prepare the stages in order; each sees the previous one's output.
    const Port* in = &p.input_;
    for (size_t i = 0; i < p.stages.size(); ++i) {
        Stage& s = *p.stages[i];
        p.prepared = i;
        Status st = s.prepare(*in, p);
        if (!st.ok()) return st.prefix(s.where + who + " stage '" + s.name + "': ");
        if (s.alt) {
            s.alt->name = s.name + ".fallback";
            st = s.alt->prepare(*in, p);
            if (!st.ok()) return st.prefix(s.where + who + " stage '" + s.name + "' fallback: ");
            if (s.alt->out().numel != s.out().numel)
                return invalid(who, " stage '", s.name, "': the fallback outputs ", s.alt->out().numel, " values, the stage ",
                               s.out().numel, "; they must match");
        }
        in = &s.out();
    }
    p.prepared = p.stages.size();

    if (emit.empty()) {  // default: the values the rules read
        for (const auto& s : p.stages)
            for (const auto& n : s->emit_defaults()) {
                bool seen = false;
                for (const auto& e : emit) seen |= e.first == n;
                if (!seen) emit.emplace_back(n, n);
            }
    }
    for (auto& [n, e] : emit) {
        Expr x;
        Status st = Expr::compile(e, p.resolver(), &x);
        if (!st.ok()) return st.prefix(who + " emit '" + n + "': ");
        a->emit_names_.push_back(n);
        a->emit_exprs_.push_back(std::move(x));
    }
    a->emit_values_.assign(a->emit_names_.size(), 0.0);
    a->tail_p99_us_.assign(p.stages.size() + 1, 0.0);
    a->json_.reserve(4096);

    for (auto& s : a->sinks_) s->share_with(p.sources);
    bool one_pull = p.sources.size() == 1 && p.sources[0]->can_pull();
    a->inline_source_ = one_pull;
    bool want_inline = a->opt_.exec == AgentOptions::kInline ||
                       (a->opt_.exec == AgentOptions::kAuto && a->opt_.period_us == 0 && p.sources.size() == 1 && p.sources[0]->inline_ok());
    if (want_inline && !one_pull) {
        if (a->opt_.period_us > 0) return invalid(who, ": 'execution: inline' needs 'trigger: event'");
        if (p.sources.size() != 1) return invalid(who, ": 'execution: inline' needs exactly one source (it has ", p.sources.size(), ")");
        a->inline_exec_ = true;
        a->qsink_ = std::make_unique<QueueSink>(a.get());
    } else if (!one_pull && !p.sources.empty()) {
        a->queue_ = std::make_unique<InputQueue>(a->opt_.queue_capacity, frame);
        a->qsink_ = std::make_unique<QueueSink>(a.get());
    }
    if (a->opt_.period_us > 0 && a->opt_.deadline_us == 0) a->opt_.deadline_us = a->opt_.period_us;
    *out = std::move(a);
    return {};
}

void Agent::stop() {
    stop_.store(true);
    if (queue_) queue_->close();
}

Status Agent::start() {
    for (auto& s : sinks_) {
        Status st = s->start();
        if (!st.ok()) return st.prefix("agent '" + opt_.name + "' sink '" + s->name + "': ");
    }
    auto now_sys = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
    unix_offset_us_ = now_sys - now_ns() / 1000;
    if (!inline_source_) {
        for (auto& src : pipe_.sources) {
            Source* s = src.get();
            sources_running_.fetch_add(1);
            source_threads_.emplace_back([this, s] {
                if (s->can_pull()) {  // a pull source that shares the agent: feed the queue
                    std::vector<float> buf(s->frame_size());
                    int64_t start = now_ns() / 1000;
                    while (!stop_.load()) {
                        FrameMeta m;
                        if (s->pull(buf.data(), &m, start) == Source::kEnd) break;
                        if (!opt_.fast && m.event_us > 0) {
                            int64_t wait = m.event_us * 1000 - now_ns();
                            if (wait > 0) {
                                timespec ts{time_t((m.event_us * 1000) / 1000000000), long((m.event_us * 1000) % 1000000000)};
                                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
                            }
                        }
                        if (opt_.fast) m.event_us = 0;
                        qsink_->push(buf.data(), m);
                    }
                } else {
                    s->run(qsink_.get(), stop_);
                }
                sources_running_.fetch_sub(1);
            });
        }
    }
    thread_ = std::thread([this] { thread_main(); });
    return {};
}

void Agent::join() {
    if (thread_.joinable()) thread_.join();
    for (auto& t : source_threads_)
        if (t.joinable()) t.join();
    source_threads_.clear();
    for (auto& s : sinks_) s->stop();
}

void Agent::apply_rt() {
    std::string warn;
    auto add = [&](const std::string& w) { warn += (warn.empty() ? "" : "; ") + w; };
    if (!opt_.rt.cpus.empty()) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c : opt_.rt.cpus) CPU_SET(c, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) add(std::string("cannot pin to the given cpus (") + std::strerror(errno) + ")");
    }
    if (opt_.rt.policy == RtOptions::kFifo) {
        sched_param sp{};
        sp.sched_priority = opt_.rt.priority;
        if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0)
            add(std::string("SCHED_FIFO not permitted (") + std::strerror(errno) + "), running SCHED_OTHER");
    } else if (opt_.rt.policy == RtOptions::kDeadline) {
        struct {
            uint32_t size, policy;
            uint64_t flags;
            int32_t nice;
            uint32_t priority;
            uint64_t runtime, deadline, period;
        } attr{};
        attr.size = sizeof attr;
        attr.policy = 6;  // SCHED_DEADLINE
        uint64_t period = uint64_t(opt_.period_us > 0 ? opt_.period_us : opt_.deadline_us) * 1000;
        uint64_t deadline = uint64_t(opt_.deadline_us > 0 ? opt_.deadline_us : opt_.period_us) * 1000;
        uint64_t runtime = uint64_t(opt_.budget_us > 0 ? opt_.budget_us : opt_.deadline_us / 2) * 1000;
        attr.runtime = runtime, attr.deadline = deadline, attr.period = period;
        if (period == 0 || runtime == 0) {
            add("SCHED_DEADLINE needs a period or deadline_us and a budget_us; running SCHED_OTHER");
        } else if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0) {
            add(std::string("SCHED_DEADLINE not permitted (") + std::strerror(errno) + "), running SCHED_OTHER");
        }
    }
    if (!warn.empty()) {
        warning_ = warn;
        std::fprintf(stderr, "jiffy agent: warning: agent '%s': %s\n", opt_.name.c_str(), warn.c_str());
    }
}

void Agent::sleep_until(int64_t t_ns) {
    int64_t early = t_ns - opt_.spin_us * 1000;
    if (early > now_ns()) {
        timespec ts{time_t(early / 1000000000), long(early % 1000000000)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR && !stop_.load()) {
        }
    }
    while (now_ns() < t_ns) cpu_relax();
}

void Agent::thread_main() {
    pthread_setname_np(pthread_self(), ("jf-" + opt_.name).substr(0, 15).c_str());
    if (inline_exec_) {  // the source's thread runs the stages; this one only waits for the end
        while (!stop_.load() && sources_running_.load() > 0) usleep(10000);
        done_.store(true);
        return;
    }
    apply_rt();
    float* in = pipe_.input_buf_.data();
    Source* pull_src = inline_source_ ? pipe_.sources[0].get() : nullptr;
    int64_t start_us = now_ns() / 1000;
    FrameMeta m;
    if (opt_.period_us > 0) {
        int64_t next = now_ns();
        while (!stop_.load()) {
            next += opt_.period_us * 1000;
            sleep_until(next);
            int64_t woke = now_ns();
            h_wake.record_ns(woke - next);
            m = FrameMeta{};
            if (pull_src) {
                int64_t t0 = now_ns();
                if (pull_src->pull(in, &m, start_us) == Source::kEnd) break;
                h_source.record_ns(now_ns() - t0);
            } else if (queue_) {
                skipped.fetch_add(queue_->discard_all_but_newest(), std::memory_order_relaxed);
                if (!queue_->pop(in, &m, 0)) {
                    if (sources_running_.load() == 0 && queue_->closed_and_empty()) break;
                    if (sources_running_.load() == 0 && queue_->size() == 0) break;
                    continue;  // nothing new this period
                }
                h_queue.record_ns(now_ns() - m.enqueue_us * 1000);
            }
            m.event_us = next / 1000;
            process(m, next + opt_.deadline_us * 1000);
        }
    } else if (pull_src) {
        while (!stop_.load()) {
            int64_t t0 = now_ns();
            m = FrameMeta{};
            if (pull_src->pull(in, &m, start_us) == Source::kEnd) break;
            int64_t t1 = now_ns();
            h_source.record_ns(t1 - t0);
            if (opt_.fast || m.event_us == 0) {
                m.event_us = t1 / 1000;  // the event is "now", once the frame exists
            } else {
                sleep_until(m.event_us * 1000);
                h_queue.record_ns(now_ns() - m.event_us * 1000);  // wake-up lateness
            }
            process(m, opt_.deadline_us > 0 ? m.event_us * 1000 + opt_.deadline_us * 1000 : 0);
        }
    } else if (queue_) {
        while (!stop_.load()) {
            if (!queue_->pop(in, &m, 100000, opt_.queue_spin_us)) {
                if (stop_.load()) break;
                if (sources_running_.load() == 0 && queue_->size() == 0) break;
                continue;
            }
            h_queue.record_ns(now_ns() - m.enqueue_us * 1000);
            process(m, opt_.deadline_us > 0 ? m.event_us * 1000 + opt_.deadline_us * 1000 : 0);
        }
    }
    done_.store(true);
}

void Agent::refresh_p99() {
    double tail = 0;
    tail_p99_us_[pipe_.stages.size()] = 0;
    for (size_t i = pipe_.stages.size(); i-- > 0;) {
        Stage& s = *pipe_.stages[i];
        s.p99_us_cached = s.hist.quantile_us(0.99);
        tail += s.p99_us_cached;
        tail_p99_us_[i] = tail;
    }
}

void Agent::process(const FrameMeta& m, int64_t deadline_ns) {
    if ((event_count_++ & 63) == 0) refresh_p99();
    events.fetch_add(1, std::memory_order_relaxed);
    ev_event_ns_ = m.event_us * 1000;
    ev_deadline_ns_ = deadline_ns;
    ev_media_s_ = m.media_s;
    ev_media_ = m.media;
    pipe_.frame = &m;
    ev_model_ns_ = 0;
    ev_stage_ns_ = 0;
    ev_rule_ = nullptr;
    int64_t begin = now_ns();
    run_from(0);
    int64_t end = now_ns();
    h_event.record_ns(end - begin);
    if (deadline_ns > 0 && end > deadline_ns) misses.fetch_add(1, std::memory_order_relaxed);
    if (opt_.budget_us > 0 && ev_stage_ns_ > opt_.budget_us * 1000) over_budget.fetch_add(1, std::memory_order_relaxed);
}

void Agent::run_from(size_t i) {
    if (i == pipe_.stages.size()) {
        emit_action();
        return;
    }
    Stage& s = *pipe_.stages[i];
    Stage* r = &s;
    int64_t t0 = now_ns();
    if (s.fallback != Stage::kNone && ev_deadline_ns_ > 0 &&
        t0 + int64_t(tail_p99_us_[i] * 1000.0) > ev_deadline_ns_ && s.hist.count() >= 16) {
        s.fallbacks.fetch_add(1, std::memory_order_relaxed);
        if (s.fallback == Stage::kSkip) {  // keep the last output, go on
            run_from(i + 1);
            return;
        }
        r = s.alt.get();
    }
    Status st = r->push();
    int64_t acc = now_ns() - t0, total = acc;
    if (!st.ok()) {
        s.errors.fetch_add(1, std::memory_order_relaxed);
        if (s.last_error.empty()) std::fprintf(stderr, "jiffy agent: error: agent '%s' stage '%s': %s\n", opt_.name.c_str(), s.name.c_str(), st.message().c_str());
        s.last_error = st.message();
        s.hist.record_ns(acc);
        return;
    }
    // `acc` is this stage's time not yet added to the event's totals; downstream time is excluded.
    for (;;) {
        int64_t t1 = now_ns();
        bool more = r->next();
        if (more && r != &s) std::memcpy(s.out().data, r->out().data, size_t(s.out().numel) * sizeof(float));
        int64_t d = now_ns() - t1;
        acc += d;
        total += d;
        if (s.is_model()) ev_model_ns_ += acc;
        ev_stage_ns_ += acc;
        acc = 0;
        if (!more) break;
        if (s.is_rule()) ev_rule_ = s.rule_name();
        run_from(i + 1);
    }
    s.hist.record_ns(total);
}

void Agent::emit_action() {
    for (size_t k = 0; k < emit_exprs_.size(); ++k) emit_values_[k] = emit_exprs_[k].eval();
    int64_t t = now_ns();
    Action a;
    a.agent = opt_.name.c_str();
    a.seq = ++seq_;
    a.event_unix_us = ev_event_ns_ / 1000 + unix_offset_us_;
    a.action_unix_us = t / 1000 + unix_offset_us_;
    a.latency_us = (t - ev_event_ns_) / 1000;
    a.media_s = ev_media_s_;
    a.media = ev_media_;
    a.stale = ev_deadline_ns_ > 0 && t > ev_deadline_ns_;
    a.rule = ev_rule_;
    a.names = &emit_names_;
    a.values = emit_values_.data();
    format_action_json(a, &json_);
    for (auto& s : sinks_) {
        if (a.stale && s->drop_stale) {
            s->dropped.fetch_add(1, std::memory_order_relaxed);
            continue;
        }
        s->emit(a, json_);
    }
    int64_t t2 = now_ns();
    h_sink.record_ns(t2 - t);
    h_e2e.record_ns(t - ev_event_ns_);  // event -> action handed to the sinks
    h_overhead.record_ns(t - ev_event_ns_ - ev_model_ns_);
    actions.fetch_add(1, std::memory_order_relaxed);
    if (a.stale) stale.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace jiffy::agent
