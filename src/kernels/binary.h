// float32 elementwise binary rows for the broadcasting arithmetic ops (Add/Sub/Mul/Div/Max/Min)
// and PRelu.
// The op collapses its broadcast into rows whose inner loop is one of
//   vv: y[i] = a[i] op b[i]     vs: y[i] = a[i] op s     sv: y[i] = s op b[i]
// and picks the functions for its ISA once at prepare (binary_rows_for). Max/Min propagate NaN
// (as the ONNX reference does). Outputs never alias inputs.
#pragma once
#include <cstdint>

#include "kernels/cpu.h"

namespace jiffy::kernels {

// kPRelu: y = a < 0 ? a * b : a (a = X, b = slope); not an elementwise-chain step.
enum class BinOp : int { kAdd = 0, kSub, kMul, kDiv, kMax, kMin, kPRelu };

using BinVV = void (*)(const float* a, const float* b, float* y, int64_t n);
using BinVS = void (*)(const float* a, float s, float* y, int64_t n);
using BinSV = void (*)(float s, const float* b, float* y, int64_t n);
struct BinaryRows {
    BinVV vv = nullptr;
    BinVS vs = nullptr;
    BinSV sv = nullptr;
};

BinaryRows binary_rows_for(Isa isa, BinOp op);
BinaryRows binary_rows_scalar(BinOp op);
BinaryRows binary_rows_avx2(BinOp op);
BinaryRows binary_rows_avx512(BinOp op);
BinaryRows binary_rows_neon(BinOp op);  // src/kernels/arm/binary_neon.cpp (aarch64 only)

}  // namespace jiffy::kernels
