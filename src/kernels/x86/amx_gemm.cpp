// AmxGemm::run (kernels/amx.h): built with the AMX-TILE, AMX-BF16 and AVX512-BF16 flags, called
// only where amx_usable().
#include <immintrin.h>

#include <algorithm>

#include "kernels/amx.h"
#include "kernels/x86/amx_tiles.h"

namespace jiffy::kernels {

void conv_epi_avx512(float*, const float*, int64_t, const ConvEpi&);

namespace {

using namespace amx;


template <int PARTS, bool B_LO>
bool gemm(int64_t M, int64_t K, int64_t N, int64_t MC, int64_t Kp, const float* A, int64_t lda,
          const uint16_t* bp, const float* bias, float* C, int64_t ldc, float* scratch, int64_t nb, int64_t ne,
          const float* res, const ConvEpi* e) {
    const int64_t KB = Kp / 32, kbs = PARTS * kTile, bkbs = 2 * kTile;
    // B's hi / mid blocks, then (BF16x3) its lo parts (AmxGemm::pack_b).
    const uint16_t* blo = bp + (N + 31) / 32 * 32 * Kp * 2;
    const auto lo = [&](int64_t t) { return B_LO ? blo + t * KB * kTile : nullptr; };
    // Row blocks of the split A one cache line more than their K x 16 x PARTS halves apart
    // (whole multiples of 4 KiB would put every block in the same L1 sets).
    const int64_t as = KB * kbs + 32;
    // 64-byte aligned: a tile row across two cache lines costs every tile load twice the lines
    // (the 64 x 256 x 256 product 1.25x slower from a malloc'd buffer).
    uint16_t* ap = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
    float* acc = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(ap + (MC + 31) / 32 * 2 * as) + 63) & ~uintptr_t(63));
    const bool epi = e && (res || e->act != ConvAct::kNone || e->clamp);
    // The bias starts the accumulators: each C tile is loaded with its 16 bias values in every
    // row (a tile load of stride 0) instead of zeroed, so no pass over C adds it (64 x 256 x 768:
    // ~3 us of 70). Copied zero-padded to whole column blocks (after acc) so edge tiles read
    // nothing past it.
    float* bpad = nullptr;
    if (bias) {
        bpad = acc + 1024;
        const int64_t np = (N + 31) / 32 * 32;
        for (int64_t n = 0; n < np; ++n) bpad[n] = n < N ? bias[n] : 0.0f;
    }
    const auto start = [&](int64_t t0, int64_t t1) {  // C tiles 0 / 2 at column tile t0, 1 / 3 at t1
        if (bpad) {
            _tile_loadd(0, bpad + 16 * t0, 0);
            _tile_loadd(1, bpad + 16 * t1, 0);
            _tile_loadd(2, bpad + 16 * t0, 0);
            _tile_loadd(3, bpad + 16 * t1, 0);
        } else {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
        }
    };
    load_tile_config();
    // Rows in chunks of MC (AmxGemm::chunk_rows: the split A of a chunk stays in L2 while every
    // column block of B passes over it).
    for (int64_t r0 = 0; r0 < M; r0 += MC) {
        const int64_t rn = std::min(MC, M - r0);
        // The chunk's rows of A split into parts; rows past rn are left as they are (they only
        // reach C rows that are never stored).
        __mmask32 bad = 0;
        for (int64_t mt = 0; mt < rn; mt += 16) {
            const int64_t mn = std::min<int64_t>(16, rn - mt);
            for (int64_t kb = 0; kb < KB; ++kb) {
                const int64_t k0 = kb * 32, nv = std::clamp<int64_t>(K - k0, 0, 32);
                uint16_t* d = ap + (mt / 16) * as + kb * kbs;
                for (int64_t m = 0; m < mn; ++m) {
                    const float* row = A + (r0 + mt + m) * lda + k0;
                    const __m512 v0 = _mm512_maskz_loadu_ps(lanes(nv), row), v1 = _mm512_maskz_loadu_ps(lanes(nv - 16), row + 16);
                    if constexpr (PARTS == 3)
                        bad |= split_values_x3_trunc(v0, v1, d + m * 32);
                    else
                        bad |= split_values<PARTS, false>(v0, v1, d + m * 32);
                }
            }
        }
        if (bad) {
            _tile_release();
            return false;
        }
        // Each 32 x 32 block of C is four C tiles over the whole K.
        float* Cc = C + r0 * ldc;
        const bool staggered = rn > 32 && rn <= 64 && ne - nb > 64;
        if (staggered) {
            // Two row blocks, staggered: pass p takes row block p % 2 and the 16-column tiles p
            // and p + 1, so each pass reads one tile of B it has not seen (the other came in the
            // pass before, still in L1 / L2), and the weights stream from L3 at an even pace
            // that overlaps the tile work; the plain order's first pass over each column block
            // reads two new tiles and its second none. NT is even, so the last pass is row
            // block 1's: it takes the final tile and the first. 64 x 256 x 1024 with the weights
            // cold 92.6 -> 87.4 us, 64 x 1024 x 256 89.8 -> 86.3 (hot: the same).
            const int64_t t0 = nb / 16, NT = (ne - nb + 31) / 32 * 2;
            const auto width = [&](int64_t t) { return std::clamp<int64_t>(ne - t * 16, 0, 16); };
            for (int64_t p = 0; p < NT; ++p) {
                const int64_t rb = p % 2, ta = t0 + p, tb = p + 1 < NT ? ta + 1 : t0;
                const uint16_t* a0 = ap + 2 * rb * as;
                start(ta, tb);
                tile_block<PARTS, 2, B_LO>(a0, a0 + as, bp + ta * KB * bkbs, bp + tb * KB * bkbs, KB, lo(ta), lo(tb));
                float* cr = Cc + 32 * rb * ldc;
                store_tiles(cr + ta * 16, cr + tb * 16, ldc, std::min<int64_t>(32, rn - 32 * rb), width(ta), width(tb), acc);
            }
        } else {
            // Each 32-column block of B (K x 32 x PARTS halves) is read once per chunk, for
            // every 32-row block of it in turn.
            for (int64_t n0 = nb; n0 < ne; n0 += 32) {
                const uint16_t* b0 = bp + (n0 / 16) * KB * bkbs;
                for (int64_t m0 = 0; m0 < rn; m0 += 32) {
                    const uint16_t* a0 = ap + (m0 / 16) * as;
                    start(n0 / 16, n0 / 16 + 1);
                    tile_block<PARTS, 2, B_LO>(a0, a0 + as, b0, b0 + KB * bkbs, KB, lo(n0 / 16), lo(n0 / 16 + 1));
                    store_block(Cc + m0 * ldc + n0, ldc, std::min<int64_t>(32, rn - m0), std::min<int64_t>(32, ne - n0), acc);
                }
            }
        }
        if (!epi) continue;
        for (int64_t m = r0; m < r0 + rn; ++m) {
            float* cr = C + m * ldc;
            conv_epi_avx512(cr + nb, res ? res + m * ldc + nb : nullptr, ne - nb, *e);
        }
    }
    _tile_release();
    return true;
}

}  // namespace

bool AmxGemm::run(const float* A, int64_t lda, const uint16_t* bp, const float* bias, float* C, int64_t ldc,
                  float* scratch, int64_t n0, int64_t n1, const float* res, const ConvEpi* e, int64_t m0,
                  int64_t m1) const {
    if (n1 < 0 || n1 > N_) n1 = N_;
    if (m1 < 0 || m1 > M_) m1 = M_;
    if (n0 >= n1 || m0 >= m1) return true;
    const int64_t M = m1 - m0;
    A += m0 * lda, C += m0 * ldc;
    if (res) res += m0 * ldc;
    if (parts_ == 2) return gemm<2, false>(M, K_, N_, mc_, Kp_, A, lda, bp, bias, C, ldc, scratch, n0, n1, res, e);
    return b_lo_ ? gemm<3, true>(M, K_, N_, mc_, Kp_, A, lda, bp, bias, C, ldc, scratch, n0, n1, res, e)
                 : gemm<3, false>(M, K_, N_, mc_, Kp_, A, lda, bp, bias, C, ldc, scratch, n0, n1, res, e);
}

}  // namespace jiffy::kernels
