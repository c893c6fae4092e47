// Silero VAD v5 streaming (see vad.h and docs/voice.md).
#include "agent/vad.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace jiffy::agent {
namespace {

Status from_error(const api::Error& e, const std::string& file) {
    Code c = e.code == int(Code::kInternal) ? Code::kInternal
             : e.code == int(Code::kUnsupported) ? Code::kUnsupported
                                                 : Code::kInvalid;
    return Status(c, file + ": " + e.message);
}

int find(const std::vector<api::TensorInfo>& v, const std::string& name) {
    for (size_t i = 0; i < v.size(); ++i)
        if (v[i].name == name) return int(i);
    return -1;
}

}  // namespace

Status SileroVad::create(const std::string& path, std::unique_ptr<SileroVad>* out) {
    std::unique_ptr<SileroVad> v(new SileroVad());
    api::Error err;
    v->model_ = api::Model::load(path, &err);
    if (err) return from_error(err, path);

    // Inputs input f32 [1,T], state f32 [2,1,128], sr i64 scalar; outputs output [1,1], stateN.
    auto ins = v->model_.inputs();
    auto outs = v->model_.outputs();
    if (ins.size() != 3 || find(ins, "input") < 0 || find(ins, "state") < 0 || find(ins, "sr") < 0)
        return invalid(path, ": expected Silero VAD v5 inputs 'input', 'state', 'sr'");
    if (find(outs, "output") < 0 || find(outs, "stateN") < 0)
        return invalid(path, ": expected Silero VAD v5 outputs 'output' and 'stateN'");
    if (ins[size_t(find(ins, "sr"))].dtype != "int64" || ins[size_t(find(ins, "input"))].dtype != "float32" ||
        ins[size_t(find(ins, "state"))].dtype != "float32")
        return invalid(path, ": expected input f32, state f32 and sr i64");

    // sr is frozen: the plan folds the model's `If` on the sample rate.
    std::vector<uint8_t> sr(sizeof(int64_t));
    std::memcpy(sr.data(), &kSampleRate, sizeof(int64_t));
    v->plan_ = v->model_.compile({{"input", {1, int64_t(kContext + kChunk)}}, {"state", {2, 1, 128}}, {"sr", {}}},
                                 &err, {{"sr", sr}});
    if (err) return from_error(err, path);
    const auto& ci = v->plan_.inputs();
    const auto& co = v->plan_.outputs();
    int ix = find(ci, "input"), is = find(ci, "state"), isr = find(ci, "sr");
    int op = find(co, "output"), os = find(co, "stateN");
    if (ix < 0 || is < 0 || op < 0 || os < 0)
        return invalid(path, ": compiled plan lacks input/state/output/stateN");
    if (co[size_t(op)].nbytes != sizeof(float) || co[size_t(os)].nbytes != kStateSize * sizeof(float))
        return invalid(path, ": expected a [1,1] probability and a [2,1,128] state out");

    v->x_.assign(kContext + kChunk, 0.0f);
    v->state_.assign(kStateSize, 0.0f);
    v->next_.assign(kStateSize, 0.0f);
    v->run_ = v->plan_.runner();
    if (isr >= 0) std::memcpy(v->run_.input(size_t(isr)), &kSampleRate, sizeof(int64_t));
    v->run_.bind_input(size_t(ix), v->x_.data());
    v->run_.bind_input(size_t(is), v->state_.data());
    v->run_.bind_output(size_t(op), &v->prob_);
    v->run_.bind_output(size_t(os), v->next_.data());
    *out = std::move(v);
    return {};
}

void SileroVad::reset() {
    std::fill(x_.begin(), x_.end(), 0.0f);
    std::fill(state_.begin(), state_.end(), 0.0f);
    prob_ = 0;
    steps_ = 0;
}

Status SileroVad::step(const int16_t* pcm, float* prob) {
    auto t0 = std::chrono::steady_clock::now();
    std::memmove(x_.data(), x_.data() + kChunk, kContext * sizeof(float));
    float* in = x_.data() + kContext;
    for (size_t i = 0; i < kChunk; ++i) in[i] = float(pcm[i]) * (1.0f / 32768.0f);
    if (api::Error e = run_.run()) [[unlikely]]
        return from_error(e, "silero vad");
    std::memcpy(state_.data(), next_.data(), kStateSize * sizeof(float));
    *prob = prob_;
    ++steps_;
    last_us_ = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    return {};
}

}  // namespace jiffy::agent
