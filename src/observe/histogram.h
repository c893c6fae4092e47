// Lock-free latency histogram: log-linear buckets over nanoseconds (16 sub-buckets per power of
// two, so a quantile is within ~3% of the true value), relaxed atomics only. One writer or many;
// readers (a /metrics scrape, the exit table) never block a writer.
//
//   jiffy::observe::Histogram h;
//   h.record_ns(t1 - t0);
//   double p99_us = h.quantile_us(0.99);
#pragma once
#include <atomic>
#include <cstdint>
#include <cstring>

namespace jiffy::observe {

class Histogram {
public:
    static constexpr int kSubBits = 4;                    // 16 sub-buckets per octave
    static constexpr int kSub = 1 << kSubBits;
    static constexpr int kOctaves = 44;                   // up to 2^44 ns (~4.9 hours)
    static constexpr int kBuckets = kSub * (kOctaves + 1);

    void record_ns(int64_t ns) {
        uint64_t v = ns < 0 ? 0 : uint64_t(ns);
        counts_[index(v)].fetch_add(1, std::memory_order_relaxed);
        count_.fetch_add(1, std::memory_order_relaxed);
        sum_ns_.fetch_add(v, std::memory_order_relaxed);
        uint64_t m = max_ns_.load(std::memory_order_relaxed);
        while (v > m && !max_ns_.compare_exchange_weak(m, v, std::memory_order_relaxed)) {
        }
    }

    uint64_t count() const { return count_.load(std::memory_order_relaxed); }
    double sum_us() const { return double(sum_ns_.load(std::memory_order_relaxed)) / 1e3; }
    double max_us() const { return double(max_ns_.load(std::memory_order_relaxed)) / 1e3; }
    double mean_us() const {
        uint64_t c = count();
        return c ? sum_us() / double(c) : 0.0;
    }

    // Quantile q in [0,1], microseconds (the midpoint of the bucket holding it); 0 when empty.
    double quantile_us(double q) const {
        uint64_t total = count();
        if (total == 0) return 0.0;
        uint64_t rank = uint64_t(q * double(total - 1)) + 1, seen = 0;
        for (int i = 0; i < kBuckets; ++i) {
            seen += counts_[i].load(std::memory_order_relaxed);
            if (seen >= rank) {
                double mid = (double(lower(i)) + double(lower(i + 1))) / 2.0;
                double mx = double(max_ns_.load(std::memory_order_relaxed));
                return (mid < mx ? mid : mx) / 1e3;
            }
        }
        return max_us();
    }

    // Cumulative count of samples <= le_us (for Prometheus buckets; exact at bucket edges).
    uint64_t count_le_us(double le_us) const {
        uint64_t lim = uint64_t(le_us * 1e3), c = 0;
        for (int i = 0; i < kBuckets && lower(i + 1) <= lim + 1; ++i) c += counts_[i].load(std::memory_order_relaxed);
        return c;
    }

    void reset() {
        for (auto& c : counts_) c.store(0, std::memory_order_relaxed);
        count_.store(0);
        sum_ns_.store(0);
        max_ns_.store(0);
    }

    // Bucket of a value: values < 16 ns map 1:1; above, the top kSubBits+1 bits pick the bucket.
    static int index(uint64_t v) {
        if (v < uint64_t(kSub)) return int(v);
        int msb = 63 - __builtin_clzll(v);              // >= kSubBits
        int oct = msb - kSubBits + 1;                   // 1..
        if (oct > kOctaves) return kBuckets - 1;
        int sub = int((v >> (msb - kSubBits)) & (kSub - 1));
        return oct * kSub + sub;
    }
    // Smallest value of bucket i.
    static uint64_t lower(int i) {
        if (i < kSub) return uint64_t(i);
        int oct = i / kSub, sub = i % kSub;
        return (uint64_t(kSub) | uint64_t(sub)) << (oct - 1);
    }

private:
    std::atomic<uint64_t> counts_[kBuckets] = {};
    std::atomic<uint64_t> count_{0}, sum_ns_{0}, max_ns_{0};
};

}  // namespace jiffy::observe
