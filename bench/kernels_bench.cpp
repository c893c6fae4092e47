// Kernel microbenchmarks (Google Benchmark): each fast kernel beside its reference, on odd sizes
// and the M=1 shapes of the audio heads. Run: build/jiffy_kernel_bench [--benchmark_filter=...]
// (reports mean per iteration; use --benchmark_repetitions=5 --benchmark_report_aggregates_only
// for medians).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/conv.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/small_conv.h"

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
        ->Args({3136, 64, 576})->Args({32, 512, 128})->Args({32, 128, 512})->Args({5, 257, 512})->Args({8, 258, 256});
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
        fn(x.data(), y.data(), rows, n);
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
        fn(x.data(), y.data(), rows, n, sc.data(), b.data(), 1e-5f);
        benchmark::DoNotOptimize(y.data());
    }
}

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
BENCHMARK(BM_sgemm_reference)->Args({1, 128, 64})->Args({64, 64, 64})->Args({256, 256, 256});

BENCHMARK_MAIN();
