// Shared helpers of the kernel tests: the ISAs this CPU can run (each fast kernel is compared with
// the reference on every one of them), edge values for activations, and a NaN/inf-aware
// relative comparison. Header-only and engine-free: the aarch64 kernels-only build uses it too.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu.h"

namespace jiffy::testisa {

// Deterministic pseudo-random floats in [-scale, scale) (the kernel tests' inputs and weights).
inline std::vector<float> rnd(int64_t n, uint32_t seed, float scale = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    uint32_t x = seed * 2654435761u + 12345u;
    for (auto& f : v) {
        x = x * 1664525u + 1013904223u;
        f = (float(x >> 8) / float(1 << 24) * 2.0f - 1.0f) * scale;
    }
    return v;
}

inline std::vector<kernels::Isa> isas() {
    using kernels::Isa;
    std::vector<Isa> r{Isa::kScalar};
    const Isa top = kernels::cpu_isa();
    if (top == Isa::kNeon) {
        r.push_back(Isa::kNeon);
        return r;
    }
    if (int(top) >= int(Isa::kAvx2)) r.push_back(Isa::kAvx2);
    if (int(top) >= int(Isa::kAvx512)) r.push_back(Isa::kAvx512);
    return r;
}

inline const float kInf = std::numeric_limits<float>::infinity();
inline const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Values that stress the activations: zeros, tiny, denormal, huge, the exp over/underflow edges,
// the tanh polynomial switch at 0.625, infinities, NaN, a sweep of i * step + 0.003 for
// |i| <= half, and multiples of 0.9 up to ±108.
inline std::vector<float> edge_values(int half = 2000, float step = 0.01f) {
    std::vector<float> v = {0.0f,    -0.0f,   1e-30f,  -1e-30f, 1e-40f,  -1e-40f, 1e-7f,   -1e-7f,  1e-3f,
                            0.5f,    -0.5f,   0.6249f, 0.625f,  0.6251f, -0.625f, 1.0f,    -1.0f,   2.5f,
                            -3.0f,   3.0f,    6.0f,    -6.0f,   9.0f,    20.0f,   -20.0f,  80.0f,   -80.0f,
                            87.0f,   -87.0f,  88.5f,   88.72f,  88.8f,   89.0f,   -88.0f,  -100.0f, -103.0f,
                            -104.0f, -110.0f, 1e10f,   -1e10f,  kInf,    -kInf,   kNaN,    3.4e38f, -3.4e38f};
    for (int i = -half; i <= half; ++i) v.push_back(float(i) * step + 0.003f);
    for (int i = -120; i <= 120; ++i) v.push_back(float(i) * 0.9f);
    return v;
}

inline bool close_rel(float got, float want, float rel, float abs_tol = 1e-37f) {
    if (std::isnan(want)) return std::isnan(got);
    if (std::isinf(want)) return got == want;
    return std::fabs(got - want) <= rel * std::fabs(want) + abs_tol;
}

}  // namespace jiffy::testisa
