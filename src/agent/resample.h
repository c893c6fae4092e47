// Streaming sample-rate conversion by a rational factor to/from (reduced to L/M): a polyphase
// windowed-sinc (Kaiser) low-pass FIR, one row of taps per output phase, built once at init.
// Its state (the input history and the phase of the next output) carries across calls, so a
// stream converted frame by frame equals the same stream converted in one call. The output is
// delayed by the filter's half length (W input samples, ~1 ms at 48 kHz) and its first outputs
// see zeros before the stream's start. Values keep their scale (int16-valued floats stay so).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace jiffy::agent {

class Resampler {
public:
    // from, to: rates in Hz. zeros: sinc zero crossings on each side of the filter (quality and
    // length: 2 * zeros / (2 * cutoff) taps per output); rolloff: the cutoff as a fraction of the
    // lower Nyquist frequency; beta: the Kaiser window's (80 dB stopband at 8).
    Status init(int64_t from, int64_t to, int zeros = 16, double rolloff = 0.92, double beta = 8.0);
    // Converts n input samples; writes the outputs to `out` (room for max_out(n)) and returns how
    // many. Allocates nothing.
    size_t process(const float* in, size_t n, float* out);
    // The most outputs n inputs can give.
    size_t max_out(size_t n) const { return size_t((uint64_t(n) * uint64_t(L_)) / uint64_t(M_)) + 1; }
    // Back to the start of a stream (history zero, phase 0).
    void reset();
    int64_t up() const { return L_; }
    int64_t down() const { return M_; }
    int taps() const { return 2 * W_; }

private:
    int64_t L_ = 1, M_ = 1;
    int W_ = 1;                // half length in input samples
    std::vector<float> table_;  // L rows of 2W taps
    std::vector<float> buf_;    // input history (2W - 1 samples) + one block
    size_t fill_ = 0;           // samples in buf_
    size_t start_ = 0;          // buf_ index of the next output's first tap
    int64_t phase_ = 0;         // the next output's phase, 0..L-1
    static constexpr size_t kBlock = 4096;
};

}  // namespace jiffy::agent
