// The plane-copy depthwise kernel (conv.h: conv_depthwise picks it per shape, see
// dw_plane_preferred), compiled per ISA: included right after kernels/conv_impl.h in the same
// translation unit, whose vector helpers (V, VI, VL, ld, st, bc, ld_n, st_n, act_v, epi_row,
// copy_n) it uses. Exports conv_dw_plane_<JIFFY_CONV_SUFFIX>.
//
// Each channel is copied into a zero-padded plane, so every tap of every output row is one
// unchecked vector load along the row: slower than the in-place row-block kernel on large planes
// (which reads each input row once for 4 output rows), faster on planes of few rows (PP-OCR's
// 2x96 and 3x96 planes: ~47 against ~84 us for a 200-channel 5x5; ~25 us since kernel rows that
// read only padding are skipped), and it handles uneven strides
// (2 x 1) with the same code.
namespace jiffy::kernels {
namespace {

inline __attribute__((always_inline)) V dwp_load_strided(const float* p, int64_t s) {
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

// Each channel is copied into a zero-padded plane (HP x WP, the borders zeroed once per call and
// never overwritten), so every tap of every output row is one unchecked vector load (two and a
// shuffle for stride 2). KH/KW: the kernel size when known at compile time (0: any), for which
// the weights are held in registers; SW the stride (0: any). The epilogue (residual, activation)
// is applied in registers.
template <int KH, int KW, int SW, ConvAct A>
void dwp_channels(const Conv2DGeom& g, const DwPlane& d, const float* x, const float* w,
                 const float* bias, const float* res, float* y, const ConvEpi& e, float* xp) {
    const int64_t kh = KH ? KH : g.kh, kw = KW ? KW : g.kw, khw = kh * kw;
    const int64_t HW = g.H * g.W, P = g.OH * g.OW, WP = d.WP, OW = g.OW;
    const int64_t sw = SW ? SW : g.sw, dh = g.dh, dw = g.dw;
    const int64_t x0 = g.pw, x1 = std::min(WP, g.pw + g.W);  // padded columns holding data
    std::memset(xp, 0, size_t(d.floats) * sizeof(float));
    for (int64_t c = 0; c < g.C; ++c) {
        const float* xc = x + c * HW;
        for (int64_t py = 0; py < d.HP; ++py) {
            const int64_t iy = py - g.ph;
            if (iy >= 0 && iy < g.H && x1 > x0) copy_n(xp + py * WP + x0, xc + iy * g.W, x1 - x0);
        }
        const float* wc = w + c * khw;
        V wv[KH && KW ? KH * KW : 1];
        if constexpr (KH && KW)
            for (int i = 0; i < KH * KW; ++i) wv[i] = bc(wc[i]);
        const V b = bc(bias ? bias[c] : 0.0f);
        float* yc = y + c * P;
        const float* rc = res ? res + c * P : nullptr;
        for (int64_t oy = 0; oy < g.OH; ++oy) {
            const float* xr = xp + oy * g.sh * WP;
            // Kernel rows [ky0, ky1) read image rows; the others read the zero padding and are
            // skipped (PP-OCR's 5x5 on 2- and 3-row planes: 2 or 3 of 5 rows).
            const int64_t top = g.ph - oy * g.sh, bottom = g.H - 1 + g.ph - oy * g.sh;
            const int64_t ky0 = top > 0 ? (top + dh - 1) / dh : 0;
            const int64_t ky1 = bottom < 0 ? 0 : std::min(kh, bottom / dh + 1);
            float* yr = yc + oy * OW;
            const float* rr = rc ? rc + oy * OW : nullptr;
            auto strip = [&](int64_t ox) {
                V acc = b;
                const float* xo = xr + ox * sw;
                if constexpr (KH && KW) {
                    // One partial sum per kernel row: short dependency chains.
                    V part[KH]{};
#pragma GCC unroll 8
                    for (int ky = 0; ky < KH; ++ky) {
                        if (ky < ky0 || ky >= ky1) continue;
                        const float* xk = xo + ky * dh * WP;
                        part[ky] = wv[ky * KW] * dwp_load_strided(xk, sw);
#pragma GCC unroll 8
                        for (int kx = 1; kx < KW; ++kx)
                            part[ky] += wv[ky * KW + kx] * dwp_load_strided(xk + kx * dw, sw);
                    }
#pragma GCC unroll 8
                    for (int ky = 0; ky < KH; ++ky)
                        if (ky >= ky0 && ky < ky1) acc += part[ky];
                } else {
                    for (int64_t ky = ky0; ky < ky1; ++ky) {
                        const float* xk = xo + ky * dh * WP;
                        for (int64_t kx = 0; kx < kw; ++kx)
                            acc += bc(wc[ky * kw + kx]) * dwp_load_strided(xk + kx * dw, sw);
                    }
                }
                return acc;
            };
            int64_t ox = 0;
            for (; ox + VL <= OW; ox += VL) {
                V v = strip(ox);
                if (rr) v += ld(rr + ox);
                st(yr + ox, act_v<A>(v, e));
            }
            if (ox < OW) {  // the tail through one vector (lanes past OW computed and dropped)
                const int64_t n = OW - ox;
                V v = strip(ox);
                if (rr) v += ld_n(rr + ox, n);
                st_n(yr + ox, act_v<A>(v, e), n);
            }
            if constexpr (A == ConvAct::kNone)
                if (deferred_act_kind(e.act)) deferred_rows(yr, OW, e);
        }
    }
}

template <ConvAct A>
void dwp_act(const Conv2DGeom& g, const DwPlane& d, const float* x, const float* w, const float* bias,
            const float* res, float* y, const ConvEpi& e, float* xp) {
    if (g.kh == 3 && g.kw == 3 && g.sw == 1)
        dwp_channels<3, 3, 1, A>(g, d, x, w, bias, res, y, e, xp);
    else if (g.kh == 3 && g.kw == 3 && g.sw == 2)
        dwp_channels<3, 3, 2, A>(g, d, x, w, bias, res, y, e, xp);
    else if (g.kh == 5 && g.kw == 5 && g.sw == 1)
        dwp_channels<5, 5, 1, A>(g, d, x, w, bias, res, y, e, xp);
    else if (g.kh == 5 && g.kw == 5 && g.sw == 2)
        dwp_channels<5, 5, 2, A>(g, d, x, w, bias, res, y, e, xp);
    else
        dwp_channels<0, 0, 0, A>(g, d, x, w, bias, res, y, e, xp);
}

void dw_plane(const Conv2DGeom& g, const float* x, const float* w, const float* bias, const float* res, float* y,
              const ConvEpi& e, float* scratch) {
    const DwPlane d = dw_plane_dims(g, VL);
    with_act(e.act, [&](auto a) { dwp_act<decltype(a)::value>(g, d, x, w, bias, res, y, e, scratch); });
}

}  // namespace

void JIFFY_CONV_CAT(conv_dw_plane_, JIFFY_CONV_SUFFIX)(const Conv2DGeom& g, const float* x, const float* w,
                                                       const float* bias, const float* res, float* y,
                                                       const ConvEpi& e, float* scratch) {
    dw_plane(g, x, w, bias, res, y, e, scratch);
}

}  // namespace jiffy::kernels
