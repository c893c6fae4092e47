#include "runtime/plan.h"

#include <chrono>

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

Status Session::run() {
    const void* const* in = in_ptrs_.data();
    void* const* out = out_ptrs_.data();
    for (const Step& s : plan_->steps) {
        Status st = s.kernel->run(in + s.first_in, out + s.first_out);
        if (!st.ok()) [[unlikely]]
            return st;
    }
    return {};
}

Status Session::run_profiled(double* step_ns) {
    using clk = std::chrono::steady_clock;
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
