#include "core/dtype.h"

#include <cmath>

namespace jiffy {

size_t dtype_size(DType t) {
    switch (t) {
        case DType::kF32: case DType::kI32: case DType::kU32: return 4;
        case DType::kU8: case DType::kI8: case DType::kBool: return 1;
        case DType::kU16: case DType::kI16: case DType::kF16: case DType::kBF16: return 2;
        case DType::kI64: case DType::kU64: case DType::kF64: return 8;
        default: return 0;
    }
}

const char* dtype_name(DType t) {
    switch (t) {
        case DType::kF32: return "float32";
        case DType::kU8: return "uint8";
        case DType::kI8: return "int8";
        case DType::kU16: return "uint16";
        case DType::kI16: return "int16";
        case DType::kI32: return "int32";
        case DType::kI64: return "int64";
        case DType::kString: return "string";
        case DType::kBool: return "bool";
        case DType::kF16: return "float16";
        case DType::kF64: return "float64";
        case DType::kU32: return "uint32";
        case DType::kU64: return "uint64";
        case DType::kBF16: return "bfloat16";
        default: return "undefined";
    }
}

const char* dtype_npy_descr(DType t) {
    switch (t) {
        case DType::kF32: return "<f4";
        case DType::kU8: return "|u1";
        case DType::kI8: return "|i1";
        case DType::kU16: return "<u2";
        case DType::kI16: return "<i2";
        case DType::kI32: return "<i4";
        case DType::kI64: return "<i8";
        case DType::kBool: return "|b1";
        case DType::kF16: return "<f2";
        case DType::kF64: return "<f8";
        case DType::kU32: return "<u4";
        case DType::kU64: return "<u8";
        case DType::kBF16: return "<V2";  // numpy has no bfloat16; raw 2-byte records
        default: return nullptr;
    }
}

bool dtype_from_npy_descr(const std::string& d, DType* out) {
    static const DType all[] = {DType::kF32, DType::kU8,  DType::kI8,  DType::kU16, DType::kI16,
                                DType::kI32, DType::kI64, DType::kBool, DType::kF16, DType::kF64,
                                DType::kU32, DType::kU64};
    std::string s = d;
    if (s.size() == 3 && s[0] == '=') s[0] = '<';
    if (s == "<b1" || s == "b1" || s == "?") s = "|b1";
    if (s == "<u1" || s == "u1") s = "|u1";
    if (s == "<i1" || s == "i1") s = "|i1";
    for (DType t : all)
        if (s == dtype_npy_descr(t)) {
            *out = t;
            return true;
        }
    return false;
}

bool dtype_is_float(DType t) {
    return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
}
bool dtype_is_int(DType t) {
    switch (t) {
        case DType::kU8: case DType::kI8: case DType::kU16: case DType::kI16: case DType::kI32:
        case DType::kI64: case DType::kU32: case DType::kU64: return true;
        default: return false;
    }
}
bool dtype_is_signed(DType t) {
    return t == DType::kI8 || t == DType::kI16 || t == DType::kI32 || t == DType::kI64 ||
           dtype_is_float(t);
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {  // subnormal: normalize
            int e = -1;
            do {
                ++e;
                man <<= 1;
            } while (!(man & 0x400));
            u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | man << 13;
    } else {
        u = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t absu = u & 0x7fffffff;
    if (absu >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (absu > 0x7f800000u ? 0x200 : 0));
    if (absu >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // overflow -> inf
    if (absu < 0x38800000u) {                                 // subnormal or zero in half
        // value = absu as float; half subnormal unit = 2^-24
        float a;
        std::memcpy(&a, &absu, 4);
        float scaled = a * 16777216.0f;  // / 2^-24
        uint32_t m = uint32_t(std::nearbyint(scaled));
        return uint16_t(sign | m);
    }
    uint32_t exp = ((absu >> 23) - 127 + 15);
    uint32_t man = absu & 0x7fffff;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
    return uint16_t(sign | h);
}

uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
    uint32_t rounding = 0x7fff + ((u >> 16) & 1);
    return uint16_t((u + rounding) >> 16);
}

}  // namespace jiffy
