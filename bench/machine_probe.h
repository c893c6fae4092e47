// What this core gives right now, measured, for the benchmarks' "% peak" and "floor" columns:
//  - fma_peak_gflops: the FP32 FMA peak, 24 independent AVX-512 FMA chains from registers (no
//    loads). The shared VMs' cores differ (Zen 4: one 512-bit FMA per cycle, ~117 GFLOP/s; Zen 5:
//    two, ~213) and other processes lower them, so GFLOP/s are read against this figure from the
//    same run instead of a constant.
//  - read_gbs: how fast one core reads a buffer of a given size again and again (the way a model
//    re-reads its weights every run): from L1, L2, L3 or DRAM depending on the size.
// A model's floor is then max(FLOPs / peak, weight bytes / read_gbs(weight bytes)): no engine
// running its direct FLOPs in FP32 from those weights can beat it on this core.
// Shared by conv_bench, kernels_bench, model_table (jiffy_models) and ort_peer (jiffy_vs_ort).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <cstring>
#include <cstdio>
#include <memory>

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
// One pass of n floats (a multiple of 128) summed into 8 vector accumulators.
__attribute__((target("avx512f"), noinline)) inline float read_pass(const float* p, size_t n) {
    FmaV16 acc[8] = {};
    for (size_t i = 0; i < n; i += 128)
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) acc[j] += *reinterpret_cast<const FmaV16*>(p + i + 16 * j);
    float s = 0;
    for (int j = 0; j < 8; ++j)
        for (int l = 0; l < 16; ++l) s += acc[j][l];
    return s;
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

// GB/s of the best pass over ~ms milliseconds reading `bytes` (rounded up to 1 KiB) with 512-bit
// loads into 8 accumulators (AVX-512; 0 on other ISAs), after one warm-up pass.
inline double read_gbs(size_t bytes, double ms) {
#if defined(__x86_64__)
    if (kernels::cpu_isa() != kernels::Isa::kAvx512) return 0;
    using clock = std::chrono::steady_clock;
    const size_t n = std::max<size_t>(1024, (bytes + 1023) / 1024 * 1024) / sizeof(float);
    std::unique_ptr<float, void (*)(void*)> buf(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))),
                                                std::free);
    if (!buf) return 0;
    for (size_t i = 0; i < n; ++i) buf.get()[i] = 1e-3f;
    double best = 0;
    float sink = 0;
    const auto t_end = clock::now() + std::chrono::duration<double, std::milli>(ms);
    for (int pass = 0;; ++pass) {
        const auto t0 = clock::now();
        sink += read_pass(buf.get(), n);
        const double s = std::chrono::duration<double>(clock::now() - t0).count();
        if (pass > 0) best = std::max(best, double(n * sizeof(float)) / s / 1e9);
        if (pass > 0 && clock::now() >= t_end) break;
    }
    volatile float keep = sink;
    (void)keep;
    return best;
#else
    (void)bytes, (void)ms;
    return 0;
#endif
}

// How often the host takes this core away: a tight loop of clock reads for ~ms milliseconds;
// every gap between two reads longer than 5 us is time the thread did not run (an interrupt, a
// hypervisor exit, another tenant). Each run of a model that a gap lands in is that much slower,
// so a model of t us has a gap in about t * per_second / 1e6 of its runs: where that passes 1%,
// its p99 is p50 plus a gap (on the shared hosts here: ~1000-1500 a second, ~20-30 us each, so
// models of ~10 to ~60 us show p99 > 1.5 x p50 whatever the engine).
// Short gaps (1.5 - 5 us) are counted apart: session 38's Intel VM lost its core ~16 600 times a
// second for ~2.9 us each (rdtsc loops agree; the guest's own timer fired ~50 times a second), so
// there every model from ~1 us up has a p99 of at least p50 + ~3 us.
struct HostGaps {
    double per_second = 0, mean_us = 0, max_us = 0;
    double short_per_second = 0, short_mean_us = 0;
};
inline HostGaps host_gaps(double ms) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    const auto t_end = t0 + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double, std::milli>(ms));
    auto prev = t0;
    int64_t n = 0, ns = 0;
    double sum = 0, mx = 0, sum_s = 0;
    for (;;) {
        const auto t = clock::now();
        const double d = std::chrono::duration<double, std::micro>(t - prev).count();
        if (d > 5.0) {
            ++n;
            sum += d;
            mx = std::max(mx, d);
        } else if (d > 1.5) {
            ++ns;
            sum_s += d;
        }
        prev = t;
        if (t >= t_end) break;
    }
    const double secs = std::chrono::duration<double>(prev - t0).count();
    HostGaps h;
    h.per_second = secs > 0 ? double(n) / secs : 0;
    h.mean_us = n ? sum / double(n) : 0;
    h.max_us = mx;
    h.short_per_second = secs > 0 ? double(ns) / secs : 0;
    h.short_mean_us = ns ? sum_s / double(ns) : 0;
    return h;
}

// A model's one-core floor in microseconds: max(flops / peak, bytes / read_gbs(bytes)), the read
// probe run for ~ms milliseconds; 0 when the core has no AVX-512 (no probe).
inline double floor_us(int64_t flops, uint64_t bytes, double peak_gflops, double ms) {
    if (peak_gflops <= 0) return 0;
    const double compute = double(flops) / peak_gflops / 1e3;
    const double gbs = bytes > 0 ? read_gbs(size_t(bytes), ms) : 0;
    return std::max(compute, gbs > 0 ? double(bytes) / gbs / 1e3 : 0.0);
}

// "Intel(R) Xeon(R) Processor (family 6 model 207; L2 2048K, L3 307200K)" from /proc/cpuinfo and
// sysfs: the benchmarks' tables name the host (the shared VMs change CPU between sessions: Zen 4,
// Zen 5, Sapphire / Emerald Rapids, with different caches and memory speeds).
inline std::string cpu_description() {
    std::string name, family, model;
    if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
        char line[512];
        auto value = [&](const char* l) {
            std::string v = std::strchr(l, ':') ? std::strchr(l, ':') + 1 : "";
            while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.erase(v.begin());
            while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
            return v;
        };
        while (std::fgets(line, sizeof line, f) && (name.empty() || family.empty() || model.empty())) {
            if (name.empty() && !std::strncmp(line, "model name", 10)) name = value(line);
            else if (family.empty() && !std::strncmp(line, "cpu family", 10)) family = value(line);
            else if (model.empty() && !std::strncmp(line, "model\t", 6)) model = value(line);
        }
        std::fclose(f);
    }
    auto cache = [](int index) {
        std::string v;
        char path[96];
        std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
        if (FILE* f = std::fopen(path, "r")) {
            char b[32] = {};
            if (std::fgets(b, sizeof b, f)) v = b;
            std::fclose(f);
        }
        while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
        return v;
    };
    std::string d = name.empty() ? std::string(kernels::cpu_vendor_name(kernels::cpu_vendor())) : name;
    d += " (";
    if (!family.empty()) d += "family " + family + " model " + model + "; ";
    d += "L2 " + cache(2) + ", L3 " + cache(3) + ")";
    return d;
}

}  // namespace jiffy::bench
