#include "agent/payload.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

namespace jiffy::agent {

bool PayloadFormat::parse(const std::string& s, Kind* k) {
    if (s == "f32" || s == "f32le" || s == "raw_f32") *k = kF32;
    else if (s == "i16" || s == "i16le" || s == "raw_i16") *k = kI16;
    else if (s == "json" || s == "json_array") *k = kJsonArray;
    else if (s == "json_field") *k = kJsonField;
    else return false;
    return true;
}

const char* PayloadFormat::name(Kind k) {
    switch (k) {
        case kF32: return "f32";
        case kI16: return "i16";
        case kJsonArray: return "json_array";
        case kJsonField: return "json_field";
    }
    return "?";
}

namespace {

Status from_json_value(const nlohmann::json& v, const char* what, float* out, size_t cap, size_t* count) {
    if (v.is_number()) {
        if (cap < 1) return invalid(what, ": no room for a value");
        out[0] = v.get<float>();
        *count = 1;
        return {};
    }
    if (!v.is_array()) return invalid(what, " must be a number or an array of numbers, got ", v.type_name());
    if (v.size() > cap) return invalid(what, " has ", v.size(), " values, more than the frame holds (", cap, ")");
    size_t i = 0;
    for (const auto& e : v) {
        if (!e.is_number()) return invalid(what, ": element ", i, " is ", e.type_name(), ", not a number");
        double d = e.get<double>();
        if (!std::isfinite(d)) return invalid(what, ": element ", i, " is not finite");
        out[i++] = float(d);
    }
    *count = i;
    return {};
}

}  // namespace

Status decode_payload(const PayloadFormat& fmt, const uint8_t* data, size_t n, float* out, size_t cap,
                      size_t* count) {
    *count = 0;
    switch (fmt.kind) {
        case PayloadFormat::kF32: {
            if (n % 4) return invalid("f32 payload of ", n, " bytes is not a whole number of 4-byte floats");
            size_t k = n / 4;
            if (k > cap) return invalid("f32 payload has ", k, " values, more than the frame holds (", cap, ")");
            for (size_t i = 0; i < k; ++i) {
                uint32_t u = uint32_t(data[4 * i]) | uint32_t(data[4 * i + 1]) << 8 | uint32_t(data[4 * i + 2]) << 16 |
                             uint32_t(data[4 * i + 3]) << 24;
                float f;
                std::memcpy(&f, &u, 4);
                if (!std::isfinite(f)) return invalid("f32 payload: value ", i, " is not finite");
                out[i] = f;
            }
            *count = k;
            return {};
        }
        case PayloadFormat::kI16: {
            if (n % 2) return invalid("i16 payload of ", n, " bytes is not a whole number of 2-byte samples");
            size_t k = n / 2;
            if (k > cap) return invalid("i16 payload has ", k, " samples, more than the frame holds (", cap, ")");
            for (size_t i = 0; i < k; ++i) out[i] = float(int16_t(uint16_t(data[2 * i]) | uint16_t(data[2 * i + 1]) << 8));
            *count = k;
            return {};
        }
        case PayloadFormat::kJsonArray:
        case PayloadFormat::kJsonField: {
            nlohmann::json j = nlohmann::json::parse(data, data + n, nullptr, /*allow_exceptions=*/false);
            if (j.is_discarded()) return invalid("payload is not valid JSON");
            if (fmt.kind == PayloadFormat::kJsonArray) return from_json_value(j, "JSON payload", out, cap, count);
            const nlohmann::json* cur = &j;
            size_t b = 0;
            while (b <= fmt.field.size()) {
                size_t e = fmt.field.find('.', b);
                if (e == std::string::npos) e = fmt.field.size();
                std::string key = fmt.field.substr(b, e - b);
                if (!cur->is_object()) return invalid("JSON payload: cannot take field '", key, "' of a ", cur->type_name());
                auto it = cur->find(key);
                if (it == cur->end()) return invalid("JSON payload has no field '", fmt.field, "'");
                cur = &*it;
                b = e + 1;
            }
            return from_json_value(*cur, ("JSON field '" + fmt.field + "'").c_str(), out, cap, count);
        }
    }
    return invalid("unknown payload format");
}

}  // namespace jiffy::agent
