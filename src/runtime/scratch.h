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
        if (floats <= n_) return;
        buf_ = aligned_buffer(floats * sizeof(float));
        n_ = floats;
    }
    // At prepare: a kernel split into `parts` will use per_part floats at data() + i *
    // part_stride() for part i, and `shared` floats at data() + parts * part_stride().
    void reserve_parts(int parts, size_t per_part, size_t shared) {
        stride_ = std::max(stride_, (per_part + 15) / 16 * 16);
        max_parts_ = std::max(max_parts_, size_t(parts));
        max_shared_ = std::max(max_shared_, shared);
        reserve(max_parts_ * stride_ + max_shared_);
    }
    float* data() const { return reinterpret_cast<float*>(buf_.get()); }
    size_t floats() const { return n_; }
    size_t part_stride() const { return stride_; }

private:
    std::shared_ptr<uint8_t> buf_;
    size_t n_ = 0;
    size_t stride_ = 0, max_parts_ = 0, max_shared_ = 0;
};

}  // namespace jiffy
