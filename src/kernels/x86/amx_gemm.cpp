// AmxGemm::run (kernels/amx.h): built with the AMX-TILE, AMX-BF16 and AVX512-BF16 flags, called
// only where amx_usable().
#include <immintrin.h>

#include <algorithm>

#include "kernels/amx.h"

namespace jiffy::kernels {

namespace {

// Palette 1, tiles 0-7 all 16 rows x 64 bytes: 0-3 the C tiles (FP32 16 x 16), 4-5 A (16 rows x
// 32 BF16), 6-7 B (16 pairs of K rows x 16 columns).
struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

constexpr int64_t kTile = 512;  // uint16 per tile

inline __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

// 32 consecutive values (v0: the first 16) split into PARTS BF16 parts, each written as one
// 64-byte A tile row (parts kTile apart); each part rounds (to nearest even) what the ones before
// it left. Returns the lanes whose value is not finite or rounds to an infinity (|x| > ~3.39e38):
// those the parts cannot carry (inf x a zero part would give NaN).
template <int PARTS>
inline __mmask32 split_row(__m512 v0, __m512 v1, uint16_t* dst) {
    __mmask32 bad = 0;
    for (int part = 0; part < PARTS; ++part) {
        const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(v1, v0);  // low 16: v0
        _mm512_storeu_si512(dst + part * kTile, h);
        if (part + 1 == PARTS) break;
        v0 = _mm512_sub_ps(v0, widen(_mm512_castsi512_si256(h)));
        v1 = _mm512_sub_ps(v1, widen(_mm512_extracti64x4_epi64(h, 1)));
        if (part == 0)  // NaN or an infinity left after the first part
            bad = __mmask32(_mm512_fpclass_ps_mask(v0, 0x99)) | (__mmask32(_mm512_fpclass_ps_mask(v1, 0x99)) << 16);
    }
    return bad;
}

#define JIFFY_DP4()          \
    _tile_dpbf16ps(0, 4, 6); \
    _tile_dpbf16ps(1, 4, 7); \
    _tile_dpbf16ps(2, 5, 6); \
    _tile_dpbf16ps(3, 5, 7)

// C tiles 0..3 (rows of A0 / A1 x columns of B0 / B1) += the part products over K blocks
// [0, n), each block's parts kTile apart (hi, mid, lo). One operand changes per step:
//  BF16x2: (hi, mid) (hi, hi) (mid, hi): 8 tile loads for 12 products;
//  BF16x3: (lo, hi) (hi, hi) (mid, hi) (mid, mid) (hi, mid) (hi, lo): 14 loads for 24.
template <int PARTS>
inline void tile_block(const uint16_t* a0, const uint16_t* a1, const uint16_t* b0, const uint16_t* b1, int64_t n) {
    constexpr int64_t kb_stride = PARTS * kTile;
    for (int64_t kb = 0; kb < n; ++kb) {
        const uint16_t *A0 = a0 + kb * kb_stride, *A1 = a1 + kb * kb_stride;
        const uint16_t *B0 = b0 + kb * kb_stride, *B1 = b1 + kb * kb_stride;
        if constexpr (PARTS == 2) {
            _tile_loadd(4, A0, 64);
            _tile_loadd(5, A1, 64);
            _tile_loadd(6, B0 + kTile, 64);
            _tile_loadd(7, B1 + kTile, 64);
            JIFFY_DP4();
            _tile_loadd(6, B0, 64);
            _tile_loadd(7, B1, 64);
            JIFFY_DP4();
            _tile_loadd(4, A0 + kTile, 64);
            _tile_loadd(5, A1 + kTile, 64);
            JIFFY_DP4();
        } else {
            _tile_loadd(4, A0 + 2 * kTile, 64);
            _tile_loadd(5, A1 + 2 * kTile, 64);
            _tile_loadd(6, B0, 64);
            _tile_loadd(7, B1, 64);
            JIFFY_DP4();
            _tile_loadd(4, A0, 64);
            _tile_loadd(5, A1, 64);
            JIFFY_DP4();
            _tile_loadd(4, A0 + kTile, 64);
            _tile_loadd(5, A1 + kTile, 64);
            JIFFY_DP4();
            _tile_loadd(6, B0 + kTile, 64);
            _tile_loadd(7, B1 + kTile, 64);
            JIFFY_DP4();
            _tile_loadd(4, A0, 64);
            _tile_loadd(5, A1, 64);
            JIFFY_DP4();
            _tile_loadd(6, B0 + 2 * kTile, 64);
            _tile_loadd(7, B1 + 2 * kTile, 64);
            JIFFY_DP4();
        }
    }
}
#undef JIFFY_DP4

template <int PARTS>
bool gemm(int64_t M, int64_t K, int64_t N, int64_t Mp, int64_t Kp, const float* A, int64_t lda,
          const uint16_t* bp, const float* bias, float* C, int64_t ldc, float* scratch) {
    const int64_t KB = Kp / 32, kbs = PARTS * kTile;
    // Row blocks of the split A one cache line more than their K x 16 x PARTS halves apart
    // (whole multiples of 4 KiB would put every block in the same L1 sets).
    const int64_t as = KB * kbs + 32;
    uint16_t* ap = reinterpret_cast<uint16_t*>(scratch);
    float* acc = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch + Mp / 16 * as / 2) + 63) & ~uintptr_t(63));
    // A's rows split into parts; rows past M are left as they are (they only reach C rows that
    // are never stored).
    __mmask32 bad = 0;
    for (int64_t m = 0; m < M; ++m) {
        const float* row = A + m * lda;
        uint16_t* d = ap + (m / 16) * as + (m % 16) * 32;
        for (int64_t kb = 0; kb < KB; ++kb) {
            const int64_t k0 = kb * 32, nv = std::clamp<int64_t>(K - k0, 0, 32);
            const __mmask16 m0 = __mmask16(nv >= 16 ? 0xffffu : (1u << nv) - 1u);
            const __mmask16 m1 = __mmask16(nv >= 32 ? 0xffffu : nv <= 16 ? 0u : (1u << (nv - 16)) - 1u);
            bad |= split_row<PARTS>(_mm512_maskz_loadu_ps(m0, row + k0), _mm512_maskz_loadu_ps(m1, row + k0 + 16),
                                    d + kb * kbs);
        }
    }
    if (bad) return false;
    TileConfig cfg;
    for (int i = 0; i < 8; ++i) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    _tile_loadconfig(&cfg);
    // Each 32-column block of B (K x 32 x PARTS halves) is read once, for every 32-row block of
    // A in turn (A's parts stay in L2); each 32 x 32 block of C is four C tiles over the whole K.
    const int64_t ys = ldc * int64_t(sizeof(float));
    for (int64_t n0 = 0; n0 < N; n0 += 32) {
        const uint16_t* b0 = bp + (n0 / 16) * KB * kbs;
        for (int64_t m0 = 0; m0 < M; m0 += 32) {
            const uint16_t* a0 = ap + (m0 / 16) * as;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            tile_block<PARTS>(a0, a0 + as, b0, b0 + KB * kbs, KB);
            // Whole 16 x 16 tiles straight into C; edge tiles through acc.
            const bool c0 = n0 + 16 <= N, c1 = n0 + 32 <= N, r0 = m0 + 16 <= M, r1 = m0 + 32 <= M;
            float* cb = C + m0 * ldc + n0;
            if (r0 && c0) _tile_stored(0, cb, ys); else _tile_stored(0, acc, 64);
            if (r0 && c1) _tile_stored(1, cb + 16, ys); else _tile_stored(1, acc + 256, 64);
            if (r1 && c0) _tile_stored(2, cb + 16 * ldc, ys); else _tile_stored(2, acc + 512, 64);
            if (r1 && c1) _tile_stored(3, cb + 16 * ldc + 16, ys); else _tile_stored(3, acc + 768, 64);
            if (r1 && c1) continue;
            const int64_t nc = std::min<int64_t>(32, N - n0), nr = std::min<int64_t>(32, M - m0);
            const __mmask16 k0 = __mmask16(nc >= 16 ? 0xffffu : (1u << nc) - 1u);
            const __mmask16 k1 = __mmask16(nc >= 32 ? 0xffffu : nc <= 16 ? 0u : (1u << (nc - 16)) - 1u);
            for (int64_t r = 0; r < nr; ++r) {
                const bool whole = r < 16 ? r0 : r1;  // its tiles went straight to C where c0 / c1
                const float* t = acc + (r >= 16 ? 512 : 0) + (r & 15) * 16;
                float* cr = cb + r * ldc;
                if (!(whole && c0)) _mm512_mask_storeu_ps(cr, k0, _mm512_load_ps(t));
                if (!(whole && c1)) _mm512_mask_storeu_ps(cr + 16, k1, _mm512_load_ps(t + 256));
            }
        }
    }
    _tile_release();
    if (!bias) return true;
    for (int64_t m = 0; m < M; ++m) {
        float* cr = C + m * ldc;
        int64_t n = 0;
        for (; n + 16 <= N; n += 16)
            _mm512_storeu_ps(cr + n, _mm512_add_ps(_mm512_loadu_ps(cr + n), _mm512_loadu_ps(bias + n)));
        if (n < N) {
            const __mmask16 km = __mmask16((1u << (N - n)) - 1u);
            _mm512_mask_storeu_ps(cr + n, km,
                                  _mm512_add_ps(_mm512_maskz_loadu_ps(km, cr + n), _mm512_maskz_loadu_ps(km, bias + n)));
        }
    }
    return true;
}

}  // namespace

bool AmxGemm::run(const float* A, int64_t lda, const uint16_t* bp, const float* bias, float* C, int64_t ldc,
                  float* scratch) const {
    return parts_ == 3 ? gemm<3>(M_, K_, N_, Mp_, Kp_, A, lda, bp, bias, C, ldc, scratch)
                       : gemm<2>(M_, K_, N_, Mp_, Kp_, A, lda, bp, bias, C, ldc, scratch);
}

}  // namespace jiffy::kernels
