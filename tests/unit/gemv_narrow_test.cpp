// The narrow GEMV (M = 1, N <= 16, kernels/gemv_narrow.h) against a float64 product on every N,
// K below / at / past the 16-float blocks (and the 2-accumulator step of N <= 8), B given plain
// and transposed, with and without bias, under every activation kind it is called with; and
// that it never reads `a` past K (a guard of NaNs after it).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/gemv_narrow.h"
#include "isa_util.h"

using namespace jiffy::kernels;
using namespace jiffy::testisa;

namespace {

TEST(GemvNarrow, MatchesFloat64ProductEveryNAndK) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    const int64_t ks[] = {1, 5, 15, 16, 17, 31, 32, 33, 48, 64, 100, 128, 300};
    std::vector<SgemvNarrowFn> fns{sgemv_narrow_scalar};
    for (Isa isa : isas()) {
        if (sgemv_narrow_for(isa)) fns.push_back(sgemv_narrow_for(isa));
    }
    Activation relu;
    relu.kind = ActKind::kRelu;
    Activation sig;
    sig.kind = ActKind::kSigmoid;
    for (int64_t N = 1; N <= kGemvNarrowMaxN; ++N)
        for (int64_t K : ks)
            for (bool trans : {false, true}) {
                const int64_t ldb = trans ? K + 2 : N + 1;
                std::vector<float> B(size_t(trans ? N * ldb : K * ldb));
                std::vector<float> bias(static_cast<size_t>(N));
                std::vector<float> a(size_t(K + 32), NAN);  // NaN past K: must not be read
                for (float& x : B) x = u(rng);
                for (float& x : bias) x = u(rng);
                for (int64_t k = 0; k < K; ++k) a[size_t(k)] = u(rng);
                const float scale = trans ? 0.5f : 1.0f;
                const PackedGemvNarrow p = pack_gemv_narrow(B.data(), K, N, ldb, trans, scale);
                for (const Activation& act : {Activation{}, relu, sig})
                    for (bool with_bias : {true, false})
                        for (SgemvNarrowFn fn : fns) {
                            std::vector<float> y(size_t(N) + 4, 7.0f);
                            fn(a.data(), p, with_bias ? bias.data() : nullptr, y.data(), act);
                            for (int64_t n = 0; n < N; ++n) {
                                double s = with_bias ? bias[size_t(n)] : 0.0;
                                for (int64_t k = 0; k < K; ++k)
                                    s += double(a[size_t(k)]) * scale *
                                         (trans ? B[size_t(n * ldb + k)] : B[size_t(k * ldb + n)]);
                                const double want = act_scalar_t<double>(act, s);
                                ASSERT_NEAR(y[size_t(n)], want, 1e-5 * (1 + std::sqrt(double(K))))
                                    << "N " << N << " K " << K << " trans " << trans << " act " << int(act.kind)
                                    << " bias " << with_bias << " fn " << (fn == sgemv_narrow_scalar ? "scalar" : "isa");
                            }
                            for (size_t i = size_t(N); i < y.size(); ++i) ASSERT_EQ(y[i], 7.0f) << "wrote past N";
                        }
            }
}

TEST(GemvNarrow, OnlyAvx512HasAKernel) {
    EXPECT_EQ(sgemv_narrow_for(Isa::kScalar), nullptr);
    EXPECT_EQ(sgemv_narrow_for(Isa::kAvx2), nullptr);
    if (cpu_isa() == Isa::kAvx512) {
        EXPECT_NE(sgemv_narrow_for(Isa::kAvx512), nullptr);
    }
}

}  // namespace
