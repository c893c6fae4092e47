// openWakeWord streaming chain on the Jiffy engine: melspectrogram -> embedding -> wake-word
// heads, one step per 80 ms (1280 samples) of 16 kHz mono int16 audio, following the rules the
// authors stream it with (docs/voice.md):
//
//   std::unique_ptr<WakeWordChain> ww;
//   Status st = WakeWordChain::create({mel, emb, {"hey_jarvis_v0.1.onnx"}}, &ww);
//   std::vector<float> scores(ww->head_names().size());
//   while (read 1280 samples into pcm) st = ww->step(pcm, scores.data());  // no allocation
//
// Every plan, buffer and binding is made in create(); step() only copies, runs and times.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "jiffy/jiffy.hpp"
#include "runtime/plan.h"  // jiffy::Session: api::Runner's inline constructor needs it complete

namespace jiffy::agent {

struct OwwOptions {
    std::string melspec_path, embedding_path;  // melspectrogram.onnx, embedding_model.onnx
    std::vector<std::string> head_paths;       // wake-word heads: input [1,N,96], output [1,C]
};

class WakeWordChain {
public:
    static constexpr size_t kStepSamples = 1280;  // 80 ms at 16 kHz
    static constexpr size_t kMelContext = 480;    // samples of the previous step fed again
    static constexpr size_t kMelWindow = 76;      // mel frames per embedding
    static constexpr size_t kMelBins = 32;
    static constexpr size_t kEmbDim = 96;
    static constexpr size_t kForcedZero = 5;      // first scores of a stream forced to 0
    static constexpr size_t kPrimeSamples = 4 * 16000;
    static constexpr uint32_t kPrimeSeed = 0x6f776b77;

    // Loads and compiles the models, checks their shapes, primes the embedding buffer.
    // Errors name the file and what is wrong.
    static Status create(const OwwOptions& opt, std::unique_ptr<WakeWordChain>* out);

    // One step: 1280 new samples -> one score per head (a multi-class head gives the max over
    // its non-background classes 1..C-1; all classes via head_classes()). The first
    // kForcedZero steps of a stream give 0. Allocation-free.
    Status step(const int16_t* pcm1280, float* scores);

    const std::vector<std::string>& head_names() const { return names_; }  // file stems
    size_t head_frames(size_t h) const { return heads_[h].frames; }        // N of [1,N,96]
    size_t head_num_classes(size_t h) const { return heads_[h].classes; }
    const float* head_classes(size_t h) const { return heads_[h].out.data(); }  // last step
    size_t steps() const { return steps_; }
    // Back to the start of a stream (mel buffer of ones, primed embeddings, no audio).
    void reset();

    struct Times {
        double mel_us = 0, emb_us = 0;  // the last step's melspectrogram and embedding runs
        std::vector<double> head_us;    // one per head
        double total_us = 0;            // the whole step(), copies and bookkeeping included
    };
    const Times& last_times() const { return times_; }

    // The deterministic priming noise (docs/voice.md): kPrimeSamples int16 values uniform in
    // [-1000, 1000) from mulberry32 seeded with kPrimeSeed.
    static void prime_noise(int16_t* out, size_t n);

private:
    WakeWordChain() = default;
    Status prime();

    struct Head {
        api::Model model;
        api::Compiled plan;
        api::Runner run;
        size_t frames = 0, classes = 0;
        std::vector<float> out;
    };

    api::Model mel_model_, emb_model_;
    api::Compiled mel_first_, mel_next_, emb_plan_;
    api::Runner mel_first_run_, mel_next_run_, emb_run_;
    size_t mel_first_frames_ = 0, mel_next_frames_ = 0;
    std::vector<Head> heads_;
    std::vector<std::string> names_;
    size_t rows_ = 0;              // embedding rows kept: the largest N of the heads
    std::vector<float> audio_;     // kMelContext + kStepSamples samples, unscaled int16 values
    std::vector<float> mel_new_;   // the mel model's output of one step
    std::vector<float> mel_;       // the last kMelWindow frames (embedding input)
    std::vector<float> emb_;       // the last rows_ embeddings (heads read their last N)
    std::vector<float> prime_;     // emb_ right after priming
    size_t steps_ = 0;
    Times times_;
};

}  // namespace jiffy::agent
