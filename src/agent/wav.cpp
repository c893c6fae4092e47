#include "agent/wav.h"

#include <cstdio>
#include <cstring>

namespace jiffy::agent {

namespace {
uint32_t le32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }
uint16_t le16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
}  // namespace

Status parse_wav(const uint8_t* d, size_t n, const std::string& what, WavData* out) {
    *out = WavData{};
    if (n < 12) return invalid(what, ": too short for a WAV header (", n, " bytes)");
    if (std::memcmp(d, "RIFF", 4) != 0 || std::memcmp(d + 8, "WAVE", 4) != 0)
        return invalid(what, ": not a WAV file (no RIFF/WAVE header)");
    size_t pos = 12;
    bool have_fmt = false;
    while (pos + 8 <= n) {
        const uint8_t* c = d + pos;
        uint32_t size = le32(c + 4);
        size_t body = pos + 8;
        if (std::memcmp(c, "fmt ", 4) == 0) {
            if (size < 16 || body + 16 > n) return invalid(what, ": truncated 'fmt ' chunk");
            uint16_t format = le16(d + body), channels = le16(d + body + 2), bits = le16(d + body + 14);
            uint32_t rate = le32(d + body + 4);
            // WAVE_FORMAT_EXTENSIBLE carries the real format in its sub-format GUID.
            if (format == 0xFFFE && size >= 40 && body + 26 <= n) format = le16(d + body + 24);
            if (format != 1) return invalid(what, ": WAV format ", format, " is not PCM (need 16-bit PCM mono)");
            if (channels != 1) return invalid(what, ": WAV has ", channels, " channels (need mono)");
            if (bits != 16) return invalid(what, ": WAV has ", bits, "-bit samples (need 16-bit PCM)");
            if (rate == 0 || rate > 1000000) return invalid(what, ": bad WAV sample rate ", rate);
            out->sample_rate = int(rate);
            have_fmt = true;
        } else if (std::memcmp(c, "data", 4) == 0) {
            if (!have_fmt) return invalid(what, ": WAV 'data' chunk before its 'fmt ' chunk");
            size_t avail = n - body;
            // Streams written without knowing their length put 0 or 0xFFFFFFFF here: take the rest.
            size_t bytes = (size == 0 || size == 0xFFFFFFFFu) ? avail : size;
            if (bytes > avail) return invalid(what, ": WAV is truncated: 'data' says ", size, " bytes, ", avail, " present");
            if (bytes % 2) return invalid(what, ": WAV 'data' chunk has an odd byte count (", bytes, ")");
            out->samples.resize(bytes / 2);
            for (size_t i = 0; i < bytes / 2; ++i) out->samples[i] = int16_t(le16(d + body + 2 * i));
            return {};
        }
        pos = body + size + (size & 1);
    }
    return invalid(what, have_fmt ? ": WAV has no 'data' chunk" : ": WAV has no 'fmt ' chunk");
}

Status read_wav(const std::string& path, WavData* out) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return invalid(path, ": cannot open: ", std::strerror(errno));
    std::vector<uint8_t> buf;
    uint8_t tmp[65536];
    size_t k;
    while ((k = std::fread(tmp, 1, sizeof tmp, f)) > 0) {
        buf.insert(buf.end(), tmp, tmp + k);
        if (buf.size() > (size_t(1) << 31)) {
            std::fclose(f);
            return invalid(path, ": WAV larger than 2 GiB");
        }
    }
    std::fclose(f);
    return parse_wav(buf.data(), buf.size(), path, out);
}

}  // namespace jiffy::agent
