// Kernel microbenchmarks (Google Benchmark): each fast kernel beside its reference, on odd sizes
// and the M=1 shapes of the audio heads. Run: build/jiffy_kernel_bench [--benchmark_filter=...]
// (reports mean per iteration; use --benchmark_repetitions=5 --benchmark_report_aggregates_only
// for medians).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "machine_probe.h"
#include "kernels/conv.h"
#include "kernels/conv_nhwc.h"
#include "kernels/weight_alloc.h"
#include "kernels/conv_cv.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/pool.h"
#include "kernels/small_conv.h"
#include "runtime/threadpool.h"

using namespace jiffy::kernels;

namespace {

struct GemmCase {
    std::vector<float> A, B, C;
    PackedB packed;
};

GemmCase make_case(int64_t M, int64_t N, int64_t K, Isa isa) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1, 1);
    GemmCase c;
    c.A.resize(size_t(M * K));
    c.B.resize(size_t(K * N));
    c.C.resize(size_t(M * N));
    for (float& x : c.A) x = u(rng);
    for (float& x : c.B) x = u(rng);
    c.packed = pack_b(c.B.data(), K, N, N, false, isa);
    return c;
}

void set_flops(benchmark::State& st, int64_t M, int64_t N, int64_t K) {
    st.counters["GFLOP/s"] = benchmark::Counter(double(2 * M * N * K), benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
}

void BM_sgemm(benchmark::State& st, Isa isa) {
    int64_t M = st.range(0), N = st.range(1), K = st.range(2);
    if (int(isa) > int(cpu_isa())) {
        st.SkipWithError("ISA not available");
        return;
    }
    GemmCase c = make_case(M, N, K, isa);
    SgemmFn fn = sgemm_for(isa);
    for (auto _ : st) {
        fn(M, c.A.data(), K, c.packed, nullptr, c.C.data(), N, Act::kNone);
        benchmark::DoNotOptimize(c.C.data());
    }
    set_flops(st, M, N, K);
}

// M = 1 over the GEMV packing: the MLP layers (weights in L1/L2) and the 256-1024-1024-256
// MLP's (4 MiB: L3/DRAM); bytes/s counts the weights streamed.
void BM_sgemv(benchmark::State& st, Isa isa) {
    int64_t N = st.range(0), K = st.range(1);
    if (int(isa) > int(cpu_isa())) {
        st.SkipWithError("ISA not available");
        return;
    }
    GemmCase c = make_case(1, N, K, Isa::kScalar);
    const PackedGemv pg = pack_b_gemv(c.B.data(), K, N, N, false);
    std::vector<float> bias(size_t(N), 0.5f);
    SgemvFn fn = sgemv_for(isa);
    Activation relu;
    relu.kind = ActKind::kRelu;
    bool backward = false;  // alternating as a plan runs it (the serpentine order, kernels/gemm.h)
    for (auto _ : st) {
        fn(c.A.data(), pg, bias.data(), c.C.data(), relu, backward);
        backward = !backward;
        benchmark::DoNotOptimize(c.C.data());
    }
    set_flops(st, 1, N, K);
    st.SetBytesProcessed(int64_t(st.iterations()) * K * N * 4);
}

// The same on less exact weights (docs/gemv.md): arg 2 = 0 float32, 1 24-bit, 2 20-bit blocks.
void BM_sgemv_w24(benchmark::State& st) {
    const int64_t N = st.range(0), K = st.range(1), mode = st.range(2);
    if (mode > 0 && !gemv_w24_supported(Isa::kAvx512)) {
        st.SkipWithError("24-bit GEMV not available");
        return;
    }
    GemmCase c = make_case(1, N, K, Isa::kScalar);
    PackedGemv pg = pack_b_gemv(c.B.data(), K, N, N, false);
    if (mode == 1) gemv_set_w24(&pg, Isa::kAvx512, true);
    if (mode == 2) gemv_set_i20(&pg, Isa::kAvx512, true);
    std::vector<float> bias(size_t(N), 0.5f);
    SgemvFn fn = sgemv_for(Isa::kAvx512);
    Activation relu;
    relu.kind = ActKind::kRelu;
    bool backward = false;
    for (auto _ : st) {
        fn(c.A.data(), pg, bias.data(), c.C.data(), relu, backward);
        backward = !backward;
        benchmark::DoNotOptimize(c.C.data());
    }
    set_flops(st, 1, N, K);
    st.SetBytesProcessed(int64_t(double(st.iterations()) * K * N * (mode == 2 ? 2.5625 : mode == 1 ? 3 : 4)));
}

// A GEMV split across 2 threads as a plan does it (docs/threading.md): the weights repacked into
// the split layout, each thread one contiguous column range (arg 2 = 1), against the whole GEMV on
// the caller (arg 2 = 0). The wake-word heads' first layers: 1536 / 2112 / 3264 x 128.
void BM_sgemv_split2(benchmark::State& st) {
    const int64_t N = st.range(0), K = st.range(1);
    const bool split = st.range(2) != 0;
    const Isa isa = cpu_isa();
    GemmCase c = make_case(1, N, K, Isa::kScalar);
    const PackedGemv whole = pack_b_gemv(c.B.data(), K, N, N, false);
    const PackedGemv pg = split ? repack_gemv_split(whole, isa) : whole;
    const int64_t unit = sgemv_split_unit(isa), mid = std::min(sgemv_main_cols(isa, N), (N / 2 + unit / 2) / unit * unit);
    jiffy::ThreadPool pool(2);
    const SgemvColsFn fn = sgemv_cols_for(isa);
    std::vector<float> bias(size_t(N), 0.5f);
    for (auto _ : st) {
        if (split)
            pool.parallel_for(2, [&](int t) {
                fn(c.A.data(), pg, t ? mid : 0, t ? N : mid, bias.data(), c.C.data(), Activation{}, false);
            });
        else
            fn(c.A.data(), pg, 0, N, bias.data(), c.C.data(), Activation{}, false);
        benchmark::DoNotOptimize(c.C.data());
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * K * N * 4);
}

// The classifier GEMVs streamed cold from DRAM (MobileNetV2 1280 -> 1000, ResNet-50 2048 ->
// 1000, transB): 96 MiB written between iterations evicts the weights (and their page-table
// entries) from every cache level, as the convolutions before them do in the model.
void BM_sgemv_cold(benchmark::State& st) {
    const int64_t N = st.range(0), K = st.range(1);
    GemmCase c = make_case(1, N, K, Isa::kScalar);
    const PackedGemv pg = pack_b_gemv(c.B.data(), K, N, K, true);
    std::vector<char> flush(size_t(96) << 20);
    SgemvFn fn = sgemv_for(cpu_isa());
    for (auto _ : st) {
        st.PauseTiming();
        for (size_t i = 0; i < flush.size(); i += 64) flush[i]++;
        benchmark::ClobberMemory();
        st.ResumeTiming();
        fn(c.A.data(), pg, nullptr, c.C.data(), Activation{}, false);
        benchmark::DoNotOptimize(c.C.data());
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * K * N * 4);
}

// GlobalAveragePool over planes x size floats (MobileNetV3's 672 x 14x14, 960 x 7x7, 120 x 28x28;
// inputs in L2 as in the model, where the conv before it just wrote them); bytes/s counts the
// input read once.
void BM_global_avg(benchmark::State& st, Isa isa) {
    const int64_t planes = st.range(0), size = st.range(1);
    if (int(isa) > int(cpu_isa())) {
        st.SkipWithError("ISA not available");
        return;
    }
    std::vector<float> x(static_cast<size_t>(planes * size)), y(static_cast<size_t>(planes));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 13) * 0.25f - 1.0f;
    const GlobalAvgFn fn = global_avg_for(isa);
    for (auto _ : st) {
        fn(x.data(), y.data(), planes, size);
        benchmark::DoNotOptimize(y.data());
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * planes * size * 4);
}

void BM_sgemm_reference(benchmark::State& st) {
    int64_t M = st.range(0), N = st.range(1), K = st.range(2);
    GemmCase c = make_case(M, N, K, Isa::kScalar);
    for (auto _ : st) {
        sgemm_reference(M, N, K, c.A.data(), K, c.B.data(), N, false, nullptr, c.C.data(), N, Act::kNone);
        benchmark::DoNotOptimize(c.C.data());
    }
    set_flops(st, M, N, K);
}

void sizes(benchmark::internal::Benchmark* b) {
    b->Args({1, 128, 64})->Args({1, 128, 96})->Args({1, 1024, 256})->Args({1, 96, 1536})
        ->Args({63, 63, 63})->Args({64, 64, 64})->Args({255, 255, 255})->Args({256, 256, 256})
        ->Args({3136, 64, 576})->Args({32, 512, 128})->Args({32, 128, 512})->Args({5, 257, 512})->Args({8, 258, 256})->Args({32, 128, 128})->Args({32, 384, 128})->Args({32, 32, 32});
}

// Few-output-pixel conv (melspectrogram's STFT: 1 x 1280 -> 257 x 5, k 512, stride 160; Silero
// v5's: 1 x 576 -> 258 x 3, k 256, stride 128): SmallConv against the general GEMM conv on the
// same ISA (what ran before).
Conv2DGeom stft_geom(int64_t W, int64_t M, int64_t k, int64_t s) {
    Conv2DGeom g;
    g.C = 1, g.H = 1, g.W = W, g.M = M, g.kh = 1, g.kw = k, g.sw = s, g.OH = 1, g.OW = (W - k) / s + 1;
    return g;
}

void BM_small_conv(benchmark::State& st, Isa isa, bool general) {
    if (int(isa) > int(cpu_isa())) {
        st.SkipWithError("ISA not available");
        return;
    }
    const Conv2DGeom g = st.range(0) == 0 ? stft_geom(1280, 257, 512, 160) : stft_geom(576, 258, 256, 128);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> x(size_t(g.W)), w(size_t(g.M * g.kw)), b(size_t(g.M)), y(size_t(g.M * g.OW));
    for (float& v : x) v = u(rng);
    for (float& v : w) v = u(rng);
    if (general) {
        ConvGemm cg(isa, g, 1);
        std::vector<float> wp(cg.packed_w_floats()), scratch(cg.scratch_floats());
        cg.pack_w(w.data(), wp.data());
        for (auto _ : st) {
            cg.run(x.data(), wp.data(), b.data(), nullptr, y.data(), scratch.data(), ConvEpi{});
            benchmark::DoNotOptimize(y.data());
        }
    } else {
        SmallConv sc(isa, g, w.data());
        std::vector<float> scratch(sc.scratch_floats());
        for (auto _ : st) {
            sc.run(x.data(), b.data(), nullptr, y.data(), scratch.data(), ConvEpi{});
            benchmark::DoNotOptimize(y.data());
        }
    }
    set_flops(st, g.OW, g.M, g.kw);
}

// Softmax / LayerNorm rows of the transformer layer (4 x 32 rows of 32; 32 rows of 128), each ISA
// beside the scalar form.
void BM_softmax_rows(benchmark::State& st, Isa isa) {
    if (int(isa) > int(cpu_isa())) {
        st.SkipWithError("ISA not available");
        return;
    }
    const int64_t rows = st.range(0), n = st.range(1);
    std::vector<float> x(size_t(rows * n)), y(x.size());
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-4, 4);
    for (float& v : x) v = u(rng);
    SoftmaxRowsFn fn = softmax_rows_for(isa);
    for (auto _ : st) {
        fn(x.data(), y.data(), rows, n, 1.0f);
        benchmark::DoNotOptimize(y.data());
    }
}

void BM_layernorm_rows(benchmark::State& st, Isa isa) {
    if (int(isa) > int(cpu_isa())) {
        st.SkipWithError("ISA not available");
        return;
    }
    const int64_t rows = st.range(0), n = st.range(1);
    std::vector<float> x(size_t(rows * n)), y(x.size()), sc(size_t(n), 1.1f), b(size_t(n), 0.1f);
    std::mt19937 rng(8);
    std::uniform_real_distribution<float> u(-4, 4);
    for (float& v : x) v = u(rng);
    LayerNormRowsFn fn = layernorm_rows_for(isa);
    for (auto _ : st) {
        fn(x.data(), y.data(), rows, n, sc.data(), b.data(), 1e-5f, nullptr);
        benchmark::DoNotOptimize(y.data());
    }
}

// ------------------------------------------------------------------------- convolutions

struct ConvCase {
    Conv2DGeom g;
    std::vector<float> x, w, wp, b, y, scratch;
    ConvGemm cg;
};

// Conv N=1 of geometry g (weights, input and bias uniform in [-1, 1)).
ConvCase make_conv_g(const Conv2DGeom& g, Isa isa, bool dw) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1, 1);
    ConvCase c;
    c.g = g;
    c.x.resize(size_t(g.C * g.H * g.W));
    c.w.resize(size_t(g.M * (dw ? 1 : g.C) * g.kh * g.kw));
    c.b.resize(size_t(g.M));
    c.y.resize(size_t(g.M * g.OH * g.OW));
    for (float& v : c.x) v = u(rng);
    for (float& v : c.w) v = u(rng);
    for (float& v : c.b) v = u(rng);
    if (dw) c.scratch.resize(conv_dw_scratch_floats(g));
    if (!dw) {
        c.cg = ConvGemm(isa, g, 1);
        c.wp.resize(c.cg.packed_w_floats());
        c.cg.pack_w(c.w.data(), c.wp.data());
        c.scratch.resize(c.cg.scratch_floats());
    }
    return c;
}

// Conv N=1, C->M, H x W (W 0: square), k x k, stride s, pad k/2 (ResNet / MobileNetV2 /
// PaddleOCR / face detector shapes).
ConvCase make_conv(int64_t C, int64_t M, int64_t H, int64_t k, int64_t s, Isa isa, bool dw, int64_t W = 0) {
    Conv2DGeom g;
    g.C = C;
    g.M = M;
    g.H = H;
    g.W = W ? W : H;
    g.kh = g.kw = k;
    g.sh = g.sw = s;
    g.ph = g.pw = k / 2;
    g.OH = (g.H + 2 * (k / 2) - k) / s + 1;
    g.OW = (g.W + 2 * (k / 2) - k) / s + 1;
    return make_conv_g(g, isa, dw);
}

void set_conv_flops(benchmark::State& st, const Conv2DGeom& g, bool dw) {
    const int64_t f = 2 * g.M * g.OH * g.OW * (dw ? 1 : g.C) * g.kh * g.kw;
    st.counters["GFLOP/s"] = benchmark::Counter(double(f), benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
}

// Args: C, M, H(=W), k, stride, depthwise.
void BM_conv(benchmark::State& st, Isa isa) {
    if (int(isa) > int(cpu_isa())) {
        st.SkipWithError("ISA not available");
        return;
    }
    const bool dw = st.range(5) != 0;
    ConvCase c = make_conv(st.range(0), st.range(1), st.range(2), st.range(3), st.range(4), isa, dw);
    const ConvEpi epi{ConvAct::kRelu};
    for (auto _ : st) {
        if (dw)
            conv_depthwise(isa, c.g, c.x.data(), c.w.data(), c.b.data(), nullptr, c.y.data(), epi,
                           c.scratch.data());
        else
            c.cg.run(c.x.data(), c.wp.data(), c.b.data(), nullptr, c.y.data(), c.scratch.data(), epi);
        benchmark::DoNotOptimize(c.y.data());
    }
    set_conv_flops(st, c.g, dw);
}

// Depthwise convs per mode. Args: C, H, k, stride, mode (0 auto, 1 rows, 2 flat, 3 plane, 4 blocked,
// 5 channels-last),
// W (0: W = H).
void BM_conv_dw(benchmark::State& st, Isa isa) {
    if (int(isa) > int(cpu_isa())) {
        st.SkipWithError("ISA not available");
        return;
    }
    const int64_t C = st.range(0);
    ConvCase c = make_conv(C, C, st.range(1), st.range(2), st.range(3), isa, true, st.range(5));
    if (st.range(4) == 5) {  // channels-last (conv_nhwc.h), the layout_nhwc pass's kernel
        const NhwcDepthwise k(isa, c.g);
        std::shared_ptr<float> packed = alloc_weights(k.packed_floats());
        k.pack(c.w.data(), c.b.data(), packed.get());
        st.SetLabel("nhwc");
        const ConvEpi epi{ConvAct::kClip, 0.0f, 6.0f};
        // 64-byte aligned like the plan's arena (a pixel of 16k channels is then whole lines).
        std::shared_ptr<float> x = alloc_weights(c.x.size()), y = alloc_weights(c.y.size());
        std::copy(c.x.begin(), c.x.end(), x.get());
        for (auto _ : st) {
            k.run(x.get(), packed.get(), nullptr, y.get(), epi, 0, c.g.OH);
            benchmark::DoNotOptimize(y.get());
        }
        set_conv_flops(st, c.g, true);
        return;
    }
    const ConvDwMode m = conv_dw_mode(isa, c.g, ConvDwMode(st.range(4)));
    if (st.range(4) != 0 && m != ConvDwMode(st.range(4))) {
        st.SkipWithError("mode not available for this shape");
        return;
    }
    st.SetLabel(conv_dw_mode_name(m, c.g));
    const ConvEpi epi{ConvAct::kClip, 0.0f, 6.0f};
    for (auto _ : st) {
        conv_depthwise(isa, c.g, c.x.data(), c.w.data(), c.b.data(), nullptr, c.y.data(), epi,
                       c.scratch.data(), m);
        benchmark::DoNotOptimize(c.y.data());
    }
    set_conv_flops(st, c.g, true);
}

void conv_dw_sizes(benchmark::internal::Benchmark* b) {
    b->ArgNames({"C", "H", "k", "s", "mode", "W"});
    // MobileNetV2's small-plane depthwise layers, then larger planes (where rows win).
    for (const auto& a : std::vector<std::vector<int64_t>>{
             {960, 7, 3, 1}, {384, 14, 3, 1}, {576, 14, 3, 1}, {576, 14, 3, 2}, {192, 28, 3, 2},
             {192, 28, 3, 1}, {144, 56, 3, 2}, {480, 7, 5, 1}, {240, 14, 5, 2},
             // MobileNetV2's large planes (rows mode) and 5x5 on large planes.
             {32, 112, 3, 1}, {96, 112, 3, 2}, {144, 56, 3, 1}, {72, 56, 5, 1}, {96, 28, 5, 2},
             // MobileNetV3-Large's 5x5 layers on small planes and its stride-2 layers.
             {960, 7, 5, 1}, {672, 14, 5, 2}, {120, 28, 5, 1}, {72, 56, 5, 2}, {64, 112, 3, 2},
             {240, 28, 3, 2}, {672, 14, 3, 1}, {672, 14, 5, 1},
             // A face detector's 32-channel stride-2 layer on 120x160 (here 140x140: as many pixels).
             {32, 140, 3, 2}, {4, 140, 3, 2},
             // 7x7 depthwise (ConvNeXt-like): no specialized rows path.
             {64, 80, 7, 1}, {480, 7, 7, 1},
             // The face detector's (240x320 input) depthwise layers: H, k, s, W.
             {16, 120, 3, 1, 160}, {32, 120, 3, 2, 160}, {32, 60, 3, 1, 80}, {32, 60, 3, 2, 80},
             {64, 30, 3, 1, 40}, {64, 30, 3, 2, 40}, {128, 15, 3, 1, 20}, {128, 15, 3, 2, 20},
             {256, 8, 3, 1, 10}, {16, 8, 3, 1, 16}, {16, 8, 3, 2, 16}})
        for (int64_t m : {1, 2, 3, 4, 5}) b->Args({a[0], a[1], a[2], a[3], m, a.size() > 4 ? a[4] : 0});
}

// The reference conv: a direct loop nest (no im2col, no vectors by hand).
void conv_reference(ConvCase& c, bool dw) {
    const Conv2DGeom& g = c.g;
    for (int64_t m = 0; m < g.M; ++m) {
        float* ym = c.y.data() + m * g.OH * g.OW;
        for (int64_t i = 0; i < g.OH * g.OW; ++i) ym[i] = c.b[size_t(m)];
        const int64_t c0 = dw ? m : 0, c1 = dw ? m + 1 : g.C;
        for (int64_t ci = c0; ci < c1; ++ci)
            for (int64_t ky = 0; ky < g.kh; ++ky)
                for (int64_t kx = 0; kx < g.kw; ++kx) {
                    const float wv = dw ? c.w[size_t((m * g.kh + ky) * g.kw + kx)]
                                        : c.w[size_t(((m * g.C + ci) * g.kh + ky) * g.kw + kx)];
                    for (int64_t oy = 0; oy < g.OH; ++oy) {
                        const int64_t iy = oy * g.sh - g.ph + ky;
                        if (iy < 0 || iy >= g.H) continue;
                        for (int64_t ox = 0; ox < g.OW; ++ox) {
                            const int64_t ix = ox * g.sw - g.pw + kx;
                            if (ix >= 0 && ix < g.W) ym[oy * g.OW + ox] += wv * c.x[size_t((ci * g.H + iy) * g.W + ix)];
                        }
                    }
                }
    }
}

// The reference beside it: a direct loop nest (no im2col, no vectors by hand).
void BM_conv_reference(benchmark::State& st) {
    const bool dw = st.range(5) != 0;
    ConvCase c = make_conv(st.range(0), st.range(1), st.range(2), st.range(3), st.range(4), Isa::kScalar, true);
    if (!dw) c.w.resize(size_t(c.g.M * c.g.C * c.g.kh * c.g.kw), 0.5f);
    const Conv2DGeom& g = c.g;
    for (auto _ : st) {
        conv_reference(c, dw);
        benchmark::DoNotOptimize(c.y.data());
    }
    set_conv_flops(st, g, dw);
}

// openWakeWord's embedding_model, every conv in order (C, M, H, W, kh, kw, ph, pw; stride 1):
// small channel counts on tall-narrow planes, 1x3 (width-padded) and 3x1 kernels.
constexpr int64_t kEmbConvs[][8] = {
    {1, 24, 76, 32, 3, 3, 0, 1},   {24, 24, 74, 32, 1, 3, 0, 1}, {24, 24, 74, 32, 3, 1, 0, 0},
    {24, 48, 36, 16, 1, 3, 0, 1},  {48, 48, 36, 16, 3, 1, 0, 0}, {48, 48, 34, 16, 1, 3, 0, 1},
    {48, 48, 34, 16, 3, 1, 0, 0},  {48, 72, 32, 8, 1, 3, 0, 1},  {72, 72, 32, 8, 3, 1, 0, 0},
    {72, 72, 30, 8, 1, 3, 0, 1},   {72, 72, 30, 8, 3, 1, 0, 0},  {72, 96, 14, 4, 1, 3, 0, 1},
    {96, 96, 14, 4, 3, 1, 0, 0},   {96, 96, 12, 4, 1, 3, 0, 1},  {96, 96, 12, 4, 3, 1, 0, 0},
    {96, 96, 10, 2, 1, 3, 0, 1},   {96, 96, 10, 2, 3, 1, 0, 0},  {96, 96, 8, 2, 1, 3, 0, 1},
    {96, 96, 8, 2, 3, 1, 0, 0},    {96, 96, 3, 1, 3, 1, 0, 0}};

Conv2DGeom emb_geom(int64_t i) {
    const int64_t* r = kEmbConvs[i];
    Conv2DGeom g;
    g.C = r[0], g.M = r[1], g.H = r[2], g.W = r[3], g.kh = r[4], g.kw = r[5], g.ph = r[6], g.pw = r[7];
    g.OH = g.H + 2 * g.ph - g.kh + 1;
    g.OW = g.W + 2 * g.pw - g.kw + 1;
    return g;
}

// Arg: the layer index in kEmbConvs. LeakyRelu epilogue as in the model.
void BM_conv_emb(benchmark::State& st, Isa isa) {
    if (int(isa) > int(cpu_isa())) {
        st.SkipWithError("ISA not available");
        return;
    }
    ConvCase c = make_conv_g(emb_geom(st.range(0)), isa, false);
    const ConvEpi epi{ConvAct::kLeakyRelu, 0.2f};
    for (auto _ : st) {
        c.cg.run(c.x.data(), c.wp.data(), c.b.data(), nullptr, c.y.data(), c.scratch.data(), epi);
        benchmark::DoNotOptimize(c.y.data());
    }
    set_conv_flops(st, c.g, false);
}

// The same layers on the channel-vector conv (conv_cv.h; the small-plane layers 11-19 only).
void BM_conv_emb_chanvec(benchmark::State& st, Isa isa) {
    if (int(isa) > int(cpu_isa())) {
        st.SkipWithError("ISA not available");
        return;
    }
    const Conv2DGeom g = emb_geom(st.range(0));
    if (!ConvChanVec::fits(g)) {
        st.SkipWithError("geometry does not fit the channel-vector conv");
        return;
    }
    ConvCase c = make_conv_g(g, isa, true);  // no GEMM packing
    c.w.resize(size_t(g.M * g.C * g.kh * g.kw), 0.5f);
    ConvChanVec cv(isa, g, c.w.data());
    c.scratch.assign(cv.scratch_floats(), 0.0f);
    const ConvEpi epi{ConvAct::kLeakyRelu, 0.2f};
    for (auto _ : st) {
        cv.run(c.x.data(), c.b.data(), nullptr, c.y.data(), c.scratch.data(), epi);
        benchmark::DoNotOptimize(c.y.data());
    }
    set_conv_flops(st, g, false);
}

void BM_conv_emb_reference(benchmark::State& st) {
    ConvCase c = make_conv_g(emb_geom(st.range(0)), Isa::kScalar, false);
    for (auto _ : st) {
        conv_reference(c, false);
        benchmark::DoNotOptimize(c.y.data());
    }
    set_conv_flops(st, c.g, false);
}

void conv_sizes(benchmark::internal::Benchmark* b) {
    b->ArgNames({"C", "M", "HW", "k", "s", "dw"})
        ->Args({64, 64, 56, 3, 1, 0})      // ResNet-50 conv2_x 3x3
        ->Args({256, 64, 56, 1, 1, 0})     // ResNet-50 conv2_x 1x1 reduce
        ->Args({64, 256, 56, 1, 1, 0})     // ResNet-50 conv2_x 1x1 expand
        ->Args({128, 128, 28, 3, 1, 0})    // ResNet-50 conv3_x 3x3
        ->Args({512, 512, 7, 3, 1, 0})     // ResNet-50 conv5_x 3x3
        ->Args({32, 192, 112, 1, 1, 0})    // MobileNetV2-like expand on a large image
        ->Args({144, 24, 56, 1, 1, 0})     // MobileNetV2 project
        ->Args({3, 32, 224, 3, 2, 0})      // stem
        ->Args({144, 144, 56, 3, 1, 1})    // MobileNetV2 depthwise
        ->Args({96, 96, 112, 3, 2, 1})     // MobileNetV2 depthwise stride 2
        ->Args({320, 1280, 7, 1, 1, 0})    // MobileNetV2 last 1x1 (few pixels)
        ->Args({960, 160, 7, 1, 1, 0})     // MobileNetV2 7x7 project
        ->Args({96, 576, 14, 1, 1, 0})     // MobileNetV2 14x14 expand
        ->Args({960, 960, 7, 3, 1, 1})     // MobileNetV2 depthwise 7x7
        ->Args({192, 192, 28, 3, 2, 1})    // MobileNetV2 depthwise stride 2, 28 -> 14
        ->Args({96, 24, 160, 3, 1, 0});    // ppocrv4_det head 3x3 (few output channels)
}

// The FMA peak this core gives right now (bench/machine_probe.h): compare a kernel's GFLOP/s with this
// figure from the same run.
#if defined(__x86_64__)
void BM_fma_peak_avx512(benchmark::State& st) {
    if (cpu_isa() != Isa::kAvx512) {
        st.SkipWithError("ISA not available");
        return;
    }
    jiffy::bench::FmaV16 c[26];
    jiffy::bench::fma_peak_init(c);
    const int64_t n = 100000;
    for (auto _ : st) {
        jiffy::bench::fma_peak_loop(c, n);
        benchmark::DoNotOptimize(c);
    }
    st.counters["GFLOP/s"] = benchmark::Counter(double(n) * jiffy::bench::kFmaPeakFlopsPerStep,
                                                benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
}
#endif

}  // namespace

BENCHMARK_CAPTURE(BM_small_conv, avx512, Isa::kAvx512, false)->Arg(0)->Arg(1);
BENCHMARK_CAPTURE(BM_small_conv, avx512_general_conv, Isa::kAvx512, true)->Arg(0)->Arg(1);
BENCHMARK_CAPTURE(BM_small_conv, avx2, Isa::kAvx2, false)->Arg(0)->Arg(1);
BENCHMARK_CAPTURE(BM_small_conv, scalar, Isa::kScalar, false)->Arg(0)->Arg(1);
BENCHMARK_CAPTURE(BM_softmax_rows, avx512, Isa::kAvx512)->Args({128, 32})->Args({4, 1000});
BENCHMARK_CAPTURE(BM_softmax_rows, avx2, Isa::kAvx2)->Args({128, 32})->Args({4, 1000});
BENCHMARK_CAPTURE(BM_softmax_rows, scalar, Isa::kScalar)->Args({128, 32})->Args({4, 1000});
BENCHMARK_CAPTURE(BM_layernorm_rows, avx512, Isa::kAvx512)->Args({32, 128})->Args({4, 1000});
BENCHMARK_CAPTURE(BM_layernorm_rows, avx2, Isa::kAvx2)->Args({32, 128})->Args({4, 1000});
BENCHMARK_CAPTURE(BM_layernorm_rows, scalar, Isa::kScalar)->Args({32, 128})->Args({4, 1000});
BENCHMARK_CAPTURE(BM_sgemm, avx512, Isa::kAvx512)->Apply(sizes);
BENCHMARK_CAPTURE(BM_sgemm, avx2, Isa::kAvx2)->Apply(sizes);
BENCHMARK_CAPTURE(BM_sgemm, scalar, Isa::kScalar)->Apply(sizes);
BENCHMARK_CAPTURE(BM_sgemv, avx512, Isa::kAvx512)
    ->Args({128, 64})->Args({128, 128})->Args({10, 128})->Args({1024, 256})->Args({1024, 1024})->Args({256, 1024})->Args({128, 3264})->Args({100, 131})->Args({1000, 1280})->Args({1000, 2048})->Args({240, 960})->Args({960, 240});
BENCHMARK_CAPTURE(BM_sgemv, avx2, Isa::kAvx2)->Args({128, 128})->Args({1024, 1024});
BENCHMARK_CAPTURE(BM_sgemv, scalar, Isa::kScalar)->Args({128, 128});
BENCHMARK(BM_sgemv_w24)->ArgNames({"N", "K", "mode"})->ArgsProduct({{128}, {64, 1536, 2112, 3264}, {0, 1, 2}});
BENCHMARK(BM_sgemv_w24)->ArgNames({"N", "K", "mode"})->ArgsProduct({{1024}, {256, 1024}, {0, 1, 2}});
BENCHMARK(BM_sgemv_split2)->ArgNames({"N", "K", "split"})->ArgsProduct({{128}, {1536, 2112, 3264}, {0, 1}})->UseRealTime();
BENCHMARK(BM_sgemv_cold)->Args({1000, 1280})->Args({1000, 2048})->Args({240, 960})->Args({960, 240})->Iterations(30);
BENCHMARK_CAPTURE(BM_global_avg, avx512, Isa::kAvx512)->Args({672, 196})->Args({960, 49})->Args({120, 784});
BENCHMARK_CAPTURE(BM_global_avg, avx2, Isa::kAvx2)->Args({672, 196})->Args({960, 49})->Args({120, 784});
BENCHMARK_CAPTURE(BM_global_avg, scalar, Isa::kScalar)->Args({672, 196})->Args({960, 49})->Args({120, 784});
BENCHMARK(BM_sgemm_reference)->Args({1, 128, 64})->Args({64, 64, 64})->Args({256, 256, 256});

#if defined(__x86_64__)
BENCHMARK(BM_fma_peak_avx512);
#endif
BENCHMARK_CAPTURE(BM_conv, avx512, Isa::kAvx512)->Apply(conv_sizes);
BENCHMARK_CAPTURE(BM_conv, avx2, Isa::kAvx2)->Apply(conv_sizes);
BENCHMARK_CAPTURE(BM_conv_dw, avx512, Isa::kAvx512)->Apply(conv_dw_sizes);
BENCHMARK_CAPTURE(BM_conv_dw, avx2, Isa::kAvx2)->Apply(conv_dw_sizes);
BENCHMARK_CAPTURE(BM_conv_emb, avx512, Isa::kAvx512)->DenseRange(0, 19);
BENCHMARK_CAPTURE(BM_conv_emb, avx2, Isa::kAvx2)->DenseRange(0, 19);
BENCHMARK_CAPTURE(BM_conv_emb_chanvec, avx512, Isa::kAvx512)->DenseRange(11, 19);
BENCHMARK_CAPTURE(BM_conv_emb_chanvec, avx2, Isa::kAvx2)->DenseRange(11, 19);
BENCHMARK(BM_conv_emb_reference)->DenseRange(0, 19);
BENCHMARK(BM_conv_reference)->ArgNames({"C", "M", "HW", "k", "s", "dw"})
    ->Args({64, 64, 56, 3, 1, 0})->Args({256, 64, 56, 1, 1, 0})->Args({144, 144, 56, 3, 1, 1});

BENCHMARK_MAIN();
