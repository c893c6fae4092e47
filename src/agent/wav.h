// WAV reader for 16-bit PCM mono (what the voice models take). Parses the RIFF header itself and
// says exactly what is wrong with a file it rejects (not RIFF, not PCM, stereo, 8-bit, truncated).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace jiffy::agent {

struct WavData {
    int sample_rate = 0;
    std::vector<int16_t> samples;
};

Status read_wav(const std::string& path, WavData* out);
// The same over bytes already in memory (`what` names them in errors).
Status parse_wav(const uint8_t* data, size_t n, const std::string& what, WavData* out);

}  // namespace jiffy::agent
