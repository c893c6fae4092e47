// Admission control for a model's queue: the depth limit follows the measured p99 latency
// (queue wait + compute, over a sliding window) against the model's latency target, AIMD style:
// over the target the limit shrinks multiplicatively (x0.7), comfortably under it (< 70%) it
// grows additively (+1/8 of itself, at least 1). Requests arriving when the queue is at its limit
// are rejected at once (503 + Retry-After) instead of waiting. On top of the AIMD loop, the limit
// is capped by Little's law from the measured service time: a request admitted at depth d waits
// about d x (time per queued request), so d may not exceed (target - batch time) / that time.
// The cap reacts from the first requests (the AIMD window needs >= 50 ms and 20 samples), which
// removes the start-of-overload burst of queueing (docs/serving.md, "Overload").
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "serve/sched_config.h"

namespace YAML {
class Node;
}

namespace jiffy::serve {

class AdmissionController {
public:
    // target_us 0: no controller, the limit stays at max_depth.
    AdmissionController(int64_t target_us, int64_t max_depth, int64_t min_depth);
    int64_t limit() const { return limit_.load(std::memory_order_relaxed); }
    // Worker thread only: one finished request's latency (queue + compute), the run time of the
    // batch it ran in and the number of requests in that batch; microseconds.
    void record(int64_t latency_us, int64_t now_us, int64_t batch_us = 0, int64_t batch_requests = 1);
    int64_t last_p99_us() const { return last_p99_.load(std::memory_order_relaxed); }

    static constexpr int64_t kWindowUs = 50000;  // the p99 is taken over 50 ms windows
    static constexpr size_t kMinSamples = 20;    // a window with fewer samples extends

private:
    int64_t target_, max_, min_;
    std::atomic<int64_t> limit_;
    std::atomic<int64_t> last_p99_{0};
    std::vector<int64_t> samples_;
    int64_t window_start_ = 0;
    double svc_us_ = 0;    // EWMA of batch time / requests in the batch
    double batch_us_ = 0;  // EWMA of batch time
    int64_t cap() const;
};

// config.yaml keys handled here: max_batch_size, dynamic_batching, latency_target_us,
// max_queue_size, execution. Returns false for a key it does not know; *st is set on a bad value.
bool parse_sched_key(const std::string& key, const YAML::Node& v, const std::string& path, SchedConfig* out, Status* st);
// Checks the settings together (after every key is read).
Status check_sched_config(const std::string& path, const SchedConfig& c);

}  // namespace jiffy::serve
