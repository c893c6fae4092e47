// Rules: a condition over named values with debounce (`for N frames`), hysteresis (a separate
// release condition), cooldown and rate limits. A rule passes its input through unchanged (its
// output is its input's buffer) and emits only when it fires, so it gates the stages and sinks
// after it. Its own value (`<name>`) is 1 while active, else 0.
#include <cctype>
#include <regex>
#include <set>

#include "agent/agent.h"
#include "agent/registry.h"

namespace jiffy::agent {

namespace {

class RuleStage : public SimpleStage {
public:
    std::string when_text, release_text;
    int64_t for_frames = 1, cooldown_frames = 0;
    int64_t cooldown_ms = 0;
    bool level = false;  // fire on every active frame instead of once per activation

    Status prepare(const Port& in, Pipeline& pipe) override {
        out_ = in;  // pass-through, no copy
        JIFFY_RETURN_IF_ERROR(Expr::compile(when_text, pipe.resolver(), &when_));
        if (!release_text.empty()) JIFFY_RETURN_IF_ERROR(Expr::compile(release_text, pipe.resolver(), &release_));
        return {};
    }
    bool is_rule() const override { return true; }
    std::vector<std::string> emit_defaults() const override { return when_.names(); }
    Status value(const std::string& sub, int index, const float** p) const override {
        if (!sub.empty() || index > 0) return invalid("rule '", name, "' has one value (1 while active)");
        *p = &active_f_;
        return {};
    }

    // One frame; true when the rule fires on it.
    bool step(int64_t now) {
        bool cond = when_.eval() != 0.0;
        if (since_fire_ < INT64_MAX) ++since_fire_;
        if (!active_) {
            run_ = cond ? run_ + 1 : 0;
            bool cooling = since_fire_ <= cooldown_frames || (cooldown_ms > 0 && last_fire_ns_ != 0 && now - last_fire_ns_ < cooldown_ms * 1000000);
            if (run_ >= for_frames && !cooling) {
                active_ = true;
                active_f_ = 1.0f;
                last_fire_ns_ = now;
                since_fire_ = 0;
                return true;
            }
            return false;
        }
        bool rel = release_text.empty() ? !cond : release_.eval() != 0.0;
        if (rel) {
            active_ = false;
            active_f_ = 0.0f;
            run_ = 0;
            return false;
        }
        return level;
    }

    // Back to the start (a new stream): inactive, no debounce run, no cooldown pending.
    void reset() {
        active_ = false;
        active_f_ = 0.0f;
        run_ = 0;
        since_fire_ = INT64_MAX;
        last_fire_ns_ = 0;
    }
    float active() const { return active_f_; }

protected:
    Status run(bool* emit) override {
        *emit = step(now_ns());
        return {};
    }

private:
    Expr when_, release_;
    bool active_ = false;
    float active_f_ = 0.0f;
    int64_t run_ = 0, since_fire_ = INT64_MAX, last_fire_ns_ = 0;
};

// Passes at most `burst` events at once and `per_s` per second on average (a token bucket), or
// one per `min_interval_ms`; drops (gates) the rest and counts them.
class RateLimitStage : public SimpleStage {
public:
    double per_s = 0, burst = 1;
    int64_t min_interval_ms = 0;
    Status prepare(const Port& in, Pipeline&) override {
        out_ = in;
        tokens_ = burst;
        return {};
    }
    Status value(const std::string& sub, int index, const float** p) const override {
        if (!sub.empty() || index > 0) return invalid("ratelimit '", name, "' has one value (events it held back)");
        *p = &held_f_;
        return {};
    }

protected:
    Status run(bool* emit) override {
        int64_t now = now_ns();
        bool ok = true;
        if (min_interval_ms > 0 && last_ns_ != 0 && now - last_ns_ < min_interval_ms * 1000000) ok = false;
        if (ok && per_s > 0) {
            if (last_refill_ns_ != 0) tokens_ = std::min(burst, tokens_ + double(now - last_refill_ns_) * 1e-9 * per_s);
            last_refill_ns_ = now;
            if (tokens_ >= 1.0) tokens_ -= 1.0;
            else ok = false;
        }
        if (ok) last_ns_ = now;
        else held_f_ += 1.0f;
        *emit = ok;
        return {};
    }

private:
    double tokens_ = 1;
    int64_t last_ns_ = 0, last_refill_ns_ = 0;
    float held_f_ = 0;
};

// Several rules side by side (`rules: [{name, when, ...}, ...]`), each with its own debounce,
// hysteresis and cooldown; unlike a chain of `rule` stages they do not gate one another. The rest
// of the pipeline runs once per rule that fires on a frame, and the action names that rule.
// Values: `<stage>.<rule>` (1 while active), `<stage>.score` (the firing rule's `score`
// expression at the time it fired). All rules start over when a new stream begins.
class RulesStage : public Stage {
public:
    struct Entry {
        std::unique_ptr<RuleStage> rule;
        std::string score_text;
        Expr score;
    };
    std::vector<Entry> rules;

    Status prepare(const Port& in, Pipeline& pipe) override {
        out_ = in;
        pipe_ = &pipe;
        for (auto& e : rules) {
            Status st = e.rule->prepare(in, pipe);
            if (st.ok() && !e.score_text.empty()) st = Expr::compile(e.score_text, pipe.resolver(), &e.score);
            if (!st.ok()) return st.prefix("rule '" + e.rule->name + "': ");
        }
        fired_.assign(rules.size(), 0);
        return {};
    }
    Status push() override {
        if (pipe_->frame && pipe_->frame->stream != stream_) {
            stream_ = pipe_->frame->stream;
            for (auto& e : rules) e.rule->reset();
        }
        int64_t now = now_ns();
        n_fired_ = 0;
        next_ = 0;
        for (size_t i = 0; i < rules.size(); ++i)
            if (rules[i].rule->step(now)) fired_[n_fired_++] = i;
        return {};
    }
    bool next() override {
        if (next_ >= n_fired_) return false;
        cur_ = fired_[next_++];
        Entry& e = rules[cur_];
        score_ = e.score_text.empty() ? 1.0f : float(e.score.eval());
        return true;
    }
    bool is_rule() const override { return true; }
    const char* rule_name() const override { return rules[cur_].rule->name.c_str(); }
    Status value(const std::string& sub, int index, const float** p) const override {
        if (index > 0) return invalid("rules '", name, "': values take no index");
        if (sub == "score") {
            *p = &score_;
            return {};
        }
        std::string list;
        for (const auto& e : rules) {
            if (e.rule->name == sub) return e.rule->value("", -1, p);
            list += ", " + e.rule->name;
        }
        return invalid("rules '", name, "' has no value '", sub, "' (values: score", list, ")");
    }

private:
    Pipeline* pipe_ = nullptr;
    std::vector<size_t> fired_;
    size_t n_fired_ = 0, next_ = 0, cur_ = 0;
    uint32_t stream_ = 0;
    float score_ = 0;
};

}  // namespace

// "score > 0.5 for 3 frames" -> ("score > 0.5", 3).
static bool split_for(std::string* text, int64_t* n) {
    static const std::regex re(R"(^(.*\S)\s+for\s+(\d{1,9})\s+frames?\s*$)");
    std::smatch m;
    if (!std::regex_match(*text, m, re)) return false;
    *n = std::stoll(m[2].str());
    *text = m[1].str();
    return true;
}

static Status read_rule(Fields& f, const std::string& type, RuleStage* s) {
    if (type == "rule") {
        JIFFY_RETURN_IF_ERROR(f.get_string("when", &s->when_text, true));
        int64_t n;
        if (split_for(&s->when_text, &n)) {
            if (n < 1) return f.error(f.node()["when"], "'for N frames' needs N >= 1");
            s->for_frames = n;
        }
        JIFFY_RETURN_IF_ERROR(f.get_string("release", &s->release_text));
    } else {  // threshold: value, on, off (hysteresis), below (fire when under instead of over)
        std::string value;
        double on = 0, off = 0;
        bool below = false;
        JIFFY_RETURN_IF_ERROR(f.get_string("value", &value, true));
        JIFFY_RETURN_IF_ERROR(f.get_double("on", &on, true));
        off = on;
        JIFFY_RETURN_IF_ERROR(f.get_double("off", &off));
        JIFFY_RETURN_IF_ERROR(f.get_bool("below", &below));
        if (!below && off > on) return f.error(f.node()["off"], "'off' must be <= 'on' (hysteresis: release below the trigger level)");
        if (below && off < on) return f.error(f.node()["off"], "with 'below', 'off' must be >= 'on'");
        auto num = [](double d) { return str_cat(d); };
        s->when_text = "(" + value + ")" + (below ? " < " : " > ") + num(on);
        s->release_text = "(" + value + ")" + (below ? " >= " : " <= ") + num(off);
    }
    JIFFY_RETURN_IF_ERROR(f.get_int("for", &s->for_frames, false, 1, 1 << 30));
    JIFFY_RETURN_IF_ERROR(f.get_int("cooldown_frames", &s->cooldown_frames, false, 0, 1 << 30));
    JIFFY_RETURN_IF_ERROR(f.get_int("cooldown_ms", &s->cooldown_ms, false, 0, 1 << 30));
    std::string mode = "edge";
    JIFFY_RETURN_IF_ERROR(f.get_enum("mode", &mode, {"edge", "level"}));
    s->level = mode == "level";
    return {};
}

Status make_rule_stage(Fields& f, const BuildEnv&, std::unique_ptr<Stage>* out) {
    auto s = std::make_unique<RuleStage>();
    JIFFY_RETURN_IF_ERROR(read_rule(f, f.node()["type"].Scalar(), s.get()));
    *out = std::move(s);
    return {};
}

Status make_rules_stage(Fields& f, const BuildEnv&, std::unique_ptr<Stage>* out) {
    auto s = std::make_unique<RulesStage>();
    YAML::Node list = f.get("rules");
    if (!list.IsDefined() || !list.IsSequence() || list.size() == 0)
        return f.error(list.IsDefined() ? list : f.node(), "'rules' must be a non-empty list of {name, when, ...}");
    std::set<std::string> names;
    for (const auto& n : list) {
        if (!n.IsMap()) return f.error(n, "each entry of 'rules' must be a mapping {name, when, ...}");
        Fields rf(n, f.file(), f.what() + " rule");
        RulesStage::Entry e;
        e.rule = std::make_unique<RuleStage>();
        std::string type = "rule";
        JIFFY_RETURN_IF_ERROR(rf.get_string("name", &e.rule->name, true));
        JIFFY_RETURN_IF_ERROR(rf.get_enum("type", &type, {"rule", "threshold"}));
        if (!names.insert(e.rule->name).second || e.rule->name == "score")
            return rf.error(n["name"], "rule name '" + e.rule->name + "' is used twice (or is 'score')");
        JIFFY_RETURN_IF_ERROR(read_rule(rf, type, e.rule.get()));
        JIFFY_RETURN_IF_ERROR(rf.get_string("score", &e.score_text));
        JIFFY_RETURN_IF_ERROR(rf.finish());
        e.rule->type = type;
        s->rules.push_back(std::move(e));
    }
    *out = std::move(s);
    return {};
}

Status make_ratelimit_stage(Fields& f, const BuildEnv&, std::unique_ptr<Stage>* out) {
    auto s = std::make_unique<RateLimitStage>();
    JIFFY_RETURN_IF_ERROR(f.get_double("per_s", &s->per_s));
    JIFFY_RETURN_IF_ERROR(f.get_double("burst", &s->burst));
    JIFFY_RETURN_IF_ERROR(f.get_int("min_interval_ms", &s->min_interval_ms, false, 0, 1 << 30));
    if (s->per_s < 0 || s->burst < 1) return f.error(f.node(), "'per_s' must be >= 0 and 'burst' >= 1");
    if (s->per_s == 0 && s->min_interval_ms == 0) return f.error(f.node(), "give 'per_s' or 'min_interval_ms'");
    *out = std::move(s);
    return {};
}

}  // namespace jiffy::agent
