#include "serve/admission.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>

namespace jiffy::serve {

AdmissionController::AdmissionController(int64_t target_us, int64_t max_depth, int64_t min_depth)
    : target_(target_us), max_(max_depth), min_(std::min(min_depth, max_depth)), limit_(max_depth) {
    if (target_ > 0) limit_.store(std::max(min_, std::min<int64_t>(max_, 16)));
    samples_.reserve(4096);
}

int64_t AdmissionController::cap() const {
    if (svc_us_ <= 0) return max_;
    double d = (double(target_) - batch_us_) / svc_us_;
    return std::clamp<int64_t>(d < 0 ? 0 : int64_t(d), min_, max_);
}

void AdmissionController::record(int64_t latency_us, int64_t now_us, int64_t batch_us, int64_t batch_requests) {
    if (target_ <= 0) return;
    if (batch_us > 0) {
        double per = double(batch_us) / double(std::max<int64_t>(1, batch_requests));
        svc_us_ = svc_us_ > 0 ? svc_us_ * 0.9 + per * 0.1 : per;
        batch_us_ = batch_us_ > 0 ? batch_us_ * 0.9 + double(batch_us) * 0.1 : double(batch_us);
        int64_t c = cap();
        if (limit_.load(std::memory_order_relaxed) > c) limit_.store(c, std::memory_order_relaxed);
    }
    if (window_start_ == 0) window_start_ = now_us;
    if (samples_.size() < 4096) samples_.push_back(latency_us);
    if (now_us - window_start_ < kWindowUs || samples_.size() < kMinSamples) return;
    size_t k = samples_.size() * 99 / 100;
    std::nth_element(samples_.begin(), samples_.begin() + ptrdiff_t(k), samples_.end());
    int64_t p99 = samples_[k];
    last_p99_.store(p99, std::memory_order_relaxed);
    int64_t l = limit_.load(std::memory_order_relaxed);
    if (p99 > target_) l = std::max(min_, l * 7 / 10);
    else if (p99 * 10 < target_ * 7) l = std::min(std::min(max_, cap()), l + std::max<int64_t>(1, l / 8));
    limit_.store(l, std::memory_order_relaxed);
    samples_.clear();
    window_start_ = now_us;
}

namespace {

std::string at(const std::string& path, const YAML::Node& n) { return path + ":" + std::to_string(n.Mark().line + 1) + ": "; }

bool as_int(const YAML::Node& n, int64_t* v) {
    if (!n.IsScalar()) return false;
    const std::string& s = n.Scalar();
    if (s.empty() || s.size() > 18) return false;
    for (size_t k = 0; k < s.size(); ++k)
        if (s[k] < '0' || s[k] > '9') return false;
    *v = std::stoll(s);
    return true;
}

}  // namespace

bool parse_sched_key(const std::string& key, const YAML::Node& v, const std::string& path, SchedConfig* c, Status* st) {
    auto num = [&](int64_t* out, int64_t lo, int64_t hi) {
        int64_t x;
        if (!as_int(v, &x) || x < lo || x > hi)
            *st = invalid(at(path, v), "'", key, "' must be an integer in ", lo, "..", hi);
        else
            *out = x;
    };
    if (key == "max_batch_size") {
        num(&c->max_batch_size, 0, 4096);
    } else if (key == "latency_target_us") {
        num(&c->latency_target_us, 1, int64_t(3600) * 1000000);
    } else if (key == "max_queue_size") {
        num(&c->max_queue_size, 1, 1 << 20);
    } else if (key == "execution") {
        if (v.IsScalar() && v.Scalar() == "inline") c->execution = SchedConfig::kInline;
        else if (v.IsScalar() && v.Scalar() == "worker") c->execution = SchedConfig::kWorker;
        else if (v.IsScalar() && v.Scalar() == "auto") c->execution = SchedConfig::kAuto;
        else *st = invalid(at(path, v), "'execution' must be inline, worker or auto");
    } else if (key == "dynamic_batching") {
        c->dynamic_batching = true;
        if (v.IsNull() || (v.IsScalar() && v.Scalar() == "{}")) return true;
        if (!v.IsMap()) {
            *st = invalid(at(path, v), "'dynamic_batching' must be a mapping, e.g. {max_queue_delay_us: 100}");
            return true;
        }
        for (auto it = v.begin(); it != v.end(); ++it) {
            std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
            const YAML::Node& x = it->second;
            if (k == "max_queue_delay_us") {
                int64_t d;
                if (!as_int(x, &d) || d > 10000000) {
                    *st = invalid(at(path, x), "'max_queue_delay_us' must be an integer in 0..10000000");
                    return true;
                }
                c->max_queue_delay_us = d;
            } else if (k == "preferred_batch_sizes") {
                if (!x.IsSequence()) {
                    *st = invalid(at(path, x), "'preferred_batch_sizes' must be a list of integers");
                    return true;
                }
                for (const auto& e : x) {
                    int64_t d;
                    if (!as_int(e, &d) || d < 1) {
                        *st = invalid(at(path, e), "preferred batch sizes must be positive integers");
                        return true;
                    }
                    c->preferred_batch_sizes.push_back(d);
                }
            } else {
                *st = invalid(at(path, it->first), "unknown key '", k,
                              "' in dynamic_batching (known: max_queue_delay_us, preferred_batch_sizes)");
                return true;
            }
        }
    } else {
        return false;
    }
    return true;
}

Status check_sched_config(const std::string& path, const SchedConfig& c) {
    if (c.dynamic_batching && c.max_batch_size < 1)
        return invalid(path, ": dynamic_batching needs max_batch_size >= 1");
    for (int64_t p : c.preferred_batch_sizes)
        if (p > c.max_batch_size)
            return invalid(path, ": preferred batch size ", p, " exceeds max_batch_size ", c.max_batch_size);
    if (c.execution == SchedConfig::kInline && (c.dynamic_batching || c.latency_target_us > 0 || c.max_queue_size > 0))
        return invalid(path, ": execution: inline has no queue, so it cannot batch or apply a latency target");
    return {};
}

}  // namespace jiffy::serve
