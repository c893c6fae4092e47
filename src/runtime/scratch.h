// SharedScratch: the per-run scratch of a plan's kernels, one buffer for all of them
// (docs/memory.md "Shared scratch"). Steps run one after another, so every kernel may use all of
// it during its own step; a split kernel gives each part a disjoint stretch. One buffer stays warm
// in L2 / L3 from step to step, where a buffer per kernel came cold from DRAM on every run
// (ResNet-50 ~5% slower at one thread, session 12). Kernels reserve() at prepare and read
// data() at run time (the buffer may move while later kernels reserve). Like the kernels' own
// scratch before it, it makes a plan's steps non-reentrant: one running session per plan.
#pragma once
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
    float* data() const { return reinterpret_cast<float*>(buf_.get()); }
    size_t floats() const { return n_; }

private:
    std::shared_ptr<uint8_t> buf_;
    size_t n_ = 0;
};

}  // namespace jiffy
