// The channel-blocked depthwise kernel (conv.h: ConvDwMode::kBlocked), compiled per ISA: included
// right after kernels/conv_impl.h in the same translation unit, whose vector helpers (V, VI, VL,
// ld, st, ld_n, st_n, act_v, deferred_act, transpose_block) it uses. Exports
// conv_dw_blocked_<JIFFY_CONV_SUFFIX>.
//
// Small planes (MobileNetV3's 5x5 layers on 7x7 and 14 -> 7) waste the row and flat modes'
// lanes and pay per tap for lane masks. Here VL channels at a time are transposed (in registers,
// VL x VL blocks) into a zero-padded pixel-major plane, one vector of VL channels per pixel; every
// tap of every output pixel is then one aligned, unmasked load and one FMA with the tap's weight
// vector (the VL channels' weights, transposed the same way), for any kernel size, stride and
// dilation. The VL-channel output vectors are transposed back into the NCHW planes with the bias,
// residual and activation. The transposes cost ~2 shuffles per value in and out; the taps 9 or 25
// FMAs per value, so it wins where the other modes waste most lanes.
namespace jiffy::kernels {
namespace {

typedef int32_t DwbOff __attribute__((may_alias));  // input offsets, kept in the float scratch

// Rows [0, nr) of a VL x VL block: row i is n floats at p + i * stride (lanes past n and rows past
// nr zero).
inline __attribute__((always_inline)) void dwb_load_rows(V (&r)[VL], const float* p, int64_t stride, int64_t nr,
                                                         int64_t n) {
#pragma GCC unroll 16
    for (int i = 0; i < VL; ++i) r[i] = i < nr ? (n == VL ? ld(p + i * stride) : ld_n(p + i * stride, n)) : V{};
}

// R adjacent output pixels of one output row: acc = bias + sum over taps of w[tap] * in[pixel +
// tap offset], each in/out/w element a vector of VL channels. KH / KW / S: the kernel size and
// stride when known at compile time with dilation 1 (every load then one immediate offset from the
// kernel row's pointer); 0: kh, kw and the steps at run time.
template <int KH, int KW, int S, int R>
inline __attribute__((always_inline)) void dwb_strip(const float* in, const float* wt, int64_t kh, int64_t kw,
                                                     int64_t rstep, int64_t cstep, int64_t pstep, V b,
                                                     float* out) {
    V acc[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = b;
    if constexpr (KH > 0 && KW > 0 && S > 0) {
#pragma GCC unroll 5
        for (int ky = 0; ky < KH; ++ky) {
            const float* row = in + ky * rstep;
#pragma GCC unroll 5
            for (int kx = 0; kx < KW; ++kx) {
                const V wv = ld(wt + (ky * KW + kx) * VL);
#pragma GCC unroll 8
                for (int r = 0; r < R; ++r) acc[r] += wv * ld(row + (kx + r * S) * VL);
            }
        }
    } else {
        for (int64_t ky = 0; ky < kh; ++ky) {
            const float* row = in + ky * rstep;
            for (int64_t kx = 0; kx < kw; ++kx) {
                const V wv = ld(wt + (ky * kw + kx) * VL);
                const float* p = row + kx * cstep;
#pragma GCC unroll 8
                for (int r = 0; r < R; ++r) acc[r] += wv * ld(p + r * pstep);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) st(out + r * VL, acc[r]);
}

template <int KH, int KW, int S>
inline void dwb_row_tail(int64_t n, const float* in, const float* wt, int64_t kh, int64_t kw, int64_t rstep,
                         int64_t cstep, int64_t pstep, V b, float* out) {
    switch (n) {
        case 1: return dwb_strip<KH, KW, S, 1>(in, wt, kh, kw, rstep, cstep, pstep, b, out);
        case 2: return dwb_strip<KH, KW, S, 2>(in, wt, kh, kw, rstep, cstep, pstep, b, out);
        case 3: return dwb_strip<KH, KW, S, 3>(in, wt, kh, kw, rstep, cstep, pstep, b, out);
        case 4: return dwb_strip<KH, KW, S, 4>(in, wt, kh, kw, rstep, cstep, pstep, b, out);
        case 5: return dwb_strip<KH, KW, S, 5>(in, wt, kh, kw, rstep, cstep, pstep, b, out);
        case 6: return dwb_strip<KH, KW, S, 6>(in, wt, kh, kw, rstep, cstep, pstep, b, out);
        default: return dwb_strip<KH, KW, S, 7>(in, wt, kh, kw, rstep, cstep, pstep, b, out);
    }
}

template <int KH, int KW, int S, ConvAct A>
void dwb_channels(const Conv2DGeom& g, const float* x, const float* w, const float* bias, const float* res,
                  float* y, const ConvEpi& e, float* scratch) {
    const DwBlocked d = dw_blocked_dims(g);
    const int64_t kh = g.kh, kw = g.kw, khw = kh * kw, HW = g.H * g.W, P = g.OH * g.OW, OW = g.OW;
    const int64_t WP = d.WP;
    // (vectors aligned: the scratch has 16 floats of slack)
    float* in = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
    // in: HP x WP pixels of VL channels, then a dump slot
    float* out = in + (d.HP * WP + 1) * VL;            // P (rounded up to VL) pixels of VL channels
    float* wt = out + (P + VL - 1) / VL * VL * VL;     // khw (rounded up to VL) taps of VL channels
    DwbOff* off = reinterpret_cast<DwbOff*>(wt + (khw + VL - 1) / VL * VL * VL);  // HW input offsets
    std::memset(in, 0, size_t(d.HP * WP * VL) * sizeof(float));  // the padding: never overwritten
    for (int64_t iy = 0, p = 0; iy < g.H; ++iy)
        for (int64_t ix = 0; ix < g.W; ++ix, ++p) {
            const int64_t py = iy + g.ph, px = ix + g.pw;
            off[p] = DwbOff(py < d.HP && px < WP ? (py * WP + px) * VL : d.HP * WP * VL);
        }
    const int64_t rstep = g.dh * WP * VL, cstep = g.dw * VL, pstep = g.sw * VL;
    for (int64_t c0 = 0; c0 < g.C; c0 += VL) {
        const int64_t nc = std::min<int64_t>(VL, g.C - c0);
        V r[VL];
        for (int64_t t0 = 0; t0 < khw; t0 += VL) {  // tap vectors: the block's weights transposed
            const int64_t nt = std::min<int64_t>(VL, khw - t0);
            dwb_load_rows(r, w + c0 * khw + t0, khw, nc, nt);
            transpose_block(r);
#pragma GCC unroll 16
            for (int j = 0; j < VL; ++j)
                if (j < nt) st(wt + (t0 + j) * VL, r[j]);
        }
        const V b = bias ? ld_n(bias + c0, nc) : V{};
        // The input plane: VL pixels at a time, transposed, each pixel's vector to its padded place
        // (pixels the outputs never read go to a dump slot past the plane).
        for (int64_t p0 = 0; p0 < HW; p0 += VL) {
            const int64_t np = std::min<int64_t>(VL, HW - p0);
            dwb_load_rows(r, x + c0 * HW + p0, HW, nc, np);
            transpose_block(r);
            const DwbOff* o = off + p0;
#pragma GCC unroll 16
            for (int j = 0; j < VL; ++j)
                if (j < np) st(in + o[j], r[j]);
        }
        for (int64_t oy = 0; oy < g.OH; ++oy) {
            const float* ir = in + oy * g.sh * WP * VL;
            float* o = out + oy * OW * VL;
            int64_t ox = 0;
            for (; ox + 8 <= OW; ox += 8)
                dwb_strip<KH, KW, S, 8>(ir + ox * pstep, wt, kh, kw, rstep, cstep, pstep, b, o + ox * VL);
            if (ox < OW) dwb_row_tail<KH, KW, S>(OW - ox, ir + ox * pstep, wt, kh, kw, rstep, cstep, pstep, b, o + ox * VL);
        }
        // Back to channel planes, VL pixels at a time, with the residual and the activation.
        for (int64_t p0 = 0; p0 < P; p0 += VL) {
            const int64_t np = std::min<int64_t>(VL, P - p0);
            dwb_load_rows(r, out + p0 * VL, VL, np, VL);
            transpose_block(r);
#pragma GCC unroll 16
            for (int i = 0; i < VL; ++i) {
                if (i >= nc) break;
                float* yd = y + (c0 + i) * P + p0;
                const float* rd = res ? res + (c0 + i) * P + p0 : nullptr;
                V v = r[i];
                if (np == VL) {
                    if (rd) v += ld(rd);
                    st(yd, act_v<A>(v, e));
                } else {
                    if (rd) v += ld_n(rd, np);
                    st_n(yd, act_v<A>(v, e), np);
                }
            }
        }
    }
    deferred_act<A>(y, g.C * P, e);
}

template <ConvAct A>
void dwb_act(const Conv2DGeom& g, const float* x, const float* w, const float* bias, const float* res, float* y,
             const ConvEpi& e, float* scratch) {
    const bool d1 = g.dh == 1 && g.dw == 1;
    const int64_t s = d1 ? g.sw : 0, k = d1 && g.kh == g.kw ? g.kh : 0;
    if (k == 3 && s == 1) return dwb_channels<3, 3, 1, A>(g, x, w, bias, res, y, e, scratch);
    if (k == 3 && s == 2) return dwb_channels<3, 3, 2, A>(g, x, w, bias, res, y, e, scratch);
    if (k == 5 && s == 1) return dwb_channels<5, 5, 1, A>(g, x, w, bias, res, y, e, scratch);
    if (k == 5 && s == 2) return dwb_channels<5, 5, 2, A>(g, x, w, bias, res, y, e, scratch);
    dwb_channels<0, 0, 0, A>(g, x, w, bias, res, y, e, scratch);
}

void dw_blocked(const Conv2DGeom& g, const float* x, const float* w, const float* bias, const float* res, float* y,
                const ConvEpi& e, float* scratch) {
    with_act(e.act, [&](auto a) { dwb_act<decltype(a)::value>(g, x, w, bias, res, y, e, scratch); });
}

}  // namespace

void JIFFY_CONV_CAT(conv_dw_blocked_, JIFFY_CONV_SUFFIX)(const Conv2DGeom& g, const float* x, const float* w,
                                                         const float* bias, const float* res, float* y,
                                                         const ConvEpi& e, float* scratch) {
    dw_blocked(g, x, w, bias, res, y, e, scratch);
}

}  // namespace jiffy::kernels
