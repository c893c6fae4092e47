// Prometheus metrics: per model and version, lock-free (relaxed atomics) so that recording a
// request never waits on the /metrics scrape, and the I/O thread and the model's worker can both
// record without a lock.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace jiffy::serve {

// Latency buckets, microseconds (upper bounds; +Inf is implicit).
inline constexpr uint64_t kLatencyBucketsUs[] = {10,   25,    50,    100,   250,    500,    1000,   2500,
                                                 5000, 10000, 25000, 50000, 100000, 250000, 1000000};
inline constexpr int kNumLatencyBuckets = sizeof(kLatencyBucketsUs) / sizeof(kLatencyBucketsUs[0]);
// Batch size buckets (upper bounds).
inline constexpr uint64_t kBatchBuckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
inline constexpr int kNumBatchBuckets = sizeof(kBatchBuckets) / sizeof(kBatchBuckets[0]);

// A fixed-bucket histogram: observe() is three relaxed atomic adds (no lock, no allocation).
template <const uint64_t* Bounds, int N>
struct Histogram {
    std::atomic<uint64_t> bucket[N + 1] = {};  // non-cumulative; last = +Inf
    std::atomic<uint64_t> sum{0};
    void observe(uint64_t v) {
        int b = 0;
        while (b < N && v > Bounds[b]) ++b;
        bucket[b].fetch_add(1, std::memory_order_relaxed);
        sum.fetch_add(v, std::memory_order_relaxed);
    }
    static constexpr int size() { return N; }
    static uint64_t bound(int i) { return Bounds[i]; }
};
using LatencyHistogram = Histogram<kLatencyBucketsUs, kNumLatencyBuckets>;
using BatchHistogram = Histogram<kBatchBuckets, kNumBatchBuckets>;

struct VersionMetrics {
    std::string model, version;
    std::atomic<uint64_t> requests{0};    // inference requests received (success + failure)
    std::atomic<uint64_t> failures{0};    // inference requests answered with an error (rejections included)
    std::atomic<uint64_t> rejections{0};  // refused by admission control (503) before queueing
    std::atomic<uint64_t> timeouts{0};    // expired in the queue (their `timeout` parameter)
    std::atomic<int64_t> queue_depth{0};  // requests waiting for the model's worker
    std::atomic<int64_t> queue_limit{0};  // admission controller's current depth limit (0: no queue)
    std::atomic<uint64_t> compute_sum_us{0};  // time inside Session::run
    // Response cache (serve/cache.h): hits in process (l1) and in Redis (l2), misses (computed),
    // entries evicted by the byte bound, Redis commands that failed (counted as misses).
    std::atomic<uint64_t> cache_hits_l1{0}, cache_hits_l2{0}, cache_misses{0}, cache_evictions{0},
        cache_redis_errors{0};
    LatencyHistogram total;    // parsed request -> response built (all requests)
    LatencyHistogram queue;    // enqueued -> taken by the worker (queued models)
    LatencyHistogram compute;  // Session::run per batch
    BatchHistogram batch;      // requests per run

    void observe(uint64_t us, bool ok) {
        requests.fetch_add(1, std::memory_order_relaxed);
        if (!ok) failures.fetch_add(1, std::memory_order_relaxed);
        total.observe(us);
    }
};

}  // namespace jiffy::serve
