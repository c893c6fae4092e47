// An agent: sources -> stages -> sinks on its own thread, with a trigger (each event, or a
// period), a deadline, a budget and optional real-time settings. See docs/agents.md.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent/expr.h"
#include "agent/queue.h"
#include "agent/sink.h"
#include "agent/source.h"
#include "agent/stage.h"
#include "observe/histogram.h"

namespace jiffy::agent {

int64_t now_ns();  // CLOCK_MONOTONIC

// The stages of one agent and the names they expose, for expressions and extra model inputs.
class Pipeline {
public:
    // Resolves "stage", "stage.sub", "source.channel", "input" (each with an optional index) over
    // the sources and the stages prepared so far.
    Status resolve(const std::string& name, int index, const float** p) const;
    Resolver resolver() const {
        return [this](const std::string& n, int i, const float** p) { return resolve(n, i, p); };
    }
    // A stage prepared before the current one, or nullptr.
    Stage* find(const std::string& name) const;
    const Port& input() const { return input_; }

    std::vector<std::unique_ptr<Stage>> stages;
    std::vector<std::unique_ptr<Source>> sources;
    size_t prepared = 0;
    const FrameMeta* frame = nullptr;  // the event being processed (agent thread; null before the first)
    Port input_;
    std::vector<float> input_buf_;
};

struct RtOptions {
    std::vector<int> cpus;           // sched_setaffinity; empty = any
    enum Policy { kNone, kFifo, kDeadline } policy = kNone;
    int priority = 50;               // SCHED_FIFO priority
    bool mlockall = false;           // process-wide; applied by the runner before agents start
};

struct AgentOptions {
    std::string name;
    int64_t period_us = 0;           // 0: run on each event
    int64_t deadline_us = 0;         // 0: none (periodic agents default to the period)
    int64_t budget_us = 0;           // 0: none
    int64_t spin_us = 50;            // final spin before a due time
    // Spin on an empty input queue before sleeping on it. Off by default: on a machine without a
    // spare core the spinning thread takes the CPU the broker and the sender need (measured with
    // jiffy_mqtt_agent: +50 us p50 with 50 us of spin, docs/agents.md).
    int64_t queue_spin_us = 0;
    size_t queue_capacity = 64;
    RtOptions rt;
    bool fast = false;               // replay files as fast as possible
    // execution: inline — an event agent's stages and sinks run on the thread that delivers its
    // one push source's frames (for MQTT: the client's network thread), with no queue and no
    // hand-off; the source's own bounded drop-oldest inbox is the queue. While they run, that
    // source reads nothing. auto (default): inline when the agent is event-triggered and its one
    // source says inline keeps its guarantees (Source::inline_ok: MQTT), else thread.
    enum Exec { kAuto, kThread, kInline } exec = kAuto;
};

class Agent {
public:
    // Takes the pipeline (sources, stages already created), prepares every stage, resolves the
    // emitted values and checks the wiring. `emit` pairs a name with an expression.
    static Status create(AgentOptions opt, Pipeline pipe, std::vector<std::unique_ptr<Sink>> sinks,
                         std::vector<std::pair<std::string, std::string>> emit, std::unique_ptr<Agent>* out);
    ~Agent();

    Status start();     // starts the sinks, the source threads and the agent thread
    void stop();        // asks everything to stop (safe from any thread)
    void join();        // waits for the agent thread and the source threads, stops the sinks
    bool done() const { return done_.load(); }

    const AgentOptions& options() const { return opt_; }
    const Pipeline& pipeline() const { return pipe_; }
    const std::vector<std::unique_ptr<Sink>>& sinks() const { return sinks_; }
    const std::string& warning() const { return warning_; }

    // Observability (read from any thread).
    observe::Histogram h_source, h_queue, h_sink, h_e2e, h_overhead, h_wake;
    observe::Histogram h_event;  // every stage of one event (rules that gate included), per event
    std::atomic<uint64_t> events{0}, actions{0}, misses{0}, stale{0}, over_budget{0}, bad_input{0}, skipped{0};
    uint64_t drops() const {  // the input queue's and the sources' own (e.g. a full MQTT inbox)
        uint64_t d = queue_ ? queue_->drops() : 0;
        for (const auto& s : pipe_.sources) d += s->dropped();
        return d;
    }
    size_t queue_bytes() const { return queue_ ? queue_->bytes() : 0; }
    std::string last_bad_input() const;

private:
    Agent() = default;
    class QueueSink;
    void thread_main();
    void apply_rt();
    void process(const FrameMeta& m, int64_t deadline_ns);
    void run_from(size_t i);
    void emit_action();
    void sleep_until(int64_t t_ns);
    void refresh_p99();

    AgentOptions opt_;
    Pipeline pipe_;
    std::vector<std::unique_ptr<Sink>> sinks_;
    std::vector<std::string> emit_names_;
    std::vector<Expr> emit_exprs_;
    std::vector<double> emit_values_;
    std::vector<double> tail_p99_us_;  // sum of cached p99s of stages i.. end
    std::unique_ptr<InputQueue> queue_;
    std::unique_ptr<QueueSink> qsink_;
    bool inline_source_ = false;
    bool inline_exec_ = false;        // stages run in QueueSink::push, on the source's thread
    bool rt_applied_ = false;         // inline: apply_rt() ran on the delivering thread
    std::thread thread_;
    std::vector<std::thread> source_threads_;
    std::atomic<int> sources_running_{0};
    std::atomic<bool> stop_{false}, done_{false};
    std::string warning_;
    int64_t unix_offset_us_ = 0;  // wall clock - steady clock, at start

    // Per-event state (agent thread only).
    uint64_t seq_ = 0;
    int64_t ev_event_ns_ = 0, ev_deadline_ns_ = 0, ev_model_ns_ = 0, ev_stage_ns_ = 0;
    double ev_media_s_ = -1;
    const char* ev_media_ = nullptr;
    const char* ev_rule_ = nullptr;
    uint64_t event_count_ = 0;
    std::string json_;
};

// Prometheus text for all agents, and the human table (exit / SIGUSR1).
std::string format_prometheus(const std::vector<Agent*>& agents);
std::string format_table(const std::vector<Agent*>& agents);

}  // namespace jiffy::agent
