#include "kernels/gemm.h"

#include "kernels/weight_alloc.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>

#include "core/env.h"

namespace jiffy::kernels {

void sgemm_avx512(int64_t, const float*, int64_t, const PackedB&, const float*, float*, int64_t, Act);
void sgemm_avx2(int64_t, const float*, int64_t, const PackedB&, const float*, float*, int64_t, Act);
void sgemm_neon(int64_t, const float*, int64_t, const PackedB&, const float*, float*, int64_t, Act);  // arm/

static int nr_for(Isa isa) { return isa == Isa::kAvx512 ? 32 : 16; }

int64_t packed_floats(int64_t K, int64_t N, Isa isa) {
    const int64_t nr = nr_for(isa);
    int64_t n = std::max<int64_t>(1, (N + nr - 1) / nr * K * nr);
    return (n + 15) / 16 * 16;
}

PackedB packed_view(int64_t K, int64_t N, Isa isa, float* dst) {
    PackedB p;
    p.K = K;
    p.N = N;
    p.NR = nr_for(isa);
    p.data = std::shared_ptr<float>(std::shared_ptr<float>(), dst);  // aliasing, owns nothing
    return p;
}

void pack_b_into(const float* B, int64_t ldb, bool trans_b, const PackedB& into) {
#if defined(__x86_64__)
    // NR = 32 panels are only made for AVX-512 (nr_for), so the CPU has it.
    if (into.NR == 32) return pack_b32_avx512(B, ldb, trans_b, into);
#endif
    const int64_t K = into.K, N = into.N, NR = into.NR;
    float* d = into.data.get();
    const int64_t panels = (N + NR - 1) / NR;
    for (int64_t pn = 0; pn < panels; ++pn) {
        const int64_t n0 = pn * NR, nv = std::min(NR, N - n0);
        float* dp = d + pn * K * NR;
        if (!trans_b) {
            for (int64_t k = 0; k < K; ++k) {
                const float* src = B + k * ldb + n0;
                float* row = dp + k * NR;
                for (int64_t j = 0; j < nv; ++j) row[j] = src[j];
                for (int64_t j = nv; j < NR; ++j) row[j] = 0.0f;
            }
        } else {
            for (int64_t k = 0; k < K; ++k)
                for (int64_t j = nv; j < NR; ++j) dp[k * NR + j] = 0.0f;
            for (int64_t j = 0; j < nv; ++j) {
                const float* src = B + (n0 + j) * ldb;
                for (int64_t k = 0; k < K; ++k) dp[k * NR + j] = src[k];
            }
        }
    }
}

PackedB pack_b(const float* B, int64_t K, int64_t N, int64_t ldb, bool trans_b, Isa isa) {
    std::shared_ptr<float> d = alloc_weights(size_t(packed_floats(K, N, isa)));
    PackedB p = packed_view(K, N, isa, d.get());
    p.data = std::move(d);
    pack_b_into(B, ldb, trans_b, p);
    return p;
}

PackedGemv pack_b_gemv(const float* B, int64_t K, int64_t N, int64_t ldb, bool trans_b, float scale) {
    PackedGemv p;
    p.K = K;
    p.N = N;
    p.ldb = std::max<int64_t>(16, (N + 15) / 16 * 16);
    p.last0 = (p.ldb - 1) / kGemvPanel * kGemvPanel;
    p.data = alloc_weights(size_t(std::max<int64_t>(1, K) * p.ldb));
    const int64_t bytes = K * p.ldb * int64_t(sizeof(float));
    if (bytes >= kGemvSerpentineMin && bytes <= kGemvSerpentineMax) {
        const int64_t segs = std::min<int64_t>(kGemvMaxSegs, K / 64);
        if (segs >= 2) p.seg_rows = (K + segs - 1) / segs, p.alternate = true;
    }
    float* d = p.data.get();
    for (int64_t n0 = 0; n0 < N; n0 += kGemvPanel) {
        float* dp = d + n0 * K;
        const int64_t w = p.stride(n0), nv = std::min(kGemvPanel, N - n0);
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < nv; ++j)
                dp[k * w + j] = scale * (trans_b ? B[(n0 + j) * ldb + k] : B[k * ldb + n0 + j]);
    }
    return p;
}

// Columns in chunks of up to 64 accumulated on the stack (each column on its own, so any range
// gives the same sums), k outer so B is read row by row. A chunk never crosses a panel.
// The serpentine order (B.seg_rows) is not taken here: one order, so `backward` changes nothing.
void sgemv_cols_scalar(const float* a, const PackedGemv& B, int64_t c0, int64_t c1, const float* bias, float* y,
                       const Activation& act, bool /*backward*/) {
    const int64_t K = B.K;
    float acc[64];
    for (int64_t n0 = c0; n0 < c1;) {
        const int64_t pend = n0 >= B.last0 ? B.ldb : (n0 / B.panel + 1) * B.panel;  // stay in one panel
        const int64_t nb = std::min<int64_t>({64 - n0 % 64, c1 - n0, pend - n0});
        for (int64_t j = 0; j < nb; ++j) acc[j] = bias ? bias[n0 + j] : 0.0f;
        const float* b = B.col(n0);
        const int64_t ldb = B.stride(n0);
        for (int64_t k = 0; k < K; ++k) {
            const float av = a[k];
            const float* br = b + k * ldb;
            for (int64_t j = 0; j < nb; ++j) acc[j] += av * br[j];
        }
        for (int64_t j = 0; j < nb; ++j) y[n0 + j] = act_scalar(act, acc[j]);
        n0 += nb;
    }
}

void sgemv_scalar(const float* a, const PackedGemv& B, const float* bias, float* y, const Activation& act,
                  bool backward) {
    sgemv_cols_scalar(a, B, 0, B.N, bias, y, act, backward);
}

// The GEMV kernels' blocks are 8 vectors (the scalar kernel takes any multiple of 16 columns).
int64_t sgemv_split_unit(Isa isa) { return 4 * isa_vector_floats(isa); }
int64_t sgemv_main_cols(Isa isa, int64_t N) { return N / (8 * isa_vector_floats(isa)) * (8 * isa_vector_floats(isa)); }

PackedGemv repack_gemv_split(const PackedGemv& src, Isa isa) {
    PackedGemv p = src;
    const int64_t K = src.K, N = src.N, main = sgemv_main_cols(isa, N);
    p.panel = sgemv_split_unit(isa);
    p.last0 = main < N ? main : N - p.panel;
    p.data = alloc_weights(size_t(std::max<int64_t>(1, K) * p.ldb));
    p.w24.reset();  // made again from the new layout where wanted (gemv_set_w24 / gemv_set_i20)
    p.use24 = false;
    p.q20.reset();
    p.s20.reset();
    p.use20 = false;
    for (int64_t n = 0; n < p.ldb; ++n) {
        const float* s = src.col(n);
        float* d = const_cast<float*>(p.col(n));
        const int64_t sw = src.stride(n), dw = p.stride(n);
        for (int64_t k = 0; k < K; ++k) d[k * dw] = s[k * sw];
    }
    return p;
}

uint32_t gemv_w24_bits(float w) {
    uint32_t u;
    std::memcpy(&u, &w, sizeof(u));
    if ((u & 0x7f800000u) == 0x7f800000u) return (u & 0x7fffffu) ? (u | 0x400000u) & 0xffffff00u : u;  // Inf / NaN
    const uint32_t r = (u + 0x7fu + ((u >> 8) & 1u)) & 0xffffff00u;  // to nearest, ties to even
    return (r & 0x7f800000u) == 0x7f800000u ? u & 0xffffff00u : r;  // would overflow: truncate
}

float gemv_w24_value(float w) {
    const uint32_t u = gemv_w24_bits(w);
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
}

bool gemv_w24_supported(Isa isa) {
#if defined(__x86_64__)
    static const bool vbmi = __builtin_cpu_supports("avx512vbmi");
    return isa == Isa::kAvx512 && vbmi && !env_zero("JIFFY_GEMV_W24");
#else
    (void)isa;
    return false;
#endif
}

bool gemv_set_w24(PackedGemv* B, Isa isa, bool on) {
    if (!gemv_w24_supported(isa) || !B->data) return false;
    if (on && !B->w24) {
        const size_t n = size_t(std::max<int64_t>(1, B->K) * B->ldb);
        std::shared_ptr<float> buf = alloc_weights((3 * n + 64 + 3) / 4);
        unsigned char* d = reinterpret_cast<unsigned char*>(buf.get());
        const float* s = B->data.get();
        for (size_t i = 0; i < n; ++i) {
            const uint32_t b = gemv_w24_bits(s[i]);
            d[3 * i] = uint8_t(b >> 8), d[3 * i + 1] = uint8_t(b >> 16), d[3 * i + 2] = uint8_t(b >> 24);
        }
        B->w24 = std::shared_ptr<unsigned char>(buf, d);  // shares buf's ownership
    }
    B->use24 = on;
    return true;
}

const float* PackedGemv::scale20(int64_t n0) const {
    const int64_t p0 = n0 >= last0 ? last0 : n0 / panel * panel;
    return s20.get() + p0 * ((K + kGemvI20Rows - 1) / kGemvI20Rows) + (n0 - p0);
}

bool gemv_i20_supported(Isa isa) { return gemv_w24_supported(isa) && !env_zero("JIFFY_GEMV_I20"); }

bool gemv_set_i20(PackedGemv* B, Isa isa, bool on) {
    if (!gemv_i20_supported(isa) || !B->data) return false;
    if (on && !B->q20) {
        const int64_t K = B->K, R = kGemvI20Rows, KB = (K + R - 1) / R, ldb = B->ldb;
        const float* d = B->data.get();
        for (int64_t i = 0; i < K * ldb; ++i)
            if (!std::isfinite(d[i])) return false;
        std::shared_ptr<float> qbuf = alloc_weights(size_t((K * ldb / 16 * 40 + 64 + 3) / 4));
        std::shared_ptr<float> sbuf = alloc_weights(size_t(std::max<int64_t>(1, KB * ldb)));
        unsigned char* q = reinterpret_cast<unsigned char*>(qbuf.get());
        B->q20 = std::shared_ptr<unsigned char>(qbuf, q);  // shares qbuf's ownership
        B->s20 = sbuf;
        constexpr int32_t kMax = (1 << 19) - 1;
        for (int64_t n0 = 0; n0 < ldb; n0 += 16) {
            const float* w = B->col(n0);
            float* sc = const_cast<float*>(B->scale20(n0));
            unsigned char* qc = const_cast<unsigned char*>(B->col20(n0));
            const int64_t ws = B->stride(n0);
            for (int64_t kb = 0; kb < KB; ++kb) {
                const int64_t k0 = kb * R, k1 = std::min(K, k0 + R);
                float s[16];
                for (int64_t j = 0; j < 16; ++j) {
                    float m = 0.0f;
                    for (int64_t k = k0; k < k1; ++k) m = std::max(m, std::fabs(w[k * ws + j]));
                    // The scale in float, then every q from it (clamped: s may round below m / kMax).
                    s[j] = m > 0.0f ? std::max(float(double(m) / kMax), std::numeric_limits<float>::min()) : 1.0f;
                    sc[kb * ws + j] = s[j] / 4096.0f;  // the kernel's lanes hold q * 2^12
                }
                for (int64_t k = k0; k < k1; ++k) {
                    unsigned char* g = qc + k * (5 * ws / 2);  // the group: weight j at bits [20 j, 20 j + 20)
                    for (int64_t j = 0; j < 16; j += 2) {
                        uint64_t pair = 0;
                        for (int64_t t = 0; t < 2; ++t) {
                            const double v = std::nearbyint(double(w[k * ws + j + t]) / s[j + t]);
                            pair |= uint64_t(uint32_t(int32_t(std::clamp(v, double(-kMax), double(kMax)))) & 0xfffffu)
                                    << (20 * t);
                        }
                        for (int64_t i = 0; i < 5; ++i) g[5 * (j / 2) + i] = uint8_t(pair >> (8 * i));
                    }
                }
            }
        }
    }
    B->use20 = on;
    return true;
}

bool gemv_set_fast(PackedGemv* B, Isa isa, bool on) {
    if (tuning_vendor() == CpuVendor::kIntel && gemv_i20_supported(isa)) return gemv_set_i20(B, isa, on);
    return gemv_set_w24(B, isa, on);
}

SgemvColsFn sgemv_cols_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return sgemv_cols_avx512;
    if (isa == Isa::kAvx2) return sgemv_cols_avx2;
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return sgemv_cols_neon;
#endif
    return sgemv_cols_scalar;
}

SgemvFn sgemv_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return sgemv_avx512;
    if (isa == Isa::kAvx2) return sgemv_avx2;
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return sgemv_neon;
#endif
    return sgemv_scalar;
}

static void sgemm_scalar(int64_t M, const float* A, int64_t lda, const PackedB& B, const float* bias, float* C,
                         int64_t ldc, Act act) {
    const int64_t K = B.K, N = B.N, NR = B.NR;
    float acc[16];
    for (int64_t m = 0; m < M; ++m)
        for (int64_t pn = 0; pn * NR < N; ++pn) {
            const float* bp = B.panel(pn);
            for (int64_t j = 0; j < NR; ++j) acc[j] = 0;
            for (int64_t k = 0; k < K; ++k) {
                float a = A[m * lda + k];
                for (int64_t j = 0; j < NR; ++j) acc[j] += a * bp[k * NR + j];
            }
            for (int64_t j = 0; j < NR && pn * NR + j < N; ++j) {
                int64_t n = pn * NR + j;
                float v = acc[j] + (bias ? bias[n] : 0.0f);
                C[m * ldc + n] = act == Act::kRelu ? std::max(v, 0.0f) : v;
            }
        }
}

SgemmFn sgemm_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return sgemm_avx512;
    if (isa == Isa::kAvx2) return sgemm_avx2;
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return sgemm_neon;
#endif
    return sgemm_scalar;
}

void sgemm_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                     bool trans_b, const float* bias, float* C, int64_t ldc, Act act) {
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double s = bias ? bias[n] : 0.0;
            for (int64_t k = 0; k < K; ++k) s += double(A[m * lda + k]) * (trans_b ? B[n * ldb + k] : B[k * ldb + n]);
            float v = float(s);
            C[m * ldc + n] = act == Act::kRelu ? std::max(v, 0.0f) : v;
        }
}

}  // namespace jiffy::kernels
