// Factories for source, stage and sink types, by the `type:` name in the config. Each factory
// reads its own fields through `f` (line-numbered errors; the loader rejects unknown keys after
// it returns). Built-ins register in register_builtins(); adapters over other modules (MQTT
// source/sink, the openWakeWord chain and Silero VAD as composite stages) register in
// register_adapters() (adapters.cpp) — that is the one place to wire a new type.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "agent/fields.h"
#include "agent/sink.h"
#include "agent/source.h"
#include "agent/stage.h"

namespace jiffy::agent {

struct BuildEnv {
    std::string config_path;  // for messages
    std::string dir;          // relative file paths resolve against the config's folder
    bool fast = false;        // --fast: replay files as fast as possible
    std::string path(const std::string& p) const;  // resolved file path
};

using SourceFactory = Status (*)(Fields& f, const BuildEnv& env, std::unique_ptr<Source>* out);
using StageFactory = Status (*)(Fields& f, const BuildEnv& env, std::unique_ptr<Stage>* out);
using SinkFactory = Status (*)(Fields& f, const BuildEnv& env, std::unique_ptr<Sink>* out);

void register_source(const std::string& type, SourceFactory f);
void register_stage(const std::string& type, StageFactory f);
void register_sink(const std::string& type, SinkFactory f);

SourceFactory find_source(const std::string& type);
StageFactory find_stage(const std::string& type);
SinkFactory find_sink(const std::string& type);
std::string known_sources();
std::string known_stages();
std::string known_sinks();

// Idempotent; the config loader calls both.
void register_builtins();
void register_adapters();

// Built-in factories (defined in sources.cpp, stages.cpp, rules.cpp, model_stage.cpp, sinks.cpp).
Status make_file_source(Fields& f, const BuildEnv& env, std::unique_ptr<Source>* out);    // wav, raw, csv
Status make_timer_source(Fields& f, const BuildEnv& env, std::unique_ptr<Source>* out);
Status make_stdin_source(Fields& f, const BuildEnv& env, std::unique_ptr<Source>* out);
Status make_model_stage(Fields& f, const BuildEnv& env, std::unique_ptr<Stage>* out);
Status make_scale_stage(Fields& f, const BuildEnv& env, std::unique_ptr<Stage>* out);      // scale, normalize
Status make_window_stage(Fields& f, const BuildEnv& env, std::unique_ptr<Stage>* out);
Status make_resample_stage(Fields& f, const BuildEnv& env, std::unique_ptr<Stage>* out);
Status make_frame_stage(Fields& f, const BuildEnv& env, std::unique_ptr<Stage>* out);
Status make_topk_stage(Fields& f, const BuildEnv& env, std::unique_ptr<Stage>* out);       // argmax, topk
Status make_rule_stage(Fields& f, const BuildEnv& env, std::unique_ptr<Stage>* out);       // rule, threshold
Status make_rules_stage(Fields& f, const BuildEnv& env, std::unique_ptr<Stage>* out);       // rules (side by side)
Status make_ratelimit_stage(Fields& f, const BuildEnv& env, std::unique_ptr<Stage>* out);
Status make_stdout_sink(Fields& f, const BuildEnv& env, std::unique_ptr<Sink>* out);       // stdout, file
Status make_webhook_sink(Fields& f, const BuildEnv& env, std::unique_ptr<Sink>* out);

}  // namespace jiffy::agent
