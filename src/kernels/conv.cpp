// Dispatch and preparation of the fast conv kernels, plus their portable build (4-float vectors:
// SSE2 on x86-64, NEON on ARM), which is also the "scalar" ISA's path.
#define JIFFY_CONV_VL 4
#define JIFFY_CONV_SUFFIX portable
#include "kernels/conv_impl.h"
#include "kernels/conv_cv_impl.h"
#include "kernels/dw_plane_impl.h"
#include "kernels/dw_blocked_impl.h"
#include "kernels/conv_nhwc_impl.h"

namespace jiffy::kernels {

#if defined(__x86_64__)
void conv_gemm_group_avx512(const ConvGemmArgs&, const float*, const float*, const float*,
                            const float*, float*, float*, const ConvEpi&);
void conv_gemm_group_avx2(const ConvGemmArgs&, const float*, const float*, const float*,
                          const float*, float*, float*, const ConvEpi&);
void conv_dw_avx512(const Conv2DGeom&, const float*, const float*, const float*, const float*,
                    float*, const ConvEpi&, float*, ConvDwMode, int64_t, int64_t);
void conv_dw_avx2(const Conv2DGeom&, const float*, const float*, const float*, const float*,
                  float*, const ConvEpi&, float*, ConvDwMode, int64_t, int64_t);
void conv_dw_plane_avx512(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                          const ConvEpi&, float*);
void conv_dw_plane_avx2(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                        const ConvEpi&, float*);
void conv_dw_blocked_avx512(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                            const ConvEpi&, float*);
void conv_dw_blocked_avx2(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                          const ConvEpi&, float*);
void conv_epi_avx512(float*, const float*, int64_t, const ConvEpi&);
void conv_epi_avx2(float*, const float*, int64_t, const ConvEpi&);
void conv_subsample_avx512(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float*, int64_t,
                           int64_t);
void conv_subsample_avx2(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float*, int64_t,
                         int64_t);
void phase_planes_avx512(const PhaseMosaic&, bool, const float*, float*, int64_t, int64_t);
#endif
#if defined(__aarch64__)  // src/kernels/arm/conv_neon.cpp
void conv_gemm_group_neon(const ConvGemmArgs&, const float*, const float*, const float*,
                          const float*, float*, float*, const ConvEpi&);
void conv_dw_neon(const Conv2DGeom&, const float*, const float*, const float*, const float*,
                  float*, const ConvEpi&, float*, ConvDwMode, int64_t, int64_t);
void conv_dw_plane_neon(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                        const ConvEpi&, float*);
void conv_dw_blocked_neon(const Conv2DGeom&, const float*, const float*, const float*, const float*, float*,
                          const ConvEpi&, float*);
void conv_epi_neon(float*, const float*, int64_t, const ConvEpi&);
void conv_subsample_neon(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float*, int64_t,
                         int64_t);
#endif

int conv_mr(Isa isa) { return isa == Isa::kAvx512 ? 12 : 6; }
int conv_nr(Isa isa) { return isa == Isa::kAvx512 ? 32 : isa == Isa::kAvx2 ? 16 : 8; }

static ConvGemmGroupFn gemm_fn(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return conv_gemm_group_avx512;
    if (isa == Isa::kAvx2) return conv_gemm_group_avx2;
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return conv_gemm_group_neon;
#endif
    (void)isa;
    return conv_gemm_group_portable;
}

ConvGemm::ConvGemm(Isa isa, const Conv2DGeom& g, int64_t groups, ConvGemmMode force)
    : isa_(isa), groups_(groups) {
    ConvGemmArgs& a = args_;
    a.g = g;
    a.K = g.C * g.kh * g.kw;
    a.P = g.OH * g.OW;
    a.pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 &&
                  g.OH == g.H && g.OW == g.W;
    const int64_t nr = conv_nr(isa);
    // K chunk: the microkernel's B sub-panel (kc x NR floats, 32 KiB on AVX-512) and one block
    // of the weights stay in L1. AVX-512 chunks of <= 256 rather than <= 128 (fewer passes over
    // C): 1x1 and 3x3 layers of MobileNetV2 / ResNet-50 with K > 128 2-8% faster
    // (bench/conv_bench.cpp --cold --huge), none slower beyond the noise.
    auto chunk = [&](int64_t kc_max) {
        const int64_t chunks = std::max<int64_t>(1, (a.K + kc_max - 1) / kc_max);
        return std::max<int64_t>(1, (a.K + chunks - 1) / chunks);
    };
    // Intel's cores (Sapphire / Emerald Rapids host, session 22): <= 192: the 1x1 layers with K =
    // 1024 on 14x14 5-8% faster (B rows read straight from the image, 784 bytes apart, fill L1
    // sooner), ResNet-50 0.975x; every other shape of bench/conv_bench.cpp within the noise.
    a.kc = chunk(isa == Isa::kAvx512 && tuning_vendor() == CpuVendor::kIntel ? 192 : 256);
    // Pixel tile. Small weights (M x K within ~256 KiB, read from L2 anyway): the whole packed
    // tile (K x tile floats) stays within ~512 KiB of L2 so the im2col writes never leave it.
    // Large weights: one K chunk of the tile (kc x tile floats, ~256 KiB) stays in L2 so each
    // chunk of the weights is reused from L2 across the tile's panels (tile capped at 4 MiB).
    int64_t tile;
    if (g.M * a.K <= 65536)
        tile = (131072 / std::max<int64_t>(1, a.K)) / nr * nr;
    else
        tile = std::min<int64_t>(65536 / a.kc, (1 << 20) / std::max<int64_t>(1, a.K)) / nr * nr;
    tile = std::clamp<int64_t>(tile, nr, 1024);
    const int64_t p_round = (a.P + nr - 1) / nr * nr;
    a.tile = std::max<int64_t>(nr, std::min(tile, p_round));
    a.pad_copy = g.ph != 0 || g.pw != 0 || (g.OH - 1) * g.sh + (g.kh - 1) * g.dh + 1 > g.H ||
                 (g.OW - 1) * g.sw + (g.kw - 1) * g.dw + 1 > g.W;
    a.HP = a.pad_copy ? (g.OH - 1) * g.sh + (g.kh - 1) * g.dh + 1 : g.H;
    a.WP = a.pad_copy ? (g.OW - 1) * g.sw + (g.kw - 1) * g.dw + 1 : g.W;
    nr_ = nr;
    // Stride-1 kernels larger than 1x1 read B rows straight from the image (implicit GEMM).
    // Planes a multiple of ~4 KiB apart would make those C rows (and the pointwise case's)
    // collide in the same L1 sets: such images are copied with a plane stride off 4 KiB.
    a.implicit = g.sh == 1 && g.sw == 1 && !a.pointwise;
    if (a.implicit && !a.pad_copy && g.C > 1 && plane_aliased(g.H * g.W)) {
        a.pad_copy = true;
        a.HP = g.H;
        a.WP = g.W;
    }
    // Transposed mode (see ConvGemmArgs::trans) when it fills clearly more vector lanes: the
    // normal mode uses P / (P rounded up to NR) of them, the transposed M / (M rounded up to NR)
    // (7x7: 49 / 64 against 1; at 14x14, 196 / 224 against 1, both measured the same).
    // With small K the masked implicit mode (below) beats the transposed one down to 16 of 32
    // lanes used (embedding_model, K <= 288: 1x3 96 -> 96 on 12x4 77 against 51 GFLOP/s, on 8x2
    // 50 against 29); with large K it does not (3x3 512 -> 512 on 7x7: 57-62 against 69-70).
    // Kernels of more than 3 taps load their lane masks per k (a kmov on the FMAs' port 5 each):
    // masked only when K is tiny (3x3 96 -> 24 on 160x160 measured 62-72 against 75 buffered)
    // or the plane is (P <= 64: the padded copy and buffered output cost more than the kmovs; the
    // face detector's 3x3 256 -> 12 / 6 heads on 4x5, 24.5 / 16.8 -> 18.3 / 10.6 us).
    const bool stride1 = g.sh == 1 && g.sw == 1;
    const bool maskable = isa == Isa::kAvx512 && stride1 && g.OW == g.W;
    const bool can_mask = maskable && a.implicit && (g.kh * g.kw <= 3 || a.K <= 32 || a.P <= 64) &&
                          !(g.H * g.W >= 1024 && plane_aliased(g.H * g.W));
    {
        // Lanes the normal mode fills. AVX-512 1x1: a last panel of <= VL pixels runs as one
        // vector (the HALF microkernel), so P rounds up to VL there (8x10 planes: 80 of 80, not
        // 80 of 96; the face detector's 1x1 128 -> 256 / 256 -> 256 / 256 -> 64 on 8x10, cold:
        // 52 / 100 / 30 us packed against 70 / 126 / 44 transposed). Not measured on AVX2 (where
        // 7x7 would then leave the transposed mode): NR rounding there.
        const int64_t vl = nr / 2, tail = a.P % nr;
        const bool half_tail = isa == Isa::kAvx512 && a.pointwise && tail > 0 && tail <= vl;
        const int64_t p_up = half_tail ? (a.P + vl - 1) / vl * vl
                                                                    : (a.P + nr - 1) / nr * nr;
        const double eff_n = double(a.P) / double(p_up);
        const double eff_t = double(g.M) / double((g.M + nr - 1) / nr * nr);
        // Strided kernels larger than 1x1 pay for a copy in every mode (im2col, split): there the
        // transposed mode wins from a smaller gap (ResNet-50's 3x3 s2 256 -> 256 on 28 -> 14,
        // 196 of 224 lanes: 2.67 against 3.08-3.28 ms im2col / split, bench/conv_bench.cpp --cold).
        const bool strided_k = (g.sh > 1 || g.sw > 1) && g.kh * g.kw > 1;
        a.trans = a.P <= 256 && g.M >= nr && eff_t > eff_n + (strided_k ? 0.1 : 0.15) &&
                  !(can_mask && eff_n >= 0.45 && a.K <= 512);
    }
    bool use_mask = can_mask && !a.trans && (a.pad_copy || a.P <= 256);
    // 1x1 convs on mid-sized planes (8x8 < P <= 32x32, rows not 4 KiB-aliased) read B straight
    // from the image (implicit, no packing): cold caches, 14x14 / 28x28 MobileNetV2 and ResNet-50
    // layers 70-89 -> 74-97 GFLOP/s (bench/conv_bench.cpp --cold --huge --modes). Larger planes
    // keep the packed panels: their K rows a plane apart defeat the hardware prefetchers.
    // Except where there are few output channels and few input ones (K <= 32, M <= 16, or M <= 32
    // up to 8192 pixels: each packed panel is used by at most three row panels, and only 32 K
    // rows to stream): MobileNetV2's 1x1 32 -> 16 on 112x112 in the model ~250 -> ~220 us; the
    // face detector's 32 -> 32 on 60x80 cold 113 -> 99 us, and its 16 -> 32 on 120x160 (up to
    // 20480 pixels): on Zen 4 cold 246 packed against 257-275 us direct, but on the Zen 5 hosts
    // hot 126 -> 117 us, the whole model 1.7% faster (scripts/ab.sh, 8 of 9 rounds; no other
    // model has such a layer). The cut-off at 40x40 planes: 30x40 and 40x40
    // measured faster direct (cold: 64 -> 64 on 30x40 107 -> 93 us, 384 -> 64 on 40x40 770 -> 703),
    // 44x44 and 56x56 slower (256 -> 256 on 44x44 2.39 against 2.66 ms; ResNet-50's 56x56 layers).
    if (a.pointwise && !a.trans && a.P > 64 && !plane_aliased(a.P) && (a.P <= 1600 || (a.K <= 32 && (g.M <= 16 || (g.M <= 32 && a.P <= 20480)))))
        a.implicit = true;
    // 1x1 onto <= 32 channels from more than 32 on 40x40 to 64x64 planes: the masked mode (in
    // place, NR-wide loads straight from the planes, no packing): MobileNetV2's 96 / 144 -> 24 on
    // 56x56 in the model 103 / 144 -> 97 / 131 us, MobileNetV3's 72.8 / 65.1 -> 65.4 / 57.8 us
    // (Zen 5 host; the whole models within noise, about 0.5% expected). On larger planes it
    // lost (the line detector's 96 -> 24 on 80x80 212 -> 276).
    if (a.pointwise && maskable && !a.trans && a.P > 1600 && a.P <= 4096 && g.M <= 32 && a.K > 32)
        a.implicit = use_mask = true;
    // A forced mode where the shape allows it (implicit and masked need stride 1, masked AVX-512
    // and OW == W).
    if (force == ConvGemmMode::kIm2col) {
        a.trans = a.implicit = use_mask = false;
    } else if (force == ConvGemmMode::kImplicit && stride1) {
        a.trans = use_mask = false;
        a.implicit = true;
    } else if (force == ConvGemmMode::kMasked && maskable) {
        a.trans = false;
        a.implicit = use_mask = true;
    } else if (force == ConvGemmMode::kTrans) {
        a.trans = true;
        use_mask = false;
    }
    // Strided convs: split into stride-1 planes (ConvGemmArgs::split) instead of im2col where
    // the im2col panels are a large share of the work: small K (the stems: MobileNetV2's 3x3 s2
    // 3 -> 32 on 224, 316-337 -> 270-318 us; ResNet-50's 7x7 s2 3 -> 64, 2.56-2.66 -> 2.42-2.54
    // ms) and 1x1 on large planes (ResNet-50's 1x1 s2 256 -> 512 on 56 -> 28: 2.07-2.26 ->
    // 1.95-2.12 ms), and any output plane of more than 256 pixels: on the Zen 5 hosts ResNet-50's
    // 3x3 s2 128 -> 128 on 56 in the model 1671 -> 1410 us (hot alone 1578 -> 1478; on Zen 4 it
    // was 2.65-2.77 ms im2col against 2.69-3.08 split). Large K onto small planes keeps im2col or
    // the transposed mode (3x3 s2 256 -> 256 on 28 -> 14: equal in the model), as do 1x1 convs
    // onto small planes (512 -> 1024 on 28 -> 14: equal).
    const bool strided = g.sh > 1 || g.sw > 1;
    bool split = strided && !a.trans && force == ConvGemmMode::kAuto &&
                 (a.K <= 256 || a.P > 256);
    if (force == ConvGemmMode::kSplit && strided) {
        split = true;
        a.trans = use_mask = false;
    }
    if (a.implicit && !a.pad_copy && g.C > 1 && plane_aliased(g.H * g.W)) {  // again, if forced
        a.pad_copy = true;
        a.HP = g.H;
        a.WP = g.W;
    }
    if (!a.implicit && !a.trans && a.pad_copy && a.HP == g.H && a.WP == g.W && g.ph == 0 &&
        g.pw == 0 && (g.OH - 1) * g.sh + (g.kh - 1) * g.dh + 1 <= g.H &&
        (g.OW - 1) * g.sw + (g.kw - 1) * g.dw + 1 <= g.W)
        a.pad_copy = false;  // forced off implicit: the anti-aliasing copy is not needed
    if (a.trans) {
        a.implicit = false;
        a.Mpad = (g.M + nr - 1) / nr * nr;
        if (a.pad_copy && a.HP == g.H && a.WP == g.W && g.ph == 0 && g.pw == 0 &&
            (g.OH - 1) * g.sh + (g.kh - 1) * g.dh + 1 <= g.H &&
            (g.OW - 1) * g.sw + (g.kw - 1) * g.dw + 1 <= g.W)
            a.pad_copy = false;  // only the implicit path's anti-aliasing copy: not needed
    }
    // Masked implicit mode (see ConvGemmArgs::masked) for padded stride-1 convs whose output rows
    // are as wide as the input's, on AVX-512 (fault-free masked loads): replaces the padded copy
    // and the buffered output (its WP - OW wasted columns per row and the copy-out); embedding_model
    // 1x3 layers 62-73 -> 87-97 GFLOP/s. Also small unpadded planes (no scalar-packed tail panel).
    // Unpadded large planes keep the plain implicit path (3-8% faster than masked loads there).
    if (use_mask) {
        a.masked = true;
        a.implicit = false;
        a.pad_copy = false;
        a.HP = g.H;
        a.WP = g.W;
        for (int64_t c = 0; c < g.C; ++c)
            for (int64_t ky = 0; ky < g.kh; ++ky)
                for (int64_t kx = 0; kx < g.kw; ++kx)
                    offs_.push_back(c * g.H * g.W + (ky * g.dh - g.ph) * g.W + kx * g.dw - g.pw);
        hmask_.assign(size_t(g.kw * g.W), 0u);
        for (int64_t kx = 0; kx < g.kw; ++kx)
            for (int64_t s = 0; s < g.W; ++s)
                for (int64_t l = 0; l < nr && l < 32; ++l) {
                    const int64_t ix = (s + l) % g.W + kx * g.dw - g.pw;
                    if (ix >= 0 && ix < g.W) hmask_[size_t(kx * g.W + s)] |= 1u << l;
                }
        a.tile = std::clamp<int64_t>((65536 / std::max<int64_t>(1, g.M)) / nr * nr, nr, 1024);
        // K chunks of whole taps (the 3-tap kernels keep their masks in registers), from chunks
        // of <= 128 (the size this mode was tuned with).
        const int64_t khw = g.kh * g.kw;
        a.kc = std::min(a.K, (chunk(128) + khw - 1) / khw * khw);
    }
    a.PS = a.HP * a.WP;
    if (a.pad_copy && g.C > 1 && !a.trans)
        while (plane_aliased(a.PS)) a.PS += 16;
    if (a.implicit) {
        for (int64_t c = 0; c < g.C; ++c)
            for (int64_t ky = 0; ky < g.kh; ++ky)
                for (int64_t kx = 0; kx < g.kw; ++kx)
                    offs_.push_back(c * a.PS + ky * g.dh * a.WP + kx * g.dw);
        // Output tile (M x tile floats) within ~256 KiB.
        a.tile = std::clamp<int64_t>((65536 / std::max<int64_t>(1, g.M)) / nr * nr, nr, 1024);
        a.ldbuf = a.tile;
        while (plane_aliased(a.ldbuf)) a.ldbuf += 16;
    }
    if (split) {
        a.split = a.implicit = true;
        a.pad_copy = false;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
            const int64_t ph = ky * g.dh % g.sh;
            if (std::find(rph_.begin(), rph_.end(), ph) == rph_.end()) rph_.push_back(ph);
        }
        a.nry = int64_t(rph_.size());
        a.HQ = g.OH + (g.kh - 1) * g.dh / g.sh;
        a.HP = a.HQ;
        a.WP = g.OW;  // the implicit grid: q == p, Y written in place
        a.tile = std::clamp<int64_t>((65536 / std::max<int64_t>(1, g.M)) / nr * nr, nr, 1024);
        a.PQ = a.HQ * g.OW;
        if (g.kh * g.kw > 1) {
            // Planes of whole output-row tiles (a multiple of NR pixels where one is near),
            // split per tile: the MobileNetV2 stem's whole split image (0.9 MB) measured slower
            // than im2col inside the model (its writes evict the L2), the tiles (~90 KB) faster.
            int64_t tr = std::clamp<int64_t>(a.tile / g.OW, 1, g.OH);
            for (int64_t t = tr; t * 2 >= tr && t >= 1; --t)
                if (t * g.OW % nr == 0) {
                    tr = t;
                    break;
                }
            a.srows = tr;
            a.tile = tr * g.OW;
            a.PQ = (tr + (g.kh - 1) * g.dh / g.sh) * g.OW;
        }
        const int64_t planes = a.nry * g.kw;
        if (planes > 1)
            while (plane_aliased(a.PQ)) a.PQ += 16;
        a.PS = planes * a.PQ;
        if (g.C > 1)
            while (plane_aliased(a.PS)) a.PS += 16;
        offs_.clear();
        for (int64_t c = 0; c < g.C; ++c)
            for (int64_t ky = 0; ky < g.kh; ++ky) {
                const int64_t r = std::find(rph_.begin(), rph_.end(), ky * g.dh % g.sh) - rph_.begin();
                for (int64_t kx = 0; kx < g.kw; ++kx)
                    offs_.push_back(c * a.PS + (r * g.kw + kx) * a.PQ + ky * g.dh / g.sh * g.OW);
            }
        a.ldbuf = 0;  // no output buffer
    }
    if (a.implicit) a.offs_max = *std::max_element(offs_.begin(), offs_.end());
}

ConvGemmMode ConvGemm::mode() const {
    const ConvGemmArgs& a = args_;
    return a.trans      ? ConvGemmMode::kTrans
           : a.split    ? ConvGemmMode::kSplit
           : a.masked   ? ConvGemmMode::kMasked
           : a.implicit ? ConvGemmMode::kImplicit
                        : ConvGemmMode::kIm2col;
}

const char* ConvGemm::name() const {
    switch (mode()) {
        case ConvGemmMode::kTrans: return "gemm-transposed";
        case ConvGemmMode::kSplit: return args_.g.kh * args_.g.kw == 1 ? "1x1-subsampled" : "implicit-split";
        case ConvGemmMode::kMasked: return "implicit-masked";
        case ConvGemmMode::kImplicit: return args_.pointwise ? "1x1-direct" : "implicit";
        default: return args_.pointwise ? "1x1-packed" : "im2col";
    }
}

void ConvGemm::pack_w(const float* W, float* dst) const {
    const int64_t M = args_.g.M, K = args_.K, mr_max = conv_mr(isa_);
    const int64_t nb = (M + mr_max - 1) / mr_max;
    if (args_.trans) {  // per group: Mpad / NR panels of K x NR, zero past M
        const int64_t Mp = args_.Mpad;
        for (int64_t gi = 0; gi < groups_; ++gi) {
            const float* wg = W + gi * M * K;
            float* dg = dst + gi * Mp * K;
            for (int64_t n0 = 0; n0 < Mp; n0 += nr_)
                for (int64_t k = 0; k < K; ++k)
                    for (int64_t j = 0; j < nr_; ++j)
                        dg[n0 * K + k * nr_ + j] = n0 + j < M ? wg[(n0 + j) * K + k] : 0.0f;
        }
        return;
    }
    for (int64_t gi = 0; gi < groups_; ++gi) {
        const float* wg = W + gi * M * K;
        float* dg = dst + gi * M * K;
        for (int64_t blk = 0; blk < nb; ++blk) {
            const int64_t r0 = blk * M / nb, r1 = (blk + 1) * M / nb, mr = r1 - r0;
            for (int64_t k = 0; k < K; ++k)
                for (int64_t i = 0; i < mr; ++i) dg[r0 * K + k * mr + i] = wg[(r0 + i) * K + k];
        }
    }
}

ConvGemmArgs ConvGemm::bound_args() const {
    ConvGemmArgs a = args_;  // the tables point into this object's own vectors (safe across copies)
    a.offs = offs_.data();
    a.hmask = hmask_.data();
    a.rph = rph_.data();
    return a;
}

void ConvGemm::run(const float* x, const float* wpacked, const float* bias, const float* res,
                   float* y, float* scratch, const ConvEpi& epi) const {
    const ConvGemmGroupFn fn = gemm_fn(isa_);
    const Conv2DGeom& g = args_.g;
    const ConvGemmArgs args = bound_args();
    const int64_t in_g = g.C * g.H * g.W, out_g = g.M * args_.P;
    const int64_t w_g = (args_.trans ? args_.Mpad : g.M) * args_.K;
    for (int64_t gi = 0; gi < groups_; ++gi)
        fn(args, x + gi * in_g, wpacked + gi * w_g, bias ? bias + gi * g.M : nullptr,
           res ? res + gi * out_g : nullptr, y + gi * out_g, scratch, epi);
}

// run_pixels / run_channels: the bound args with one range member pair set ([b, e) of pixels
// or of weight blocks), one group.
void ConvGemm::run_pixels(const float* x, const float* wpacked, const float* bias, const float* res,
                          float* y, float* scratch, const ConvEpi& epi, int64_t pb, int64_t pe) const {
    ConvGemmArgs args = bound_args();
    args.pb = pb;
    args.pe = pe;
    if (pe > pb) gemm_fn(isa_)(args, x, wpacked, bias, res, y, scratch, epi);
}

void ConvGemm::run_channels(const float* x, const float* wpacked, const float* bias, const float* res,
                            float* y, float* scratch, const ConvEpi& epi, int64_t cb, int64_t ce) const {
    ConvGemmArgs args = bound_args();
    args.cb = cb;
    args.ce = ce;
    if (ce > cb) gemm_fn(isa_)(args, x, wpacked, bias, res, y, scratch, epi);
}

int64_t ConvGemm::channel_blocks() const {
    return args_.trans ? args_.Mpad / nr_ : (args_.g.M + conv_mr(isa_) - 1) / conv_mr(isa_);
}

int64_t ConvGemm::pixel_align() const {
    if (groups_ != 1) return 0;
    if (mode() == ConvGemmMode::kIm2col || mode() == ConvGemmMode::kMasked) return nr_;
    if (mode() == ConvGemmMode::kSplit && args_.srows > 0) return args_.tile;
    // Transposed: any range (run_pixels makes balanced blocks of its own range).
    if (mode() == ConvGemmMode::kTrans) return 1;
    // 1x1-direct reading the image in place (no anti-aliasing copy): any NR-aligned range.
    if (mode() == ConvGemmMode::kImplicit && args_.pointwise && !args_.pad_copy && args_.WP == args_.g.OW) return nr_;
    // The buffered implicit grid (a padded copy, output rows WP apart): whole output rows, each part
    // copying only the padded rows it reads (the line detector's dilated 3x3 32 -> 32 on 160x160,
    // whose channel split was 12 | 20 channels).
    if (mode() == ConvGemmMode::kImplicit && args_.WP != args_.g.OW && args_.g.sh == 1 && args_.g.sw == 1)
        return args_.g.OW;
    return 0;
}

ConvDwMode conv_dw_mode(Isa isa, const Conv2DGeom& g, ConvDwMode force) {
    const int64_t P = g.OH * g.OW, k = g.kh, s = g.sh;
    const bool square = g.kh == g.kw && g.sh == g.sw && g.dh == 1 && g.dw == 1 && (k == 3 || k == 5);
    const bool flat_ok = isa == Isa::kAvx512 && square && P <= kConvDwFlatMaxP &&
                         ((s == 1 && g.OW == g.W) || (s == 2 && (g.H + 1) / 2 <= g.OH && (g.W + 1) / 2 <= g.OW));
    const bool blocked_ok = conv_dw_blocked_floats(g) > 0;
    if (force == ConvDwMode::kBlocked) return blocked_ok ? force : ConvDwMode::kRows;
    if (force == ConvDwMode::kRows || force == ConvDwMode::kPlane) return force;
    if (force == ConvDwMode::kFlat && !flat_ok) return ConvDwMode::kRows;
    if (force == ConvDwMode::kFlat) return ConvDwMode::kFlat;
    // Planes of few output rows (the rows mode computes 4 per block) and uneven strides (its
    // generic row path): the plane-copy kernel, unless flat takes them. 3x3 stride 2 keeps rows
    // down to 4 output rows (576 x 14 -> 7: 32 against 67 us for the plane copy, Zen 4).
    // 5x5 on narrow planes: the channel-blocked kernel (every lane busy, no masks). 960 x 7x7:
    // ~50 against ~140 us flat and ~175 us rows; 672 x 14 -> 7: ~48 against ~130 us rows; 672 x
    // 14x14: ~112 against ~139 us rows (Zen 4, AVX-512). Wider rows fill the rows mode's vectors:
    // it keeps 28 -> 14 stride 2 and 28-wide rows on AVX-512; AVX2's 8-lane blocks win there too
    // (96 x 28 -> 14: 36 against 56 us; 120 x 28x28: 108 against 147 us).
    // Kernels without a specialized rows path (7x7, dilated, stride 3, ...): blocked where the plane
    // fits (64 x 80x80 7x7: ~3.4 ms generic rows; see docs/benchmarks.md).
    if (blocked_ok && conv_dw_generic_kernel(g) && g.sh == g.sw) return ConvDwMode::kBlocked;
    if (blocked_ok && square && k == 5) {
        const bool wide = isa == Isa::kAvx512;
        if (g.OW <= 8 || (g.OW <= 16 && (s == 1 || !wide)) || (!wide && g.OW <= 28 && s == 1))
            return ConvDwMode::kBlocked;
    }
    // 3x3 whose output rows fill few of the rows mode's 16 lanes (<= 70%: 7, 10, 20 or 40-wide;
    // 14 and 28 fill 88%): blocked on AVX-512, stride 2 only onto one-strip rows (wider ones keep
    // the strip tiles). Zen 5 host, hot (bench/kernels_bench.cpp BM_conv_dw): face detector 256 x
    // 8x10 8.9 -> 6.3 us, 128 x 15x20 12.1 -> 11.0, 128 x 15x20 -> 8x10 6.7 -> 5.9; MobileNetV2
    // 960 x 7x7 18.8 (flat) -> 16.2, 576 x 14 -> 7 24.6 -> 16.4; 64 x 30x40 -> 15x20 stays in
    // rows (9.1 against 13.1 blocked), as does 384 x 14x14 (20.4 against 22.4). Up to 320 output
    // pixels: the line detector's 384 x 20x20 measured no gain in the model. In the face detector
    // (JIFFY_PROFILE, 3 rounds alternating): 256 x 8x10 ~9-13 -> ~6.5 us, 128 x 15x20 -> 8x10
    // ~8-10 -> ~6.2 us.
    if (isa == Isa::kAvx512 && blocked_ok && square && k == 3) {
        const double fill = double(g.OW) / double((g.OW + 15) / 16 * 16);
        if (fill <= 0.7 && g.OH * g.OW <= 320 && (s == 1 || g.OW <= 16)) return ConvDwMode::kBlocked;
    }
    const int64_t few_rows = k == 3 && s == 2 ? 4 : 8;
    const ConvDwMode other = g.OH < few_rows || g.sh != g.sw ? ConvDwMode::kPlane : ConvDwMode::kRows;
    // Flat where rows waste lanes: 7-wide rows fill 7 of 16, the flat plane 49 of 64 (960 x 7x7:
    // 27 against 39 us in rows). Rows that fill most of a vector run faster in rows (384 x 14x14:
    // 25 against 32 us flat; 576: 39 against 48, Zen 4). Stride 2 pays for splitting the input
    // into parity planes: for 3x3 not worth it on Zen 4 even on 7-wide outputs (576 x 14 -> 7:
    // 32 against 52 us; the Zen 5 of MACHINE.md measured ~1.15x for flat there), for 5x5 kept.
    if (!flat_ok || P > kConvDwFlatAutoP) return other;
    if (s == 2 && k == 3) return other;
    if (s == 1 && k == 3 && g.OW * 2 > 16 && other == ConvDwMode::kRows) return other;
    // 5x5 on planes of few rows: the plane-copy kernel measured faster (PP-OCR cls 200 x 2x96:
    // 47 against 60 us for flat, whose 25 weights spill from registers).
    if (k == 5 && other == ConvDwMode::kPlane) return other;
    return ConvDwMode::kFlat;
}

const char* conv_dw_mode_name(ConvDwMode m, const Conv2DGeom& g) {
    if (m == ConvDwMode::kPlane) return "plane";
    if (m == ConvDwMode::kBlocked) return "blocked";
    if (m != ConvDwMode::kFlat) return "rows";
    return g.sh == 2 ? "flat-s2" : "flat";
}

const char* conv_dw_kernel_name(Isa isa, ConvDwMode m, const Conv2DGeom& g) {
    if (m == ConvDwMode::kRows && isa == Isa::kAvx512 && conv_dw_s2_strips(g)) return "rows-s2";
    return conv_dw_mode_name(m, g);
}

void conv_depthwise(Isa isa, const Conv2DGeom& g, const float* x, const float* w,
                    const float* bias, const float* res, float* y, const ConvEpi& epi,
                    float* scratch, ConvDwMode mode, int64_t oy0, int64_t oy1) {
    mode = conv_dw_mode(isa, g, mode);
    if (oy1 < 0) oy1 = g.OH;
    // Output rows [oy0, oy1) only: the rows mode alone takes a range (conv_dw_rows_range_ok).
    if ((oy0 != 0 || oy1 != g.OH) && mode != ConvDwMode::kRows) return;
    if (mode == ConvDwMode::kPlane) {
#if defined(__x86_64__)
        if (isa == Isa::kAvx512) return conv_dw_plane_avx512(g, x, w, bias, res, y, epi, scratch);
        if (isa == Isa::kAvx2) return conv_dw_plane_avx2(g, x, w, bias, res, y, epi, scratch);
#endif
#if defined(__aarch64__)
        if (isa == Isa::kNeon) return conv_dw_plane_neon(g, x, w, bias, res, y, epi, scratch);
#endif
        return conv_dw_plane_portable(g, x, w, bias, res, y, epi, scratch);
    }
    if (mode == ConvDwMode::kBlocked) {
#if defined(__x86_64__)
        if (isa == Isa::kAvx512) return conv_dw_blocked_avx512(g, x, w, bias, res, y, epi, scratch);
        if (isa == Isa::kAvx2) return conv_dw_blocked_avx2(g, x, w, bias, res, y, epi, scratch);
#endif
#if defined(__aarch64__)
        if (isa == Isa::kNeon) return conv_dw_blocked_neon(g, x, w, bias, res, y, epi, scratch);
#endif
        return conv_dw_blocked_portable(g, x, w, bias, res, y, epi, scratch);
    }
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return conv_dw_avx512(g, x, w, bias, res, y, epi, scratch, mode, oy0, oy1);
    if (isa == Isa::kAvx2) return conv_dw_avx2(g, x, w, bias, res, y, epi, scratch, mode, oy0, oy1);
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return conv_dw_neon(g, x, w, bias, res, y, epi, scratch, mode, oy0, oy1);
#endif
    (void)isa;
    conv_dw_portable(g, x, w, bias, res, y, epi, scratch, mode, oy0, oy1);
}

void conv_epilogue(Isa isa, float* y, const float* r, int64_t n, const ConvEpi& epi) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return conv_epi_avx512(y, r, n, epi);
    if (isa == Isa::kAvx2) return conv_epi_avx2(y, r, n, epi);
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return conv_epi_neon(y, r, n, epi);
#endif
    (void)isa;
    conv_epi_portable(y, r, n, epi);
}

void conv_subsample(Isa isa, const float* x, int64_t H, int64_t W, int64_t sh, int64_t sw, int64_t OH,
                    int64_t OW, float* y, int64_t c0, int64_t c1) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return conv_subsample_avx512(x, H, W, sh, sw, OH, OW, y, c0, c1);
    if (isa == Isa::kAvx2) return conv_subsample_avx2(x, H, W, sh, sw, OH, OW, y, c0, c1);
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return conv_subsample_neon(x, H, W, sh, sw, OH, OW, y, c0, c1);
#endif
    (void)isa;
    conv_subsample_portable(x, H, W, sh, sw, OH, OW, y, c0, c1);
}

// The AVX-512 build sorts the phases with lane permutes; the others copy one float at a time.
static void phase_planes(Isa isa, const PhaseMosaic& p, bool split, const float* from, float* to, int64_t c0,
                         int64_t c1) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return phase_planes_avx512(p, split, from, to, c0, c1);
#endif
    (void)isa;
    phase_planes_portable(p, split, from, to, c0, c1);
}

void phase_split(Isa isa, const PhaseMosaic& p, const float* x, float* mosaic, int64_t c0, int64_t c1) {
    phase_planes(isa, p, true, x, mosaic, c0, c1);
}

void phase_merge(Isa isa, const PhaseMosaic& p, const float* mosaic, float* y, int64_t c0, int64_t c1) {
    phase_planes(isa, p, false, mosaic, y, c0, c1);
}

}  // namespace jiffy::kernels
