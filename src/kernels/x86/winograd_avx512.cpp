// AVX-512 build of the Winograd kernels (16-float vectors, 12 x 32 microkernel).
#pragma GCC diagnostic ignored "-Wunused-function"
#define JIFFY_CONV_VL 16
#define JIFFY_CONV_SUFFIX avx512
#define JIFFY_CONV_NO_ENTRY_POINTS
#include "kernels/conv_impl.h"
#include "kernels/winograd_impl.h"
