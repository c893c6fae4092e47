// AVX-512 build of the conv kernels (16-float vectors, 12 x 32 GEMM microkernel).
#define JIFFY_CONV_VL 16
#define JIFFY_CONV_SUFFIX avx512
#include "kernels/conv_impl.h"
#include "kernels/conv_cv_impl.h"
#include "kernels/dw_plane_impl.h"
#include "kernels/dw_blocked_impl.h"
#include "kernels/conv_nhwc_impl.h"
#include "kernels/conv_stem_impl.h"
