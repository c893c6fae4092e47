// InstanceNormalization planes as plain loops that the compiler vectorizes for the ISA of the
// including translation unit (norm.cpp baseline, x86/norm_avx2.cpp, x86/norm_avx512.cpp): 16
// independent float partial sums (one AVX-512 register, two AVX2 ones), folded into a double
// every 1024 elements so long planes keep ~1e-7 relative sums. Include it inside
// `namespace jiffy::kernels { namespace { ... } }` after kernels/norm.h (internal linkage, so
// the per-ISA copies never merge at link time).

constexpr int64_t kInLanes = 16, kInChunk = 1024;

// sum of (x[i] - m), or of (x[i] - m)^2 when SQ.
template <bool SQ>
double instnorm_sum(const float* __restrict x, int64_t n, float m) {
    double total = 0;
    int64_t i = 0;
    const int64_t whole = n - n % kInLanes;
    while (i < whole) {
        const int64_t end = i + kInChunk < whole ? i + kInChunk : whole;
        float acc[kInLanes] = {};
        for (; i < end; i += kInLanes)
            for (int64_t k = 0; k < kInLanes; ++k) {
                const float v = x[i + k] - m;
                acc[k] += SQ ? v * v : v;
            }
        for (int64_t k = 0; k < kInLanes; ++k) total += double(acc[k]);
    }
    for (; i < n; ++i) {
        const double v = double(x[i]) - double(m);
        total += SQ ? v * v : v;
    }
    return total;
}

// Planes p = b * channels + c of n elements: y = (x - mean) * (scale[c] / sqrt(var + eps)) + bias[c].
inline void instnorm_planes_impl(const float* x, float* y, int64_t batch, int64_t channels, int64_t n,
                                 const float* scale, const float* bias, float eps) {
    for (int64_t p = 0; p < batch * channels; ++p) {
        const float* xp = x + p * n;
        float* yp = y + p * n;  // may equal xp (same index in the last loop)
        const int64_t c = p % channels;
        // Sums of x - x[0] (small terms when the mean is large against the spread).
        const double mean = n ? double(xp[0]) + instnorm_sum<false>(xp, n, xp[0]) / double(n) : 0.0;
        const float mu = float(mean);
        // Deviations from the float mean; the small residual (mean - mu) is removed exactly.
        const double d = mean - double(mu);
        const double var = n ? instnorm_sum<true>(xp, n, mu) / double(n) - d * d : 0.0;
        const float a = float(double(scale[c]) / std::sqrt((var > 0 ? var : 0.0) + double(eps)));
        const float b = float(double(bias[c]) - d * double(a));  // (x - mean) a = (x - mu) a - d a
        for (int64_t i = 0; i < n; ++i) yp[i] = (xp[i] - mu) * a + b;
    }
}
