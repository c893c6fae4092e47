// Silero VAD v5 streaming on the Jiffy engine, as its authors stream it (docs/voice.md):
// 512-sample chunks of 16 kHz audio as floats in [-1, 1) (int16 / 32768), with the last 64
// samples of the previous chunk prepended (input [1,576]); the LSTM state [2,1,128] starts at
// zeros and the returned state is fed back; sr = 16000 is frozen into the plan at compile time
// (its `If` on the sample rate folds away).
//
//   std::unique_ptr<SileroVad> vad;
//   Status st = SileroVad::create(".cache/models/silero_vad_v5.onnx", &vad);
//   float p;
//   while (read 512 samples into pcm) st = vad->step(pcm, &p);  // no allocation
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

class SileroVad {
public:
    static constexpr size_t kChunk = 512;   // 32 ms at 16 kHz
    static constexpr size_t kContext = 64;  // samples of the previous chunk prepended
    static constexpr size_t kStateSize = 2 * 1 * 128;
    static constexpr int64_t kSampleRate = 16000;

    // Loads and compiles the model; errors name the file and what is wrong.
    static Status create(const std::string& model_path, std::unique_ptr<SileroVad>* out);

    // One chunk of 512 int16 samples -> the speech probability. Allocation-free.
    Status step(const int16_t* pcm512, float* prob);
    void reset();  // zero state and context: the start of a stream
    double last_us() const { return last_us_; }  // the last step's model run
    size_t steps() const { return steps_; }

private:
    SileroVad() = default;

    api::Model model_;
    api::Compiled plan_;
    api::Runner run_;
    size_t out_prob_ = 0, out_state_ = 0;
    std::vector<float> x_;      // kContext + kChunk
    std::vector<float> state_;  // kStateSize, bound as the state input
    std::vector<float> next_;   // kStateSize, bound as the state output
    float prob_ = 0;
    double last_us_ = 0;
    size_t steps_ = 0;
};

}  // namespace jiffy::agent
