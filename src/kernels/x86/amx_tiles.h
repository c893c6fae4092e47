// The tile helpers of the AMX kernels (kernels/amx.h): the tile configuration, the split of FP32
// values into BF16 parts, and the 32 x 32 block of C tiles over K. Included only by the files
// built with the AMX flags (kernels/x86/amx_*.cpp).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace jiffy::kernels::amx {

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

// 32 values v0 (16) and v1 (16) split into PARTS BF16 parts, each written as one 64-byte tile
// row (parts kTile apart): as they stand (an A tile row: 32 consecutive K values) or, INTERLEAVE,
// v0[n] and v1[n] side by side (a B tile row: K rows k and k + 1 of 16 columns). Each part rounds
// (to nearest even) what the ones before it left. Returns the lanes whose value is not finite or
// rounds to an infinity (|x| > ~3.39e38): those the parts cannot carry (inf x a zero part would
// give NaN).
template <int PARTS, bool INTERLEAVE>
inline __mmask32 split_values(__m512 v0, __m512 v1, uint16_t* dst) {
    alignas(64) static constexpr uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                                             21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26,
                                                             11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    __mmask32 bad = 0;
    for (int part = 0; part < PARTS; ++part) {
        const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(v1, v0);  // low 16: v0
        _mm512_storeu_si512(dst + part * kTile, INTERLEAVE ? _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), h) : h);
        if (part + 1 == PARTS) break;
        v0 = _mm512_sub_ps(v0, widen(_mm512_castsi512_si256(h)));
        v1 = _mm512_sub_ps(v1, widen(_mm512_extracti64x4_epi64(h, 1)));
        if (part == 0)  // NaN or an infinity left after the first part
            bad = __mmask32(_mm512_fpclass_ps_mask(v0, 0x99)) | (__mmask32(_mm512_fpclass_ps_mask(v1, 0x99)) << 16);
    }
    return bad;
}

// BF16x3 of 32 values as they stand (an A tile row), hi and mid by truncation: hi = x with its
// low 16 bits cleared, mid the same of x - hi, lo = x - hi - mid (at most 8 significant bits
// left, so exact in BF16). hi + mid + lo = x exactly; |mid| < 2^-7 |x|, |lo| < 2^-15 |x|, so the
// products BF16x3 drops stay below ~2^-22 of |a b| with B's parts rounded to nearest (2^-23 each
// for am.bl and al.bm), as with round-to-nearest parts on both sides (3 x 2^-24). No rounding
// means no conversion back to FP32: ~16 vector ops per 32 values instead of ~24 (split_values),
// and a finite x never gives an infinite part, so only NaN and infinities are refused.
inline __mmask32 split_values_x3_trunc(__m512 v0, __m512 v1, uint16_t* dst) {
    const __mmask32 bad = __mmask32(_mm512_fpclass_ps_mask(v0, 0x99)) | (__mmask32(_mm512_fpclass_ps_mask(v1, 0x99)) << 16);
    const __m512i keep = _mm512_set1_epi32(int(0xffff0000u));
    for (int part = 0; part < 2; ++part) {
        const __m512 h0 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v0), keep));
        const __m512 h1 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v1), keep));
        _mm512_store_si512(dst + part * kTile, (__m512i)_mm512_cvtne2ps_pbh(h1, h0));  // exact
        v0 = _mm512_sub_ps(v0, h0);
        v1 = _mm512_sub_ps(v1, h1);
    }
    _mm512_store_si512(dst + 2 * kTile, (__m512i)_mm512_cvtne2ps_pbh(v1, v0));  // exact
    return bad;
}

#define JIFFY_DP4()          \
    _tile_dpbf16ps(0, 4, 6); \
    _tile_dpbf16ps(1, 4, 7); \
    _tile_dpbf16ps(2, 5, 6); \
    _tile_dpbf16ps(3, 5, 7)

// C tiles 0..3 (rows of A0 / A1 x columns of B0 / B1) += the part products over K blocks
// [0, n). A's parts of a block kTile apart (hi, mid, lo), blocks APARTS * kTile apart. B's hi and
// mid likewise, blocks BSTRIDE * kTile apart; B's lo (BF16x3 with B_LO) at L0 / L1 (blocks kTile
// apart) or, where null, after B's mid. One operand changes per step:
//  BF16x2 (APARTS 2): (hi, mid) (hi, hi) (mid, hi): 8 tile loads for 12 products;
//  BF16x3 (APARTS 3, B_LO): (lo, hi) (hi, hi) (mid, hi) (mid, mid) (hi, mid) (hi, lo): 14 loads
//  for 24; without B_LO (MatMul's weights to 17 bits) the first five, without A_LO (a conv's
//  weights, which are A, to 17 bits) the last five: 12 loads for 20.
template <int APARTS, int BSTRIDE = APARTS, bool B_LO = APARTS == 3, bool A_LO = true>
inline void tile_block(const uint16_t* a0, const uint16_t* a1, const uint16_t* b0, const uint16_t* b1, int64_t n,
                       const uint16_t* l0 = nullptr, const uint16_t* l1 = nullptr) {
    constexpr int64_t as = APARTS * kTile, bs = BSTRIDE * kTile;
    for (int64_t kb = 0; kb < n; ++kb) {
        const uint16_t *A0 = a0 + kb * as, *A1 = a1 + kb * as;
        const uint16_t *B0 = b0 + kb * bs, *B1 = b1 + kb * bs;
        if constexpr (APARTS == 2) {
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
            _tile_loadd(6, B0, 64);
            _tile_loadd(7, B1, 64);
            if constexpr (A_LO) {
                _tile_loadd(4, A0 + 2 * kTile, 64);
                _tile_loadd(5, A1 + 2 * kTile, 64);
                JIFFY_DP4();
            }
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
            if constexpr (B_LO) {
                _tile_loadd(6, l0 ? l0 + kb * kTile : B0 + 2 * kTile, 64);
                _tile_loadd(7, l1 ? l1 + kb * kTile : B1 + 2 * kTile, 64);
                JIFFY_DP4();
            }
        }
    }
}
#undef JIFFY_DP4

// Loads the tile configuration (per thread; before the first tile instruction of a run).
inline void load_tile_config() {
    TileConfig cfg;
    for (int i = 0; i < 8; ++i) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    // GCC 12 does not see LDTILECFG read all 64 bytes: in a function where nothing else reads
    // cfg (session 39's keep-awake product, docs/amx.md) it dropped the stores above and loaded a
    // config of no tiles (#UD at the first tile instruction). The empty asm keeps them.
    __asm__ volatile("" : : "m"(cfg) : "memory");
    _tile_loadconfig(&cfg);
}

// Lanes [0, n) of 16 (n clamped to 0..16).
inline __mmask16 lanes(int64_t n) { return __mmask16(n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1u); }

// The finished C tiles 0..3 into rows nr (<= 32) of two 16-column tiles: tiles 0 / 2 (rows 0-15 /
// 16-31) at c0, nc0 (<= 16) columns, tiles 1 / 3 at c1, nc1 columns (rows ld floats apart).
// Whole 16 x 16 tiles go straight from the tiles, edge tiles through acc (4 x 256 floats, 64-byte
// aligned) and masked stores.
inline void store_tiles(float* c0, float* c1, int64_t ld, int64_t nr, int64_t nc0, int64_t nc1, float* acc) {
    const bool w0 = nc0 >= 16, w1 = nc1 >= 16, r0 = nr >= 16, r1 = nr >= 32;
    const int64_t ys = ld * int64_t(sizeof(float));
    if (r0 && w0) _tile_stored(0, c0, ys); else _tile_stored(0, acc, 64);
    if (r0 && w1) _tile_stored(1, c1, ys); else _tile_stored(1, acc + 256, 64);
    if (r1 && w0) _tile_stored(2, c0 + 16 * ld, ys); else _tile_stored(2, acc + 512, 64);
    if (r1 && w1) _tile_stored(3, c1 + 16 * ld, ys); else _tile_stored(3, acc + 768, 64);
    if (r1 && w0 && w1) return;
    const __mmask16 k0 = lanes(nc0), k1 = lanes(nc1);
    for (int64_t r = 0; r < nr; ++r) {
        const bool whole = r < 16 ? r0 : r1;  // this row's tiles went straight out where w0 / w1
        const float* t = acc + (r >= 16 ? 512 : 0) + (r & 15) * 16;
        if (!(whole && w0) && nc0 > 0) _mm512_mask_storeu_ps(c0 + r * ld, k0, _mm512_load_ps(t));
        if (!(whole && w1) && nc1 > 0) _mm512_mask_storeu_ps(c1 + r * ld, k1, _mm512_load_ps(t + 256));
    }
}

// The finished C tiles 0..3 of a 32 x 32 block into rows nr (<= 32) x columns nc (<= 32) at cb.
inline void store_block(float* cb, int64_t ld, int64_t nr, int64_t nc, float* acc) {
    store_tiles(cb, cb + 16, ld, nr, nc < 16 ? nc : 16, nc - 16, acc);
}

}  // namespace jiffy::kernels::amx
