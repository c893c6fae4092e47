// openWakeWord streaming chain (see oww.h and docs/voice.md).
#include "agent/oww.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace jiffy::agent {
namespace {

using Clock = std::chrono::steady_clock;

double us_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}

Status from_error(const api::Error& e, const std::string& file) {
    Code c = e.code == int(Code::kInternal) ? Code::kInternal
             : e.code == int(Code::kUnsupported) ? Code::kUnsupported
                                                 : Code::kInvalid;
    return Status(c, file + ": " + e.message);
}

std::string stem(const std::string& path) {
    size_t slash = path.find_last_of('/');
    std::string s = slash == std::string::npos ? path : path.substr(slash + 1);
    if (s.size() > 5 && s.compare(s.size() - 5, 5, ".onnx") == 0) s.resize(s.size() - 5);
    return s;
}

std::string shape_str(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) {
        if (i) r += ',';
        r += std::to_string(s[i]);
    }
    return r + "]";
}

// Loads `path` and checks it has one float32 input and at least one float32 output.
Status load_single(const std::string& path, api::Model* m) {
    api::Error err;
    *m = api::Model::load(path, &err);
    if (err) return from_error(err, path);
    auto in = m->inputs();
    auto out = m->outputs();
    if (in.size() != 1 || out.empty())
        return invalid(path, ": expected one input and at least one output, found ", in.size(),
                       " inputs and ", out.size(), " outputs");
    if (in[0].dtype != "float32" || out[0].dtype != "float32")
        return invalid(path, ": expected float32 input and output, found ", in[0].dtype, " and ",
                       out[0].dtype);
    return {};
}

Status compile_for(const api::Model& m, const std::string& path, std::vector<int64_t> shape,
                   api::Compiled* c) {
    api::Error err;
    std::map<std::string, std::vector<int64_t>> shapes;
    if (!shape.empty()) shapes[m.inputs()[0].name] = std::move(shape);
    *c = m.compile(shapes, &err);
    if (err) return from_error(err, path);
    return {};
}

// Frames of 32 bins in the mel model's output for an input of `samples`.
Status mel_frames(const api::Compiled& c, const std::string& path, size_t samples, size_t* frames) {
    const auto& o = c.outputs()[0];
    size_t n = o.nbytes / sizeof(float);
    if (o.shape.empty() || o.shape.back() != int64_t(WakeWordChain::kMelBins) || n == 0 ||
        n % WakeWordChain::kMelBins != 0)
        return invalid(path, ": for ", samples, " samples the output is ", shape_str(o.shape),
                       ", expected frames of ", WakeWordChain::kMelBins, " mel bins");
    *frames = n / WakeWordChain::kMelBins;
    if (*frames > WakeWordChain::kMelWindow)
        return invalid(path, ": ", *frames, " mel frames for ", samples, " samples, more than ",
                       WakeWordChain::kMelWindow);
    return {};
}

// openWakeWord's transform of the mel model's output, towards Google's speech_embedding input.
inline float mel_transform(float v) { return v / 10.0f + 2.0f; }

}  // namespace

void WakeWordChain::prime_noise(int16_t* out, size_t n) {
    uint32_t a = kPrimeSeed;
    for (size_t i = 0; i < n; ++i) {  // mulberry32
        a += 0x6d2b79f5u;
        uint32_t t = (a ^ (a >> 15)) * (a | 1u);
        t = (t + (t ^ (t >> 7)) * (t | 61u)) ^ t;
        t ^= t >> 14;
        out[i] = int16_t(int32_t(t % 2000u) - 1000);
    }
}

Status WakeWordChain::create(const OwwOptions& opt, std::unique_ptr<WakeWordChain>* out) {
    if (opt.head_paths.empty()) return invalid("wake-word chain: no head models given");
    std::unique_ptr<WakeWordChain> w(new WakeWordChain());

    // melspectrogram: [1, samples] -> frames x 32, for the first step (1280 samples) and the
    // next ones (480 + 1280).
    const std::string& mp = opt.melspec_path;
    if (Status st = load_single(mp, &w->mel_model_); !st.ok()) return st;
    if (w->mel_model_.inputs()[0].shape.size() != 2)
        return invalid(mp, ": expected a [1, samples] input, declared ",
                       shape_str(w->mel_model_.inputs()[0].shape));
    if (Status st = compile_for(w->mel_model_, mp, {1, int64_t(kStepSamples)}, &w->mel_first_); !st.ok())
        return st;
    if (Status st = compile_for(w->mel_model_, mp, {1, int64_t(kMelContext + kStepSamples)}, &w->mel_next_);
        !st.ok())
        return st;
    if (Status st = mel_frames(w->mel_first_, mp, kStepSamples, &w->mel_first_frames_); !st.ok()) return st;
    if (Status st = mel_frames(w->mel_next_, mp, kMelContext + kStepSamples, &w->mel_next_frames_); !st.ok())
        return st;

    // embedding: [1,76,32,1] -> 96 values.
    const std::string& ep = opt.embedding_path;
    if (Status st = load_single(ep, &w->emb_model_); !st.ok()) return st;
    if (Status st = compile_for(w->emb_model_, ep, {1, int64_t(kMelWindow), int64_t(kMelBins), 1}, &w->emb_plan_);
        !st.ok())
        return st;
    if (w->emb_plan_.outputs()[0].nbytes != kEmbDim * sizeof(float))
        return invalid(ep, ": output ", shape_str(w->emb_plan_.outputs()[0].shape), " is not ", kEmbDim,
                       " values");

    // Heads: [1,N,96] -> [1,C].
    for (const std::string& hp : opt.head_paths) {
        Head h;
        if (Status st = load_single(hp, &h.model); !st.ok()) return st;
        auto s = h.model.inputs()[0].shape;
        if (s.size() != 3 || s[0] != 1 || s[1] <= 0 || s[2] != int64_t(kEmbDim))
            return invalid(hp, ": expected a fixed [1,N,", kEmbDim, "] input, declared ", shape_str(s));
        if (Status st = compile_for(h.model, hp, {}, &h.plan); !st.ok()) return st;
        h.frames = size_t(s[1]);
        h.classes = h.plan.outputs()[0].nbytes / sizeof(float);
        if (h.classes == 0) return invalid(hp, ": empty output");
        h.out.assign(h.classes, 0.0f);
        w->rows_ = std::max(w->rows_, h.frames);
        w->names_.push_back(stem(hp));
        w->heads_.push_back(std::move(h));
    }

    // Buffers and fixed bindings: step() never rebinds.
    w->audio_.assign(kMelContext + kStepSamples, 0.0f);
    w->mel_new_.assign(std::max(w->mel_first_frames_, w->mel_next_frames_) * kMelBins, 0.0f);
    w->mel_.assign(kMelWindow * kMelBins, 1.0f);
    w->emb_.assign(w->rows_ * kEmbDim, 0.0f);
    w->mel_first_run_ = w->mel_first_.runner();
    w->mel_next_run_ = w->mel_next_.runner();
    w->emb_run_ = w->emb_plan_.runner();
    w->mel_first_run_.bind_input(0, w->audio_.data() + kMelContext);
    w->mel_first_run_.bind_output(0, w->mel_new_.data());
    w->mel_next_run_.bind_input(0, w->audio_.data());
    w->mel_next_run_.bind_output(0, w->mel_new_.data());
    w->emb_run_.bind_input(0, w->mel_.data());
    w->emb_run_.bind_output(0, w->emb_.data() + (w->rows_ - 1) * kEmbDim);
    for (Head& h : w->heads_) {
        h.run = h.plan.runner();
        h.run.bind_input(0, w->emb_.data() + (w->rows_ - h.frames) * kEmbDim);
        h.run.bind_output(0, h.out.data());
    }
    w->times_.head_us.assign(w->heads_.size(), 0.0);

    if (Status st = w->prime(); !st.ok()) return st;
    w->reset();
    *out = std::move(w);
    return {};
}

// openWakeWord fills its embedding buffer with the embeddings of 4 s of low random noise before
// the first step: the mel of the whole noise, then windows of 76 frames every 8 frames. We do
// the same with deterministic noise (prime_noise) and keep the last rows_ embeddings.
Status WakeWordChain::prime() {
    const std::string mp = "melspectrogram (priming)";
    api::Compiled c;
    if (Status st = compile_for(mel_model_, mp, {1, int64_t(kPrimeSamples)}, &c); !st.ok()) return st;
    size_t n = c.outputs()[0].nbytes / sizeof(float);
    size_t frames = n / kMelBins;
    std::vector<int16_t> noise(kPrimeSamples);
    prime_noise(noise.data(), noise.size());
    api::Runner r = c.runner();
    float* x = static_cast<float*>(r.input(0));
    for (size_t i = 0; i < kPrimeSamples; ++i) x[i] = float(noise[i]);
    if (api::Error e = r.run()) return from_error(e, mp);
    const float* mel = static_cast<const float*>(r.output(0));

    std::vector<float> rows;  // every window's embedding, oldest first
    for (size_t f = 0; f + kMelWindow <= frames; f += 8) {
        for (size_t i = 0; i < kMelWindow * kMelBins; ++i) mel_[i] = mel_transform(mel[f * kMelBins + i]);
        if (api::Error e = emb_run_.run()) return from_error(e, "embedding (priming)");
        const float* e = emb_.data() + (rows_ - 1) * kEmbDim;
        rows.insert(rows.end(), e, e + kEmbDim);
    }
    size_t have = rows.size() / kEmbDim;
    if (have < rows_)
        return invalid("wake-word chain: a head needs ", rows_, " embedding rows, priming gives ", have);
    prime_.assign(rows.end() - std::ptrdiff_t(rows_ * kEmbDim), rows.end());
    return {};
}

void WakeWordChain::reset() {
    std::fill(audio_.begin(), audio_.end(), 0.0f);
    std::fill(mel_.begin(), mel_.end(), 1.0f);
    std::copy(prime_.begin(), prime_.end(), emb_.begin());
    for (Head& h : heads_) std::fill(h.out.begin(), h.out.end(), 0.0f);
    steps_ = 0;
}

Status WakeWordChain::step(const int16_t* pcm, float* scores) {
    Clock::time_point t0 = Clock::now();
    // Audio: the last kMelContext samples of the previous step, then the new ones (first step:
    // only the new ones, through the 1280-sample plan).
    std::memmove(audio_.data(), audio_.data() + kStepSamples, kMelContext * sizeof(float));
    float* in = audio_.data() + kMelContext;
    for (size_t i = 0; i < kStepSamples; ++i) in[i] = float(pcm[i]);
    bool first = steps_ == 0;
    api::Runner& mr = first ? mel_first_run_ : mel_next_run_;
    if (api::Error e = mr.run()) [[unlikely]]
        return from_error(e, "melspectrogram");
    // Mel window: drop the oldest frames, append the new ones transformed.
    size_t nf = first ? mel_first_frames_ : mel_next_frames_;
    size_t keep = (kMelWindow - nf) * kMelBins;
    std::memmove(mel_.data(), mel_.data() + nf * kMelBins, keep * sizeof(float));
    for (size_t i = 0; i < nf * kMelBins; ++i) mel_[keep + i] = mel_transform(mel_new_[i]);
    Clock::time_point t1 = Clock::now();

    // Embedding of the last 76 frames, written as the newest row of emb_.
    std::memmove(emb_.data(), emb_.data() + kEmbDim, (rows_ - 1) * kEmbDim * sizeof(float));
    if (api::Error e = emb_run_.run()) [[unlikely]]
        return from_error(e, "embedding");
    Clock::time_point t2 = Clock::now();
    times_.mel_us = us_between(t0, t1);
    times_.emb_us = us_between(t1, t2);

    bool forced = steps_ < kForcedZero;
    for (size_t h = 0; h < heads_.size(); ++h) {
        Head& hd = heads_[h];
        Clock::time_point a = Clock::now();
        if (api::Error e = hd.run.run()) [[unlikely]]
            return from_error(e, names_[h]);
        times_.head_us[h] = us_between(a, Clock::now());
        if (forced) std::fill(hd.out.begin(), hd.out.end(), 0.0f);
        float s = hd.out[0];
        if (hd.classes > 1) {
            s = hd.out[1];
            for (size_t c = 2; c < hd.classes; ++c) s = std::max(s, hd.out[c]);
        }
        scores[h] = s;
    }
    ++steps_;
    times_.total_us = us_between(t0, Clock::now());
    return {};
}

}  // namespace jiffy::agent
