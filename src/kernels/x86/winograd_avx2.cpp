// AVX2 build of the Winograd kernels (8-float vectors, 6 x 16 microkernel).
#pragma GCC diagnostic ignored "-Wunused-function"
#define JIFFY_CONV_VL 8
#define JIFFY_CONV_SUFFIX avx2
#define JIFFY_CONV_NO_ENTRY_POINTS
#include "kernels/conv_impl.h"
#include "kernels/winograd_impl.h"
