// Kernel microbenchmarks (Google Benchmark): each fast kernel beside its reference, on odd sizes
// and the M=1 shapes of the audio heads. Run: build/jiffy_kernel_bench [--benchmark_filter=...]
// (reports mean per iteration; use --benchmark_repetitions=5 --benchmark_report_aggregates_only
// for medians).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/gemm.h"

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
        ->Args({3136, 64, 576});
}

}  // namespace

BENCHMARK_CAPTURE(BM_sgemm, avx512, Isa::kAvx512)->Apply(sizes);
BENCHMARK_CAPTURE(BM_sgemm, avx2, Isa::kAvx2)->Apply(sizes);
BENCHMARK_CAPTURE(BM_sgemm, scalar, Isa::kScalar)->Apply(sizes);
BENCHMARK(BM_sgemm_reference)->Args({1, 128, 64})->Args({64, 64, 64})->Args({256, 256, 256});

BENCHMARK_MAIN();
