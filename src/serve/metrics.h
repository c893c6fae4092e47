// Prometheus metrics: per model and version, lock-free (relaxed atomics) so that recording a
// request never waits on the /metrics scrape.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace jiffy::serve {

// Request latency buckets, microseconds (upper bounds; +Inf is implicit).
inline constexpr uint64_t kLatencyBucketsUs[] = {10,   25,    50,    100,   250,    500,    1000,   2500,
                                                 5000, 10000, 25000, 50000, 100000, 250000, 1000000};
inline constexpr int kNumLatencyBuckets = sizeof(kLatencyBucketsUs) / sizeof(kLatencyBucketsUs[0]);

struct VersionMetrics {
    std::string model, version;
    std::atomic<uint64_t> requests{0};   // inference requests received (success + failure)
    std::atomic<uint64_t> failures{0};   // inference requests answered with an error
    std::atomic<uint64_t> bucket[kNumLatencyBuckets + 1] = {};  // non-cumulative; last = +Inf
    std::atomic<uint64_t> latency_sum_us{0};
    std::atomic<uint64_t> compute_sum_us{0};  // time inside Session::run
    // Response cache (serve/cache.h): hits in process (l1) and in Redis (l2), misses (computed),
    // entries evicted by the byte bound, Redis commands that failed (counted as misses).
    std::atomic<uint64_t> cache_hits_l1{0}, cache_hits_l2{0}, cache_misses{0}, cache_evictions{0},
        cache_redis_errors{0};

    void observe(uint64_t us, bool ok) {
        requests.fetch_add(1, std::memory_order_relaxed);
        if (!ok) failures.fetch_add(1, std::memory_order_relaxed);
        int b = 0;
        while (b < kNumLatencyBuckets && us > kLatencyBucketsUs[b]) ++b;
        bucket[b].fetch_add(1, std::memory_order_relaxed);
        latency_sum_us.fetch_add(us, std::memory_order_relaxed);
    }
};

}  // namespace jiffy::serve
