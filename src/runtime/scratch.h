// SharedScratch: the per-run scratch of a plan's kernels, one buffer for all of them
// (docs/memory.md "Shared scratch"). Steps run one after another, so every kernel may use all of
// it during its own step; a split kernel gives each part a disjoint stretch. One buffer stays warm
// in L2 / L3 from step to step, where a buffer per kernel came cold from DRAM on every run
// (ResNet-50 ~5% slower at one thread, session 12). Kernels reserve() at prepare and read
// data() at run time (the buffer may move while later kernels reserve). Like the kernels' own
// scratch before it, it makes a plan's steps non-reentrant: one running session per plan.
// Split kernels put part i at i * part_stride() (read at run time): one stride for the whole plan,
// so each thread's part is the same stretch from step to step and its lines stay in that thread's
// core. Stretches that moved with each kernel's part sizes left a core's scratch lines in the other
// core's L2 (Intel host, session 22: ResNet-50 at two threads 0.969x with the fixed stretches).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace jiffy {

class SharedScratch {
public:
    // At prepare: some kernel will use up to `floats` floats from data() (64-byte aligned).
    void reserve(size_t floats) {
        front_ = std::max(front_, round16(floats));
        grow();
    }
    // At prepare: a kernel split into `parts` will use per_part floats at data() + i *
    // part_stride() for part i, and `shared` floats at data() + parts * part_stride().
    void reserve_parts(int parts, size_t per_part, size_t shared) {
        stride_ = std::max(stride_, round16(per_part));
        max_parts_ = std::max(max_parts_, size_t(parts));
        max_shared_ = std::max(max_shared_, shared);
        reserve(max_parts_ * stride_ + max_shared_);
    }
    // At prepare: a kernel that runs another kernel inside its step (which may use data() on, as
    // above) keeps `floats` of its own at top(floats), past everything reserve / reserve_parts
    // give: the row stack of ops/conv.cpp's SubsampledConvKernel, which a buffer of its own would
    // write cold (session 34: three such 0.7 MB copies in the SVTR-like probe, ~500 us a run).
    void reserve_top(size_t floats) {
        top_ = std::max(top_, round16(floats));
        grow();
    }
    float* top(size_t floats) const { return data() + n_ - round16(floats); }
    float* data() const { return reinterpret_cast<float*>(buf_.get()); }
    size_t floats() const { return n_; }
    size_t part_stride() const { return stride_; }

private:
    static size_t round16(size_t n) { return (n + 15) / 16 * 16; }
    void grow() {
        if (front_ + top_ <= n_) return;
        n_ = front_ + top_;
        buf_ = aligned_buffer(n_ * sizeof(float));
    }

    std::shared_ptr<uint8_t> buf_;
    size_t n_ = 0;
    size_t front_ = 0, top_ = 0;  // the largest reserve (from data()) and reserve_top (below the end)
    size_t stride_ = 0, max_parts_ = 0, max_shared_ = 0;
};

}  // namespace jiffy
