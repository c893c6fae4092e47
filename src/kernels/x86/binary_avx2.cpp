// Binary rows compiled for AVX2 (the loops in kernels/binary_impl.h, auto-vectorized).
#include "kernels/binary.h"

namespace jiffy::kernels {
namespace {
#include "kernels/binary_impl.h"
}  // namespace

BinaryRows binary_rows_avx2(BinOp op) { return rows_for(op); }

}  // namespace jiffy::kernels
