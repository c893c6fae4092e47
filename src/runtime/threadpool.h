// Optional intra-op thread pool (docs/threading.md). Created only when a plan is compiled with
// threads > 1; without it every kernel runs on the caller's thread and nothing here is touched.
//
// run(n, fn, ctx) calls fn(ctx, i) for i in [0, n) on the caller and the workers and returns when
// all calls are done. The caller takes part: chunks are claimed from one atomic word, so a worker
// that is asleep or preempted never delays the op by more than the chunk it has already claimed
// (the caller runs the unclaimed ones itself). Workers are pinned to distinct CPUs (when the
// affinity mask allows) and never share the caller's CPU (see `caller_cpu_`), spin for a bounded time (JIFFY_SPIN_US, default 100 us) waiting for the
// next job, then sleep on a futex. No allocation, lock or (with spinning workers) syscall on the
// run path. A pool that is already running a job for another caller runs the next one serially.
//
// Balanced splits (split / run_balanced): one part per thread, part i sized by thread i's share
// of the measured speed. The host's cores are not equally fast for long stretches (a busy
// neighbour on a core's SMT sibling made one of this machine's two vCPUs 23-30% slower for
// minutes); a fixed half each makes the fast thread wait for the slow one on every op. Each
// balanced run times its parts (cycle counter, from the publish to each part's end, so a late
// wake counts) and folds speed = fraction / time into per-thread sums that decay per run; the
// shares are speed / sum of speeds, each speed clamped to [0.5, 1.5] x the mean. Each balanced op
// keeps its own sums (decay 0.95: about its last 20 runs; one op's parts may favour a core more
// than another's), the pool's overall ones (every balanced run, decay 0.98) standing in until the
// op has run once. No allocation, lock or syscall: a cycle-counter read per part.
// JIFFY_BALANCE=0 keeps every split equal (and untimed); JIFFY_SPLIT_SHARE=f gives the caller the
// fraction f of every split (tests).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace jiffy {

// Per-thread speeds one balanced split measured (a pool's overall one, or one op's): decayed sums
// of fraction x run length and of part cycles per thread, and the shares of work they give.
class Balance {
public:
    explicit Balance(int threads = 1, double decay = 0.95);
    int threads() const { return n_; }
    bool measured() const { return measured_.load(std::memory_order_relaxed); }
    // Thread i's share (1 / threads() until measured).
    double share(int i) const { return share_[size_t(i)].load(std::memory_order_relaxed); }
    // Each speed is clamped to [kSlowest, kFastest] x the mean speed.
    static constexpr double kSlowest = 0.5, kFastest = 1.5;
    // The largest share one of `threads` threads can get (0.75 of two).
    static constexpr double max_share(int threads) { return kFastest / (kFastest + kSlowest * (threads - 1)); }
    // Folds one run in: part i had fraction frac[i] of the work, ran on thread who[i] and ended
    // cycles[i] after the publish.
    void update(const double* frac, const int* who, const uint64_t* cycles, int n);

private:
    int n_;
    double decay_;
    std::unique_ptr<double[]> work_, time_;
    std::unique_ptr<std::atomic<double>[]> share_;
    std::atomic<bool> measured_{false};
};

// A cycle counter (no syscall): the TSC, the ARM virtual counter, else steady_clock's ticks.
inline uint64_t cycles() {
#if defined(__x86_64__)
    return __rdtsc();
#elif defined(__aarch64__)
    uint64_t v;
    asm volatile("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
    return uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

class ThreadPool {
public:
    using Fn = void (*)(void* ctx, int i);
    static constexpr int kMaxThreads = 256;

    // threads: total threads including the caller (>= 1; 1 makes a pool with no workers).
    // spin_us < 0: from JIFFY_SPIN_US (default 100). pin: from JIFFY_PIN (default on).
    explicit ThreadPool(int threads, int spin_us = -1);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int threads() const { return int(workers_.size()) + 1; }
    int spin_us() const { return spin_us_; }

    // Caller-only mode: every job's chunks run on the calling thread, in order (the same splits,
    // so the same bits), the workers idle. Session sets it per run (its measured threads choice).
    void set_serial(bool on) { serial_.store(on, std::memory_order_relaxed); }
    bool serial() const { return serial_.load(std::memory_order_relaxed); }

    void run(int n, Fn fn, void* ctx);

    // f(i) for i in [0, n); f is called by reference (no copy, no allocation).
    template <typename F>
    void parallel_for(int n, F&& f) {
        using T = std::remove_reference_t<F>;
        run(n, [](void* c, int i) { (*static_cast<T*>(c))(i); }, const_cast<void*>(static_cast<const void*>(&f)));
    }

    // Boundaries b[0] = 0 <= b[1] <= ... <= b[threads()] = total splitting [0, total) in
    // proportion to the shares of `op` (once it has measured; else the pool's overall ones), the
    // interior ones rounded to multiples of align (>= 1).
    void split(int64_t total, int64_t align, int64_t* b, const Balance* op = nullptr) const;
    // Part i of threads() (b: split()'s boundaries, for the fractions), part 0 on the caller and
    // part i preferably on worker i; each part timed, the pool's and op's shares updated.
    void run_balanced(const int64_t* b, Fn fn, void* ctx, Balance* op = nullptr);
    template <typename F>
    void parallel_balanced(const int64_t* b, F&& f, Balance* op = nullptr) {
        using T = std::remove_reference_t<F>;
        run_balanced(b, [](void* c, int i) { (*static_cast<T*>(c))(i); },
                     const_cast<void*>(static_cast<const void*>(&f)), op);
    }
    // f(i, begin, end) on thread i for its balanced range of [0, total) (split(total, align, op)).
    template <typename F>
    void for_balanced(int64_t total, int64_t align, Balance* op, F&& f) {
        int64_t b[kMaxThreads + 1];
        split(total, align, b, op);
        parallel_balanced(b, [&](int i) { f(i, b[i], b[i + 1]); }, op);
    }
    // The pool's overall shares (every balanced run counts; reported by `jiffy bench`).
    const Balance& balance() const { return *overall_; }

private:
    void worker(int index);
    void work(uint32_t epoch, int self);
    void run_impl(int n, Fn fn, void* ctx, const double* frac, Balance* op);  // frac: a balanced run
    void finished(int i, int self);  // chunk i done by thread self (0: the caller)
    void pin_away(int index, int* cpu);  // worker index, pinned to *cpu: off the caller's CPU

    // Pinning: cpus_[i] is thread i's CPU (the i-th of the affinity mask; slot 0 the caller's
    // nominal one), n_cpus_ of them (0: workers not pinned). The caller is never pinned: it
    // stores the CPU it runs on in caller_cpu_ with every job (sched_getcpu: glibc reads it from
    // the rseq area, no syscall), and a worker that finds the caller on its own CPU moves itself
    // to cpus_[0], and home again once the caller has left it. A worker pinned to the caller's CPU can only run when the
    // scheduler preempts the caller, which spins on the op's last chunk meanwhile: a Zen 4 host's
    // scheduler moved the unpinned caller onto the sleeping worker's CPU for seconds at a time,
    // and every op then ran on one core (weather_v0.1 at two threads 12-120 us against 6.1).
    int cpus_[kMaxThreads] = {};
    int n_cpus_ = 0;
    alignas(64) std::atomic<int> caller_cpu_{-1};

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
    std::atomic<bool> serial_{false};
    // Balanced runs: per part, the thread that ran it and its end (cycle counter); the pool's
    // overall speeds (Balance).
    bool balance_ = true;  // JIFFY_BALANCE=0: every split stays equal (measurements)
    double fixed_share_ = 0;  // JIFFY_SPLIT_SHARE=f in (0, 1): the caller's share of every split (tests)
    std::atomic<bool> timed_{false};
    uint64_t t_start_ = 0;  // the caller's cycle counter at the publish
    struct alignas(64) Slot {
        std::atomic<uint64_t> end{0};
        std::atomic<int> who{0};
    };
    std::unique_ptr<Slot[]> slots_;
    std::unique_ptr<Balance> overall_;
};

// f(i, begin, end) over [0, total): split across `pool` (ThreadPool::for_balanced) where a kernel
// has one, else f(0, 0, total) on the caller. The shape of every kernel that splits one range of
// rows / planes / bytes when it was given a pool at prepare.
template <typename F>
inline void for_balanced_or_caller(ThreadPool* pool, int64_t total, int64_t align, Balance* op, F&& f) {
    if (pool)
        pool->for_balanced(total, align, op, f);
    else
        f(0, int64_t(0), total);
}

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
