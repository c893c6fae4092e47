#include "agent/config.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <set>

#include "agent/fields.h"
#include "agent/registry.h"

namespace jiffy::agent {

namespace {

Status list_of(Fields& f, const std::string& key, bool required, std::vector<YAML::Node>* out) {
    YAML::Node n = f.get(key);
    if (!n.IsDefined() || n.IsNull()) {
        if (required) return invalid(f.at(), "missing required field '", key, "'");
        return {};
    }
    if (!n.IsSequence()) return f.error(n, "field '" + key + "' must be a list");
    for (const auto& e : n) {
        if (!e.IsMap()) return f.error(e, "each entry of '" + key + "' must be a mapping with a 'type'");
        out->push_back(e);
    }
    return {};
}

// name + type + the factory's own fields, then unknown-key check.
template <typename T, typename Factory>
Status build_one(const YAML::Node& n, const BuildEnv& env, const std::string& who, const char* kind, size_t idx,
                 Factory (*find)(const std::string&), std::string (*known)(), std::set<std::string>* names,
                 std::unique_ptr<T>* out, std::function<Status(Fields&, T*)> extra = nullptr) {
    std::string type, name;
    Fields probe(n, env.config_path, who + " " + kind);
    JIFFY_RETURN_IF_ERROR(probe.get_string("type", &type, true));
    JIFFY_RETURN_IF_ERROR(probe.get_string("name", &name));
    if (name.empty()) name = kind == std::string("stage") ? type + std::to_string(idx) : type + std::to_string(idx);
    Fields f(n, env.config_path, who + " " + kind + " '" + name + "'");
    f.get("type");
    f.get("name");
    Factory make = find(type);
    if (!make) return f.error(n["type"], "unknown " + std::string(kind) + " type '" + type + "' (known: " + known() + ")");
    if (!names->insert(name).second) return f.error(n["name"], "the name '" + name + "' is used twice");
    for (char c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-')
            return f.error(n["name"], "names may hold letters, digits, '_' and '-' only (they are used in expressions)");
    Status st = make(f, env, out);
    if (!st.ok()) {
        // Factory messages that lack a location get the mapping's.
        if (st.message().rfind(env.config_path, 0) != 0) return invalid(f.at(), st.message());
        return st;
    }
    (*out)->name = name;
    (*out)->type = type;
    if (extra) JIFFY_RETURN_IF_ERROR(extra(f, out->get()));
    return f.finish();
}

Status build_agent(const YAML::Node& n, const BuildEnv& env, size_t idx, std::set<std::string>* agent_names,
                   std::unique_ptr<Agent>* out) {
    Fields probe(n, env.config_path, "agent " + std::to_string(idx));
    std::string name;
    JIFFY_RETURN_IF_ERROR(probe.get_string("name", &name, true));
    if (!agent_names->insert(name).second) return probe.error(n["name"], "agent name '" + name + "' is used twice");
    const std::string who = "agent '" + name + "'";
    Fields f(n, env.config_path, who);
    f.get("name");
    AgentOptions opt;
    opt.name = name;
    opt.fast = env.fast;

    YAML::Node trig = f.get("trigger");
    if (trig.IsDefined() && !trig.IsNull()) {
        if (trig.IsScalar() && trig.Scalar() == "event") {
        } else if (trig.IsMap()) {
            Fields tf(trig, env.config_path, who + " trigger");
            double ms = 0;
            JIFFY_RETURN_IF_ERROR(tf.get_double("period_ms", &ms, true));
            if (ms <= 0 || ms > 3.6e6) return tf.error(trig["period_ms"], "'period_ms' must be in (0, 3600000]");
            opt.period_us = int64_t(ms * 1000.0);
            JIFFY_RETURN_IF_ERROR(tf.finish());
        } else {
            return f.error(trig, "'trigger' must be 'event' or {period_ms: N}");
        }
    }
    JIFFY_RETURN_IF_ERROR(f.get_int("deadline_us", &opt.deadline_us, false, 0));
    JIFFY_RETURN_IF_ERROR(f.get_int("budget_us", &opt.budget_us, false, 0));
    JIFFY_RETURN_IF_ERROR(f.get_int("spin_us", &opt.spin_us, false, 0, 100000));
    JIFFY_RETURN_IF_ERROR(f.get_int("queue_spin_us", &opt.queue_spin_us, false, 0, 100000));
    int64_t q = 64;
    JIFFY_RETURN_IF_ERROR(f.get_int("queue", &q, false, 1, 1 << 20));
    opt.queue_capacity = size_t(q);
    std::vector<int64_t> cpus;
    JIFFY_RETURN_IF_ERROR(f.get_ints("cpus", &cpus));
    for (int64_t c : cpus) {
        if (c < 0 || c >= CPU_SETSIZE) return f.error(n["cpus"], "cpu numbers must be in [0, " + std::to_string(CPU_SETSIZE) + ")");
        opt.rt.cpus.push_back(int(c));
    }
    std::string rt = "none";
    JIFFY_RETURN_IF_ERROR(f.get_enum("rt", &rt, {"none", "fifo", "deadline"}));
    opt.rt.policy = rt == "fifo" ? RtOptions::kFifo : rt == "deadline" ? RtOptions::kDeadline : RtOptions::kNone;
    int64_t prio = 50;
    JIFFY_RETURN_IF_ERROR(f.get_int("priority", &prio, false, 1, 99));
    opt.rt.priority = int(prio);
    JIFFY_RETURN_IF_ERROR(f.get_bool("mlockall", &opt.rt.mlockall));
    std::string exec = "auto";
    JIFFY_RETURN_IF_ERROR(f.get_enum("execution", &exec, {"auto", "thread", "inline"}));
    opt.exec = exec == "inline" ? AgentOptions::kInline : exec == "thread" ? AgentOptions::kThread : AgentOptions::kAuto;
    if (opt.exec == AgentOptions::kInline && opt.period_us > 0)
        return f.error(n["execution"], "'execution: inline' runs the stages on each event; it needs 'trigger: event', not a period");
    if (opt.rt.policy == RtOptions::kDeadline && opt.period_us == 0 && opt.deadline_us == 0)
        return f.error(n["rt"], "rt: deadline needs a trigger period or a deadline_us");

    Pipeline pipe;
    std::set<std::string> names;
    std::vector<YAML::Node> src_nodes, stage_nodes, sink_nodes;
    JIFFY_RETURN_IF_ERROR(list_of(f, "sources", false, &src_nodes));
    JIFFY_RETURN_IF_ERROR(list_of(f, "stages", false, &stage_nodes));
    JIFFY_RETURN_IF_ERROR(list_of(f, "sinks", true, &sink_nodes));
    for (size_t i = 0; i < src_nodes.size(); ++i) {
        std::unique_ptr<Source> s;
        JIFFY_RETURN_IF_ERROR((build_one<Source, SourceFactory>(src_nodes[i], env, who, "source", i, find_source, known_sources, &names, &s)));
        pipe.sources.push_back(std::move(s));
    }
    if (opt.exec == AgentOptions::kInline && src_nodes.size() != 1)
        return f.error(n["execution"], "'execution: inline' runs the stages on the source's thread; it needs exactly one source (this agent has " +
                                           std::to_string(src_nodes.size()) + ")");
    std::function<Status(Fields&, Stage*)> fallback = [&](Fields& sf, Stage* st) -> Status {
        YAML::Node fb = sf.get("fallback");
        if (!fb.IsDefined() || fb.IsNull()) return {};
        if (fb.IsScalar() && fb.Scalar() == "skip") {
            st->fallback = Stage::kSkip;
            return {};
        }
        if (!fb.IsMap()) return sf.error(fb, "'fallback' must be 'skip' or a stage mapping (e.g. {type: model, file: small.onnx})");
        std::unique_ptr<Stage> alt;
        std::set<std::string> scratch;
        JIFFY_RETURN_IF_ERROR((build_one<Stage, StageFactory>(fb, env, who + " stage '" + st->name + "'", "fallback", 0, find_stage,
                                                             known_stages, &scratch, &alt)));
        st->fallback = Stage::kAlt;
        st->alt = std::move(alt);
        return {};
    };
    for (size_t i = 0; i < stage_nodes.size(); ++i) {
        std::unique_ptr<Stage> s;
        JIFFY_RETURN_IF_ERROR((build_one<Stage, StageFactory>(stage_nodes[i], env, who, "stage", i, find_stage, known_stages, &names, &s, fallback)));
        s->where = env.config_path + ":" + std::to_string(stage_nodes[i].Mark().line + 1) + ": ";
        pipe.stages.push_back(std::move(s));
    }
    std::vector<std::unique_ptr<Sink>> sinks;
    std::set<std::string> sink_names;
    std::function<Status(Fields&, Sink*)> sink_extra = [](Fields& sf, Sink* s) { return sf.get_bool("drop_stale", &s->drop_stale); };
    for (size_t i = 0; i < sink_nodes.size(); ++i) {
        std::unique_ptr<Sink> s;
        JIFFY_RETURN_IF_ERROR((build_one<Sink, SinkFactory>(sink_nodes[i], env, who, "sink", i, find_sink, known_sinks, &sink_names, &s, sink_extra)));
        sinks.push_back(std::move(s));
    }
    std::vector<std::pair<std::string, std::string>> emit;
    YAML::Node en = f.get("emit");
    if (en.IsDefined() && !en.IsNull()) {
        if (en.IsSequence()) {
            for (const auto& e : en) {
                if (!e.IsScalar()) return f.error(e, "'emit' entries must be value names or expressions");
                emit.emplace_back(e.Scalar(), e.Scalar());
            }
        } else if (en.IsMap()) {
            for (auto it = en.begin(); it != en.end(); ++it) {
                if (!it->second.IsScalar()) return f.error(it->second, "'emit' maps names to expressions");
                emit.emplace_back(it->first.Scalar(), it->second.Scalar());
            }
        } else {
            return f.error(en, "'emit' must be a list of value names or a mapping {name: expression}");
        }
    }
    JIFFY_RETURN_IF_ERROR(f.finish());

    Status st = Agent::create(std::move(opt), std::move(pipe), std::move(sinks), std::move(emit), out);
    if (!st.ok() && st.message().rfind(env.config_path, 0) != 0)
        return invalid(env.config_path, ":", n.Mark().line + 1, ": ", st.message());
    if (!st.ok()) return st;
    return {};
}

}  // namespace

Status load_agents_text(const std::string& text, const std::string& name, const std::string& dir, const LoadOptions& opt,
                        std::vector<std::unique_ptr<Agent>>* out) {
    register_builtins();
    register_adapters();
    out->clear();
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
        return invalid(name, ":", e.mark.line + 1, ": invalid YAML: ", e.msg);
    }
    BuildEnv env;
    env.config_path = name;
    env.dir = dir;
    env.fast = opt.fast;
    try {
        if (!root.IsMap()) return invalid(name, ":", root.Mark().line + 1, ": expected a mapping with 'agents:' at the top level");
        Fields top(root, name, "config");
        std::vector<YAML::Node> agents;
        JIFFY_RETURN_IF_ERROR(list_of(top, "agents", true, &agents));
        JIFFY_RETURN_IF_ERROR(top.finish());
        if (agents.empty()) return invalid(top.at(root["agents"]), "'agents' is empty");
        std::set<std::string> names;
        for (size_t i = 0; i < agents.size(); ++i) {
            std::unique_ptr<Agent> a;
            JIFFY_RETURN_IF_ERROR(build_agent(agents[i], env, i, &names, &a));
            out->push_back(std::move(a));
        }
    } catch (const std::exception& e) {  // yaml-cpp conversions: never let one escape
        return invalid(name, ": ", e.what());
    }
    return {};
}

Status load_agents(const std::string& path, const LoadOptions& opt, std::vector<std::unique_ptr<Agent>>* out) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return invalid(path, ": no such config file");
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string dir = std::filesystem::path(path).parent_path().string();
    return load_agents_text(ss.str(), path, dir, opt, out);
}

}  // namespace jiffy::agent
