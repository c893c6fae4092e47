// `jiffy loadtest`: open-loop load against a KServe v2 server (see docs/serving.md, "Load test").
// The arrival schedule of each step is fixed before it starts (constant or Poisson rate) and every
// latency is measured from the request's scheduled send time, so a slow server cannot slow the
// offered load down (no coordinated omission).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace jiffy::serve {

// One step's results. Latencies in microseconds; -1 where there was no sample.
struct LoadStep {
    double offered_rps = 0;   // scheduled requests / duration
    double duration_s = 0;
    int64_t scheduled = 0;    // requests in the schedule
    int64_t ok = 0;           // 2xx responses
    double goodput_rps = 0;   // ok / duration
    double p50_us = -1, p99_us = -1, p999_us = -1, max_us = -1, mean_us = -1;  // 2xx, from scheduled send time
    double p99_sent_us = -1;  // 2xx p99 from the actual send time (the client's own lateness excluded)
    int64_t rejections = 0;   // 503
    double rejected_p50_us = -1, rejected_p99_us = -1, rejected_max_us = -1;   // 503s, from scheduled send time
    double rejected_p99_sent_us = -1;  // 503s p99 from the actual send time
    int64_t timeouts = 0;     // 504 from the server, or no answer within --timeout-ms
    int64_t errors = 0;       // other statuses, connection errors, malformed responses
    int64_t late_starts = 0;  // sent more than --late-us after the scheduled time (no free connection / client busy)
    int64_t connections = 0;  // connections opened during the step
};

// argv[0] is "loadtest". Returns 0 on success, 2 for bad arguments or an unreachable server/model.
int loadtest_main(int argc, char** argv);

// The chart: latency percentiles (log axis) and goodput against offered load. Well-formed SVG.
std::string loadtest_svg(const std::string& title, const std::vector<LoadStep>& steps);

}  // namespace jiffy::serve
