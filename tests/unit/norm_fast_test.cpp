// Softmax / LayerNorm row kernels (src/kernels/norm.h) on every ISA this machine has, against a
// float64 reference on odd row lengths (tails of every size), large offsets, constant rows and
// extreme logits; and the engine's float Softmax / LayerNormalization taking them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/norm.h"
#include "isa_util.h"

using namespace jiffy::kernels;
using namespace jiffy::testisa;

namespace {

std::vector<float> rnd(int64_t n, uint32_t seed, float scale, float offset = 0) {
    std::vector<float> v(static_cast<size_t>(n));
    uint32_t x = seed * 2654435761u + 12345u;
    for (auto& f : v) {
        x = x * 1664525u + 1013904223u;
        f = (float(x >> 8) / float(1 << 24) * 2.0f - 1.0f) * scale + offset;
    }
    return v;
}

std::vector<double> softmax_ref(const std::vector<float>& x, int64_t rows, int64_t n) {
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        double mx = -INFINITY, s = 0;
        for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(x[size_t(r * n + i)]));
        for (int64_t i = 0; i < n; ++i) s += std::exp(double(x[size_t(r * n + i)]) - mx);
        for (int64_t i = 0; i < n; ++i) y[size_t(r * n + i)] = std::exp(double(x[size_t(r * n + i)]) - mx) / s;
    }
    return y;
}

std::vector<double> layernorm_ref(const std::vector<float>& x, int64_t rows, int64_t n, const float* scale,
                                  const float* bias, double eps) {
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        double m = 0, q = 0;
        for (int64_t i = 0; i < n; ++i) m += x[size_t(r * n + i)];
        m /= double(n);
        for (int64_t i = 0; i < n; ++i) q += (x[size_t(r * n + i)] - m) * (x[size_t(r * n + i)] - m);
        const double inv = 1 / std::sqrt(q / double(n) + eps);
        for (int64_t i = 0; i < n; ++i)
            y[size_t(r * n + i)] = (x[size_t(r * n + i)] - m) * inv * scale[i] + (bias ? bias[i] : 0.0);
    }
    return y;
}

TEST(NormFast, SoftmaxRowsMatchReferenceEveryIsa) {
    // Rows 1..9: the register kernels (n <= 64) take 4 rows at a time, then single rows.
    const int64_t lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 100, 257, 1000};
    uint32_t seed = 1;
    for (int64_t n : lens)
        for (float scale : {1.0f, 30.0f})
            for (float offset : {0.0f, -500.0f, 80.0f}) {
                const int64_t rows = 1 + int64_t(seed % 9);
                const auto x = rnd(rows * n, seed++, scale, offset);
                const auto want = softmax_ref(x, rows, n);
                for (Isa isa : isas()) {
                    std::vector<float> y(x.size(), NAN);
                    softmax_rows_for(isa)(x.data(), y.data(), rows, n, 1.0f);
                    for (size_t i = 0; i < y.size(); ++i)
                        ASSERT_NEAR(y[i], want[i], 2e-6 * want[i] + 1e-7)
                            << "n " << n << " scale " << scale << " offset " << offset << " isa " << isa_name(isa) << " " << i;
                    std::vector<float> inplace = x;  // x == y
                    softmax_rows_for(isa)(inplace.data(), inplace.data(), rows, n, 1.0f);
                    ASSERT_EQ(0, std::memcmp(inplace.data(), y.data(), y.size() * sizeof(float))) << isa_name(isa);
                }
            }
}

// Many rows of 2, 4 or 8 (the AVX-512 kernel packs 16 / n rows per vector; SSD score heads are
// thousands of 2-wide rows): every row count around the 4-vector step and the masked tail, plain
// and scaled, out of place and in place, with a -inf logit and (unscaled) a huge gap.
TEST(NormFast, SoftmaxManyShortRowsMatchReference) {
    uint32_t seed = 900;
    for (int64_t n : {2, 4, 8})
        for (int64_t rows : {16, 17, 31, 32, 33, 63, 64, 65, 130, 4420})
            for (float s : {1.0f, 0.3f}) {
                auto x = rnd(rows * n, seed++, 20.0f, -3.0f);
                x[size_t(n)] = -INFINITY;            // row 1: one -inf entry
                if (s == 1.0f) {                     // row 3: a huge gap (unscaled, as in SoftmaxExtremeLogits)
                    x[size_t(3 * n)] = 3.0e38f;
                    x[size_t(3 * n + 1)] = -3.0e38f;
                }
                std::vector<float> xs(x.size());
                for (size_t i = 0; i < x.size(); ++i) xs[i] = x[i] * s;
                const auto want = softmax_ref(xs, rows, n);
                for (Isa isa : isas()) {
                    std::vector<float> y(x.size(), NAN);
                    softmax_rows_for(isa)(x.data(), y.data(), rows, n, s);
                    for (size_t i = 0; i < y.size(); ++i)
                        ASSERT_NEAR(y[i], want[i], 4e-6 * want[i] + 1e-7)
                            << "n " << n << " rows " << rows << " s " << s << " " << isa_name(isa) << " " << i;
                    std::vector<float> inplace = x;
                    softmax_rows_for(isa)(inplace.data(), inplace.data(), rows, n, s);
                    ASSERT_EQ(0, std::memcmp(inplace.data(), y.data(), y.size() * sizeof(float))) << isa_name(isa);
                }
            }
}

// The fused attention scale: softmax(s * x) equals the plain kernel on pre-scaled rows.
TEST(NormFast, ScaledSoftmaxMatchesPrescaledRows) {
    uint32_t seed = 300;
    for (int64_t n : {1, 7, 16, 31, 32, 33, 100})
        for (float s : {0.125f, 0.17677669f, 3.0f}) {
            const int64_t rows = 4;
            const auto x = rnd(rows * n, seed++, 8.0f, 0.0f);
            std::vector<float> xs(x.size());
            for (size_t i = 0; i < x.size(); ++i) xs[i] = x[i] * s;
            const auto want = softmax_ref(xs, rows, n);
            for (Isa isa : isas()) {
                std::vector<float> y(x.size(), NAN);
                softmax_rows_for(isa)(x.data(), y.data(), rows, n, s);
                for (size_t i = 0; i < y.size(); ++i)
                    ASSERT_NEAR(y[i], want[i], 4e-6 * want[i] + 1e-7) << "n " << n << " s " << s << " " << isa_name(isa);
            }
        }
}

// The fused residual: LayerNorm(x + res) in one call, out of place and in place (y == res).
TEST(NormFast, LayerNormWithResidualMatchesAddThenNorm) {
    uint32_t seed = 400;
    for (int64_t n : {1, 7, 8, 9, 16, 17, 33, 127, 128, 129, 255, 256, 257}) {
        const int64_t rows = 1 + int64_t(seed % 5);
        const auto x = rnd(rows * n, seed++, 2.0f, 0.0f), res = rnd(rows * n, seed++, 2.0f, 1.0f);
        const auto sc = rnd(n, seed++, 1.5f), b = rnd(n, seed++, 1.0f);
        std::vector<float> sum(x.size());
        for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + res[i];
        const auto want = layernorm_ref(sum, rows, n, sc.data(), b.data(), 1e-5);
        for (Isa isa : isas()) {
            std::vector<float> y(x.size(), NAN);
            layernorm_rows_for(isa)(x.data(), y.data(), rows, n, sc.data(), b.data(), 1e-5f, res.data());
            for (size_t i = 0; i < y.size(); ++i)
                ASSERT_NEAR(y[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << "n " << n << " " << isa_name(isa) << " " << i;
            std::vector<float> inplace = res;
            layernorm_rows_for(isa)(x.data(), inplace.data(), rows, n, sc.data(), b.data(), 1e-5f, inplace.data());
            ASSERT_EQ(0, std::memcmp(inplace.data(), y.data(), y.size() * sizeof(float))) << isa_name(isa);
        }
    }
}

TEST(NormFast, SoftmaxExtremeLogits) {
    // -inf entries get 0; a huge gap underflows to exact 0 and 1.
    const std::vector<float> x = {-INFINITY, 0.0f, 1.0f, -INFINITY, 3.4e38f, -3.4e38f, 0.0f, 0.0f, 0.0f};
    for (Isa isa : isas()) {
        std::vector<float> y(x.size());
        softmax_rows_for(isa)(x.data(), y.data(), 3, 3, 1.0f);
        EXPECT_EQ(y[0], 0.0f) << isa_name(isa);
        EXPECT_NEAR(y[2], 1 / (1 + std::exp(-1.0)), 1e-6) << isa_name(isa);
        EXPECT_EQ(y[3], 0.0f) << isa_name(isa);
        EXPECT_EQ(y[4], 1.0f) << isa_name(isa);
        EXPECT_EQ(y[5], 0.0f) << isa_name(isa);
        for (int i = 6; i < 9; ++i) EXPECT_NEAR(y[size_t(i)], 1.0 / 3, 1e-7) << isa_name(isa);
    }
}

TEST(NormFast, LayerNormRowsMatchReferenceEveryIsa) {
    // Rows 1..5: the register kernels (n <= 128) take 2 rows at a time, then single rows.
    const int64_t lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 112, 113, 128, 129, 200, 256, 257, 1000};
    uint32_t seed = 50;
    for (int64_t n : lens)
        for (float offset : {0.0f, 100.0f})
            for (bool with_bias : {true, false}) {
                const int64_t rows = 1 + int64_t(seed % 5);
                const auto x = rnd(rows * n, seed++, 2.0f, offset);
                const auto sc = rnd(n, seed++, 1.5f), b = rnd(n, seed++, 1.0f);
                const auto want = layernorm_ref(x, rows, n, sc.data(), with_bias ? b.data() : nullptr, 1e-5);
                for (Isa isa : isas()) {
                    std::vector<float> y(x.size(), NAN);
                    layernorm_rows_for(isa)(x.data(), y.data(), rows, n, sc.data(), with_bias ? b.data() : nullptr, 1e-5f, nullptr);
                    for (size_t i = 0; i < y.size(); ++i)
                        ASSERT_NEAR(y[i], want[i], 2e-5 * (1 + std::abs(want[i])) * (offset > 0 ? 10 : 1))
                            << "n " << n << " offset " << offset << " isa " << isa_name(isa) << " " << i;
                }
            }
}

TEST(NormFast, LayerNormConstantRowIsBias) {
    const int64_t n = 21;
    const std::vector<float> x(size_t(n), 3.25f), sc(size_t(n), 2.0f), b = rnd(n, 9, 1.0f);
    for (Isa isa : isas()) {
        std::vector<float> y(static_cast<size_t>(n));
        layernorm_rows_for(isa)(x.data(), y.data(), 1, n, sc.data(), b.data(), 1e-5f, nullptr);
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[size_t(i)], b[size_t(i)]) << isa_name(isa) << " " << i;
    }
}

}  // namespace

namespace {

// InstanceNormalization planes against float64 on every ISA: plane lengths across the 16-lane
// blocks and the 1024-element chunks, a large offset (mean >> std), a constant plane (var = 0:
// y = bias), N = 2 (channel index wraps), and in place.
TEST(NormFast, InstNormPlanesMatchFloat64EveryIsa) {
    uint32_t seed = 900;
    for (int64_t n : {1, 5, 16, 17, 100, 1023, 1024, 1025, 3000, 6400})
        for (float offset : {0.0f, 300.0f}) {
            const int64_t batch = 2, channels = 3;
            auto x = rnd(batch * channels * n, seed++, 2.0f, offset);
            for (int64_t i = 0; i < n; ++i) x[size_t(2 * n + i)] = 7.5f;  // plane 2: constant
            const auto scale = rnd(channels, seed++, 1.5f), bias = rnd(channels, seed++, 1.0f);
            const float eps = 1e-5f;
            std::vector<double> want(x.size());
            for (int64_t p = 0; p < batch * channels; ++p) {
                double m = 0, q = 0;
                for (int64_t i = 0; i < n; ++i) m += x[size_t(p * n + i)];
                m /= double(n);
                for (int64_t i = 0; i < n; ++i) q += (x[size_t(p * n + i)] - m) * (x[size_t(p * n + i)] - m);
                const double a = scale[size_t(p % channels)] / std::sqrt(q / double(n) + eps);
                for (int64_t i = 0; i < n; ++i)
                    want[size_t(p * n + i)] = (x[size_t(p * n + i)] - m) * a + bias[size_t(p % channels)];
            }
            for (Isa isa : isas()) {
                std::vector<float> y(x.size(), NAN);
                instnorm_planes_for(isa)(x.data(), y.data(), batch, channels, n, scale.data(), bias.data(), eps);
                for (size_t i = 0; i < y.size(); ++i)
                    ASSERT_NEAR(y[i], want[i], 2e-6 * (std::fabs(want[i]) + 1))
                        << "n " << n << " offset " << offset << " " << isa_name(isa) << " at " << i;
                std::vector<float> inplace = x;
                instnorm_planes_for(isa)(inplace.data(), inplace.data(), batch, channels, n, scale.data(), bias.data(), eps);
                ASSERT_EQ(0, std::memcmp(inplace.data(), y.data(), y.size() * sizeof(float))) << isa_name(isa);
            }
        }
}

}  // namespace
