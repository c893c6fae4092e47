// Pool rows compiled for AVX512 (the loops in kernels/pool_impl.h, auto-vectorized).
#include <algorithm>
#include <cmath>

#include "kernels/pool.h"

namespace jiffy::kernels {
namespace {
#include "kernels/pool_impl.h"
}  // namespace

void pool2d_avx512(const Pool2d& p, const float* x, float* y, int64_t planes, float* scratch) {
    pool2d_run(p, x, y, planes, scratch);
}

}  // namespace jiffy::kernels
