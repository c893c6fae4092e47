#include "runtime/plan.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace jiffy {

Session::Session(std::shared_ptr<const Plan> plan) : plan_(std::move(plan)) {
    arena_ = aligned_buffer(plan_->arena_bytes);
    for (const IoDesc& d : plan_->inputs) {
        own_in_.push_back(aligned_buffer(d.nbytes));
        inputs_.push_back(own_in_.back().get());
    }
    for (const IoDesc& d : plan_->outputs) {
        own_out_.push_back(aligned_buffer(d.nbytes));
        outputs_.push_back(own_out_.back().get());
    }
    in_ptrs_.resize(plan_->step_in.size());
    out_ptrs_.resize(plan_->step_out.size());
    resolve();
}

void Session::bind_input(size_t i, const void* p) {
    inputs_[i] = p ? const_cast<void*>(p) : own_in_[i].get();
    resolve();
}

void Session::bind_output(size_t i, void* p) {
    outputs_[i] = p ? p : own_out_[i].get();
    resolve();
}

// Turns slot ids into pointers once, so run() only reads flat pointer arrays.
void Session::resolve() {
    auto ptr = [&](int32_t sid) -> void* {
        if (sid < 0) return nullptr;
        const Slot& s = plan_->slots[size_t(sid)];
        switch (s.kind) {
            case Slot::kArena: return arena_.get() + s.offset;
            case Slot::kConst: return const_cast<void*>(s.data);
            case Slot::kInput: return inputs_[s.offset];
            case Slot::kOutput: return static_cast<uint8_t*>(outputs_[s.offset]) + s.out_byte;
        }
        return nullptr;
    };
    for (size_t i = 0; i < plan_->step_in.size(); ++i) in_ptrs_[i] = ptr(plan_->step_in[i]);
    for (size_t i = 0; i < plan_->step_out.size(); ++i) out_ptrs_[i] = ptr(plan_->step_out[i]);
}

namespace {

// Sets the pool's caller-only mode for one run, restoring what was set before (a subgraph's
// session runs inside its parent's step on the same pool).
struct SerialScope {
    ThreadPool* pool;
    bool before;
    SerialScope(ThreadPool* p, bool on) : pool(p), before(p && p->serial()) {
        if (p) p->set_serial(on);
    }
    ~SerialScope() {
        if (pool) pool->set_serial(before);
    }
};

float median_timed(const float* v) {
    constexpr int n = Session::kTimed;
    float s[n];
    for (int i = 0; i < n; ++i) s[i] = v[i];
    std::sort(s, s + n);
    return 0.5f * (s[n / 2 - 1] + s[n / 2]);
}

bool auto_threads() {
    static const bool on = [] {
        const char* e = std::getenv("JIFFY_THREADS_AUTO");
        return !(e && e[0] == '0');
    }();
    return on;
}

}  // namespace

Status Session::run() {
    ThreadPool* pool = plan_->pool.get();
    if (!pool || pool->threads() < 2) return run_steps();
    ThreadsChoice& c = choice_;
    if (c.phase == 0 && c.runs >= c.next && auto_threads()) c.phase = 1;  // a probe starts
    if (c.phase == 0) {
        ++c.runs;
        SerialScope scope(pool, c.decided == 1);
        return run_steps();
    }
    return run_probing(pool);
}

// One run of a probe (see ThreadsChoice): two cycle-counter reads, no allocation or syscall.
Status Session::run_probing(ThreadPool* pool) {
    ThreadsChoice& c = choice_;
    const int k = c.phase - 1 - kWarmRuns;  // run of the blocks (< 0: warming up)
    const int block = k >= 0 ? k / kBlockRuns : 0, in_block = k >= 0 ? k % kBlockRuns : 0;
    const bool caller = k >= 0 && block % 2 == 1;  // the warm-up on the pool (its splits'
                                                    // balance converges over the first runs)
    const uint64_t t0 = cycles();
    Status st;
    {
        SerialScope scope(pool, caller);
        st = run_steps();
    }
    const float ticks = float(cycles() - t0);
    if (!st.ok()) return st;  // a failed run does not count
    if (k >= 0 && in_block > 0)
        (caller ? c.caller_ticks : c.pool_ticks)[(block / 2) * (kBlockRuns - 1) + in_block - 1] = ticks;
    ++c.phase;
    bool clear_win = false;
    if (k == 2 * kBlockRuns - 1) {  // the first caller-alone block is done: a clear pool win?
        constexpr int kPerBlock = kBlockRuns - 1;  // timed runs per block
        float pool_max = 0, caller_min = c.caller_ticks[0];
        for (int i = 0; i < kPerBlock; ++i)
            pool_max = std::max(pool_max, c.pool_ticks[i]), caller_min = std::min(caller_min, c.caller_ticks[i]);
        clear_win = pool_max < kClearWin * caller_min;
        if (clear_win) c.pool_med = pool_max, c.caller_med = caller_min;
    }
    if (c.phase <= kProbeRuns && !clear_win) return st;
    if (!clear_win) c.pool_med = median_timed(c.pool_ticks), c.caller_med = median_timed(c.caller_ticks);
    // The caller alone only when two probes in a row say so (a probe can meet another process
    // spinning on the second core: ORT's workers between interleaved runs chose it for ResNet-50
    // and YOLO); until the second one, the pool stays. Back to the pool on one probe.
    const bool caller_faster = c.pool_med > 1.02f * c.caller_med;
    c.decided = caller_faster && (c.suspect || c.decided == 1) ? 1 : 0;
    c.suspect = caller_faster && c.decided == 0;
    c.phase = 0;
    c.runs = 0;
    c.next = c.suspect ? 200 : c.probes == 0 ? 2000 : 10000;
    ++c.probes;
    return st;
}

Status Session::run_steps() {
    const void* const* in = in_ptrs_.data();
    void* const* out = out_ptrs_.data();
    for (const Step& s : plan_->steps) {
        Status st = s.kernel->run(in + s.first_in, out + s.first_out);
        if (!st.ok()) [[unlikely]]
            return st;
    }
    return {};
}

Status Session::run_observed(const std::function<void(size_t, void* const*)>& after) {
    ThreadPool* pool = plan_->pool.get();
    SerialScope scope(pool, pool && pool->threads() >= 2 && choice_.decided == 1);
    for (size_t i = 0; i < plan_->steps.size(); ++i) {
        const Step& s = plan_->steps[i];
        Status st = s.kernel->run(in_ptrs_.data() + s.first_in, out_ptrs_.data() + s.first_out);
        if (!st.ok()) return st;
        after(i, out_ptrs_.data() + s.first_out);
    }
    return {};
}

Status Session::run_profiled(double* step_ns) {
    using clk = std::chrono::steady_clock;
    // The threads choice as run() made it (the pool until the first probe has ended).
    ThreadPool* pool = plan_->pool.get();
    const bool caller = pool && pool->threads() >= 2 && choice_.decided == 1;
    SerialScope scope(pool, caller);
    const void* const* in = in_ptrs_.data();
    void* const* out = out_ptrs_.data();
    for (size_t i = 0; i < plan_->steps.size(); ++i) {
        const Step& s = plan_->steps[i];
        auto t0 = clk::now();
        Status st = s.kernel->run(in + s.first_in, out + s.first_out);
        step_ns[i] += std::chrono::duration<double, std::nano>(clk::now() - t0).count();
        if (!st.ok()) return st;
    }
    return {};
}

}  // namespace jiffy
