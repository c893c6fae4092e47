// Plain loops over __restrict pointers that the compiler vectorizes for the ISA of the including
// translation unit (binary.cpp baseline, x86/binary_avx2.cpp, x86/binary_avx512.cpp). Include it
// inside `namespace jiffy::kernels { namespace { ... } }` (internal linkage, so the per-ISA
// copies of these templates never merge at link time) after kernels/binary.h.

template <BinOp OP>
inline float bin_op(float a, float b) {
    if constexpr (OP == BinOp::kAdd) return a + b;
    if constexpr (OP == BinOp::kSub) return a - b;
    if constexpr (OP == BinOp::kMul) return a * b;
    if constexpr (OP == BinOp::kDiv) return a / b;
    if constexpr (OP == BinOp::kMax) {
        float m = a > b ? a : b;
        return (a != a) | (b != b) ? a + b : m;  // NaN in, NaN out (a + b is NaN then)
    }
    if constexpr (OP == BinOp::kMin) {
        float m = a < b ? a : b;
        return (a != a) | (b != b) ? a + b : m;
    }
    if constexpr (OP == BinOp::kPRelu) return a < 0.0f ? a * b : a;
}

template <BinOp OP>
void vv(const float* __restrict a, const float* __restrict b, float* __restrict y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = bin_op<OP>(a[i], b[i]);
}
template <BinOp OP>
void vs(const float* __restrict a, float s, float* __restrict y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = bin_op<OP>(a[i], s);
}
template <BinOp OP>
void sv(float s, const float* __restrict b, float* __restrict y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = bin_op<OP>(s, b[i]);
}

template <BinOp OP>
BinaryRows rows() {
    return BinaryRows{vv<OP>, vs<OP>, sv<OP>};
}

inline BinaryRows rows_for(BinOp op) {
    switch (op) {
        case BinOp::kAdd: return rows<BinOp::kAdd>();
        case BinOp::kSub: return rows<BinOp::kSub>();
        case BinOp::kMul: return rows<BinOp::kMul>();
        case BinOp::kDiv: return rows<BinOp::kDiv>();
        case BinOp::kMax: return rows<BinOp::kMax>();
        case BinOp::kMin: return rows<BinOp::kMin>();
        case BinOp::kPRelu: return rows<BinOp::kPRelu>();
    }
    return rows<BinOp::kAdd>();
}

