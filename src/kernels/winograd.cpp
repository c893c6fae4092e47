// Winograd conv: preparation (tiling, weight transform), dispatch, the tile-size choice, and the
// portable build of the kernels (4-float vectors; also the "scalar" and NEON ISAs' path).
#pragma GCC diagnostic ignored "-Wunused-function"
#define JIFFY_CONV_VL 4
#define JIFFY_CONV_SUFFIX portable
#define JIFFY_CONV_NO_ENTRY_POINTS
#include <cmath>
#include <cstdlib>

#include "kernels/conv_impl.h"
#include "kernels/winograd_impl.h"

namespace jiffy::kernels {

#if defined(__x86_64__)
void winograd_avx512(const WinoArgs&, const float*, const float*, const float*, const float*, float*, float*,
                     const ConvEpi&);
void winograd_avx2(const WinoArgs&, const float*, const float*, const float*, const float*, float*, float*,
                   const ConvEpi&);
#endif

static WinoFn wino_fn(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return winograd_avx512;
    if (isa == Isa::kAvx2) return winograd_avx2;
#endif
    (void)isa;
    return winograd_portable;
}

Winograd::Winograd(Isa isa, const Conv2DGeom& g, int m) : isa_(isa) {
    WinoArgs& a = a_;
    a.g = g;
    a.m = m == 4 ? 4 : 2;
    a.alpha = a.m + 2;
    a.TH = (g.OH + a.m - 1) / a.m;
    a.TW = (g.OW + a.m - 1) / a.m;
    a.T = a.TH * a.TW;
    const int64_t nr = conv_nr(isa), a2 = a.alpha * a.alpha;
    // Tiles per block: V (alpha^2 x C x nb) and Mt (alpha^2 x M x nb) within ~768 KiB of L2,
    // the tiles split evenly between the blocks.
    const int64_t nb_max = std::max<int64_t>(nr, 196608 / (a2 * (g.C + g.M)) / nr * nr);
    const int64_t blocks = (a.T + nb_max - 1) / nb_max;
    a.nb = ((a.T + blocks - 1) / blocks + nr - 1) / nr * nr;
    const int64_t kc_max = isa == Isa::kAvx512 ? 128 : 256;
    const int64_t chunks = (g.C + kc_max - 1) / kc_max;
    a.kc = (g.C + chunks - 1) / chunks;
    // The padded rows: data at [pw, pw + W), vector reads up to m * (TW - 1 + VL) + 2 (VL <= 16).
    a.RW = (std::max<int64_t>(a.m * (a.TW + 16) + 2, g.pw + g.W) + 15) / 16 * 16;
    for (int64_t c = 0; c < g.C; ++c) offs_.push_back(c * a.nb);
}

size_t Winograd::scratch_floats() const {
    const WinoArgs& a = a_;
    const int64_t a2 = a.alpha * a.alpha;
    return size_t(a2 * a.g.C * a.nb + a2 * a.g.M * a.nb + 64 + a.alpha * a.RW);
}

// U[t][mo][c] = (G g G^T)[t / alpha][t % alpha] in double, packed per t like ConvGemm's weights
// (balanced row blocks of <= MR output channels, each C x mr).
void Winograd::pack_w(const float* W, float* dst) const {
    static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    static const double G4[6][3] = {{1.0 / 4, 0, 0},
                                    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                    {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                    {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                    {0, 0, 1}};
    const int A = a_.alpha;
    const int64_t M = a_.g.M, C = a_.g.C, mr_max = conv_mr(isa_);
    const int64_t nbk = (M + mr_max - 1) / mr_max;
    auto G = [&](int i, int k) { return A == 6 ? G4[i][k] : G2[i][k]; };
    std::vector<double> u(size_t(A * A));
    for (int64_t b = 0; b < nbk; ++b)
        for (int64_t mo = b * M / nbk; mo < (b + 1) * M / nbk; ++mo) {
            const int64_t r0 = b * M / nbk, mr = (b + 1) * M / nbk - r0;
            for (int64_t c = 0; c < C; ++c) {
                const float* k = W + (mo * C + c) * 9;
                for (int i = 0; i < A; ++i)
                    for (int j = 0; j < A; ++j) {
                        double s = 0;
                        for (int p = 0; p < 3; ++p)
                            for (int q = 0; q < 3; ++q) s += G(i, p) * double(k[p * 3 + q]) * G(j, q);
                        u[size_t(i * A + j)] = s;
                    }
                for (int t = 0; t < A * A; ++t)
                    dst[t * M * C + r0 * C + c * mr + (mo - r0)] = float(u[size_t(t)]);
            }
        }
}

void Winograd::run(const float* x, const float* wpacked, const float* bias, const float* res, float* y,
                   float* scratch, const ConvEpi& epi) const {
    WinoArgs a = a_;
    a.offs = offs_.data();
    wino_fn(isa_)(a, x, wpacked, bias, res, y, scratch, epi);
}

const char* Winograd::name() const {
    const bool f4 = a_.m == 4;
    switch (isa_) {
        case Isa::kAvx512:
            return f4 ? "f32_winograd_f4x3__avx512" : "f32_winograd_f2x3__avx512";
        case Isa::kAvx2:
            return f4 ? "f32_winograd_f4x3__avx2" : "f32_winograd_f2x3__avx2";
        default:
            return f4 ? "f32_winograd_f4x3__portable" : "f32_winograd_f2x3__portable";
    }
}

// Estimated speedup of F(m,3) over the direct conv: the multiplies saved (9 m^2 / alpha^2), times
// the microkernel lanes holding real tiles (T / tiles rounded up to blocks of nb) and the output
// pixels that are real (edge tiles), over 1 + the transforms' cost relative to the GEMM's,
// k (C + M) / (C M) / u^0.25 with u the transforms' lane use (a vector holds VL tiles of one tile
// row, so a 7-tile row fills 7 of 16 lanes). k = 14 (F(2,3)), 26 (F(4,3)): a least-squares fit of
// the log speedups measured by bench/winograd_bench.cpp (AVX-512, thread CPU time), which the
// model reproduces within ~15% on ResNet-50's and PP-OCR's shapes (docs/winograd.md).
static double wino_speedup(Isa isa, const Conv2DGeom& g, int m) {
    const Winograd w(isa, g, m);
    const WinoArgs& a = w.args();
    const int64_t vl = conv_nr(isa) / 2, alpha = a.alpha;
    const int64_t blocks = (a.T + a.nb - 1) / a.nb;
    const double lanes = double(a.T) / double(blocks * a.nb);
    const double pixels = double(g.OH * g.OW) / double(a.T * m * m);
    const double tf_lanes = double(a.TW) / double((a.TW + vl - 1) / vl * vl);
    const double k = m == 4 ? 26.0 : 14.0;
    const double overhead = 1.0 + k * double(g.C + g.M) / double(g.C * g.M) / std::pow(tf_lanes, 0.25);
    return 9.0 * m * m / double(alpha * alpha) * lanes * pixels / overhead;
}

int winograd_choice(Isa isa, const Conv2DGeom& g) {
    if (!Winograd::suits(g)) return 0;
    static const int forced = [] {
        const char* s = std::getenv("JIFFY_WINOGRAD");
        return s && *s ? std::atoi(s) : -1;
    }();
    if (forced == 0 || forced == 2 || forced == 4) return forced;
    // F(4,3) rounds ~10x worse than F(2,3) (docs/winograd.md): only where clearly faster.
    const double s2 = wino_speedup(isa, g, 2), s4 = wino_speedup(isa, g, 4);
    if (s4 >= 1.2 && s4 >= 1.1 * s2) return 4;
    if (s2 >= 1.2) return 2;
    return 0;
}

}  // namespace jiffy::kernels
