// Prometheus exposition and the human latency table for a set of agents.
#include <cinttypes>
#include <cstdio>

#include "agent/agent.h"

namespace jiffy::agent {

namespace {

void prom_hist(std::string* o, const char* metric, const std::string& labels, const observe::Histogram& h) {
    static const double le[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 1000000};
    char b[256];
    for (double l : le) {
        std::snprintf(b, sizeof b, "%s_bucket{%s,le=\"%g\"} %" PRIu64 "\n", metric, labels.c_str(), l * 1e-6, h.count_le_us(l));
        *o += b;
    }
    std::snprintf(b, sizeof b, "%s_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n%s_sum{%s} %.9g\n%s_count{%s} %" PRIu64 "\n", metric,
                  labels.c_str(), h.count(), metric, labels.c_str(), h.sum_us() * 1e-6, metric, labels.c_str(), h.count());
    *o += b;
}

void prom_counter(std::string* o, const char* metric, const std::string& labels, uint64_t v) {
    char b[256];
    std::snprintf(b, sizeof b, "%s{%s} %" PRIu64 "\n", metric, labels.c_str(), v);
    *o += b;
}

}  // namespace

std::string format_prometheus(const std::vector<Agent*>& agents) {
    std::string o;
    o += "# HELP jiffy_agent_stage_seconds Time per event in each part of an agent's pipeline.\n"
         "# TYPE jiffy_agent_stage_seconds histogram\n";
    for (Agent* a : agents) {
        std::string al = "agent=\"" + a->options().name + "\"";
        prom_hist(&o, "jiffy_agent_stage_seconds", al + ",stage=\"source\"", a->h_source);
        prom_hist(&o, "jiffy_agent_stage_seconds", al + ",stage=\"queue\"", a->h_queue);
        for (const auto& s : a->pipeline().stages) {
            prom_hist(&o, "jiffy_agent_stage_seconds", al + ",stage=\"" + s->name + "\"", s->hist);
            for (const auto& [n, h] : s->sub_timings())
                prom_hist(&o, "jiffy_agent_stage_seconds", al + ",stage=\"" + s->name + "." + n + "\"", *h);
        }
        prom_hist(&o, "jiffy_agent_stage_seconds", al + ",stage=\"sink\"", a->h_sink);
    }
    o += "# HELP jiffy_agent_event_to_action_seconds Event time to the action handed to the sinks.\n"
         "# TYPE jiffy_agent_event_to_action_seconds histogram\n";
    for (Agent* a : agents) prom_hist(&o, "jiffy_agent_event_to_action_seconds", "agent=\"" + a->options().name + "\"", a->h_e2e);
    o += "# HELP jiffy_agent_overhead_seconds Event to action minus the model stages' time.\n"
         "# TYPE jiffy_agent_overhead_seconds histogram\n";
    for (Agent* a : agents) prom_hist(&o, "jiffy_agent_overhead_seconds", "agent=\"" + a->options().name + "\"", a->h_overhead);
    struct C {
        const char* name;
        const char* help;
        uint64_t (*get)(Agent*);
    };
    static const C counters[] = {
        {"jiffy_agent_events_total", "Events processed.", [](Agent* a) -> uint64_t { return a->events.load(); }},
        {"jiffy_agent_actions_total", "Actions emitted.", [](Agent* a) -> uint64_t { return a->actions.load(); }},
        {"jiffy_agent_deadline_misses_total", "Events finished after their deadline.", [](Agent* a) -> uint64_t { return a->misses.load(); }},
        {"jiffy_agent_stale_actions_total", "Actions marked stale.", [](Agent* a) -> uint64_t { return a->stale.load(); }},
        {"jiffy_agent_over_budget_total", "Events whose stages took longer than the budget.", [](Agent* a) -> uint64_t { return a->over_budget.load(); }},
        {"jiffy_agent_dropped_total", "Input frames dropped by a full queue.", [](Agent* a) -> uint64_t { return a->drops(); }},
        {"jiffy_agent_skipped_total", "Input frames superseded before a periodic tick.", [](Agent* a) -> uint64_t { return a->skipped.load(); }},
        {"jiffy_agent_bad_input_total", "Payloads that could not be decoded.", [](Agent* a) -> uint64_t { return a->bad_input.load(); }},
    };
    for (const C& c : counters) {
        o += std::string("# HELP ") + c.name + " " + c.help + "\n# TYPE " + c.name + " counter\n";
        for (Agent* a : agents) prom_counter(&o, c.name, "agent=\"" + a->options().name + "\"", c.get(a));
    }
    o += "# HELP jiffy_agent_stage_errors_total Stage runs that failed.\n# TYPE jiffy_agent_stage_errors_total counter\n";
    for (Agent* a : agents)
        for (const auto& s : a->pipeline().stages)
            prom_counter(&o, "jiffy_agent_stage_errors_total", "agent=\"" + a->options().name + "\",stage=\"" + s->name + "\"", s->errors.load());
    o += "# HELP jiffy_agent_sink_errors_total Actions a sink failed to deliver.\n# TYPE jiffy_agent_sink_errors_total counter\n";
    for (Agent* a : agents)
        for (const auto& s : a->sinks())
            prom_counter(&o, "jiffy_agent_sink_errors_total", "agent=\"" + a->options().name + "\",sink=\"" + s->name + "\"", s->errors.load());
    return o;
}

std::string format_table(const std::vector<Agent*>& agents) {
    std::string o;
    char b[512];
    for (Agent* a : agents) {
        std::snprintf(b, sizeof b,
                      "agent %s: %" PRIu64 " events, %" PRIu64 " actions, %" PRIu64 " deadline misses, %" PRIu64 " stale, %" PRIu64
                      " dropped, %" PRIu64 " skipped, %" PRIu64 " bad input, %" PRIu64 " over budget\n",
                      a->options().name.c_str(), a->events.load(), a->actions.load(), a->misses.load(), a->stale.load(), a->drops(),
                      a->skipped.load(), a->bad_input.load(), a->over_budget.load());
        o += b;
        std::snprintf(b, sizeof b, "  %-28s %10s %10s %10s %10s %10s\n", "part (us)", "count", "p50", "p90", "p99", "max");
        o += b;
        auto row = [&](const std::string& n, const observe::Histogram& h) {
            if (h.count() == 0) return;
            std::snprintf(b, sizeof b, "  %-28s %10" PRIu64 " %10.1f %10.1f %10.1f %10.1f\n", n.c_str(), h.count(), h.quantile_us(0.5),
                          h.quantile_us(0.9), h.quantile_us(0.99), h.max_us());
            o += b;
        };
        row("source", a->h_source);
        row(a->options().period_us > 0 ? "wake-up lateness" : "queue / wake-up", a->h_queue);
        if (a->options().period_us > 0) row("tick lateness", a->h_wake);
        row("all stages, per event", a->h_event);
        for (const auto& s : a->pipeline().stages) {
            row("stage " + s->name + " (" + s->type + ")", s->hist);
            for (const auto& [n, h] : s->sub_timings()) row("  " + n, *h);
        }
        row("sinks", a->h_sink);
        row("event -> action", a->h_e2e);
        row("overhead (e2e - models)", a->h_overhead);
        for (const auto& s : a->pipeline().stages) {
            if (s->errors.load()) {
                std::snprintf(b, sizeof b, "  stage %s: %" PRIu64 " errors (last: %s)\n", s->name.c_str(), s->errors.load(), s->last_error.c_str());
                o += b;
            }
            if (s->fallbacks.load()) {
                std::snprintf(b, sizeof b, "  stage %s: %" PRIu64 " fallbacks\n", s->name.c_str(), s->fallbacks.load());
                o += b;
            }
        }
        for (const auto& s : a->pipeline().sources) {
            std::string r = s->report();
            if (!r.empty()) o += "  source " + s->name + " (" + s->type + "): " + r + "\n";
        }
        for (const auto& s : a->sinks()) {
            std::snprintf(b, sizeof b, "  sink %s (%s): %" PRIu64 " sent, %" PRIu64 " errors, %" PRIu64 " dropped", s->name.c_str(),
                          s->type.c_str(), s->sent.load(), s->errors.load(), s->dropped.load());
            o += b;
            std::string r = s->report();
            o += r.empty() ? "\n" : "; " + r + "\n";
        }
        if (a->h_overhead.count()) {
            std::snprintf(b, sizeof b, "  pipeline overhead p50: %.1f us (event -> action p50 %.1f us minus model time)\n",
                          a->h_overhead.quantile_us(0.5), a->h_e2e.quantile_us(0.5));
            o += b;
        }
    }
    return o;
}

}  // namespace jiffy::agent
