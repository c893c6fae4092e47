// f32_gemm_8x32__avx512: MR=8 rows x NR=32 columns (two zmm) per microkernel call; 16 zmm
// accumulators, B streamed from one contiguous K x 32 panel, A broadcast from memory.
#include <immintrin.h>

#include <algorithm>

#include "kernels/gemm.h"
#include "kernels/prefetch.h"

namespace jiffy::kernels {

namespace {

// TWO = false: a tail panel with at most 16 valid columns (only its first half is read).
template <int MR, bool TWO = true>
inline void ukernel(int64_t K, const float* A, int64_t lda, const float* bp, const float* bias, float* C,
                    int64_t ldc, int64_t nvalid, Act act) {
    __m512 acc0[MR], acc1[MR];
    __mmask16 m0 = nvalid >= 16 ? __mmask16(0xffff) : __mmask16((1u << nvalid) - 1);
    __mmask16 m1 = nvalid >= 32 ? __mmask16(0xffff) : (nvalid <= 16 ? __mmask16(0) : __mmask16((1u << (nvalid - 16)) - 1));
    __m512 b0i = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 b1i = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
        acc0[m] = b0i;
        acc1[m] = b1i;
    }
    for (int64_t k = 0; k < K; ++k) {
        __m512 b0 = _mm512_load_ps(bp + k * 32);
        if constexpr (TWO) {
            __m512 b1 = _mm512_load_ps(bp + k * 32 + 16);
            #pragma GCC unroll 16
            for (int m = 0; m < MR; ++m) {
                __m512 a = _mm512_set1_ps(A[m * lda + k]);
                acc0[m] = _mm512_fmadd_ps(a, b0, acc0[m]);
                acc1[m] = _mm512_fmadd_ps(a, b1, acc1[m]);
            }
        } else {
            #pragma GCC unroll 16
            for (int m = 0; m < MR; ++m) acc0[m] = _mm512_fmadd_ps(_mm512_set1_ps(A[m * lda + k]), b0, acc0[m]);
        }
    }
    if (act == Act::kRelu) {
        __m512 z = _mm512_setzero_ps();
        #pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) {
            acc0[m] = _mm512_max_ps(acc0[m], z);
            acc1[m] = _mm512_max_ps(acc1[m], z);
        }
    }
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
        _mm512_mask_storeu_ps(C + m * ldc, m0, acc0[m]);
        if constexpr (TWO) _mm512_mask_storeu_ps(C + m * ldc + 16, m1, acc1[m]);
    }
}

}  // namespace

namespace {

// The lines of rows [r0, r1) x columns [0, nv) of C for writing (a row's 128 bytes may touch 3).
inline void pf_c(float* C, int64_t ldc, int64_t r0, int64_t r1, int64_t nv) {
    for (int64_t r = r0; r < r1; ++r) {
        float* p = C + r * ldc;
        pf_write(p);
        pf_write(p + std::min<int64_t>(16, nv - 1));
        pf_write(p + nv - 1);
    }
}

// next_c: the next panel's C (its first 8 rows are prefetched during this panel's last block),
// or null.
template <bool TWO>
void sgemm_panel(int64_t M, const float* A, int64_t lda, const float* bp, const float* bb, float* C, int64_t ldc,
                 int64_t K, int64_t nv, Act act, float* next_c, int64_t next_nv) {
    int64_t m = 0;
    for (; m + 8 <= M; m += 8) {
        // The next block's output lines for writing: C (M x N) passes L2 in the tall products
        // (a 160 x 6625 CTC head: 4.2 MB), and each block's first stores waited for their
        // read-for-ownership.
        if (m + 8 < M) pf_c(C, ldc, m + 8, std::min(M, m + 16), nv);
        else if (next_c) pf_c(next_c, ldc, 0, std::min<int64_t>(M, 8), next_nv);
        ukernel<8, TWO>(K, A + m * lda, lda, bp, bb, C + m * ldc, ldc, nv, act);
    }
    switch (M - m) {
        case 7: ukernel<7, TWO>(K, A + m * lda, lda, bp, bb, C + m * ldc, ldc, nv, act); break;
        case 6: ukernel<6, TWO>(K, A + m * lda, lda, bp, bb, C + m * ldc, ldc, nv, act); break;
        case 5: ukernel<5, TWO>(K, A + m * lda, lda, bp, bb, C + m * ldc, ldc, nv, act); break;
        case 4: ukernel<4, TWO>(K, A + m * lda, lda, bp, bb, C + m * ldc, ldc, nv, act); break;
        case 3: ukernel<3, TWO>(K, A + m * lda, lda, bp, bb, C + m * ldc, ldc, nv, act); break;
        case 2: ukernel<2, TWO>(K, A + m * lda, lda, bp, bb, C + m * ldc, ldc, nv, act); break;
        case 1: ukernel<1, TWO>(K, A + m * lda, lda, bp, bb, C + m * ldc, ldc, nv, act); break;
        default: break;
    }
}

}  // namespace

void sgemm_avx512(int64_t M, const float* A, int64_t lda, const PackedB& B, const float* bias, float* C,
                  int64_t ldc, Act act) {
    const int64_t K = B.K, N = B.N;
    for (int64_t n0 = 0; n0 < N; n0 += 32) {
        const float* bp = B.panel(n0 / 32);
        const float* bb = bias ? bias + n0 : nullptr;
        const int64_t nv = std::min<int64_t>(32, N - n0);
        float* next_c = n0 + 32 < N ? C + n0 + 32 : nullptr;
        const int64_t next_nv = std::min<int64_t>(32, N - n0 - 32);
        if (nv > 16)
            sgemm_panel<true>(M, A, lda, bp, bb, C + n0, ldc, K, nv, act, next_c, next_nv);
        else
            sgemm_panel<false>(M, A, lda, bp, bb, C + n0, ldc, K, nv, act, next_c, next_nv);
    }
}

}  // namespace jiffy::kernels

// ---------------------------------------------------------------- transposed packing
namespace jiffy::kernels {
namespace {

// In place: r[j] (row j, 16 floats) becomes column j of the 16 x 16 block.
inline void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4g + c], 128-bit lane L: column 4L + c of rows 4g .. 4g + 3.
    for (int g = 0; g < 4; ++g) {
        u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    // A 4 x 4 transpose of 128-bit lanes per c: row 4L + c = lane L of u[c], u[4 + c], u[8 + c], u[12 + c].
    for (int c = 0; c < 4; ++c) {
        const __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44), x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
        const __m512 x2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        const __m512 x3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
        r[c] = _mm512_shuffle_f32x4(x0, x2, 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(x0, x2, 0xDD);
        r[8 + c] = _mm512_shuffle_f32x4(x1, x3, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(x1, x3, 0xDD);
    }
}

}  // namespace

void pack_b32_avx512(const float* B, int64_t ldb, bool trans_b, const PackedB& into) {
    const int64_t K = into.K, N = into.N;
    float* d = into.data.get();
    if (!trans_b) {
        for (int64_t n0 = 0; n0 < N; n0 += 32) {
            float* dp = d + n0 * K;
            const int64_t nv = std::min<int64_t>(32, N - n0);
            const __mmask16 m0 = nv >= 16 ? __mmask16(0xffff) : __mmask16((1u << nv) - 1);
            const __mmask16 m1 = nv >= 32 ? __mmask16(0xffff) : (nv <= 16 ? __mmask16(0) : __mmask16((1u << (nv - 16)) - 1));
            for (int64_t k = 0; k < K; ++k) {
                const float* src = B + k * ldb + n0;
                _mm512_storeu_ps(dp + k * 32, _mm512_maskz_loadu_ps(m0, src));
                _mm512_storeu_ps(dp + k * 32 + 16, _mm512_maskz_loadu_ps(m1, src + 16));
            }
        }
        return;
    }
    for (int64_t n0 = 0; n0 < N; n0 += 32) {
        float* dp = d + n0 * K;  // panel n0 / 32 (K x 32)
        for (int64_t h = 0; h < 32; h += 16) {
            const int64_t jv = std::max<int64_t>(0, std::min<int64_t>(16, N - n0 - h));  // valid rows of B
            for (int64_t k0 = 0; k0 < K; k0 += 16) {
                const int64_t kv = std::min<int64_t>(16, K - k0);
                const __mmask16 km = kv >= 16 ? __mmask16(0xffff) : __mmask16((1u << kv) - 1);
                __m512 r[16];
                for (int j = 0; j < 16; ++j)
                    r[j] = j < jv ? _mm512_maskz_loadu_ps(km, B + (n0 + h + j) * ldb + k0) : _mm512_setzero_ps();
                transpose16(r);
                for (int64_t kk = 0; kk < kv; ++kk) _mm512_storeu_ps(dp + (k0 + kk) * 32 + h, r[kk]);
            }
        }
    }
}

}  // namespace jiffy::kernels

// ---------------------------------------------------------------- GEMV (M = 1)
// y[n0 .. n0 + 16V) for one column block: U independent accumulator sets along K hide the FMA
// latency when the block is narrow (V * U >= 8 chains); B rows are ldb apart (64-byte aligned).
namespace jiffy::kernels {
namespace {

template <int V, int U>
inline void gemv_block(int64_t K, const float* a, const float* b, int64_t ldb, const float* bias, float* y,
                       int64_t nvalid, const Activation& act) {
    __m512 acc[U][V];
    for (int u = 0; u < U; ++u)
        for (int v = 0; v < V; ++v) acc[u][v] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + U <= K; k += U)
        for (int u = 0; u < U; ++u) {
            const __m512 av = _mm512_set1_ps(a[k + u]);
            const float* br = b + (k + u) * ldb;
            for (int v = 0; v < V; ++v) acc[u][v] = _mm512_fmadd_ps(av, _mm512_load_ps(br + 16 * v), acc[u][v]);
        }
    for (; k < K; ++k) {
        const __m512 av = _mm512_set1_ps(a[k]);
        const float* br = b + k * ldb;
        for (int v = 0; v < V; ++v) acc[0][v] = _mm512_fmadd_ps(av, _mm512_load_ps(br + 16 * v), acc[0][v]);
    }
    for (int v = 0; v < V; ++v) {
        __m512 s = acc[0][v];
        for (int u = 1; u < U; ++u) s = _mm512_add_ps(s, acc[u][v]);
        const int64_t left = nvalid - 16 * v;
        const __mmask16 m = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
        if (bias) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(m, bias + 16 * v));
        _mm512_mask_storeu_ps(y + 16 * v, m, act_v512(act, s));
    }
}

// The same block on 24-bit weights (PackedGemv::w24: 3 bytes a weight, rows 3 * ldb bytes apart):
// each group of 16 weights is one 64-byte load whose first 48 bytes one byte permute (VBMI)
// spreads into the top three bytes of 16 floats, the low byte zeroed by the mask; the same FMAs
// in the same order as gemv_block on the rounded weights. 3/4 of the bytes per weight: the
// GEMV streams its weights from L2 or L3 (docs/gemv.md, "24-bit weights"). Its loop repeats
// gemv_block's: one body for both would have to be compiled for VBMI (GCC inlines a VBMI loader
// only into a VBMI function), and gemv_block runs on AVX-512 cores without it.
__attribute__((target("avx512vbmi"), always_inline)) inline __m512 w24_group(const unsigned char* p, __m512i spread,
                                                                             __mmask64 hi3) {
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi8(hi3, spread, _mm512_loadu_si512(p)));
}

template <int V, int U>
__attribute__((target("avx512vbmi"))) void gemv_block24(int64_t K, const float* a, const unsigned char* b,
                                                        int64_t ldb, const float* bias, float* y, int64_t nvalid,
                                                        const Activation& act) {
    // Byte 4i + j + 1 of the result is byte 3i + j of the group (j < 3); byte 4i is zeroed.
    const __m512i spread = _mm512_set_epi32(0x2f2e2d00, 0x2c2b2a00, 0x29282700, 0x26252400, 0x23222100, 0x201f1e00,
                                            0x1d1c1b00, 0x1a191800, 0x17161500, 0x14131200, 0x11100f00, 0x0e0d0c00,
                                            0x0b0a0900, 0x08070600, 0x05040300, 0x02010000);
    const __mmask64 hi3 = 0xeeeeeeeeeeeeeeeeull;
    const int64_t row = 3 * ldb;
    __m512 acc[U][V];
    for (int u = 0; u < U; ++u)
        for (int v = 0; v < V; ++v) acc[u][v] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + U <= K; k += U)
        for (int u = 0; u < U; ++u) {
            const __m512 av = _mm512_set1_ps(a[k + u]);
            const unsigned char* br = b + (k + u) * row;
            for (int v = 0; v < V; ++v) acc[u][v] = _mm512_fmadd_ps(av, w24_group(br + 48 * v, spread, hi3), acc[u][v]);
        }
    for (; k < K; ++k) {
        const __m512 av = _mm512_set1_ps(a[k]);
        const unsigned char* br = b + k * row;
        for (int v = 0; v < V; ++v) acc[0][v] = _mm512_fmadd_ps(av, w24_group(br + 48 * v, spread, hi3), acc[0][v]);
    }
    for (int v = 0; v < V; ++v) {
        __m512 s = acc[0][v];
        for (int u = 1; u < U; ++u) s = _mm512_add_ps(s, acc[u][v]);
        const int64_t left = nvalid - 16 * v;
        const __mmask16 m = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
        if (bias) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(m, bias + 16 * v));
        _mm512_mask_storeu_ps(y + 16 * v, m, act_v512(act, s));
    }
}

// The block on 20-bit block weights (PackedGemv::q20 / s20, docs/gemv.md): rows [k0, k0 + n) of
// columns whose groups start at q (row k at q + k * ldq bytes) and whose scales start at sc (scale
// block kb at sc + kb * lds); a[i] is row k0 + i's input. A group is one 64-byte load of which 40
// bytes are its 16 weights: a byte permute gives every qword the 5 bytes of two weights, a bit-field
// shift (VPMULTISHIFTQB) puts each weight in the top 20 bits of its lane, the low 12 bits are
// cleared and the lane converted (q * 2^12, exact). Per scale block the products sum in their own
// accumulators, which then add s * 2^-12 (as s20 holds it) times themselves to the block's sum: the
// weights are q * s exactly, the sums in float32.
__attribute__((target("avx512vbmi"), always_inline)) inline __m512 i20_group(const unsigned char* p, __m512i pick,
                                                                             __m512i shift, __m512i top) {
    const __m512i g = _mm512_permutexvar_epi8(pick, _mm512_loadu_si512(p));
    return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_multishift_epi64_epi8(shift, g), top));
}

template <int V, int U>
__attribute__((target("avx512vbmi"))) void gemv_block20(int64_t n, const float* a, const unsigned char* q,
                                                        int64_t ldq, const float* sc, int64_t lds, int64_t k0,
                                                        const float* bias, float* y, int64_t nvalid,
                                                        const Activation& act) {
    // Qword j of the permuted group holds bytes 5j .. 5j + 7 (weights 2j and 2j + 1 at its bits 0
    // and 20); lane 2j + t takes the 8-bit fields at 20 t - 12, - 4, + 4, + 12 (mod 64) of its qword.
    alignas(64) static constexpr unsigned char kPick[64] = {
        0,  1,  2,  3,  4,  5,  6,  7,  5,  6,  7,  8,  9,  10, 11, 12, 10, 11, 12, 13, 14, 15,
        16, 17, 15, 16, 17, 18, 19, 20, 21, 22, 20, 21, 22, 23, 24, 25, 26, 27, 25, 26, 27, 28,
        29, 30, 31, 32, 30, 31, 32, 33, 34, 35, 36, 37, 35, 36, 37, 38, 39, 40, 41, 42};
    const __m512i pick = _mm512_load_si512(kPick);
    const __m512i shift = _mm512_set1_epi64(0x20181008'0c043c34ll);  // bytes 52, 60, 4, 12, 8, 16, 24, 32
    const __m512i top = _mm512_set1_epi32(int32_t(0xfffff000u));
    __m512 sum[V];
    for (int v = 0; v < V; ++v) sum[v] = _mm512_setzero_ps();
    const int64_t R = kGemvI20Rows, k_end = k0 + n;
    for (int64_t kb = k0 / R; kb * R < k_end; ++kb) {
        const int64_t r0 = std::max(k0, kb * R), r1 = std::min(k_end, (kb + 1) * R);
        __m512 acc[U][V];
        for (int u = 0; u < U; ++u)
            for (int v = 0; v < V; ++v) acc[u][v] = _mm512_setzero_ps();
        int64_t k = r0;
        for (; k + U <= r1; k += U)
            for (int u = 0; u < U; ++u) {
                const __m512 av = _mm512_set1_ps(a[k + u - k0]);
                const unsigned char* br = q + (k + u) * ldq;
                if constexpr (V == 8)  // the row 8 ahead (past the end too: a prefetch never faults)
                    for (int l = 0; l < 320; l += 64)
                        _mm_prefetch(reinterpret_cast<const char*>(br + 8 * ldq + l), _MM_HINT_T0);
                for (int v = 0; v < V; ++v)
                    acc[u][v] = _mm512_fmadd_ps(av, i20_group(br + 40 * v, pick, shift, top), acc[u][v]);
            }
        for (; k < r1; ++k) {
            const __m512 av = _mm512_set1_ps(a[k - k0]);
            const unsigned char* br = q + k * ldq;
            for (int v = 0; v < V; ++v)
                acc[0][v] = _mm512_fmadd_ps(av, i20_group(br + 40 * v, pick, shift, top), acc[0][v]);
        }
        const float* s = sc + kb * lds;
        for (int v = 0; v < V; ++v) {
            __m512 t = acc[0][v];
            for (int u = 1; u < U; ++u) t = _mm512_add_ps(t, acc[u][v]);
            sum[v] = _mm512_fmadd_ps(t, _mm512_load_ps(s + 16 * v), sum[v]);  // s20 holds s * 2^-12
        }
    }
    for (int v = 0; v < V; ++v) {
        const int64_t left = nvalid - 16 * v;
        const __mmask16 m = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
        __m512 t = sum[v];
        if (bias) t = _mm512_add_ps(t, _mm512_maskz_loadu_ps(m, bias + 16 * v));
        _mm512_mask_storeu_ps(y + 16 * v, m, act_v512(act, t));
    }
}

#define JIFFY_GEMV_W24 1
constexpr int64_t kGemvVL = 16;
constexpr int kGemvMainU = 1;
constexpr int kGemvTailU[7] = {8, 4, 2, 2, 1, 1, 1};
#include "kernels/gemv_driver_impl.h"

}  // namespace

void sgemv_avx512(const float* a, const PackedGemv& B, const float* bias, float* y, const Activation& act,
                  bool backward) {
    sgemv_cols_run(a, B, 0, B.N, bias, y, act, backward);
}

void sgemv_cols_avx512(const float* a, const PackedGemv& B, int64_t c0, int64_t c1, const float* bias, float* y,
                      const Activation& act, bool backward) {
    sgemv_cols_run(a, B, c0, c1, bias, y, act, backward);
}

}  // namespace jiffy::kernels
