#include "kernels/cpu.h"

#include <cstdlib>
#include <cstring>
#if defined(__linux__)
#include <unistd.h>
#endif

namespace jiffy::kernels {

Isa cpu_isa() {
#if defined(__x86_64__)
    static const Isa isa = [] {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
            return Isa::kAvx512;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
        return Isa::kScalar;
    }();
    return isa;
#elif defined(__aarch64__)
    return Isa::kNeon;  // Advanced SIMD is part of the AArch64 base ISA
#else
    return Isa::kScalar;
#endif
}

Isa active_isa() {
    static const Isa isa = [] {
        Isa best = cpu_isa();
        const char* e = std::getenv("JIFFY_ISA");
        if (!e) return best;
        Isa want = best;
        if (!std::strcmp(e, "scalar")) want = Isa::kScalar;
#if defined(__x86_64__)
        else if (!std::strcmp(e, "avx2")) want = Isa::kAvx2;
        else if (!std::strcmp(e, "avx512")) want = Isa::kAvx512;
#elif defined(__aarch64__)
        else if (!std::strcmp(e, "neon")) want = Isa::kNeon;
#endif
        return int(want) < int(best) ? want : best;
    }();
    return isa;
}

CpuVendor cpu_vendor() {
#if defined(__x86_64__)
    static const CpuVendor v = [] {
        __builtin_cpu_init();
        return __builtin_cpu_is("intel") ? CpuVendor::kIntel : __builtin_cpu_is("amd") ? CpuVendor::kAmd : CpuVendor::kOther;
    }();
    return v;
#else
    return CpuVendor::kOther;
#endif
}

CpuVendor tuning_vendor() {
    static const CpuVendor v = [] {
        const char* e = std::getenv("JIFFY_TUNE_VENDOR");
        if (!e) return cpu_vendor();
        if (std::strcmp(e, "intel") == 0) return CpuVendor::kIntel;
        if (std::strcmp(e, "amd") == 0) return CpuVendor::kAmd;
        if (std::strcmp(e, "other") == 0) return CpuVendor::kOther;
        return cpu_vendor();
    }();
    return v;
}

int64_t l2_cache_bytes() {
    static const int64_t bytes = [] {
#if defined(__linux__) && defined(_SC_LEVEL2_CACHE_SIZE)
        const long b = sysconf(_SC_LEVEL2_CACHE_SIZE);
        if (b > 0) return int64_t(b);
#endif
        return int64_t(1) << 20;
    }();
    return bytes;
}

const char* cpu_vendor_name(CpuVendor v) {
    return v == CpuVendor::kIntel ? "intel" : v == CpuVendor::kAmd ? "amd" : "other";
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::kAvx512: return "avx512";
        case Isa::kAvx2: return "avx2";
        case Isa::kNeon: return "neon";
        default: return "scalar";
    }
}

}  // namespace jiffy::kernels
