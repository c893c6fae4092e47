// NEON build of the conv kernels (4-float vectors, 6 x 8 GEMM microkernel). The same source as
// the portable build in conv.cpp, compiled with -ffp-contract=fast so the multiply-adds of the
// microkernel, im2col-free implicit GEMM and depthwise strips become FMLA.
#define JIFFY_CONV_VL 4
#define JIFFY_CONV_SUFFIX neon
#include "kernels/conv_impl.h"
#include "kernels/conv_cv_impl.h"
#include "kernels/dw_plane_impl.h"
#include "kernels/dw_blocked_impl.h"
#include "kernels/conv_nhwc_impl.h"
