// Per-model scheduling settings from config.yaml: dynamic batching, the request queue and the
// admission controller's latency target. Parsed by parse_sched_key (admission.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace jiffy::serve {

struct SchedConfig {
    int64_t max_batch_size = 0;          // > 0: inputs and outputs carry a batch dim 0 (Triton's meaning)
    bool dynamic_batching = false;       // requests from different clients are concatenated along dim 0
    int64_t max_queue_delay_us = 100;    // how long the oldest request may wait for a batch to fill
    std::vector<int64_t> preferred_batch_sizes;  // a batch of one of these sizes runs at once
    int64_t latency_target_us = 0;       // > 0: the queue depth limit follows p99 against this target
    int64_t max_queue_size = 0;          // hard cap on queued requests (0: 1024 when the model has a queue)
    enum Exec { kAuto, kInline, kWorker } execution = kAuto;  // auto: worker when any queue setting is given
    bool wants_worker() const {
        if (execution != kAuto) return execution == kWorker;
        return dynamic_batching || latency_target_us > 0 || max_queue_size > 0;
    }
};

}  // namespace jiffy::serve
