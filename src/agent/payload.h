// Decoders from message bytes to float samples, shared by every source that receives bytes
// (stdin lines, MQTT payloads): raw little-endian f32 / i16, a JSON array of numbers, or one field
// of a JSON object (a dotted path, e.g. "sensor.temp" or "data.samples", holding a number or an
// array of numbers). Malformed input gives an error naming what is wrong; nothing is written past
// `cap` floats.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace jiffy::agent {

struct PayloadFormat {
    enum Kind { kF32, kI16, kJsonArray, kJsonField } kind = kJsonArray;
    std::string field;  // kJsonField: dotted path
    // "f32" | "i16" | "json" | "json_array" | "json_field"; false on an unknown name.
    static bool parse(const std::string& name, Kind* k);
    static const char* name(Kind k);
};

// Decodes data[0..n) into out[0..cap); *count = floats written. i16 samples keep their integer
// values (-32768..32767); scale with a `scale` stage where a model wants [-1, 1).
Status decode_payload(const PayloadFormat& fmt, const uint8_t* data, size_t n, float* out, size_t cap,
                      size_t* count);

}  // namespace jiffy::agent
