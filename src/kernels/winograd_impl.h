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

// Tiles [b0, b0 + nt) of the block: V[t][c][i] (t < the kind's points, i < nb) for tile b0 + i;
// the columns [nt, nt rounded up to NR) are zeroed (the GEMM computes them and they are dropped).
// D (WinoArgs::kind): 0 3x3 (alpha^2 points), 1 1x3 (tiles 1 x m along a row, alpha points),
// 2 3x1 (tiles m x 1 down a column, alpha points; a vector holds VL adjacent columns, no shuffles).
// TR (transposed orientation): V[t] holds the nt tiles in balanced row blocks of <= MR tiles,
// block [r0, r1) at r0 * C as C x (r1 - r0), so tile i of channel c sits at
// r0 * C + c * (r1 - r0) + i - r0 (a vector's lanes stored in runs within one block, masked).
template <int m, int D = 0, bool TR = false>
void input_transform(const WinoArgs& a, const float* x, int64_t b0, int64_t nt, float* vb, float* rb) {
    constexpr int A = m + 2;
    constexpr int NP = D == 0 ? A * A : A;  // transform points
    constexpr int KH = D == 1 ? 1 : A;      // input rows per tile row
    constexpr int SH = D == 1 ? 1 : m;      // output rows per tile row
    const Conv2DGeom& g = a.g;
    const int64_t C = g.C, nb = a.nb, TW = a.TW, RW = a.RW;
    const int64_t ty0 = b0 / TW, ty1 = (b0 + nt - 1) / TW;
    const int64_t ntp = TR ? nt : std::min(nb, (nt + NR - 1) / NR * NR);
    const int64_t nbk = (nt + MR - 1) / MR;
    for (int64_t c = 0; c < C; ++c) {
        const float* xc = x + c * g.H * g.W;
        for (int64_t ty = ty0; ty <= ty1; ++ty) {
            for (int r = 0; r < KH; ++r) {  // the padded input rows of this tile row
                const int64_t iy = ty * SH - g.ph + r;
                float* row = rb + r * RW + g.pw;
                if (iy >= 0 && iy < g.H)
                    copy_n(row, xc + iy * g.W, g.W);
                else
                    zero_n(row, g.W);
            }
            const int64_t tx_lo = ty == ty0 ? b0 - ty * TW : 0;
            const int64_t tx_hi = ty == ty1 ? b0 + nt - ty * TW : TW;
            for (int64_t tx = tx_lo; tx < tx_hi; tx += VL) {
                const int64_t n = std::min<int64_t>(VL, tx_hi - tx);
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
                auto put = [&](int t, V v) {  // point t of the VL tiles
                    if constexpr (TR) {
                        float* p = vb + t * C * nb;
                        for (int k = 0; k < ns; ++k) st_m(p + off[k], v, msk[k]);
                    } else {
                        float* p = dst + t * C * nb;
                        if (n == VL)
                            st(p, v);
                        else
                            st_n(p, v, n);
                    }
                };
                if constexpr (D == 1) {
                    V d[A], z[A];
                    deinterleave<m>(rb + m * tx, d);
                    WinoTf<m>::in(d, z);
#pragma GCC unroll 8
                    for (int j = 0; j < A; ++j) put(j, z[j]);
                } else if constexpr (D == 2) {
                    V d[A], z[A];
#pragma GCC unroll 8
                    for (int r = 0; r < A; ++r) d[r] = ld(rb + r * RW + tx);
                    WinoTf<m>::in(d, z);
#pragma GCC unroll 8
                    for (int i = 0; i < A; ++i) put(i, z[i]);
                } else {
                    V h[A][A];  // h[r][j]: row r transformed along x
#pragma GCC unroll 8
                    for (int r = 0; r < A; ++r) {
                        V d[A];
                        deinterleave<m>(rb + r * RW + m * tx, d);
                        WinoTf<m>::in(d, h[r]);
                    }
#pragma GCC unroll 8
                    for (int j = 0; j < A; ++j) {
                        V col[A], z[A];
#pragma GCC unroll 8
                        for (int r = 0; r < A; ++r) col[r] = h[r][j];
                        WinoTf<m>::in(col, z);
#pragma GCC unroll 8
                        for (int i = 0; i < A; ++i) put(i * A + j, z[i]);
                    }
                }
            }
        }
        if (ntp > nt)
            for (int t = 0; t < NP; ++t)
                zero_n(vb + (t * C + c) * nb + nt, ntp - nt);  // inline: a call per (t, c) cost more
    }
}

// Y for tiles [b0, b0 + nt) from Mt[t][mo][i] (+ bias), then the epilogue.
template <int m, int D = 0>
void output_transform(const WinoArgs& a, const float* mb, int64_t b0, int64_t nt, const float* bias,
                      const float* res, float* y, const ConvEpi& e) {
    constexpr int A = m + 2;
    constexpr int SH = D == 1 ? 1 : m;  // output rows per tile row
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
                if constexpr (D == 2) {  // tile column tx is output column tx: rows ty m + i
                    V row[A], o[m];
#pragma GCC unroll 8
                    for (int r = 0; r < A; ++r) row[r] = ld(src + r * M * nb);
                    WinoTf<m>::out(row, o);
                    for (int i = 0; i < m; ++i) {
                        const int64_t oy = ty * m + i;
                        if (oy >= OH) break;
                        float* yr = ym + oy * OW + tx;
                        if (n == VL)
                            st(yr, o[i] + bv);
                        else
                            st_n(yr, o[i] + bv, n);
                        if (epi) epi_row(yr, rm ? rm + oy * OW + tx : nullptr, n, e);
                    }
                    continue;
                }
                V o[m][m];  // o[i][j]: output row i, column j of each tile (D 1: row 0 only)
                if constexpr (D == 1) {
                    V row[A];
#pragma GCC unroll 8
                    for (int b = 0; b < A; ++b) row[b] = ld(src + b * M * nb);
                    WinoTf<m>::out(row, o[0]);
#pragma GCC unroll 8
                    for (int j = 0; j < m; ++j) o[0][j] += bv;
                } else {
                    V s[A][m];  // s[a][j]: row a of the tile transformed along x
#pragma GCC unroll 8
                    for (int r = 0; r < A; ++r) {
                        V row[A];
#pragma GCC unroll 8
                        for (int b = 0; b < A; ++b) row[b] = ld(src + (r * A + b) * M * nb);
                        WinoTf<m>::out(row, s[r]);
                    }
#pragma GCC unroll 8
                    for (int j = 0; j < m; ++j) {
                        V col[A], oc[m];
#pragma GCC unroll 8
                        for (int r = 0; r < A; ++r) col[r] = s[r][j];
                        WinoTf<m>::out(col, oc);
#pragma GCC unroll 8
                        for (int i = 0; i < m; ++i) o[i][j] = oc[i] + bv;
                    }
                }
                const int64_t ox = m * tx, valid = std::min<int64_t>(m * n, OW - ox);
                for (int i = 0; i < SH; ++i) {
                    const int64_t oy = ty * SH + i;
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
template <int m, int D = 0>
void output_transform_t(const WinoArgs& a, const float* mb, int64_t b0, int64_t nt, float* yt) {
    constexpr int A = m + 2;
    constexpr int TH_ = D == 1 ? 1 : m, TW_ = D == 2 ? 1 : m;  // tile rows, columns
    const Conv2DGeom& g = a.g;
    const int64_t Mp = a.Mpad, nb = a.nb, TW = a.TW, OH = g.OH, OW = g.OW;
    for (int64_t i = 0; i < nt; ++i) {
        const int64_t q = b0 + i, ty = q / TW, tx = q - ty * TW;
        const int64_t oy0 = ty * TH_, ox0 = tx * TW_;
        const int64_t vh = std::min<int64_t>(TH_, OH - oy0), vw = std::min<int64_t>(TW_, OW - ox0);
        for (int64_t mo = 0; mo < Mp; mo += VL) {
            const float* src = mb + i * Mp + mo;
            if constexpr (D != 0) {  // one line of m outputs: along x (D 1) or y (D 2)
                V row[A], oc[m];
#pragma GCC unroll 8
                for (int b = 0; b < A; ++b) row[b] = ld(src + b * nb * Mp);
                WinoTf<m>::out(row, oc);
                const int64_t cnt = D == 1 ? vw : vh, step = D == 1 ? Mp : OW * Mp;
                float* dst = yt + (oy0 * OW + ox0) * Mp + mo;
#pragma GCC unroll 8
                for (int k = 0; k < m; ++k)
                    if (k < cnt) st(dst + k * step, oc[k]);
                continue;
            }
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

// ---- 1-D kinds, "flat": a vector holds VL consecutive tiles of the block whatever tile row
// they are in (a plane of 8 columns fills a 16-lane vector with two tile rows), no per-row calls.

// The lanes of a chunk of tiles [q0, q0 + n) by tile row: segment s covers lanes [ls, le) of tile
// row ty, lane ls holding tile column tx.
struct WinoSeg {
    int ls, le;
    int64_t ty, tx;
};
inline int wino_segs(int64_t q0, int64_t n, int64_t TW, WinoSeg* sg) {
    int ns = 0;
    for (int64_t l = 0; l < n;) {
        const int64_t q = q0 + l, ty = q / TW, tx = q - ty * TW, run = std::min(n - l, TW - tx);
        sg[ns++] = {int(l), int(l + run), ty, tx};
        l += run;
    }
    return ns;
}

// V for tiles [b0, b0 + nt) of a 1-D kind (as input_transform), chunk by chunk of VL tiles (the
// lane bookkeeping once per chunk), every channel per chunk. D 1 (1x3, pw 1, W = TW m): tile q
// reads the plane at q m - 1 - ph W (rows follow each other), de-interleaved straight from x; the
// lanes at a row's start (d[0], the left pad) and end (d[m + 1], the right pad) are masked to
// zero; chunks reading outside the plane (pad rows, the tensor's ends) go through a zero-filled
// copy of their window. D 2 (3x1): rows ty m + r of each tile row's lanes read straight from x
// under lane masks (zero outside the plane).
template <int m, int D, bool TR>
void input_transform_flat(const WinoArgs& a, const float* x, int64_t b0, int64_t nt, float* vb) {
    constexpr int A = m + 2;
    constexpr int WIN = m * VL + 2;  // D 1: floats a chunk reads
    const Conv2DGeom& g = a.g;
    const int64_t C = g.C, nb = a.nb, TW = a.TW, H = g.H, W = g.W, HW = H * W;
    const int64_t ntp = TR ? nt : std::min(nb, (nt + NR - 1) / NR * NR);
    const int64_t nbk = (nt + MR - 1) / MR;
    for (int64_t k = 0; k < nt; k += VL) {
        const int64_t n = std::min<int64_t>(VL, nt - k), q0 = b0 + k;
        // D 1: the row start / end lanes; D 2: the lane segments per tile row.
        VI keep0, keep1;
        int64_t s0 = 0;
        bool inside = true;
        WinoSeg sg[VL];
        int nsg = 0;
        if constexpr (D == 1) {
            int64_t tx = q0 % TW;
            for (int l = 0; l < VL; ++l) {
                keep0[l] = tx == 0 ? 0 : -1;
                keep1[l] = tx == TW - 1 ? 0 : -1;
                if (++tx == TW) tx = 0;
            }
            s0 = q0 * m - 1 - g.ph * W;
            inside = s0 >= 0 && s0 + WIN + 2 * VL <= HW;  // (ld reads whole vectors)
        } else {
            nsg = wino_segs(q0, n, TW, sg);
        }
        // TR: the lanes in runs within one row block; run s at off[s] + c * rs[s] + lane.
        int64_t off[VL], rs[VL];
        LaneMask msk[VL];
        int ns = 0;
        if constexpr (TR)
            for (int64_t l = 0; l < n; ++ns) {
                const int64_t q = k + l, blk = ((q + 1) * nbk + nt - 1) / nt - 1;
                const int64_t r0 = blk * nt / nbk, r1 = (blk + 1) * nt / nbk;
                const int64_t run = std::min(n - l, r1 - q);
                off[ns] = r0 * C + q - r0 - l;
                rs[ns] = r1 - r0;
                msk[ns] = lane_mask(l, l + run);
                l += run;
            }
        for (int64_t c = 0; c < C; ++c) {
            const float* xc = x + c * HW;
            V d[A], z[A];
            if constexpr (D == 1) {
                if (inside) {
                    deinterleave<m>(xc + s0, d);
                } else {
                    float win[WIN + 2 * VL];
                    for (int i = 0; i < WIN + 2 * VL; ++i) {
                        const int64_t j = s0 + i;
                        win[i] = j >= 0 && j < HW ? xc[j] : 0.0f;
                    }
                    deinterleave<m>(win, d);
                }
                d[0] = (V)((VI)d[0] & keep0);
                d[A - 1] = (V)((VI)d[A - 1] & keep1);
            } else {
#pragma GCC unroll 8
                for (int r = 0; r < A; ++r) d[r] = V{};
                for (int si = 0; si < nsg; ++si) {
                    const WinoSeg& q = sg[si];
                    // lane l reads column tx + l - ls - pw of row ty m + r - ph
                    const int64_t sh = q.ls + g.pw - q.tx;  // lane of column 0
                    const LaneMask mk = lane_mask(std::max<int64_t>(q.ls, sh), std::min<int64_t>(q.le, sh + W));
#pragma GCC unroll 8
                    for (int r = 0; r < A; ++r) {
                        const int64_t iy = q.ty * m + r - g.ph;
                        if (iy >= 0 && iy < H) d[r] += ld_m(xc + iy * W - sh, mk);
                    }
                }
            }
            WinoTf<m>::in(d, z);
            if constexpr (TR) {
                for (int si = 0; si < ns; ++si)
#pragma GCC unroll 8
                    for (int t = 0; t < A; ++t) st_m(vb + t * C * nb + off[si] + c * rs[si], z[t], msk[si]);
            } else {
                float* dst = vb + c * nb + k;
#pragma GCC unroll 8
                for (int t = 0; t < A; ++t) {
                    if (n == VL)
                        st(dst + t * C * nb, z[t]);
                    else
                        st_n(dst + t * C * nb, z[t], n);
                }
            }
        }
    }
    if (ntp > nt)
        for (int64_t c = 0; c < C; ++c)
            for (int t = 0; t < A; ++t) zero_n(vb + (t * C + c) * nb + nt, ntp - nt);
}

// Y for tiles [b0, b0 + nt) of a 1-D kind (flat, normal orientation) from Mt[t][mo][i] + bias,
// chunk by chunk of VL tiles, every output channel per chunk; then the epilogue once per channel
// over the block's pixels (per row segment at partial tile rows).
template <int m, int D>
void output_transform_flat(const WinoArgs& a, const float* mb, int64_t b0, int64_t nt, const float* bias,
                           const float* res, float* y, const ConvEpi& e) {
    constexpr int A = m + 2;
    const Conv2DGeom& g = a.g;
    const int64_t M = g.M, nb = a.nb, TW = a.TW, OH = g.OH, OW = g.OW, P = OH * OW;
    for (int64_t k = 0; k < nt; k += VL) {
        const int64_t n = std::min<int64_t>(VL, nt - k), q0 = b0 + k;
        WinoSeg sg[VL];
        const int nsg = D == 2 ? wino_segs(q0, n, TW, sg) : 0;
        for (int64_t mo = 0; mo < M; ++mo) {
            const V bv = bc(bias ? bias[mo] : 0.0f);
            float* ym = y + mo * P;
            const float* src = mb + mo * nb + k;
            V row[A], o[m];
#pragma GCC unroll 8
            for (int b = 0; b < A; ++b) row[b] = ld(src + b * M * nb);
            WinoTf<m>::out(row, o);
#pragma GCC unroll 8
            for (int j = 0; j < m; ++j) o[j] += bv;
            if constexpr (D == 1) {  // OW = TW m: tile q's pixels are q m .. q m + m - 1
                V qv[m];
                interleave<m>(o, qv);
                float* yr = ym + q0 * m;
                if (n == VL) {
#pragma GCC unroll 8
                    for (int j = 0; j < m; ++j) st(yr + j * VL, qv[j]);
                } else {
#pragma GCC unroll 8
                    for (int j = 0; j < m; ++j) {
                        const int64_t cnt = std::min<int64_t>(VL, m * n - j * VL);
                        if (cnt <= 0) break;
                        st_n(yr + j * VL, qv[j], cnt);
                    }
                }
            } else {  // output rows ty m + i, columns tx of each segment
                for (int si = 0; si < nsg; ++si) {
                    const WinoSeg& q = sg[si];
                    const LaneMask mk = lane_mask(q.ls, q.le);
#pragma GCC unroll 8
                    for (int i = 0; i < m; ++i)
                        if (q.ty * m + i < OH) st_m(ym + (q.ty * m + i) * OW + q.tx - q.ls, o[i], mk);
                }
            }
        }
    }
    if (res == nullptr && e.act == ConvAct::kNone) return;
    const int64_t ty0 = b0 / TW, ty1 = (b0 + nt - 1) / TW;
    const bool whole_rows = b0 == ty0 * TW && (b0 + nt == a.T || (b0 + nt) % TW == 0);
    for (int64_t mo = 0; mo < M; ++mo) {
        float* ym = y + mo * P;
        const float* rm = res ? res + mo * P : nullptr;
        if (D == 1) {
            epi_row(ym + b0 * m, rm ? rm + b0 * m : nullptr, nt * m, e);
        } else if (whole_rows) {
            const int64_t p0 = ty0 * m * OW, p1 = std::min(OH, (ty1 + 1) * m) * OW;
            epi_row(ym + p0, rm ? rm + p0 : nullptr, p1 - p0, e);
        } else {
            for (int64_t ty = ty0; ty <= ty1; ++ty) {
                const int64_t lo = ty == ty0 ? b0 - ty * TW : 0, hi = ty == ty1 ? b0 + nt - ty * TW : TW;
                for (int64_t oy = ty * m; oy < std::min(OH, ty * m + m); ++oy)
                    epi_row(ym + oy * OW + lo, rm ? rm + oy * OW + lo : nullptr, hi - lo, e);
            }
        }
    }
}

// Transposed orientation: Y's pixels of tile rows [tr0, tr1) from the P x Mpad Yt (trans_out:
// bias, residual, activation).
inline void tile_rows_out(const WinoArgs& a, const float* yt, const float* bias, const float* res, float* y,
                          const ConvEpi& e, int64_t tr0, int64_t tr1) {
    const int64_t th = a.kind == 1 ? 1 : a.m, OW = a.g.OW;  // pixel rows per tile row
    trans_out_fn(e.act)(yt, a.Mpad, a.g.OH * OW, 0, a.g.M, bias, res, y, e, tr0 * th * OW,
                        std::min(tr1 * th, a.g.OH) * OW);
}

// The transposed orientation (WinoArgs::trans): per block, V[t]^T (nt x C) . U[t]^T (C x Mpad)
// with the tiles as the microkernel's rows and NR output channels on its lanes, the output
// transform into the pixel-major Yt, and at the end Y = Yt^T + bias (+ res), activation.
template <int m, int D>
void wino_run_t(const WinoArgs& a, const float* x, const float* wp, const float* bias, const float* res,
                float* y, float* scratch, const ConvEpi& e) {
    constexpr int A = m + 2;
    constexpr int NP = D == 0 ? A * A : A;  // transform points
    const Conv2DGeom& g = a.g;
    const int64_t C = g.C, Mp = a.Mpad, nb = a.nb, P = g.OH * g.OW;
    float* vb = scratch;               // NP x C x nb (row blocks)
    float* mb = vb + NP * C * nb;      // NP x nb x Mp
    float* yt = mb + NP * nb * Mp;     // P x Mp
    float* rb = yt + P * Mp + 64;      // alpha x RW padded input rows
    if (a.yt) yt = a.yt;               // a tile split's shared output
    std::memset(rb, 0, size_t(A * a.RW) * sizeof(float));
    const bool wpf = NP * C * Mp > 262144;  // U past L2
    const float* uend = wp + NP * C * Mp;
    const ConvEpi none{};
    const int64_t tb = a.t1 > 0 ? a.t0 : 0, te = a.t1 > 0 ? a.t1 : a.T;
    // Y's pixel rows go out as soon as every tile of theirs is done, their Yt rows still in L2
    // (before, all of Yt at the end: the line detector's 32-channel 160x160 layers' 3.3 MB Yt made
    // a round trip through L3). Only the tile rows wholly inside [tb, te): those a tile split
    // shares between two parts are left to the split's finish_rows.
    int64_t next_tr = (tb + a.TW - 1) / a.TW;
    const int64_t end_tr = te / a.TW;
    for (int64_t b0 = tb; b0 < te; b0 += nb) {
        const int64_t nt = std::min(nb, te - b0);
        if (D != 0 && a.flat) {
            input_transform_flat<m, D, true>(a, x, b0, nt, vb);
        } else {
            input_transform<m, D, true>(a, x, b0, nt, vb, rb);
        }
        const int64_t nbk = (nt + MR - 1) / MR;
        for (int t = 0; t < NP; ++t) {
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
        output_transform_t<m, D>(a, mb, b0, nt, yt);
        if (const int64_t done_tr = std::min(end_tr, (b0 + nt) / a.TW); done_tr > next_tr) {
            tile_rows_out(a, yt, bias, res, y, e, next_tr, done_tr);
            next_tr = done_tr;
        }
    }
}

template <int m, int D>
void wino_run(const WinoArgs& a, const float* x, const float* wp, const float* bias, const float* res,
              float* y, float* scratch, const ConvEpi& e) {
    constexpr int A = m + 2;
    constexpr int NP = D == 0 ? A * A : A;  // transform points
    const Conv2DGeom& g = a.g;
    const int64_t C = g.C, M = g.M, nb = a.nb;
    const int64_t nbk = (M + MR - 1) / MR;
    float* vb = scratch;                // NP x C x nb
    float* mb = vb + NP * C * nb;       // NP x M x nb (+ slack)
    float* rb = mb + NP * M * nb + 64;  // alpha x RW padded input rows
    std::memset(rb, 0, size_t(A * a.RW) * sizeof(float));
    const ConvEpi none{};
    const int64_t tb = a.t1 > 0 ? a.t0 : 0, te = a.t1 > 0 ? a.t1 : a.T;
    for (int64_t b0 = tb; b0 < te; b0 += nb) {
        const int64_t nt = std::min(nb, te - b0);
        const bool flat = D != 0 && a.flat;
        if (flat) {
            input_transform_flat<m, D, false>(a, x, b0, nt, vb);
        } else {
            input_transform<m, D>(a, x, b0, nt, vb, rb);
        }
        const int64_t np = (nt + NR - 1) / NR;
        for (int t = 0; t < NP; ++t) {
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
        if (flat)
            output_transform_flat<m, D>(a, mb, b0, nt, bias, res, y, e);
        else
            output_transform<m, D>(a, mb, b0, nt, bias, res, y, e);
    }
}

template <int D>
void wino_kind(const WinoArgs& a, const float* x, const float* wp, const float* bias, const float* res, float* y,
               float* scratch, const ConvEpi& e) {
    if (a.trans) {
        if (a.m == 4)
            wino_run_t<4, D>(a, x, wp, bias, res, y, scratch, e);
        else
            wino_run_t<2, D>(a, x, wp, bias, res, y, scratch, e);
    } else if (a.m == 4) {
        wino_run<4, D>(a, x, wp, bias, res, y, scratch, e);
    } else {
        wino_run<2, D>(a, x, wp, bias, res, y, scratch, e);
    }
}

}  // namespace

void JIFFY_CONV_CAT(winograd_, JIFFY_CONV_SUFFIX)(const WinoArgs& a, const float* x, const float* wp,
                                                  const float* bias, const float* res, float* y,
                                                  float* scratch, const ConvEpi& e) {
    if (a.out_only) {  // a tile split's shared tile rows [tr0, tr1) (transposed)
        tile_rows_out(a, a.yt, bias, res, y, e, a.tr0, a.tr1);
        return;
    }
    if (a.kind == 1)
        wino_kind<1>(a, x, wp, bias, res, y, scratch, e);
    else if (a.kind == 2)
        wino_kind<2>(a, x, wp, bias, res, y, scratch, e);
    else
        wino_kind<0>(a, x, wp, bias, res, y, scratch, e);
}

}  // namespace jiffy::kernels
