// Element types. Values equal ONNX TensorProto.DataType so import is a checked cast.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace jiffy {

enum class DType : int32_t {
    kUndefined = 0,
    kF32 = 1,
    kU8 = 2,
    kI8 = 3,
    kU16 = 4,
    kI16 = 5,
    kI32 = 6,
    kI64 = 7,
    kString = 8,
    kBool = 9,
    kF16 = 10,
    kF64 = 11,
    kU32 = 12,
    kU64 = 13,
    kBF16 = 16,
};

// Size in bytes of one element; 0 for types Jiffy cannot hold (string, complex, undefined).
size_t dtype_size(DType t);
// "float32", "int64", ... (numpy-style names, used by the CLI and errors).
const char* dtype_name(DType t);
// numpy .npy descr ("<f4"), or nullptr.
const char* dtype_npy_descr(DType t);
bool dtype_from_npy_descr(const std::string& descr, DType* out);
bool dtype_is_float(DType t);  // f16, bf16, f32, f64
bool dtype_is_int(DType t);    // signed or unsigned integers (not bool)
bool dtype_is_signed(DType t);

// IEEE half and bfloat16 storage types with conversions.
struct f16 {
    uint16_t bits;
};
struct bf16 {
    uint16_t bits;
};
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even
inline float bf16_to_f32(uint16_t b) {
    uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
uint16_t f32_to_bf16(float f);  // round to nearest even

}  // namespace jiffy
