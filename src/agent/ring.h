// Ring buffers for agent state.
//
// MirrorRing: the last N frames of F floats, always readable as one contiguous [N*F] block in
// order oldest -> newest, at the cost of writing each frame twice (slot i and slot i+N of a 2N
// buffer). A sliding window therefore needs no copy when a model reads it.
//
// ValueRing<T>: the last N values of a scalar (past scores, for rules over history).
#pragma once
#include <cstddef>
#include <cstring>
#include <vector>

namespace jiffy::agent {

class MirrorRing {
public:
    MirrorRing() = default;
    MirrorRing(size_t frames, size_t frame_size) { reset(frames, frame_size); }
    void reset(size_t frames, size_t frame_size) {
        n_ = frames;
        f_ = frame_size;
        buf_.assign(2 * n_ * f_, 0.0f);
        head_ = 0;
        count_ = 0;
    }
    // Appends one frame of frame_size() floats, evicting the oldest when full.
    void push(const float* frame) {
        std::memcpy(&buf_[head_ * f_], frame, f_ * sizeof(float));
        std::memcpy(&buf_[(head_ + n_) * f_], frame, f_ * sizeof(float));
        head_ = head_ + 1 == n_ ? 0 : head_ + 1;
        if (count_ < n_) ++count_;
    }
    // The window, oldest frame first: frames() * frame_size() contiguous floats (zeros where
    // nothing was pushed yet).
    const float* window() const { return &buf_[head_ * f_]; }
    bool full() const { return count_ == n_; }
    size_t count() const { return count_; }
    size_t frames() const { return n_; }
    size_t frame_size() const { return f_; }

private:
    std::vector<float> buf_;
    size_t n_ = 0, f_ = 0, head_ = 0, count_ = 0;
};

template <typename T>
class ValueRing {
public:
    explicit ValueRing(size_t n = 1) : buf_(n ? n : 1) {}
    void push(T v) {
        buf_[head_] = v;
        head_ = (head_ + 1) % buf_.size();
        if (count_ < buf_.size()) ++count_;
    }
    // k = 0 is the newest; k < size().
    T ago(size_t k) const { return buf_[(head_ + buf_.size() - 1 - k) % buf_.size()]; }
    size_t size() const { return count_; }
    size_t capacity() const { return buf_.size(); }

private:
    std::vector<T> buf_;
    size_t head_ = 0, count_ = 0;
};

}  // namespace jiffy::agent
