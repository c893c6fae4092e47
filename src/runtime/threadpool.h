// Optional intra-op thread pool (docs/threading.md). Created only when a plan is compiled with
// threads > 1; without it every kernel runs on the caller's thread and nothing here is touched.
//
// run(n, fn, ctx) calls fn(ctx, i) for i in [0, n) on the caller and the workers and returns when
// all calls are done. The caller takes part: chunks are claimed from one atomic word, so a worker
// that is asleep or preempted never delays the op by more than the chunk it has already claimed
// (the caller runs the unclaimed ones itself). Workers are pinned to distinct CPUs (when the
// affinity mask allows), spin for a bounded time (JIFFY_SPIN_US, default 100 us) waiting for the
// next job, then sleep on a futex. No allocation, lock or (with spinning workers) syscall on the
// run path. A pool that is already running a job for another caller runs the next one serially.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace jiffy {

class ThreadPool {
public:
    using Fn = void (*)(void* ctx, int i);

    // threads: total threads including the caller (>= 1; 1 makes a pool with no workers).
    // spin_us < 0: from JIFFY_SPIN_US (default 100). pin: from JIFFY_PIN (default on).
    explicit ThreadPool(int threads, int spin_us = -1);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int threads() const { return int(workers_.size()) + 1; }
    int spin_us() const { return spin_us_; }

    void run(int n, Fn fn, void* ctx);

    // f(i) for i in [0, n); f is called by reference (no copy, no allocation).
    template <typename F>
    void parallel_for(int n, F&& f) {
        using T = std::remove_reference_t<F>;
        run(n, [](void* c, int i) { (*static_cast<T*>(c))(i); }, const_cast<void*>(static_cast<const void*>(&f)));
    }

private:
    void worker(int index);
    void work(uint32_t epoch);

    std::vector<std::thread> workers_;
    int spin_us_ = 100;
    // claim_: epoch (32) | n (16) | next chunk (16). The epoch is also in epoch_ (the futex word).
    alignas(64) std::atomic<uint64_t> claim_{0};
    alignas(64) std::atomic<uint32_t> epoch_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
    alignas(64) std::atomic<int> done_{0};
    std::atomic<Fn> fn_{nullptr};
    std::atomic<void*> ctx_{nullptr};
    alignas(64) std::atomic<bool> busy_{false};
};

// Contiguous chunk i of n over [0, total), boundaries rounded to multiples of `align`.
inline void chunk_range(int64_t total, int n, int i, int64_t align, int64_t* begin, int64_t* end) {
    auto at = [&](int k) {
        if (k >= n) return total;
        int64_t b = total * k / n;
        b = (b + align / 2) / align * align;
        return b < total ? b : total;
    };
    *begin = at(i);
    *end = at(i + 1);
}

}  // namespace jiffy
