// Winograd conv: preparation (tiling, weight transform), dispatch, the tile-size choice, and the
// portable build of the kernels (4-float vectors; also the "scalar" and NEON ISAs' path).
#pragma GCC diagnostic ignored "-Wunused-function"
#define JIFFY_CONV_VL 4
#define JIFFY_CONV_SUFFIX portable
#define JIFFY_CONV_NO_ENTRY_POINTS
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"
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

Winograd::Winograd(Isa isa, const Conv2DGeom& g, int m, bool trans) : isa_(isa) {
    WinoArgs& a = a_;
    a.g = g;
    a.m = m == 4 ? 4 : 2;
    a.alpha = a.m + 2;
    a.kind = kind_of(g);
    a.npts = a.kind == 0 ? a.alpha * a.alpha : a.alpha;
    const int64_t th = a.kind == 1 ? 1 : a.m, tw = a.kind == 2 ? 1 : a.m;  // tile rows, columns
    a.TH = (g.OH + th - 1) / th;
    a.TW = (g.OW + tw - 1) / tw;
    a.T = a.TH * a.TW;
    a.trans = trans;
    const int64_t nr = conv_nr(isa), mr = conv_mr(isa), a2 = a.npts;
    a.Mpad = (g.M + nr - 1) / nr * nr;
    if (trans) {
        // The packed weights (alpha^2 C Mpad floats, often MiBs from DRAM) are streamed once per
        // block: one block unless V and Mt pass ~2 MiB (each GEMM t touches only 1 / alpha^2 of
        // them, so they need not stay in L2 whole).
        const int64_t nb_max = std::max<int64_t>(mr, 524288 / (a2 * (g.C + a.Mpad)));
        const int64_t blocks = (a.T + nb_max - 1) / nb_max;
        a.nb = (a.T + blocks - 1) / blocks;
    } else {
        // Tiles per block: V (alpha^2 x C x nb) and Mt (alpha^2 x M x nb) within ~768 KiB of L2,
        // the tiles split evenly between the blocks.
        const int64_t nb_max = std::max<int64_t>(nr, 196608 / (a2 * (g.C + g.M)) / nr * nr);
        const int64_t blocks = (a.T + nb_max - 1) / nb_max;
        a.nb = ((a.T + blocks - 1) / blocks + nr - 1) / nr * nr;
    }
    const int64_t kc_max = isa == Isa::kAvx512 ? 128 : 256;
    const int64_t chunks = (g.C + kc_max - 1) / kc_max;
    a.kc = (g.C + chunks - 1) / chunks;
    // The padded rows: data at [pw, pw + W), vector reads up to tw * (TW - 1 + VL) + 2 (VL <= 16).
    a.RW = (std::max<int64_t>(tw * (a.TW + 16) + 2, g.pw + g.W) + 15) / 16 * 16;
    a.flat = a.kind == 2 || (a.kind == 1 && g.pw == 1 && g.W == g.OW && g.OW == a.TW * a.m);
    for (int64_t c = 0; c < g.C; ++c) offs_.push_back(c * a.nb);
    static const char* const isas[3] = {"avx512", "avx2", "portable"};
    const char* in = isas[isa == Isa::kAvx512 ? 0 : isa == Isa::kAvx2 ? 1 : 2];
    const char* tr = trans ? "_trans" : "";
    if (a.kind == 0)
        std::snprintf(name_, sizeof(name_), "f32_winograd_f%dx3%s__%s", a.m, tr, in);
    else if (a.kind == 1)
        std::snprintf(name_, sizeof(name_), "f32_winograd_f1x%d_1x3%s__%s", a.m, tr, in);
    else
        std::snprintf(name_, sizeof(name_), "f32_winograd_f%dx1_3x1%s__%s", a.m, tr, in);
}

size_t Winograd::scratch_floats() const {
    const WinoArgs& a = a_;
    const int64_t a2 = a.npts;
    if (a.trans)  // V, Mt (nb x Mpad per t), the P x Mpad output, the padded rows
        return size_t(a2 * a.g.C * a.nb + a2 * a.nb * a.Mpad + a.g.OH * a.g.OW * a.Mpad + 64 + a.alpha * a.RW);
    return size_t(a2 * a.g.C * a.nb + a2 * a.g.M * a.nb + 64 + a.alpha * a.RW);
}

// U[t][mo][c] = (G g G^T)[t / alpha][t % alpha] in double, packed per t like ConvGemm's weights
// (balanced row blocks of <= MR output channels, each C x mr; transposed: C x NR column panels
// per NR output channels, zero past M).
void Winograd::pack_w(const float* W, float* dst) const {
    static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    static const double G4[6][3] = {{1.0 / 4, 0, 0},
                                    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                    {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                    {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                    {0, 0, 1}};
    const int A = a_.alpha, NP = a_.npts, ks = a_.kind == 0 ? 9 : 3;
    const int64_t M = a_.g.M, C = a_.g.C, mr_max = conv_mr(isa_);
    const int64_t nbk = (M + mr_max - 1) / mr_max, nr = conv_nr(isa_), Mp = a_.Mpad;
    if (a_.trans) std::fill(dst, dst + packed_w_floats(), 0.0f);
    auto G = [&](int i, int k) { return A == 6 ? G4[i][k] : G2[i][k]; };
    std::vector<double> u(static_cast<size_t>(NP));
    for (int64_t b = 0; b < nbk; ++b)
        for (int64_t mo = b * M / nbk; mo < (b + 1) * M / nbk; ++mo) {
            const int64_t r0 = b * M / nbk, mr = (b + 1) * M / nbk - r0;
            for (int64_t c = 0; c < C; ++c) {
                const float* k = W + (mo * C + c) * ks;
                if (a_.kind != 0)  // 1-D: U = G g (the 3 taps along the kernel's long axis)
                    for (int i = 0; i < A; ++i) {
                        double s = 0;
                        for (int p = 0; p < 3; ++p) s += G(i, p) * double(k[p]);
                        u[size_t(i)] = s;
                    }
                else
                    for (int i = 0; i < A; ++i)
                        for (int j = 0; j < A; ++j) {
                            double s = 0;
                            for (int p = 0; p < 3; ++p)
                                for (int q = 0; q < 3; ++q) s += G(i, p) * double(k[p * 3 + q]) * G(j, q);
                            u[size_t(i * A + j)] = s;
                        }
                for (int t = 0; t < NP; ++t)
                    if (a_.trans)
                        dst[t * Mp * C + mo / nr * nr * C + c * nr + mo % nr] = float(u[size_t(t)]);
                    else
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

void Winograd::run_tiles(const float* x, const float* wpacked, const float* bias, const float* res, float* y,
                         float* scratch, const ConvEpi& epi, int64_t t0, int64_t t1, float* yt) const {
    if (t1 <= t0) return;
    WinoArgs a = a_;
    a.offs = offs_.data();
    a.t0 = t0;
    a.t1 = t1;
    a.yt = a.trans ? yt : nullptr;
    wino_fn(isa_)(a, x, wpacked, bias, res, y, scratch, epi);
}

void Winograd::finish_rows(const float* yt, const float* bias, const float* res, float* y, const ConvEpi& epi,
                           int64_t tr0, int64_t tr1) const {
    if (!a_.trans || tr1 <= tr0) return;
    WinoArgs a = a_;
    a.out_only = true;
    a.yt = const_cast<float*>(yt);
    a.tr0 = tr0;
    a.tr1 = tr1;
    wino_fn(isa_)(a, nullptr, nullptr, bias, res, y, nullptr, epi);
}

// Estimated speedup of F(m,3) over the direct conv: the multiplies saved (9 m^2 / alpha^2), times
// the microkernel lanes holding real data and the output pixels that are real (edge tiles), over
// 1 + the transforms' cost relative to the GEMM's, k (C + M) / (C M) / u^0.25 with u the
// transforms' lane use (a vector holds VL tiles of one tile row, so a 7-tile row fills 7 of 16).
// Normal orientation: the lanes hold tiles (T / tiles rounded up to blocks of nb); k = 14 (F(2,3)),
// 26 (F(4,3)). Transposed: the lanes hold output channels (M / Mpad); k = 14, 20; blocks of fewer
// than 8 tiles run the microkernel below its rate (x 1 + 0.8 (8 - mr) / 8), and where U passes
// ~4 MiB it streams from DRAM once per block: + 0.3 x 16 / nb. The constants are a least-squares
// fit of the log speedups measured by bench/winograd_bench.cpp (AVX-512, thread CPU time, medians
// of 3 runs; rms error ~17% on ResNet-50's and PP-OCR's shapes, docs/winograd.md).
// 1-D kinds: saved = 3 m / alpha; k per kind (1x3, 3x1): F(2,3), F(4,3) normal, then transposed,
// fitted as the 3x3 ones on openWakeWord's embedding_model layers (rms error 15-36%).
static const double kD1[2][4] = {{3.9, 7.4, 6.6, 9.2}, {7.6, 7.1, 7.8, 7.8}};

double winograd_speedup(Isa isa, const Conv2DGeom& g, WinoPick p, bool tuned) {
    if (!Winograd::suits(g) || (p.m != 2 && p.m != 4)) return 0;
    const int m = p.m;
    const Winograd w(isa, g, m, p.trans);
    const WinoArgs& a = w.args();
    const int64_t vl = conv_nr(isa) / 2, alpha = a.alpha;
    const bool d1 = a.kind != 0;  // 1-D: m outputs per tile, 3 m / alpha of the multiplies saved
    const double pixels = double(g.OH * g.OW) / double(a.T * (d1 ? m : m * m));
    // Flat 1-D transforms fill the vectors across tile rows.
    const double tf_lanes = a.flat ? 1.0 : double(a.TW) / double((a.TW + vl - 1) / vl * vl);
    const double tf = double(g.C + g.M) / double(g.C * g.M) / std::pow(tf_lanes, 0.25);
    const double saved = (d1 ? 3.0 * m / double(alpha) : 9.0 * m * m / double(alpha * alpha)) * pixels;
    if (!p.trans) {
        const int64_t blocks = (a.T + a.nb - 1) / a.nb;
        const double lanes = double(a.T) / double(blocks * a.nb);
        const double k = d1 ? kD1[a.kind - 1][m == 4 ? 1 : 0] : m == 4 ? 26.0 : 14.0;
        return saved * lanes / (1.0 + k * tf);
    }
    // Intel cores (the fit above is AMD Zen 5's; tuned): measured against it on a Sapphire /
    // Emerald Rapids Xeon (bench/winograd_bench.cpp, 2 x 9 rounds; docs/winograd.md "Intel"), the
    // transposed variants run slower the more tiles a plane has (line detector 32 x 160x160 F(4,3)t
    // 1.16x the direct conv, F(4,3) 1.63x): x 1 up to 50 tiles, 0.8 at 100, 0.6 from ~200 on (at
    // 100 tiles the bench read ~0.6, but YOLO's 32 x 40x40 ran F(4,3)t 170-200 us in the model
    // against F(4,3)'s 235-245).
    // The 1-D kinds on every core (not a tuning: the fit's own shapes had few tiles): on AMD Zen 4
    // too, the transposed 1x3 variants lose on wide planes (row-stacked SVTR-like layers,
    // winograd_bench "rows": 192 -> 120 on 6x160, 240 tiles, F(4,3)t 1000 against F(4,3) 866 us,
    // estimated 1.67 against 1.51; 96 -> 64 on 8x100 230 against 207) and win on few tiles (4x80,
    // 80 tiles: 264 against 304; 2x40 252 against 428; the embedding model's 14x4 and 12x4).
    const bool intel = (tuned && tuning_vendor() == CpuVendor::kIntel) || d1;
    const int64_t mr = conv_mr(isa), rows = (a.nb + mr - 1) / mr;
    const double mr_avg = double(a.nb) / double(rows);
    const double lanes = double(g.M) / double(a.Mpad);
    const double rowf = 1.0 + 0.8 * std::max(0.0, 8.0 - mr_avg) / 8.0;
    const bool u_big = double(a.npts * g.C * a.Mpad) * sizeof(float) > 4.0 * (1 << 20);
    const double mem = u_big ? 0.3 * 16.0 / double(a.nb) : 0.0;
    const double k = d1 ? kD1[a.kind - 1][m == 4 ? 3 : 2] : m == 4 ? 20.0 : 14.0;
    const double vendor = intel ? std::clamp(1.0 - 0.2 * std::log2(double(a.T) / 50.0), 0.6, 1.0) : 1.0;
    return vendor * saved * lanes / (1.0 + k * tf + mem) / rowf;
}

WinoPick winograd_choice(Isa isa, const Conv2DGeom& g) {
    if (!Winograd::suits(g)) return {};
    // JIFFY_WINOGRAD: 0, 2, 4, 2n, 4n, 2t, 4t (winograd.h).
    struct Forced {
        bool set = false, orient = false;  // orient: the orientation given too
        WinoPick p;
    };
    static const Forced forced = [] {
        Forced f;
        const char* s = std::getenv("JIFFY_WINOGRAD");
        if (!s || (s[0] != '0' && s[0] != '2' && s[0] != '4')) return f;
        f.set = true;
        f.p.m = s[0] - '0';
        f.orient = s[1] == 'n' || s[1] == 't';
        f.p.trans = s[1] == 't';
        return f;
    }();
    if (forced.set && (forced.p.m == 0 || forced.orient)) return forced.p;
    auto best = [&](int m, bool tuned) {
        const double n = winograd_speedup(isa, g, {m, false}, tuned), t = winograd_speedup(isa, g, {m, true}, tuned);
        return std::make_pair(std::max(n, t), WinoPick{m, t > n});
    };
    // Whether Winograd, and which tile size: the fitted model. F(4,3) rounds ~10x worse than
    // F(2,3) (docs/winograd.md): only where clearly faster (1-D: 3x less worse, F(4,3) as accurate
    // as the direct conv, measured).
    const double s2 = best(2, false).first, s4 = best(4, false).first;
    int m = 0;
    if (forced.set) m = forced.p.m;
    else if (s4 >= 1.2 && s4 >= (Winograd::kind_of(g) ? 1.0 : 1.1) * s2) m = 4;
    else if (s2 >= 1.2) m = 2;
    if (m == 0) return {};
    // The orientation: with the vendor's corrections (winograd_speedup). Only that: on Intel the
    // direct conv that won in winograd_bench ran 1.6-2x slower in YOLO than the F(4,3)t it would
    // have replaced, and ResNet-50's 14x14 F(4,3)t (1.12x F(2,3)t's speed hot) ~10% slower in the
    // model, its transformed weights (9.4 against 4.2 MB) coming from DRAM.
    return best(m, true).second;
}

}  // namespace jiffy::kernels
