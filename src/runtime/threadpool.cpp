#include "runtime/threadpool.h"

#include <chrono>
#include <climits>
#include <cstdlib>

#if defined(__linux__)
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace jiffy {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
}

void futex_wait(std::atomic<uint32_t>* a, uint32_t expected) {
#if defined(__linux__)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
#else
    a->wait(expected);
#endif
}

void futex_wake_all(std::atomic<uint32_t>* a) {
#if defined(__linux__)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
#else
    a->notify_all();
#endif
}

int env_int(const char* name, int def) {
    const char* s = std::getenv(name);
    if (!s || !*s) return def;
    char* end = nullptr;
    long v = std::strtol(s, &end, 10);
    return (end && *end == 0 && v >= 0 && v <= 1000000) ? int(v) : def;
}

// Pins the calling thread to the k-th CPU of the process's affinity mask (k modulo its size).
// Allocation-free: it runs as the worker starts, possibly while a caller is already running.
void pin_to(int k) {
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return;
    const int count = CPU_COUNT(&set);
    if (count < 2) return;
    int want = k % count;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (!CPU_ISSET(c, &set)) continue;
        if (want-- == 0) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            sched_setaffinity(0, sizeof(one), &one);
            return;
        }
    }
#else
    (void)k;
#endif
}

constexpr uint64_t pack(uint32_t epoch, uint32_t n, uint32_t next) {
    return (uint64_t(epoch) << 32) | (uint64_t(n) << 16) | next;
}

}  // namespace

ThreadPool::ThreadPool(int threads, int spin_us) {
    spin_us_ = spin_us >= 0 ? spin_us : env_int("JIFFY_SPIN_US", 100);
    const bool pin = env_int("JIFFY_PIN", 1) != 0;
    if (threads < 1) threads = 1;
    if (threads > 256) threads = 256;
    workers_.reserve(size_t(threads - 1));
    for (int i = 1; i < threads; ++i)
        workers_.emplace_back([this, i, pin] {
            if (pin) pin_to(i);
            worker(i);
        });
}

ThreadPool::~ThreadPool() {
    stop_.store(true, std::memory_order_seq_cst);
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&epoch_);
    for (std::thread& t : workers_) t.join();
}

// Claims and runs chunks of the job published with `epoch` until none is left.
void ThreadPool::work(uint32_t epoch) {
    uint64_t w = claim_.load(std::memory_order_acquire);
    for (;;) {
        if (uint32_t(w >> 32) != epoch) return;
        const uint32_t n = uint32_t(w >> 16) & 0xFFFF, i = uint32_t(w) & 0xFFFF;
        if (i >= n) return;
        if (!claim_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire))
            continue;
        fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), int(i));
        done_.fetch_add(1, std::memory_order_acq_rel);
        w = claim_.load(std::memory_order_acquire);
    }
}

void ThreadPool::worker(int) {
    using clk = std::chrono::steady_clock;
    uint32_t seen = epoch_.load(std::memory_order_acquire);
    const auto spin = std::chrono::microseconds(spin_us_);
    for (;;) {
        if (stop_.load(std::memory_order_seq_cst)) return;
        uint32_t e = epoch_.load(std::memory_order_acquire);
        if (e == seen) {
            // Bounded spin, checking the clock every 64 pauses.
            const auto t0 = clk::now();
            for (;;) {
                for (int k = 0; k < 64 && (e = epoch_.load(std::memory_order_acquire)) == seen; ++k) cpu_relax();
                if (e != seen || clk::now() - t0 >= spin) break;
            }
        }
        if (e == seen) {
            sleepers_.fetch_add(1, std::memory_order_seq_cst);
            if (epoch_.load(std::memory_order_seq_cst) == seen && !stop_.load(std::memory_order_seq_cst))
                futex_wait(&epoch_, seen);
            sleepers_.fetch_sub(1, std::memory_order_seq_cst);
            continue;
        }
        if (stop_.load(std::memory_order_acquire)) return;
        seen = e;
        work(e);
    }
}

void ThreadPool::run(int n, Fn fn, void* ctx) {
    if (n <= 0) return;
    if (n == 1 || workers_.empty() || n > 0xFFFF || busy_.exchange(true, std::memory_order_acquire)) {
        for (int i = 0; i < n; ++i) fn(ctx, i);
        return;
    }
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    const uint32_t e = epoch_.load(std::memory_order_relaxed) + 1;
    claim_.store(pack(e, uint32_t(n), 0), std::memory_order_release);
    epoch_.store(e, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(&epoch_);
    work(e);
    while (done_.load(std::memory_order_acquire) < n) cpu_relax();
    busy_.store(false, std::memory_order_release);
}

}  // namespace jiffy
