// Binary rows, baseline ISA (SSE2 on x86-64, whatever the target has elsewhere), and dispatch.
#include "kernels/binary.h"

namespace jiffy::kernels {
namespace {
#include "kernels/binary_impl.h"
}  // namespace

BinaryRows binary_rows_scalar(BinOp op) { return rows_for(op); }

BinaryRows binary_rows_for(Isa isa, BinOp op) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return binary_rows_avx512(op);
    if (isa == Isa::kAvx2) return binary_rows_avx2(op);
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return binary_rows_neon(op);
#endif
    return binary_rows_scalar(op);
}

}  // namespace jiffy::kernels
