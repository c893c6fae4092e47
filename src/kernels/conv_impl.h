// The conv kernels, written once over GCC/Clang vector extensions of VL floats and compiled per
// ISA: the includer defines JIFFY_CONV_VL (16 AVX-512, 8 AVX2, 4 portable), JIFFY_CONV_SUFFIX
// (the suffix of the exported entry points) and compiles with the ISA's -m flags. Everything
// except the three entry points has internal linkage, so the per-ISA copies never mix.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "kernels/conv.h"

#define JIFFY_CONV_CAT2(a, b) a##b
#define JIFFY_CONV_CAT(a, b) JIFFY_CONV_CAT2(a, b)

namespace jiffy::kernels {
namespace {

constexpr int VL = JIFFY_CONV_VL;
constexpr int NR = 2 * VL;
constexpr int MR = VL == 16 ? 12 : 6;
typedef float V __attribute__((vector_size(VL * sizeof(float))));
typedef int VI __attribute__((vector_size(VL * sizeof(int))));

inline V ld(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}
inline void st(float* p, V v) { std::memcpy(p, &v, sizeof(v)); }
inline V bc(float a) {  // broadcast (V{} + a would add 0: not an identity for a = -0)
    V v = {a};
    return __builtin_shuffle(v, VI{});
}
inline V vmax(V a, V b) { return a > b ? a : b; }
inline V vmin(V a, V b) { return a < b ? a : b; }

inline __attribute__((always_inline)) float act_s(float v, const ConvEpi& e) {
    switch (e.act) {
        case ConvAct::kNone: return v;
        case ConvAct::kRelu: return v > 0 ? v : 0.0f;
        case ConvAct::kLeakyRelu: return v < 0 ? v * e.alpha : v;
        case ConvAct::kClip: return std::min(std::max(v, e.alpha), e.beta);
        case ConvAct::kHardSigmoid: return std::min(std::max(e.alpha * v + e.beta, 0.0f), 1.0f);
        case ConvAct::kHardSwish:
            return v * std::min(std::max(v * (1.0f / 6.0f) + 0.5f, 0.0f), 1.0f);
        case ConvAct::kSigmoid: return 1.0f / (1.0f + std::exp(-v));
        case ConvAct::kTanh: return std::tanh(v);
    }
    return v;
}

template <ConvAct A>
inline V act_v(V v, const ConvEpi& e) {
    if constexpr (A == ConvAct::kRelu) return vmax(v, V{});
    else if constexpr (A == ConvAct::kLeakyRelu) return v < V{} ? v * e.alpha : v;
    else if constexpr (A == ConvAct::kClip) return vmin(vmax(v, bc(e.alpha)), bc(e.beta));
    else if constexpr (A == ConvAct::kHardSigmoid)
        return vmin(vmax(v * e.alpha + e.beta, V{}), bc(1.0f));
    else if constexpr (A == ConvAct::kHardSwish)
        return v * vmin(vmax(v * (1.0f / 6.0f) + 0.5f, V{}), bc(1.0f));
    else return v;
}

// y[i] = act(y[i] (+ r[i])) over n values.
template <ConvAct A>
void epi_row_t(float* y, const float* r, int64_t n, const ConvEpi& e) {
    int64_t i = 0;
    if constexpr (A == ConvAct::kSigmoid || A == ConvAct::kTanh) {
        for (; i < n; ++i) y[i] = act_s(r ? y[i] + r[i] : y[i], e);
    } else {
        if (r)
            for (; i + VL <= n; i += VL) st(y + i, act_v<A>(ld(y + i) + ld(r + i), e));
        else
            for (; i + VL <= n; i += VL) st(y + i, act_v<A>(ld(y + i), e));
        if (i < n) {  // the tail through one vector
            float t[VL] = {};
            for (int64_t j = i; j < n; ++j) t[j - i] = r ? y[j] + r[j] : y[j];
            st(t, act_v<A>(ld(t), e));
            for (int64_t j = i; j < n; ++j) y[j] = t[j - i];
        }
    }
}

void epi_row(float* y, const float* r, int64_t n, const ConvEpi& e) {
    switch (e.act) {
        case ConvAct::kNone:
            if (r) epi_row_t<ConvAct::kNone>(y, r, n, e);
            break;
        case ConvAct::kRelu: epi_row_t<ConvAct::kRelu>(y, r, n, e); break;
        case ConvAct::kLeakyRelu: epi_row_t<ConvAct::kLeakyRelu>(y, r, n, e); break;
        case ConvAct::kClip: epi_row_t<ConvAct::kClip>(y, r, n, e); break;
        case ConvAct::kHardSigmoid: epi_row_t<ConvAct::kHardSigmoid>(y, r, n, e); break;
        case ConvAct::kHardSwish: epi_row_t<ConvAct::kHardSwish>(y, r, n, e); break;
        case ConvAct::kSigmoid: epi_row_t<ConvAct::kSigmoid>(y, r, n, e); break;
        case ConvAct::kTanh: epi_row_t<ConvAct::kTanh>(y, r, n, e); break;
    }
}

// ------------------------------------------------------------------------- GEMM microkernel

template <int mr, ConvAct A>
inline void store_block(V (&c0)[mr], V (&c1)[mr], float* C, int64_t ldc, const float* R,
                        const ConvEpi& e) {
#pragma GCC unroll 16
    for (int i = 0; i < mr; ++i) {
        V v0 = c0[i], v1 = c1[i];
        if (R) {
            v0 += ld(R + i * ldc);
            v1 += ld(R + i * ldc + VL);
        }
        st(C + i * ldc, act_v<A>(v0, e));
        st(C + i * ldc + VL, act_v<A>(v1, e));
    }
}

// C[mr x NR] (=|+=) a[kc x mr] . b[kc x NR]; `first`: start from the bias (per row, may be null)
// instead of C; `last`: add R (may be null) and apply the activation. C, R: full NR columns.
// IND: B row k is b + offs[k] (implicit GEMM over the image) instead of b + k * NR (packed).
template <int mr, bool IND = false>
void ukr(int64_t kc, const float* __restrict a, const float* __restrict b, float* C, int64_t ldc,
         bool first, const float* bias, bool last, const float* R, const ConvEpi& e,
         const int64_t* offs = nullptr) {
    V c0[mr], c1[mr];
#pragma GCC unroll 16
    for (int i = 0; i < mr; ++i) {
        if (first) {
            c0[i] = c1[i] = bias ? bc(bias[i]) : V{};
        } else {
            c0[i] = ld(C + i * ldc);
            c1[i] = ld(C + i * ldc + VL);
        }
    }
    for (int64_t k = 0; k < kc; ++k) {
        const float* bk = IND ? b + offs[k] : b + k * NR;
        const V b0 = ld(bk), b1 = ld(bk + VL);
#pragma GCC unroll 16
        for (int i = 0; i < mr; ++i) {
            const V av = bc(a[k * mr + i]);
            c0[i] += av * b0;
            c1[i] += av * b1;
        }
    }
    if (!last) {
        store_block<mr, ConvAct::kNone>(c0, c1, C, ldc, nullptr, e);
        return;
    }
    switch (e.act) {
        case ConvAct::kRelu: store_block<mr, ConvAct::kRelu>(c0, c1, C, ldc, R, e); break;
        case ConvAct::kLeakyRelu: store_block<mr, ConvAct::kLeakyRelu>(c0, c1, C, ldc, R, e); break;
        case ConvAct::kClip: store_block<mr, ConvAct::kClip>(c0, c1, C, ldc, R, e); break;
        case ConvAct::kHardSigmoid:
            store_block<mr, ConvAct::kHardSigmoid>(c0, c1, C, ldc, R, e);
            break;
        case ConvAct::kHardSwish: store_block<mr, ConvAct::kHardSwish>(c0, c1, C, ldc, R, e); break;
        case ConvAct::kNone: store_block<mr, ConvAct::kNone>(c0, c1, C, ldc, R, e); break;
        case ConvAct::kSigmoid:
        case ConvAct::kTanh:
            store_block<mr, ConvAct::kNone>(c0, c1, C, ldc, R, e);
            for (int i = 0; i < mr; ++i)
                for (int j = 0; j < NR; ++j) C[i * ldc + j] = act_s(C[i * ldc + j], e);
            break;
    }
}

// Block with nv <= NR valid columns: full blocks go straight to C, partial ones via a buffer.
template <int mr>
void ukr_nv(int64_t kc, const float* a, const float* b, float* C, int64_t ldc, int64_t nv,
            bool first, const float* bias, bool last, const float* R, const ConvEpi& e) {
    if (nv == NR) {
        ukr<mr>(kc, a, b, C, ldc, first, bias, last, R, e);
        return;
    }
    float tc[mr * NR], tr[mr * NR];
    for (int i = 0; i < mr; ++i)
        for (int j = 0; j < NR; ++j) {
            tc[i * NR + j] = (!first && j < nv) ? C[i * ldc + j] : 0.0f;
            tr[i * NR + j] = (R && j < nv) ? R[i * ldc + j] : 0.0f;
        }
    ukr<mr>(kc, a, b, tc, NR, first, bias, last, R ? tr : nullptr, e);
    for (int i = 0; i < mr; ++i)
        for (int j = 0; j < nv; ++j) C[i * ldc + j] = tc[i * NR + j];
}

using UkrFn = void (*)(int64_t, const float*, const float*, float*, int64_t, int64_t, bool,
                       const float*, bool, const float*, const ConvEpi&);

template <int... I>
constexpr auto make_ukr_table(std::integer_sequence<int, I...>) {
    return std::array<UkrFn, sizeof...(I)>{&ukr_nv<I + 1>...};
}
constexpr auto kUkr = make_ukr_table(std::make_integer_sequence<int, MR>{});

using UkrIndFn = void (*)(int64_t, const float*, const float*, float*, int64_t, bool, const float*,
                          bool, const float*, const ConvEpi&, const int64_t*);
template <int... I>
constexpr auto make_ukr_ind_table(std::integer_sequence<int, I...>) {
    return std::array<UkrIndFn, sizeof...(I)>{&ukr<I + 1, true>...};
}
constexpr auto kUkrInd = make_ukr_ind_table(std::make_integer_sequence<int, MR>{});

// ------------------------------------------------------------------------- im2col into panels

inline void copy_n(float* __restrict d, const float* __restrict s, int64_t n) {
    if (n == NR) {
        st(d, ld(s));
        st(d + VL, ld(s + VL));
        return;
    }
    int64_t i = 0;
    for (; i + VL <= n; i += VL) st(d + i, ld(s + i));
    for (; i < n; ++i) d[i] = s[i];
}

// Copies one group's C planes into the zero-padded HP x WP image xp.
void pad_image(const ConvGemmArgs& a, const float* x, float* xp) {
    const Conv2DGeom& g = a.g;
    const int64_t HP = a.HP, WP = a.WP;
    const int64_t x0 = g.pw, x1 = std::min(WP, g.pw + g.W);  // destination columns with data
    for (int64_t c = 0; c < g.C; ++c) {
        float* pc = xp + c * a.PS;
        std::memset(pc + HP * WP, 0, size_t(a.PS - HP * WP) * sizeof(float));
        for (int64_t py = 0; py < HP; ++py) {
            float* row = pc + py * WP;
            const int64_t iy = py - g.ph;
            if (iy < 0 || iy >= g.H || x1 <= x0) {
                std::memset(row, 0, size_t(WP) * sizeof(float));
                continue;
            }
            std::memset(row, 0, size_t(x0) * sizeof(float));
            copy_n(row + x0, x + (c * g.H + iy) * g.W, x1 - x0);
            std::memset(row + x1, 0, size_t(WP - x1) * sizeof(float));
        }
    }
}

// Writes the im2col of output pixels [p0, p0 + np) as ceil(np / NR) panels of K x NR floats.
// x is an HP x WP image per channel in which every tap of every output pixel is in bounds.
void pack_tile(const ConvGemmArgs& a, const float* x, int64_t p0, int64_t np, float* dst) {
    const Conv2DGeom& g = a.g;
    const int64_t K = a.K, HW = a.PS, khw = g.kh * g.kw, WP = a.WP;
    for (int64_t j = 0; j * NR < np; ++j) {
        float* d = dst + j * K * NR;
        const int64_t ps = p0 + j * NR, cnt = std::min<int64_t>(NR, np - j * NR);
        if (a.pointwise) {
            for (int64_t c = 0; c < K; ++c) copy_n(d + c * NR, x + c * HW + ps, cnt);
        } else {
            // Runs of pixels within one output row.
            for (int64_t l = 0; l < cnt;) {
                const int64_t p = ps + l, oy = p / g.OW, ox0 = p - oy * g.OW;
                const int64_t run = std::min(cnt - l, g.OW - ox0);
                for (int64_t c = 0; c < g.C; ++c)
                    for (int64_t ky = 0; ky < g.kh; ++ky) {
                        const float* row = x + c * HW + (oy * g.sh + ky * g.dh) * WP + ox0 * g.sw;
                        float* dk = d + (c * khw + ky * g.kw) * NR + l;
                        for (int64_t kx = 0; kx < g.kw; ++kx, dk += NR) {
                            const float* __restrict s = row + kx * g.dw;
                            if (g.sw == 1) {
                                copy_n(dk, s, run);
                            } else {
                                for (int64_t o = 0; o < run; ++o) dk[o] = s[o * g.sw];
                            }
                        }
                    }
                l += run;
            }
        }
        if (cnt < NR)
            for (int64_t k = 0; k < K; ++k)
                for (int64_t l = cnt; l < NR; ++l) d[k * NR + l] = 0.0f;
    }
}

// Stride-1 convs as an implicit GEMM over the (padded) image: with q = oy * WP + ox on the padded
// grid, col[k, q] = xp[q + offs[k]], offs[k] = c * HP * WP + ky * dh * WP + kx * dw, so each B row
// is read straight from the image (no im2col). Positions with ox >= OW are computed and dropped:
// when WP != OW the tile goes to a buffer and its valid columns are copied out (with the
// epilogue); the last panels, whose reads would pass the end of the image, are packed.
void implicit_group(const ConvGemmArgs& a, const float* x, const float* wp, const float* bias,
                    const float* res, float* y, float* scratch, const ConvEpi& e) {
    const Conv2DGeom& g = a.g;
    const int64_t K = a.K, M = a.g.M, WP = a.WP, OW = g.OW, P = a.P;
    const int64_t nb = (M + MR - 1) / MR;
    const int64_t Q = (g.OH - 1) * WP + OW;     // positions on the padded grid
    const bool direct = WP == OW;               // q == p: write Y in place
    float* buf = scratch;                       // M x tile (buffered mode)
    float* panel = scratch + M * a.tile;        // K x NR packed tail panel
    if (a.pad_copy) {
        float* xp = panel + K * NR;
        pad_image(a, x, xp);
        x = xp;
    }
    const int64_t limit = g.C * a.PS - a.offs[K - 1];  // panel at q is direct iff q + NR <= limit
    const ConvEpi none{};
    for (int64_t q0 = 0; q0 < Q; q0 += a.tile) {
        const int64_t nq = std::min(a.tile, Q - q0);
        float* C = direct ? y + q0 : buf;
        const int64_t ldc = direct ? P : a.tile;
        for (int64_t k0 = 0; k0 < K; k0 += a.kc) {
            const int64_t kc = std::min(a.kc, K - k0);
            const bool first = k0 == 0, last = k0 + kc == K;
            for (int64_t j = 0; j * NR < nq; ++j) {
                const int64_t q = q0 + j * NR;
                const int64_t nv = direct ? std::min<int64_t>(NR, nq - j * NR) : NR;
                // Partial panels in direct mode are packed too: the indirect kernel stores NR.
                const bool packed = q + NR > limit || nv < NR;
                if (packed) {
                    // Pack this K chunk of the panel (positions past the image read as zero).
                    for (int64_t k = 0; k < kc; ++k) {
                        const int64_t o = a.offs[k0 + k] + q;
                        const int64_t avail = std::clamp<int64_t>(g.C * a.PS - o, 0, NR);
                        for (int64_t l = 0; l < NR; ++l) panel[k * NR + l] = l < avail ? x[o + l] : 0.0f;
                    }
                }
                for (int64_t blk = 0; blk < nb; ++blk) {
                    const int64_t r0 = blk * M / nb, r1 = (blk + 1) * M / nb, mr = r1 - r0;
                    float* Cb = C + r0 * ldc + j * NR;
                    const float* bb = bias ? bias + r0 : nullptr;
                    const float* Rb = direct && res ? res + r0 * P + q : nullptr;
                    // Buffered: the activation still runs in the kernel unless a residual
                    // has to be added first (in the copy-out).
                    const ConvEpi& eb = direct || !res ? e : none;
                    if (packed)
                        kUkr[size_t(mr - 1)](kc, wp + r0 * K + k0 * mr, panel, Cb, ldc, nv, first,
                                             bb, last, Rb, eb);
                    else
                        kUkrInd[size_t(mr - 1)](kc, wp + r0 * K + k0 * mr, x + q, Cb, ldc, first,
                                                bb, last, Rb, eb, a.offs + k0);
                }
            }
        }
        if (direct) continue;
        // Copy the valid columns of the tile out to Y, applying the epilogue.
        const bool epi = res != nullptr;
        for (int64_t oy = q0 / WP; oy * WP < q0 + nq && oy < g.OH; ++oy) {
            const int64_t lo = std::max<int64_t>(0, q0 - oy * WP);
            const int64_t hi = std::min<int64_t>(OW, q0 + nq - oy * WP);
            if (hi <= lo) continue;
            for (int64_t m = 0; m < M; ++m) {
                float* yd = y + m * P + oy * OW + lo;
                copy_n(yd, buf + m * a.tile + oy * WP + lo - q0, hi - lo);
                if (epi) epi_row(yd, res ? res + m * P + oy * OW + lo : nullptr, hi - lo, e);
            }
        }
    }
}

void gemm_group(const ConvGemmArgs& a, const float* x, const float* wp, const float* bias,
                const float* res, float* y, float* scratch, const ConvEpi& e) {
    if (a.implicit) return implicit_group(a, x, wp, bias, res, y, scratch, e);
    const int64_t K = a.K, P = a.P, M = a.g.M;
    const int64_t nb = (M + MR - 1) / MR;
    if (a.pad_copy) {
        float* xp = scratch + K * a.tile;
        pad_image(a, x, xp);
        x = xp;
    }
    for (int64_t p0 = 0; p0 < P; p0 += a.tile) {
        const int64_t np = std::min(a.tile, P - p0);
        pack_tile(a, x, p0, np, scratch);
        for (int64_t k0 = 0; k0 < K; k0 += a.kc) {
            const int64_t kc = std::min(a.kc, K - k0);
            const bool first = k0 == 0, last = k0 + kc == K;
            for (int64_t j = 0; j * NR < np; ++j) {
                const float* bp = scratch + j * K * NR + k0 * NR;
                const int64_t nv = std::min<int64_t>(NR, np - j * NR);
                const int64_t col = p0 + j * NR;
                for (int64_t blk = 0; blk < nb; ++blk) {
                    const int64_t r0 = blk * M / nb, r1 = (blk + 1) * M / nb, mr = r1 - r0;
                    kUkr[size_t(mr - 1)](kc, wp + r0 * K + k0 * mr, bp, y + r0 * P + col, P, nv,
                                         first, bias ? bias + r0 : nullptr, last,
                                         res ? res + r0 * P + col : nullptr, e);
                }
            }
        }
    }
}

// ------------------------------------------------------------------------- depthwise

inline __attribute__((always_inline)) V load_strided(const float* p, int64_t s) {
    if (s == 1) return ld(p);
    if (s == 2) {
        VI m;
        for (int i = 0; i < VL; ++i) m[i] = 2 * i;
        return __builtin_shuffle(ld(p), ld(p + VL), m);
    }
    float t[VL];
    for (int i = 0; i < VL; ++i) t[i] = p[i * s];
    return ld(t);
}

// Vector strips of output columns [L, Hv) of one output row; SW = the stride (0: any).
// Returns the first column not done.
template <int SW>
int64_t dw_strips(const Conv2DGeom& g, const float* xc, const float* wc, float b, int64_t oy,
                  int64_t ky0, int64_t ky1, int64_t L, int64_t Hv, float* yr) {
    const int64_t sw = SW ? SW : g.sw;
    auto strip = [&](int64_t ox) {
        V acc = bc(b);
        for (int64_t ky = ky0; ky < ky1; ++ky) {
            const float* xr = xc + (oy * g.sh - g.ph + ky * g.dh) * g.W + ox * sw - g.pw;
            const float* wr = wc + ky * g.kw;
            if (g.kw == 3 && g.dw == 1) {
                acc += bc(wr[0]) * load_strided(xr, sw);
                acc += bc(wr[1]) * load_strided(xr + 1, sw);
                acc += bc(wr[2]) * load_strided(xr + 2, sw);
            } else {
                for (int64_t kx = 0; kx < g.kw; ++kx)
                    acc += bc(wr[kx]) * load_strided(xr + kx * g.dw, sw);
            }
        }
        st(yr + ox, acc);
    };
    int64_t ox = L;
    for (; ox + VL <= Hv; ox += VL) strip(ox);
    // The rest of the interior as one strip overlapping the previous one (same values rewritten).
    if (ox < Hv && Hv - L >= VL) {
        strip(Hv - VL);
        ox = Hv;
    }
    return ox;
}

void depthwise(const Conv2DGeom& g, const float* x, const float* w, const float* bias,
               const float* res, float* y, const ConvEpi& e) {
    const int64_t HW = g.H * g.W, P = g.OH * g.OW, khw = g.kh * g.kw;
    // Interior columns [L, Hc): every kernel column reads inside the row; vector strips also
    // need their last load (VL, or 2 VL for stride 2, floats) to stay inside the row.
    int64_t L = 0, Hc = g.OW, Hv = g.OW;
    for (int64_t kx = 0; kx < g.kw; ++kx) {
        const int64_t off = kx * g.dw - g.pw;
        // ox * sw + off >= 0  and  ox * sw + off <= W - 1
        const int64_t lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
        const int64_t top = g.W - 1 - off;
        const int64_t hi = top < 0 ? 0 : top / g.sw + 1;
        L = std::max(L, lo);
        Hc = std::min(Hc, hi);
        // The strip at ox0 reads up to (ox0 + VL - 1) * sw + off (+1 for the stride-2 pair).
        const int64_t extra = g.sw == 2 ? 1 : 0;
        const int64_t topv = g.W - 1 - off - extra;
        Hv = std::min(Hv, topv < 0 ? 0 : topv / g.sw + 1);
    }
    Hc = std::max(Hc, L);
    Hv = std::clamp(Hv, L, Hc);
    for (int64_t c = 0; c < g.C; ++c) {
        const float* xc = x + c * HW;
        const float* wc = w + c * khw;
        const float b = bias ? bias[c] : 0.0f;
        for (int64_t oy = 0; oy < g.OH; ++oy) {
            float* yr = y + c * P + oy * g.OW;
            int64_t ky0 = 0, ky1 = g.kh;
            while (ky0 < ky1 && oy * g.sh - g.ph + ky0 * g.dh < 0) ++ky0;
            while (ky1 > ky0 && oy * g.sh - g.ph + (ky1 - 1) * g.dh >= g.H) --ky1;
            auto scalar_at = [&](int64_t ox) {
                float acc = b;
                for (int64_t ky = ky0; ky < ky1; ++ky) {
                    const float* xr = xc + (oy * g.sh - g.ph + ky * g.dh) * g.W;
                    for (int64_t kx = 0; kx < g.kw; ++kx) {
                        const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
                        if (ix >= 0 && ix < g.W) acc += wc[ky * g.kw + kx] * xr[ix];
                    }
                }
                yr[ox] = acc;
            };
            for (int64_t ox = 0; ox < L; ++ox) scalar_at(ox);
            int64_t ox = L;
            if (g.sw == 1)
                ox = dw_strips<1>(g, xc, wc, b, oy, ky0, ky1, L, Hv, yr);
            else if (g.sw == 2)
                ox = dw_strips<2>(g, xc, wc, b, oy, ky0, ky1, L, Hv, yr);
            else
                ox = dw_strips<0>(g, xc, wc, b, oy, ky0, ky1, L, Hv, yr);
            for (; ox < g.OW; ++ox) scalar_at(ox);
            if (res || e.act != ConvAct::kNone)
                epi_row(yr, res ? res + c * P + oy * g.OW : nullptr, g.OW, e);
        }
    }
}

}  // namespace

void JIFFY_CONV_CAT(conv_gemm_group_, JIFFY_CONV_SUFFIX)(const ConvGemmArgs& a, const float* x,
                                                         const float* wp, const float* bias,
                                                         const float* res, float* y,
                                                         float* scratch, const ConvEpi& e) {
    gemm_group(a, x, wp, bias, res, y, scratch, e);
}

void JIFFY_CONV_CAT(conv_dw_, JIFFY_CONV_SUFFIX)(const Conv2DGeom& g, const float* x,
                                                 const float* w, const float* bias,
                                                 const float* res, float* y, const ConvEpi& e) {
    depthwise(g, x, w, bias, res, y, e);
}

void JIFFY_CONV_CAT(conv_epi_, JIFFY_CONV_SUFFIX)(float* y, const float* r, int64_t n,
                                                  const ConvEpi& e) {
    epi_row(y, r, n, e);
}

}  // namespace jiffy::kernels
