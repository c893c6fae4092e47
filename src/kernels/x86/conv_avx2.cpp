// AVX2 + FMA build of the conv kernels (8-float vectors, 6 x 16 GEMM microkernel).
#define JIFFY_CONV_VL 8
#define JIFFY_CONV_SUFFIX avx2
#include "kernels/conv_impl.h"
#include "kernels/conv_cv_impl.h"
#include "kernels/dw_plane_impl.h"
#include "kernels/dw_blocked_impl.h"
#include "kernels/conv_nhwc_impl.h"
