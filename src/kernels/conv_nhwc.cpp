// Packing and ISA dispatch of the channels-last conv kernels (conv_nhwc.h); the kernels themselves
// are in conv_nhwc_impl.h, built per ISA with the other conv kernels.
#include "kernels/conv_nhwc.h"

#include <algorithm>
#include <cstring>

namespace jiffy::kernels {

void conv_nhwc_pw_portable(int64_t, int64_t, const float*, const float*, const float*, const float*, float*,
                           const ConvEpi&, int64_t, int64_t, int64_t);
void conv_nhwc_dw_portable(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                           const ConvEpi&, int64_t, int64_t, bool, int64_t, int64_t);
void conv_nhwc_dot_portable(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                            const ConvEpi&, int64_t, int64_t);
void conv_nhwc_pw_scale_portable(int64_t, int64_t, const float*, const float*, float*);
void transpose32_portable(const float*, float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
#if defined(__x86_64__)
void conv_nhwc_pw_scale_avx512(int64_t, int64_t, const float*, const float*, float*);
void conv_nhwc_pw_scale_avx2(int64_t, int64_t, const float*, const float*, float*);
void transpose32_avx512(const float*, float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
void transpose32_avx2(const float*, float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
void conv_nhwc_pw_avx512(int64_t, int64_t, const float*, const float*, const float*, const float*, float*,
                         const ConvEpi&, int64_t, int64_t, int64_t);
void conv_nhwc_dw_avx512(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                         const ConvEpi&, int64_t, int64_t, bool, int64_t, int64_t);
void conv_nhwc_dot_avx512(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                          const ConvEpi&, int64_t, int64_t);
void conv_nhwc_dot_avx2(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                        const ConvEpi&, int64_t, int64_t);
void conv_nhwc_pw_avx2(int64_t, int64_t, const float*, const float*, const float*, const float*, float*,
                       const ConvEpi&, int64_t, int64_t, int64_t);
void conv_nhwc_dw_avx2(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                       const ConvEpi&, int64_t, int64_t, bool, int64_t, int64_t);
#endif
#if defined(__aarch64__)
void conv_nhwc_pw_scale_neon(int64_t, int64_t, const float*, const float*, float*);
void transpose32_neon(const float*, float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
void conv_nhwc_dot_neon(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                        const ConvEpi&, int64_t, int64_t);
void conv_nhwc_pw_neon(int64_t, int64_t, const float*, const float*, const float*, const float*, float*,
                       const ConvEpi&, int64_t, int64_t, int64_t);
void conv_nhwc_dw_neon(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                       const ConvEpi&, int64_t, int64_t, bool, int64_t, int64_t);
#endif

namespace {
ConvNhwcPwFn pw_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return conv_nhwc_pw_avx512;
    if (isa == Isa::kAvx2) return conv_nhwc_pw_avx2;
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return conv_nhwc_pw_neon;
#endif
    (void)isa;
    return conv_nhwc_pw_portable;
}
ConvNhwcPwScaleFn pw_scale_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return conv_nhwc_pw_scale_avx512;
    if (isa == Isa::kAvx2) return conv_nhwc_pw_scale_avx2;
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return conv_nhwc_pw_scale_neon;
#endif
    (void)isa;
    return conv_nhwc_pw_scale_portable;
}
ConvNhwcDwFn dw_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return conv_nhwc_dw_avx512;
    if (isa == Isa::kAvx2) return conv_nhwc_dw_avx2;
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return conv_nhwc_dw_neon;
#endif
    (void)isa;
    return conv_nhwc_dw_portable;
}
ConvNhwcDotFn dot_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return conv_nhwc_dot_avx512;
    if (isa == Isa::kAvx2) return conv_nhwc_dot_avx2;
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return conv_nhwc_dot_neon;
#endif
    (void)isa;
    return conv_nhwc_dot_portable;
}
}  // namespace

void transpose32(Isa isa, const void* xv, void* yv, int64_t rows, int64_t cols, int64_t i0, int64_t i1, int64_t j0,
                 int64_t j1) {
    const float* x = static_cast<const float*>(xv);
    float* y = static_cast<float*>(yv);
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return transpose32_avx512(x, y, rows, cols, i0, i1, j0, j1);
    if (isa == Isa::kAvx2) return transpose32_avx2(x, y, rows, cols, i0, i1, j0, j1);
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return transpose32_neon(x, y, rows, cols, i0, i1, j0, j1);
#endif
    (void)isa;
    transpose32_portable(x, y, rows, cols, i0, i1, j0, j1);
}

void transpose32(Isa isa, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols) {
    for (int64_t b = 0; b < batch; ++b)
        transpose32(isa, static_cast<const float*>(x) + b * rows * cols, static_cast<float*>(y) + b * rows * cols, rows,
                    cols, 0, rows, 0, cols);
}

NhwcPointwise::NhwcPointwise(Isa isa, int64_t K, int64_t M) : isa_(isa), K_(K), M_(M), nr_(conv_nr(isa)) {
    Mp_ = (M + nr_ - 1) / nr_ * nr_;
}

void NhwcPointwise::pack(const float* W, const float* b, float* dst) const {
    std::memset(dst, 0, packed_floats() * sizeof(float));
    for (int64_t n0 = 0; n0 < M_; n0 += nr_) {
        float* panel = dst + n0 * K_;
        for (int64_t j = 0; j < std::min(nr_, M_ - n0); ++j)
            for (int64_t k = 0; k < K_; ++k) panel[k * nr_ + j] = W[(n0 + j) * K_ + k];
    }
    if (b) std::memcpy(dst + K_ * Mp_, b, size_t(M_) * sizeof(float));
}

void NhwcPointwise::run(const float* x, const float* packed, const float* res, float* y, const ConvEpi& epi,
                        int64_t p0, int64_t p1, int64_t x_plane) const {
    if (p1 > p0) pw_for(isa_)(K_, M_, x, packed, packed + K_ * Mp_, res, y, epi, p0, p1, x_plane);
}

void NhwcPointwise::scale_inputs(const float* packed, const float* s, float* dst) const {
    pw_scale_for(isa_)(K_, Mp_, packed, s, dst);
}

NhwcDepthwise::NhwcDepthwise(Isa isa, const Conv2DGeom& g) : isa_(isa), g_(g) { Cp_ = (g.C + 15) / 16 * 16; }

void NhwcDepthwise::pack(const float* W, const float* b, float* dst) const {
    std::memset(dst, 0, packed_floats() * sizeof(float));
    const int64_t khw = g_.kh * g_.kw;
    for (int64_t c = 0; c < g_.C; ++c)
        for (int64_t t = 0; t < khw; ++t) dst[t * Cp_ + c] = W[c * khw + t];
    if (b) std::memcpy(dst + khw * Cp_, b, size_t(g_.C) * sizeof(float));
}

void NhwcDepthwise::run(const float* x, const float* packed, const float* res, float* y, const ConvEpi& epi,
                        int64_t oy0, int64_t oy1, bool y_nchw, int64_t c0, int64_t c1) const {
    if (c1 < 0) c0 = 0, c1 = g_.C;
    if (y_nchw && (res || !nhwc_dw_writes_nchw(g_))) return;  // callers check (ConvNhwc's prepare)
    if (c1 - c0 != g_.C && !nhwc_dw_writes_nchw(g_)) return;
    if (oy1 > oy0 && c1 > c0)
        dw_for(isa_)(g_, x, packed, packed + g_.kh * g_.kw * Cp_, res, y, epi, oy0, oy1, y_nchw, c0, c1);
}

void NhwcDepthwise::run_band(const float* x, int64_t h0, int64_t h1, const float* packed, float* y,
                             const ConvEpi& epi, int64_t oy0, int64_t oy1, bool y_nchw) const {
    if (y_nchw && !nhwc_dw_writes_nchw(g_)) return;
    if (oy1 <= oy0) return;
    // The band as an image of h1 - h0 rows whose padding above is h0 rows deeper: every output
    // row's first input row, oy * sh - ph, lands on the band's row oy * sh - ph - h0; the output
    // keeps the whole image's rows and strides.
    Conv2DGeom g = g_;
    g.H = h1 - h0;
    g.ph = g_.ph + h0;
    dw_for(isa_)(g, x, packed, packed + g_.kh * g_.kw * Cp_, nullptr, y, epi, oy0, oy1, y_nchw, 0, g_.C);
}

NhwcDot::NhwcDot(Isa isa, const Conv2DGeom& g) : isa_(isa), g_(g) {
    const int64_t vl = conv_nr(isa) / 2;
    G_ = nhwc_dot_group(g.M, int(vl));
    const int64_t L = vl / G_;
    Cp_ = (g.C + L - 1) / L * L;
    Hp_ = std::max(g.ph + g.H, (g.OH - 1) * g.sh + (g.kh - 1) * g.dh + 1);
    Wp_ = std::max(g.pw + g.W, (g.OW - 1) * g.sw + (g.kw - 1) * g.dw + 1);
}

void NhwcDot::pack(const float* W, const float* b, float* dst) const {
    std::memset(dst, 0, packed_floats() * sizeof(float));
    const int64_t T = g_.kh * g_.kw, M = g_.M, C = g_.C, vl = conv_nr(isa_) / 2, L = vl / G_, nch = Cp_ / L;
    // [tap][L channels][M / G][G outputs x L channels]
    for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t m = 0; m < M; ++m)
                dst[((t * nch + c / L) * (M / G_) + m / G_) * vl + (m % G_) * L + c % L] = W[(m * C + c) * T + t];
    float* bt = dst + T * Cp_ * M;
    for (int64_t j = 0; j < 16 * M; ++j) bt[j] = b ? b[j % M] : 0.0f;
}

const float* NhwcDot::pad_input(const float* x, float* scratch) const {
    if (!padded()) return x;
    const int64_t C = g_.C, row = Wp_ * C;
    std::memset(scratch, 0, size_t(Hp_ * row) * sizeof(float));
    for (int64_t h = 0; h < g_.H; ++h)
        std::memcpy(scratch + (h + g_.ph) * row + g_.pw * C, x + h * g_.W * C, size_t(g_.W * C) * sizeof(float));
    return scratch;
}

void NhwcDot::run(const float* xp, const float* packed, const float* res, float* y, const ConvEpi& epi, int64_t p0,
                  int64_t p1) const {
    if (p1 <= p0 || !supports(g_)) return;
    Conv2DGeom g = g_;  // the kernel reads rows of W pixels: the padded image's
    g.W = Wp_, g.ph = g.pw = 0;
    dot_for(isa_)(g, xp, packed, packed + g_.kh * g_.kw * Cp_ * g_.M, res, y, epi, p0, p1);
}

}  // namespace jiffy::kernels
