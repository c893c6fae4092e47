#include "agent/registry.h"

#include <map>
#include <mutex>

namespace jiffy::agent {

namespace {
struct Registry {
    std::mutex mu;
    std::map<std::string, SourceFactory> sources;
    std::map<std::string, StageFactory> stages;
    std::map<std::string, SinkFactory> sinks;
};
Registry& reg() {
    static Registry r;
    return r;
}
template <typename M>
std::string keys(M& m) {
    std::lock_guard<std::mutex> g(reg().mu);
    std::string s;
    for (const auto& [k, v] : m) s += (s.empty() ? "" : ", ") + k;
    return s;
}
template <typename M>
typename M::mapped_type lookup(M& m, const std::string& k) {
    std::lock_guard<std::mutex> g(reg().mu);
    auto it = m.find(k);
    return it == m.end() ? nullptr : it->second;
}
}  // namespace

std::string BuildEnv::path(const std::string& p) const {
    if (p.empty() || p[0] == '/' || dir.empty()) return p;
    return dir + "/" + p;
}

void register_source(const std::string& t, SourceFactory f) {
    std::lock_guard<std::mutex> g(reg().mu);
    reg().sources[t] = f;
}
void register_stage(const std::string& t, StageFactory f) {
    std::lock_guard<std::mutex> g(reg().mu);
    reg().stages[t] = f;
}
void register_sink(const std::string& t, SinkFactory f) {
    std::lock_guard<std::mutex> g(reg().mu);
    reg().sinks[t] = f;
}
SourceFactory find_source(const std::string& t) { return lookup(reg().sources, t); }
StageFactory find_stage(const std::string& t) { return lookup(reg().stages, t); }
SinkFactory find_sink(const std::string& t) { return lookup(reg().sinks, t); }
std::string known_sources() { return keys(reg().sources); }
std::string known_stages() { return keys(reg().stages); }
std::string known_sinks() { return keys(reg().sinks); }

void register_builtins() {
    static std::once_flag once;
    std::call_once(once, [] {
        for (const char* t : {"wav", "raw", "csv"}) register_source(t, make_file_source);
        register_source("timer", make_timer_source);
        register_source("stdin", make_stdin_source);
        register_stage("model", make_model_stage);
        register_stage("scale", make_scale_stage);
        register_stage("normalize", make_scale_stage);
        register_stage("window", make_window_stage);
        register_stage("frame", make_frame_stage);
        register_stage("resample", make_resample_stage);
        register_stage("argmax", make_topk_stage);
        register_stage("topk", make_topk_stage);
        register_stage("rule", make_rule_stage);
        register_stage("threshold", make_rule_stage);
        register_stage("rules", make_rules_stage);
        register_stage("ratelimit", make_ratelimit_stage);
        register_sink("stdout", make_stdout_sink);
        register_sink("file", make_stdout_sink);
        register_sink("webhook", make_webhook_sink);
    });
}

}  // namespace jiffy::agent
