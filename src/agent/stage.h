// Stages: the steps of an agent's pipeline. Data between stages is float32; every stage owns its
// output buffer, whose address is fixed once prepare() returns, so the next stage reads it in
// place (a model stage binds it as its input: no copy between stages).
//
// Per event the pipeline calls push() once (the input is at the pointer given to prepare), then
// next() until it returns false; each true means "a new output is in out().data" and the rest of
// the pipeline runs on it. A 1:1 stage (most) emits once; a framing stage may emit 0..k times; a
// rule emits only when it fires, which gates everything after it (sinks included).
//
// A new stage type (e.g. an adapter over a composite chain) derives from Stage or SimpleStage and
// registers a factory (registry.h).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "observe/histogram.h"

namespace jiffy::agent {

// A float32 tensor owned by a stage (or the agent's input buffer).
struct Port {
    float* data = nullptr;
    std::vector<int64_t> shape;
    int64_t numel = 0;
};

class Pipeline;

class Stage {
public:
    virtual ~Stage() = default;

    // Set up for input `in` (its data pointer stays valid and fixed); must set out_. `pipe` gives
    // access to earlier stages and named values (for extra inputs and expressions).
    virtual Status prepare(const Port& in, Pipeline& pipe) = 0;
    // Consume the current input. Errors are counted per stage and end this event's pipeline.
    virtual Status push() = 0;
    // Produce the next output into out_.data; false when there is none.
    virtual bool next() = 0;
    // A named value of this stage for expressions: `sub` is what follows "<stage>." ("" for the
    // stage name alone), index -1 when not given. Default: element `index` (or 0) of the output.
    virtual Status value(const std::string& sub, int index, const float** p) const;
    // True for model-like stages whose time counts as "model time" in the overhead figure.
    virtual bool is_model() const { return false; }
    // A rule that fired may add its name to the action.
    virtual bool is_rule() const { return false; }
    // The name an action carries for the rule that fired (a multi-rule stage: the one that fired).
    virtual const char* rule_name() const { return name.c_str(); }
    // Value names an action carries by default (rules: the names their expressions read).
    virtual std::vector<std::string> emit_defaults() const { return {}; }
    // Sub-timings a composite stage wants in the table (name, histogram); default none.
    virtual std::vector<std::pair<std::string, const observe::Histogram*>> sub_timings() const { return {}; }

    const Port& out() const { return out_; }

    std::string name, type;
    std::string where;  // "FILE:LINE: " of its config, for errors found at prepare
    // Fallback when the deadline is predicted to be missed: none, skip (keep the last output and
    // go on), or run `alt` instead (same output size; its output is copied into out_).
    enum Fallback { kNone, kSkip, kAlt } fallback = kNone;
    std::unique_ptr<Stage> alt;

    // Filled by the pipeline.
    observe::Histogram hist;        // time per event in push + next (excluding later stages)
    std::atomic<uint64_t> errors{0}, fallbacks{0};
    double p99_us_cached = 0;       // refreshed every 64 events, for the fallback decision
    std::string last_error;         // written by the agent thread, for the exit table

protected:
    Port out_;
    std::vector<float> out_buf_;  // storage for out_ where the stage owns a plain buffer
    void alloc_out(std::vector<int64_t> shape);
};

// A stage with exactly one output per push (or none, when run() sets *emit = false).
class SimpleStage : public Stage {
public:
    Status push() final {
        pending_ = false;
        bool emit = true;
        Status st = run(&emit);
        pending_ = st.ok() && emit;
        return st;
    }
    bool next() final {
        bool p = pending_;
        pending_ = false;
        return p;
    }

protected:
    virtual Status run(bool* emit) = 0;

private:
    bool pending_ = false;
};

}  // namespace jiffy::agent
