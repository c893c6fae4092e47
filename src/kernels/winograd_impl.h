// The Winograd kernels (winograd.h), written once over the vector type of conv_impl.h and compiled
// per ISA: the includer defines JIFFY_CONV_VL, JIFFY_CONV_SUFFIX and JIFFY_CONV_NO_ENTRY_POINTS,
// includes kernels/conv_impl.h (for V, ld/st, the microkernel and the epilogue) and then this
// file, which exports winograd_<suffix>.
#include "kernels/winograd.h"

namespace jiffy::kernels {
namespace {

// Transforms of one alpha-vector (a row or a column of a tile), per tile size m.
// Input: z = B^T d. Output: o = A^T s. Points 0, +-1, +-2 (F(4,3)) and 0, +-1 (F(2,3)).
template <int m>
struct WinoTf;

template <>
struct WinoTf<2> {
    static constexpr int A = 4;
    static inline void in(const V (&d)[A], V (&z)[A]) {
        z[0] = d[0] - d[2];
        z[1] = d[1] + d[2];
        z[2] = d[2] - d[1];
        z[3] = d[1] - d[3];
    }
    static inline void out(const V (&s)[A], V (&o)[2]) {
        o[0] = s[0] + s[1] + s[2];
        o[1] = s[1] - s[2] - s[3];
    }
};

template <>
struct WinoTf<4> {
    static constexpr int A = 6;
    static inline void in(const V (&d)[A], V (&z)[A]) {
        const V four = bc(4.0f), five = bc(5.0f), two = bc(2.0f);
        z[0] = four * d[0] - five * d[2] + d[4];
        const V a = d[3] + d[4], b = d[1] + d[2];
        z[1] = a - four * b;
        const V c = d[4] - d[3], e = d[1] - d[2];
        z[2] = c + four * e;
        const V f = d[4] - d[2], h = d[3] - d[1];
        z[3] = f + two * h;
        z[4] = f - two * h;
        z[5] = four * d[1] - five * d[3] + d[5];
    }
    static inline void out(const V (&s)[A], V (&o)[4]) {
        const V p = s[1] + s[2], q = s[1] - s[2], r = s[3] + s[4], t = s[3] - s[4];
        o[0] = s[0] + p + r;
        o[1] = q + bc(2.0f) * t;
        o[2] = p + bc(4.0f) * r;
        o[3] = q + bc(8.0f) * t + s[5];
    }
};

inline VI lanes_from(int first, int step) {
    VI v;
    for (int i = 0; i < VL; ++i) v[i] = first + step * i;
    return v;
}

// d[cc][l] = p[m * l + cc] for cc < alpha, l < VL (VL tiles starting at p, m columns apart).
template <int m>
inline void deinterleave(const float* p, V (&d)[m + 2]) {
    const VI even = lanes_from(0, 2), odd = lanes_from(1, 2), next = lanes_from(1, 1);
    if constexpr (m == 2) {
        const V v0 = ld(p), v1 = ld(p + VL);
        d[0] = __builtin_shuffle(v0, v1, even);
        d[1] = __builtin_shuffle(v0, v1, odd);
    } else {
        const V v0 = ld(p), v1 = ld(p + VL), v2 = ld(p + 2 * VL), v3 = ld(p + 3 * VL);
        const V e01 = __builtin_shuffle(v0, v1, even), o01 = __builtin_shuffle(v0, v1, odd);
        const V e23 = __builtin_shuffle(v2, v3, even), o23 = __builtin_shuffle(v2, v3, odd);
        d[0] = __builtin_shuffle(e01, e23, even);
        d[1] = __builtin_shuffle(o01, o23, even);
        d[2] = __builtin_shuffle(e01, e23, odd);
        d[3] = __builtin_shuffle(o01, o23, odd);
    }
    // The last two columns are the first two of the next tile: shift by one lane.
    d[m] = __builtin_shuffle(d[0], bc(p[m * VL]), next);
    d[m + 1] = __builtin_shuffle(d[1], bc(p[m * VL + 1]), next);
}

// Output row from m per-tile column vectors: q[k] holds pixels m * VL * k / m ... of the row,
// i.e. pixel m * l + j of the VL tiles is o[j][l].
template <int m>
inline void interleave(const V (&o)[m], V (&q)[m]) {
    VI lo, hi;
    for (int i = 0; i < VL / 2; ++i) {
        lo[2 * i] = i;
        lo[2 * i + 1] = i + VL;
        hi[2 * i] = i + VL / 2;
        hi[2 * i + 1] = i + VL / 2 + VL;
    }
    if constexpr (m == 2) {
        q[0] = __builtin_shuffle(o[0], o[1], lo);
        q[1] = __builtin_shuffle(o[0], o[1], hi);
    } else {
        const V a = __builtin_shuffle(o[0], o[2], lo), b = __builtin_shuffle(o[0], o[2], hi);
        const V c = __builtin_shuffle(o[1], o[3], lo), d = __builtin_shuffle(o[1], o[3], hi);
        q[0] = __builtin_shuffle(a, c, lo);
        q[1] = __builtin_shuffle(a, c, hi);
        q[2] = __builtin_shuffle(b, d, lo);
        q[3] = __builtin_shuffle(b, d, hi);
    }
}

// Lanes of v under m to p (lane l to p[l]; the others are not touched).
inline void st_m(float* p, V v, LaneMask m) {
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
    _mm512_mask_storeu_ps(p, m, (__m512)v);
#elif JIFFY_CONV_VL == 8 && defined(__AVX2__)
    _mm256_maskstore_ps(p, m, (__m256)v);
#else
    for (int64_t l = m.lo; l < m.hi; ++l) p[l] = v[l];
#endif
}

// Tiles [b0, b0 + nt) of the block: V[t][c][i] (t < alpha^2, i < nb) for tile b0 + i; the
// columns [nt, nt rounded up to NR) are zeroed (the GEMM computes them and they are dropped).
// TR (transposed orientation): V[t] holds the nt tiles in balanced row blocks of <= MR tiles,
// block [r0, r1) at r0 * C as C x (r1 - r0), so tile i of channel c sits at
// r0 * C + c * (r1 - r0) + i - r0 (a vector's lanes stored in runs within one block, masked).
template <int m, bool TR = false>
void input_transform(const WinoArgs& a, const float* x, int64_t b0, int64_t nt, float* vb, float* rb) {
    constexpr int A = m + 2;
    const Conv2DGeom& g = a.g;
    const int64_t C = g.C, nb = a.nb, TW = a.TW, RW = a.RW;
    const int64_t ty0 = b0 / TW, ty1 = (b0 + nt - 1) / TW;
    const int64_t ntp = TR ? nt : std::min(nb, (nt + NR - 1) / NR * NR);
    const int64_t nbk = (nt + MR - 1) / MR;
    for (int64_t c = 0; c < C; ++c) {
        const float* xc = x + c * g.H * g.W;
        for (int64_t ty = ty0; ty <= ty1; ++ty) {
            for (int r = 0; r < A; ++r) {  // the padded input rows of this tile row
                const int64_t iy = ty * m - g.ph + r;
                float* row = rb + r * RW + g.pw;
                if (iy >= 0 && iy < g.H)
                    copy_n(row, xc + iy * g.W, g.W);
                else
                    std::memset(row, 0, size_t(g.W) * sizeof(float));
            }
            const int64_t tx_lo = ty == ty0 ? b0 - ty * TW : 0;
            const int64_t tx_hi = ty == ty1 ? b0 + nt - ty * TW : TW;
            for (int64_t tx = tx_lo; tx < tx_hi; tx += VL) {
                const int64_t n = std::min<int64_t>(VL, tx_hi - tx);
                V h[A][A];  // h[r][j]: row r transformed along x
#pragma GCC unroll 8
                for (int r = 0; r < A; ++r) {
                    V d[A];
                    deinterleave<m>(rb + r * RW + m * tx, d);
                    WinoTf<m>::in(d, h[r]);
                }
                const int64_t q0 = ty * TW + tx - b0;
                float* dst = vb + c * nb + q0;
                // TR: the lanes in runs within one row block; lane l of run s goes to off[s] + l.
                int64_t off[VL];
                LaneMask msk[VL];
                int ns = 0;
                if constexpr (TR)
                    for (int64_t l = 0; l < n; ++ns) {
                        const int64_t q = q0 + l, blk = ((q + 1) * nbk + nt - 1) / nt - 1;
                        const int64_t r0 = blk * nt / nbk, r1 = (blk + 1) * nt / nbk;
                        const int64_t run = std::min(n - l, r1 - q);
                        off[ns] = r0 * C + c * (r1 - r0) + q - r0 - l;
                        msk[ns] = lane_mask(l, l + run);
                        l += run;
                    }
#pragma GCC unroll 8
                for (int j = 0; j < A; ++j) {
                    V col[A], z[A];
#pragma GCC unroll 8
                    for (int r = 0; r < A; ++r) col[r] = h[r][j];
                    WinoTf<m>::in(col, z);
#pragma GCC unroll 8
                    for (int i = 0; i < A; ++i) {
                        if constexpr (TR) {
                            float* p = vb + (i * A + j) * C * nb;
                            for (int k = 0; k < ns; ++k) st_m(p + off[k], z[i], msk[k]);
                        } else {
                            float* p = dst + (i * A + j) * C * nb;
                            if (n == VL)
                                st(p, z[i]);
                            else
                                st_n(p, z[i], n);
                        }
                    }
                }
            }
        }
        if (ntp > nt)
            for (int t = 0; t < A * A; ++t)
                std::memset(vb + (t * C + c) * nb + nt, 0, size_t(ntp - nt) * sizeof(float));
    }
}

// Y for tiles [b0, b0 + nt) from Mt[t][mo][i] (+ bias), then the epilogue.
template <int m>
void output_transform(const WinoArgs& a, const float* mb, int64_t b0, int64_t nt, const float* bias,
                      const float* res, float* y, const ConvEpi& e) {
    constexpr int A = m + 2;
    const Conv2DGeom& g = a.g;
    const int64_t M = g.M, nb = a.nb, TW = a.TW, OH = g.OH, OW = g.OW, P = OH * OW;
    const int64_t ty0 = b0 / TW, ty1 = (b0 + nt - 1) / TW;
    const bool epi = res != nullptr || e.act != ConvAct::kNone;
    for (int64_t mo = 0; mo < M; ++mo) {
        const V bv = bc(bias ? bias[mo] : 0.0f);
        float* ym = y + mo * P;
        const float* rm = res ? res + mo * P : nullptr;
        for (int64_t ty = ty0; ty <= ty1; ++ty) {
            const int64_t tx_lo = ty == ty0 ? b0 - ty * TW : 0;
            const int64_t tx_hi = ty == ty1 ? b0 + nt - ty * TW : TW;
            for (int64_t tx = tx_lo; tx < tx_hi; tx += VL) {
                const int64_t n = std::min<int64_t>(VL, tx_hi - tx);
                const float* src = mb + mo * nb + (ty * TW + tx - b0);
                V s[A][m];  // s[a][j]: row a of the tile transformed along x
#pragma GCC unroll 8
                for (int r = 0; r < A; ++r) {
                    V row[A];
#pragma GCC unroll 8
                    for (int b = 0; b < A; ++b) row[b] = ld(src + (r * A + b) * M * nb);
                    WinoTf<m>::out(row, s[r]);
                }
                V o[m][m];  // o[i][j]: output row i, column j of each tile
#pragma GCC unroll 8
                for (int j = 0; j < m; ++j) {
                    V col[A], oc[m];
#pragma GCC unroll 8
                    for (int r = 0; r < A; ++r) col[r] = s[r][j];
                    WinoTf<m>::out(col, oc);
#pragma GCC unroll 8
                    for (int i = 0; i < m; ++i) o[i][j] = oc[i] + bv;
                }
                const int64_t ox = m * tx, valid = std::min<int64_t>(m * n, OW - ox);
                for (int i = 0; i < m; ++i) {
                    const int64_t oy = ty * m + i;
                    if (oy >= OH) break;
                    V q[m];
                    interleave<m>(o[i], q);
                    float* yr = ym + oy * OW + ox;
                    if (valid == m * VL) {
#pragma GCC unroll 8
                        for (int k = 0; k < m; ++k) st(yr + k * VL, q[k]);
                    } else {
#pragma GCC unroll 8
                        for (int k = 0; k < m; ++k) {
                            const int64_t cnt = std::min<int64_t>(VL, valid - k * VL);
                            if (cnt <= 0) break;
                            st_n(yr + k * VL, q[k], cnt);
                        }
                    }
                    if (epi) epi_row(yr, rm ? rm + oy * OW + ox : nullptr, valid, e);
                }
            }
        }
    }
}

// TR: Yt[p][mo] (pixel-major, Mpad channels per pixel) for the pixels of tiles [b0, b0 + nt),
// from Mt[t][i][mo] (nt x Mpad per t), vectorized across VL output channels; no bias.
template <int m>
void output_transform_t(const WinoArgs& a, const float* mb, int64_t b0, int64_t nt, float* yt) {
    constexpr int A = m + 2;
    const Conv2DGeom& g = a.g;
    const int64_t Mp = a.Mpad, nb = a.nb, TW = a.TW, OH = g.OH, OW = g.OW;
    for (int64_t i = 0; i < nt; ++i) {
        const int64_t q = b0 + i, ty = q / TW, tx = q - ty * TW;
        const int64_t oy0 = ty * m, ox0 = tx * m;
        const int64_t vh = std::min<int64_t>(m, OH - oy0), vw = std::min<int64_t>(m, OW - ox0);
        for (int64_t mo = 0; mo < Mp; mo += VL) {
            const float* src = mb + i * Mp + mo;
            V s[A][m];
#pragma GCC unroll 8
            for (int r = 0; r < A; ++r) {
                V row[A];
#pragma GCC unroll 8
                for (int b = 0; b < A; ++b) row[b] = ld(src + (r * A + b) * nb * Mp);
                WinoTf<m>::out(row, s[r]);
            }
#pragma GCC unroll 8
            for (int j = 0; j < m; ++j) {
                V col[A], oc[m];
#pragma GCC unroll 8
                for (int r = 0; r < A; ++r) col[r] = s[r][j];
                WinoTf<m>::out(col, oc);
                if (j < vw)
#pragma GCC unroll 8
                    for (int ii = 0; ii < m; ++ii)
                        if (ii < vh) st(yt + ((oy0 + ii) * OW + ox0 + j) * Mp + mo, oc[ii]);
            }
        }
    }
}

// The transposed orientation (WinoArgs::trans): per block, V[t]^T (nt x C) . U[t]^T (C x Mpad)
// with the tiles as the microkernel's rows and NR output channels on its lanes, the output
// transform into the pixel-major Yt, and at the end Y = Yt^T + bias (+ res), activation.
template <int m>
void wino_run_t(const WinoArgs& a, const float* x, const float* wp, const float* bias, const float* res,
                float* y, float* scratch, const ConvEpi& e) {
    constexpr int A = m + 2;
    const Conv2DGeom& g = a.g;
    const int64_t C = g.C, Mp = a.Mpad, nb = a.nb, P = g.OH * g.OW;
    float* vb = scratch;                    // alpha^2 x C x nb (row blocks)
    float* mb = vb + A * A * C * nb;        // alpha^2 x nb x Mp
    float* yt = mb + A * A * nb * Mp;       // P x Mp
    float* rb = yt + P * Mp + 64;           // alpha x RW padded input rows
    if (a.yt) yt = a.yt;                    // a tile split's shared output (Y left to finish_tiles)
    std::memset(rb, 0, size_t(A * a.RW) * sizeof(float));
    const bool wpf = A * A * C * Mp > 262144;  // U past L2
    const float* uend = wp + A * A * C * Mp;
    const ConvEpi none{};
    const int64_t tb = a.t1 > 0 ? a.t0 : 0, te = a.t1 > 0 ? a.t1 : a.T;
    for (int64_t b0 = tb; b0 < te; b0 += nb) {
        const int64_t nt = std::min(nb, te - b0);
        input_transform<m, true>(a, x, b0, nt, vb, rb);
        const int64_t nbk = (nt + MR - 1) / MR;
        for (int t = 0; t < A * A; ++t) {
            const float* ut = wp + t * Mp * C;
            const float* vt = vb + t * C * nb;
            float* mt = mb + t * nb * Mp;
            for (int64_t n0 = 0; n0 < Mp; n0 += NR)
                for (int64_t k0 = 0; k0 < C; k0 += a.kc) {
                    const int64_t kc = std::min(a.kc, C - k0);
                    const float* bp = ut + n0 * C + k0 * NR;
                    for (int64_t blk = 0; blk < nbk; ++blk) {
                        const int64_t r0 = blk * nt / nbk, r1 = (blk + 1) * nt / nbk, mr = r1 - r0;
                        // U is streamed once (from DRAM when large) in order: the first two blocks
                        // prefetch the next chunk (2 kc lines), one line per k step each.
                        const float* pa = blk < 2 && wpf && bp + kc * NR < uend ? bp + kc * NR + blk * 16 * kc : nullptr;
                        kUkr[size_t(mr - 1)](kc, vt + r0 * C + k0 * mr, bp, mt + r0 * Mp + n0, Mp, NR, k0 == 0,
                                             nullptr, false, nullptr, none, pa, nullptr, nullptr);
                    }
                }
        }
        output_transform_t<m>(a, mb, b0, nt, yt);
    }
    if (!a.yt) trans_out_fn(e.act)(yt, Mp, P, 0, g.M, bias, res, y, e);
}

template <int m>
void wino_run(const WinoArgs& a, const float* x, const float* wp, const float* bias, const float* res,
              float* y, float* scratch, const ConvEpi& e) {
    constexpr int A = m + 2;
    const Conv2DGeom& g = a.g;
    const int64_t C = g.C, M = g.M, nb = a.nb;
    const int64_t nbk = (M + MR - 1) / MR;
    float* vb = scratch;                   // alpha^2 x C x nb
    float* mb = vb + A * A * C * nb;       // alpha^2 x M x nb (+ slack)
    float* rb = mb + A * A * M * nb + 64;  // alpha x RW padded input rows
    std::memset(rb, 0, size_t(A * a.RW) * sizeof(float));
    const ConvEpi none{};
    const int64_t tb = a.t1 > 0 ? a.t0 : 0, te = a.t1 > 0 ? a.t1 : a.T;
    for (int64_t b0 = tb; b0 < te; b0 += nb) {
        const int64_t nt = std::min(nb, te - b0);
        input_transform<m>(a, x, b0, nt, vb, rb);
        const int64_t np = (nt + NR - 1) / NR;
        for (int t = 0; t < A * A; ++t) {
            const float* ut = wp + t * M * C;
            const float* vt = vb + t * C * nb;
            float* mt = mb + t * M * nb;
            for (int64_t k0 = 0; k0 < C; k0 += a.kc) {
                const int64_t kc = std::min(a.kc, C - k0);
                const bool first = k0 == 0;
                for (int64_t j = 0; j < np; ++j)
                    for (int64_t blk = 0; blk < nbk; ++blk) {
                        const int64_t r0 = blk * M / nbk, r1 = (blk + 1) * M / nbk, mr = r1 - r0;
                        kUkrInd[size_t(mr - 1)](kc, ut + r0 * C + k0 * mr, vt + j * NR, mt + r0 * nb + j * NR,
                                                nb, first, nullptr, false, nullptr, none, a.offs + k0, nullptr, nullptr,
                                                nullptr);
                    }
            }
        }
        output_transform<m>(a, mb, b0, nt, bias, res, y, e);
    }
}

}  // namespace

void JIFFY_CONV_CAT(winograd_, JIFFY_CONV_SUFFIX)(const WinoArgs& a, const float* x, const float* wp,
                                                  const float* bias, const float* res, float* y,
                                                  float* scratch, const ConvEpi& e) {
    if (a.out_only) {  // the second stage of a tile split (transposed): Y channels [m0, m1)
        trans_out_fn(e.act)(a.yt, a.Mpad, a.g.OH * a.g.OW, a.m0, a.m1, bias, res, y, e);
        return;
    }
    if (a.trans) {
        if (a.m == 4)
            wino_run_t<4>(a, x, wp, bias, res, y, scratch, e);
        else
            wino_run_t<2>(a, x, wp, bias, res, y, scratch, e);
    } else if (a.m == 4) {
        wino_run<4>(a, x, wp, bias, res, y, scratch, e);
    } else {
        wino_run<2>(a, x, wp, bias, res, y, scratch, e);
    }
}

}  // namespace jiffy::kernels
