#include "runtime/threadpool.h"

#include <algorithm>
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

// The CPUs of the process's affinity mask in order, at most `max` of them; 0 when fewer than two
// (pinning would put every thread on one CPU) or unknown.
int mask_cpus(int* out, int max) {
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 2) return 0;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < max; ++c)
        if (CPU_ISSET(c, &set)) out[n++] = c;
    return n;
#else
    (void)out, (void)max;
    return 0;
#endif
}

// Pins the calling thread to `cpu` (allocation-free: it runs in a worker, possibly while a caller
// is running).
void pin_to_cpu(int cpu) {
#if defined(__linux__)
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof(one), &one);
#else
    (void)cpu;
#endif
}

// The CPU the calling thread runs on, or -1 (glibc 2.35+ reads it from the thread's rseq area;
// older ones from the vDSO: no kernel entry either way).
inline int current_cpu() {
#if defined(__linux__)
    return sched_getcpu();
#else
    return -1;
#endif
}

constexpr uint64_t pack(uint32_t epoch, uint32_t n, uint32_t next) {
    return (uint64_t(epoch) << 32) | (uint64_t(n) << 16) | next;
}

}  // namespace

ThreadPool::ThreadPool(int threads, int spin_us) {
    spin_us_ = spin_us >= 0 ? spin_us : env_int("JIFFY_SPIN_US", 100);
    const bool pin = env_int("JIFFY_PIN", 1) != 0;
    balance_ = env_int("JIFFY_BALANCE", 1) != 0;
    if (const char* e = std::getenv("JIFFY_SPLIT_SHARE"); e && *e) {
        const double v = std::atof(e);
        if (v > 0 && v < 1) fixed_share_ = v;
    }
    if (threads < 1) threads = 1;
    if (threads > kMaxThreads) threads = kMaxThreads;
    slots_.reset(new Slot[size_t(threads)]);
    overall_ = std::make_unique<Balance>(threads, 0.98);
    // Pinned threads get distinct CPUs while there are enough; past that, unpinned.
    if (pin) n_cpus_ = mask_cpus(cpus_, threads);
    if (n_cpus_ < threads) n_cpus_ = 0;
    workers_.reserve(size_t(threads - 1));
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true, std::memory_order_seq_cst);
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&epoch_);
    for (std::thread& t : workers_) t.join();
}

// Claims and runs chunks of the job published with `epoch` until none is left.
void ThreadPool::work(uint32_t epoch, int self) {
    uint64_t w = claim_.load(std::memory_order_acquire);
    for (;;) {
        if (uint32_t(w >> 32) != epoch) return;
        const uint32_t n = uint32_t(w >> 16) & 0xFFFF, i = uint32_t(w) & 0xFFFF;
        if (i >= n) return;
        if (!claim_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire))
            continue;
        fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), int(i));
        finished(int(i), self);
        w = claim_.load(std::memory_order_acquire);
    }
}

void ThreadPool::finished(int i, int self) {
    if (timed_.load(std::memory_order_relaxed)) {
        slots_[size_t(i)].who.store(self, std::memory_order_relaxed);
        slots_[size_t(i)].end.store(cycles(), std::memory_order_relaxed);
    }
    done_.fetch_add(1, std::memory_order_acq_rel);
}

// Worker `index`, pinned to *cpu: its own CPU cpus_[index] unless the caller's last job came
// from there, then the one the caller left (cpus_[0]). One syscall, on the worker, only when that
// changes its CPU (so with three or more threads a worker that made room goes home once the caller
// moves on, and two workers never share cpus_[0]).
void ThreadPool::pin_away(int index, int* cpu) {
    if (n_cpus_ == 0) return;
    const int c = caller_cpu_.load(std::memory_order_relaxed);
    const int want = cpus_[index] != c ? cpus_[index] : cpus_[0];
    if (want == *cpu) return;
    *cpu = want;
    pin_to_cpu(want);
}

void ThreadPool::worker(int index) {
    using clk = std::chrono::steady_clock;
    int cpu = -1;
    if (n_cpus_ > 0) pin_to_cpu(cpu = cpus_[index]);
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
        pin_away(index, &cpu);
        work(e, index);
    }
}

void ThreadPool::run(int n, Fn fn, void* ctx) { run_impl(n, fn, ctx, nullptr, nullptr); }

void ThreadPool::run_impl(int n, Fn fn, void* ctx, const double* frac, Balance* op) {
    const bool timed = frac != nullptr && balance_;
    if (n <= 0) return;
    if (n == 1 || workers_.empty() || n > 0xFFFF || serial_.load(std::memory_order_relaxed) ||
        busy_.exchange(true, std::memory_order_acquire)) {
        for (int i = 0; i < n; ++i) fn(ctx, i);
        return;
    }
    if (n_cpus_ > 0) caller_cpu_.store(current_cpu(), std::memory_order_relaxed);
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    timed_.store(timed, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    const uint32_t e = epoch_.load(std::memory_order_relaxed) + 1;
    // The caller claims chunk 0 before publishing: it runs first on the caller (whose cache holds
    // what the previous op's part 0 wrote), the workers take 1, 2, ... in order.
    claim_.store(pack(e, uint32_t(n), 1), std::memory_order_release);
    if (timed) t_start_ = cycles();
    epoch_.store(e, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(&epoch_);
    fn(ctx, 0);
    finished(0, 0);
    work(e, 0);
    while (done_.load(std::memory_order_acquire) < n) cpu_relax();
    if (timed) {
        int who[kMaxThreads];
        uint64_t cyc[kMaxThreads];
        for (int i = 0; i < n; ++i) {
            who[i] = slots_[size_t(i)].who.load(std::memory_order_relaxed);
            const uint64_t end = slots_[size_t(i)].end.load(std::memory_order_relaxed);
            cyc[i] = end > t_start_ ? end - t_start_ : 1;
        }
        overall_->update(frac, who, cyc, n);
        if (op && op->threads() == threads()) op->update(frac, who, cyc, n);
    }
    busy_.store(false, std::memory_order_release);
}

void ThreadPool::split(int64_t total, int64_t align, int64_t* b, const Balance* op) const {
    const int n = threads();
    const Balance& bal = op && op->threads() == n && op->measured() ? *op : *overall_;
    if (align < 1) align = 1;
    double acc = 0;
    b[0] = 0;
    for (int i = 1; i < n; ++i) {
        acc += fixed_share_ > 0 ? (i == 1 ? fixed_share_ : (1 - fixed_share_) / (n - 1)) : bal.share(i - 1);
        int64_t v = int64_t(double(total) * acc + 0.5);
        v = (v + align / 2) / align * align;
        b[i] = std::clamp<int64_t>(v, b[i - 1], total);
    }
    b[n] = total;
}

void ThreadPool::run_balanced(const int64_t* b, Fn fn, void* ctx, Balance* op) {
    const int n = threads();
    const double total = double(b[n] - b[0]);
    if (n < 2 || total <= 0) {
        for (int i = 0; i < n; ++i) fn(ctx, i);
        return;
    }
    double frac[kMaxThreads];
    for (int i = 0; i < n; ++i) frac[i] = double(b[i + 1] - b[i]) / total;
    run_impl(n, fn, ctx, frac, op);
}

Balance::Balance(int threads, double decay) : n_(std::max(1, threads)), decay_(decay) {
    work_.reset(new double[size_t(n_)]());
    time_.reset(new double[size_t(n_)]());
    share_.reset(new std::atomic<double>[size_t(n_)]);
    for (int i = 0; i < n_; ++i) share_[size_t(i)].store(1.0 / n_, std::memory_order_relaxed);
}

void Balance::update(const double* frac, const int* who, const uint64_t* cyc, int n) {
    const int T = n_;
    // Per thread: the fractions it ran and when its last part ended (a thread that ran two
    // parts, the caller covering for a late worker, took until the later end for both).
    double f[ThreadPool::kMaxThreads] = {};
    uint64_t end[ThreadPool::kMaxThreads] = {}, run_len = 0;
    for (int i = 0; i < n; ++i) {
        const int t = who[i];
        if (t < 0 || t >= T) continue;
        f[t] += frac[i];
        end[t] = std::max(end[t], cyc[i]);
        run_len = std::max(run_len, cyc[i]);
    }
    for (int t = 0; t < T; ++t) {
        work_[size_t(t)] *= decay_;
        time_[size_t(t)] *= decay_;
        if (f[t] <= 0 || end[t] == 0) continue;
        work_[size_t(t)] += f[t] * double(run_len);
        time_[size_t(t)] += double(end[t]);
    }
    // speed_t = work / time; threads not yet measured count as the mean of those measured.
    double speed[ThreadPool::kMaxThreads], sum = 0;
    int known = 0;
    for (int t = 0; t < T; ++t) {
        speed[t] = time_[size_t(t)] > 0 ? work_[size_t(t)] / time_[size_t(t)] : 0;
        if (speed[t] > 0) sum += speed[t], ++known;
    }
    if (known == 0) return;
    const double mean = sum / known;
    double tot = 0;
    for (int t = 0; t < T; ++t) {
        if (speed[t] <= 0) speed[t] = mean;
        speed[t] = std::clamp(speed[t], kSlowest * mean, kFastest * mean);
        tot += speed[t];
    }
    for (int t = 0; t < T; ++t) share_[size_t(t)].store(speed[t] / tot, std::memory_order_relaxed);
    measured_.store(true, std::memory_order_relaxed);
}

}  // namespace jiffy
