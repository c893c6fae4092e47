// Bounded input queue between source threads and an agent thread. Slots are preallocated (no
// allocation per event); when full, a push overwrites the oldest frame and counts a drop, so a
// flood costs bounded memory and the agent always works on the newest data.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

namespace jiffy::agent {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

struct FrameMeta {
    int source = 0;          // index of the source in the agent
    int64_t event_us = 0;    // steady clock, when the event happened (arrived / was due)
    int64_t enqueue_us = 0;  // steady clock, when it entered the queue
    double media_s = -1;     // position in a replayed file, seconds (-1: none)
    size_t n = 0;            // floats
    const char* media = nullptr;  // name of the replayed stream (file stem), owned by the source
    uint32_t stream = 0;     // stream number: a change means a new stream (stateful stages reset)
};

class InputQueue {
public:
    InputQueue(size_t capacity, size_t frame_floats)
        : cap_(capacity ? capacity : 1), ff_(frame_floats ? frame_floats : 1), data_(cap_ * ff_), meta_(cap_) {}

    size_t capacity() const { return cap_; }
    size_t frame_floats() const { return ff_; }

    // Copies min(n, frame_floats) floats in. Never blocks on the consumer.
    void push(const float* data, const FrameMeta& m) {
        {
            std::lock_guard<std::mutex> g(mu_);
            if (size_ == cap_) {  // drop the oldest
                head_ = (head_ + 1) % cap_;
                --size_;
                drops_.fetch_add(1, std::memory_order_relaxed);
            }
            size_t slot = (head_ + size_) % cap_;
            size_t n = m.n < ff_ ? m.n : ff_;
            std::memcpy(&data_[slot * ff_], data, n * sizeof(float));
            meta_[slot] = m;
            meta_[slot].n = n;
            ++size_;
            avail_.store(size_, std::memory_order_release);
            pushed_.fetch_add(1, std::memory_order_relaxed);
        }
        cv_.notify_one();
    }

    // Pops the oldest frame into out (frame_floats capacity). Waits up to timeout_us (spinning
    // first for spin_us, since a futex wake-up costs ~20 us here). False on timeout or close.
    bool pop(float* out, FrameMeta* m, int64_t timeout_us, int64_t spin_us = 0) {
        if (spin_us > 0) {
            auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
            while (avail_.load(std::memory_order_acquire) == 0 && !closed_.load(std::memory_order_relaxed) &&
                   std::chrono::steady_clock::now() < end) {
                cpu_relax();
            }
        }
        std::unique_lock<std::mutex> g(mu_);
        if (size_ == 0) {
            if (closed_) return false;
            cv_.wait_for(g, std::chrono::microseconds(timeout_us), [&] { return size_ > 0 || closed_; });
            if (size_ == 0) return false;
        }
        *m = meta_[head_];
        std::memcpy(out, &data_[head_ * ff_], m->n * sizeof(float));
        head_ = (head_ + 1) % cap_;
        --size_;
        avail_.store(size_, std::memory_order_release);
        return true;
    }

    // Keeps only the newest frame (for periodic agents); returns how many older ones it discarded.
    size_t discard_all_but_newest() {
        std::lock_guard<std::mutex> g(mu_);
        if (size_ <= 1) return 0;
        size_t k = size_ - 1;
        head_ = (head_ + k) % cap_;
        size_ = 1;
        avail_.store(size_, std::memory_order_release);
        return k;
    }

    void close() {
        {
            std::lock_guard<std::mutex> g(mu_);
            closed_ = true;
        }
        cv_.notify_all();
    }
    bool closed_and_empty() {
        std::lock_guard<std::mutex> g(mu_);
        return closed_ && size_ == 0;
    }
    size_t size() {
        std::lock_guard<std::mutex> g(mu_);
        return size_;
    }
    uint64_t drops() const { return drops_.load(std::memory_order_relaxed); }
    uint64_t pushed() const { return pushed_.load(std::memory_order_relaxed); }
    size_t bytes() const { return data_.capacity() * sizeof(float) + meta_.capacity() * sizeof(FrameMeta); }

private:
    const size_t cap_, ff_;
    std::vector<float> data_;
    std::vector<FrameMeta> meta_;
    std::mutex mu_;
    std::condition_variable cv_;
    size_t head_ = 0, size_ = 0;
    std::atomic<size_t> avail_{0};  // size_, readable without the lock (the spin only hints)
    std::atomic<uint64_t> pushed_{0}, drops_{0};
    std::atomic<bool> closed_{false};
};

}  // namespace jiffy::agent
