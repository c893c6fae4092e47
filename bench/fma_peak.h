// The FP32 FMA peak one core gives right now: 24 independent AVX-512 FMA chains from registers
// (no loads). The shared VMs' cores differ (Zen 4: one 512-bit FMA per cycle, ~117 GFLOP/s; Zen 5:
// two, ~213) and other processes lower them, so benchmarks read their GFLOP/s against this figure
// from the same run instead of a constant. Shared by conv_bench, kernels_bench, model_table
// (jiffy_models) and ort_peer (jiffy_vs_ort).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>

#include "kernels/cpu.h"

namespace jiffy::bench {

#if defined(__x86_64__)
typedef float FmaV16 __attribute__((vector_size(64)));
// n steps of 24 chained FMAs on c[0..24) (c[24], c[25]: the multiplier and addend).
__attribute__((target("avx512f,fma"), noinline)) inline void fma_peak_loop(FmaV16* c, int64_t n) {
    FmaV16 acc[24];
    for (int i = 0; i < 24; ++i) acc[i] = c[i];
    FmaV16 a = c[24], b = c[25];
    for (int64_t k = 0; k < n; ++k) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; ++i) acc[i] = acc[i] * a + b;
        asm volatile("" : "+v"(a));
    }
    for (int i = 0; i < 24; ++i) c[i] = acc[i];
}
constexpr double kFmaPeakFlopsPerStep = 24 * 32;  // 24 FMAs of 16 lanes, 2 FLOP each
inline void fma_peak_init(FmaV16 (&c)[26]) {
    for (int i = 0; i < 26; ++i)
        for (int j = 0; j < 16; ++j) c[i][j] = i == 24 ? 0.999f : 0.001f * float(i);
}
#endif

// The best GFLOP/s of the loop over ~ms milliseconds; 0 without AVX-512 (the figure is the
// AVX-512 FP32 peak the targets refer to).
inline double fma_peak_gflops(double ms) {
#if defined(__x86_64__)
    if (kernels::cpu_isa() != kernels::Isa::kAvx512) return 0;
    using clock = std::chrono::steady_clock;
    FmaV16 c[26];
    fma_peak_init(c);
    const int64_t n = 20000;
    double best = 0;
    const auto t_end = clock::now() + std::chrono::duration<double, std::milli>(ms);
    do {
        const auto t0 = clock::now();
        fma_peak_loop(c, n);
        const double s = std::chrono::duration<double>(clock::now() - t0).count();
        best = std::max(best, double(n) * kFmaPeakFlopsPerStep / s / 1e9);
    } while (clock::now() < t_end);
    volatile float sink = c[0][0];
    (void)sink;
    return best;
#else
    (void)ms;
    return 0;
#endif
}

}  // namespace jiffy::bench
