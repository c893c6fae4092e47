// Packing and ISA dispatch of the direct stem conv (conv_stem.h); the AVX-512 kernel is in
// kernels/conv_stem_impl.h (built in the AVX-512 conv translation unit, x86/conv_avx512.cpp).
#include "kernels/conv_stem.h"

#include <algorithm>
#include <cstring>

namespace jiffy::kernels {

#if defined(__x86_64__)
void conv_stem_avx512(const Conv2DGeom& g, const float* x, const float* packed, const float* res, float* y,
                      const ConvEpi& e, int64_t oy0, int64_t oy1, bool nhwc, bool bcast, int64_t yrow0);
#endif

bool ConvStem::suits(Isa isa, const Conv2DGeom& g) {
#if defined(__x86_64__)
    return isa == Isa::kAvx512 && g.kh == 3 && g.kw == 3 && g.sh == 2 && g.sw == 2 && g.dh == 1 &&
           g.dw == 1 && g.C >= 1 && g.C <= 4 && g.M >= 8 && g.M % 8 == 0 && g.ph >= 0 && g.ph <= 1 &&
           g.pw >= 0 && g.pw <= 1 && g.OW >= 16 && g.OH >= 1 && g.W >= 2;
#else
    (void)isa;
    (void)g;
    return false;
#endif
}

void ConvStem::pack(const float* W, const float* b, float* dst) const {
    const int64_t M = g_.M, C = g_.C, Mp = (M + 15) / 16 * 16;
    std::memset(dst, 0, packed_floats() * sizeof(float));
    for (int64_t m0 = 0; m0 < M; m0 += 16) {
        float* blk = dst + m0 * C * 9;  // C * 9 taps of 16 floats
        for (int64_t m = m0; m < std::min(M, m0 + 16); ++m)
            for (int64_t t = 0; t < C * 9; ++t) blk[t * 16 + (m - m0)] = W[m * C * 9 + t];
    }
    float* bias = dst + Mp * C * 9;
    if (b) std::memcpy(bias, b, size_t(M) * sizeof(float));
}

void ConvStem::run(const float* x, const float* packed, const float* res, float* y, const ConvEpi& e,
                   int64_t oy0, int64_t oy1) const {
#if defined(__x86_64__)
    if (isa_ == Isa::kAvx512) {
        // The pixel-broadcast form takes no residual (nhwc: res unused).
        conv_stem_avx512(g_, x, packed, res, y, e, oy0, oy1, nhwc_, bcast_ && (nhwc_ || !res), 0);
        return;
    }
#endif
    (void)x, (void)packed, (void)res, (void)y, (void)e, (void)oy0, (void)oy1;
}

void ConvStem::run_rows(const float* x, const float* packed, float* rows, const ConvEpi& e, int64_t oy0,
                        int64_t oy1) const {
#if defined(__x86_64__)
    if (isa_ == Isa::kAvx512) {
        conv_stem_avx512(g_, x, packed, nullptr, rows, e, oy0, oy1, true, true, oy0);
        return;
    }
#endif
    (void)x, (void)packed, (void)rows, (void)e, (void)oy0, (void)oy1;
}

}  // namespace jiffy::kernels
