// Plain loops over __restrict pointers that the compiler vectorizes for the ISA of the including
// translation unit (pool.cpp baseline, x86/pool_avx2.cpp, x86/pool_avx512.cpp). Include inside
// `namespace jiffy::kernels { namespace { ... } }` after kernels/pool.h.

inline float pool_max(float v, float m) { return v > m ? v : m; }  // NaN never wins

// t = reduce over rows r[0..n) of the input rows (each W wide), written at t[0..W).
template <bool MAX>
void pool_vertical(const float* __restrict x, int64_t W, int64_t first, int64_t n, int64_t dh,
                   float* __restrict t) {
    const float* __restrict r0 = x + first * W;
    if (n == 2) {
        const float* __restrict r1 = r0 + dh * W;
        for (int64_t i = 0; i < W; ++i)
            t[i] = MAX ? pool_max(r1[i], pool_max(r0[i], -INFINITY)) : r0[i] + r1[i];
        return;
    }
    if (n == 3) {
        const float* __restrict r1 = r0 + dh * W;
        const float* __restrict r2 = r1 + dh * W;
        for (int64_t i = 0; i < W; ++i)
            t[i] = MAX ? pool_max(r2[i], pool_max(r1[i], pool_max(r0[i], -INFINITY)))
                       : (r0[i] + r1[i]) + r2[i];
        return;
    }
    if (MAX && (n == 4 || n == 5)) {  // 5-row windows (YOLO's SPPF): one pass, same order as below
        const float* __restrict r1 = r0 + dh * W;
        const float* __restrict r2 = r1 + dh * W;
        const float* __restrict r3 = r2 + dh * W;
        if (n == 4) {
            for (int64_t i = 0; i < W; ++i)
                t[i] = pool_max(r3[i], pool_max(r2[i], pool_max(r1[i], pool_max(r0[i], -INFINITY))));
            return;
        }
        const float* __restrict r4 = r3 + dh * W;
        for (int64_t i = 0; i < W; ++i)
            t[i] = pool_max(r4[i], pool_max(r3[i], pool_max(r2[i], pool_max(r1[i], pool_max(r0[i], -INFINITY)))));
        return;
    }
    for (int64_t i = 0; i < W; ++i) t[i] = MAX ? pool_max(r0[i], -INFINITY) : r0[i];
    for (int64_t r = 1; r < n; ++r) {
        const float* __restrict rr = r0 + r * dh * W;
        for (int64_t i = 0; i < W; ++i) t[i] = MAX ? pool_max(rr[i], t[i]) : t[i] + rr[i];
    }
}

// y[o] = reduce over k < KW of t[o * SW + k] (then / (rc * cc[o]) for Average).
template <bool MAX, int KW, int SW>
void pool_horizontal(const float* __restrict t, int64_t OW, float rc, const float* __restrict cc,
                     float* __restrict y) {
    for (int64_t o = 0; o < OW; ++o) {
        const float* __restrict w = t + o * SW;
        float a = MAX ? -INFINITY : 0.0f;
        for (int k = 0; k < KW; ++k) a = MAX ? pool_max(w[k], a) : a + w[k];
        y[o] = MAX ? a : a / (rc * cc[o]);
    }
}

template <bool MAX>
void pool_horizontal_any(const float* __restrict t, int64_t OW, int64_t kw, int64_t sw, int64_t dw,
                         float rc, const float* __restrict cc, float* __restrict y) {
    for (int64_t o = 0; o < OW; ++o) {
        const float* w = t + o * sw;
        float a = MAX ? -INFINITY : 0.0f;
        for (int64_t k = 0; k < kw; ++k) a = MAX ? pool_max(w[k * dw], a) : a + w[k * dw];
        y[o] = MAX ? a : a / (rc * cc[o]);
    }
}

using PoolHFn = void (*)(const float*, int64_t, float, const float*, float*);

template <bool MAX>
PoolHFn pool_pick_h(int64_t kw, int64_t sw, int64_t dw) {
    if (dw != 1 && kw != 1) return nullptr;
    if (sw == 1) {
        if (kw == 1) return pool_horizontal<MAX, 1, 1>;
        if (kw == 2) return pool_horizontal<MAX, 2, 1>;
        if (kw == 3) return pool_horizontal<MAX, 3, 1>;
        if (kw == 5) return pool_horizontal<MAX, 5, 1>;  // YOLO's SPPF (5x5, stride 1, pad 2)
    } else if (sw == 2) {
        if (kw == 1) return pool_horizontal<MAX, 1, 2>;
        if (kw == 2) return pool_horizontal<MAX, 2, 2>;
        if (kw == 3) return pool_horizontal<MAX, 3, 2>;
    }
    return nullptr;
}

// Pool2d::tile_rows: 1x2 or 2x2 windows tiling the planes exactly, all planes' rows as one
// stretch: (2x2) the row pairs of a block of rows reduced into `t`, then every output of the block
// from the adjacent pairs of t (pairs never straddle two rows, W being even): both loops long and
// contiguous whatever the plane width. Same comparisons in the same order as the general path
// (rows first, then columns), so the result is bitwise the same, NaN and signed zeros included.
template <int KH>
void pool_max_tiled(const float* __restrict x, float* __restrict y, int64_t rows, int64_t OW,
                    float* __restrict t) {
    const int64_t W = 2 * OW;
    const int64_t block = std::max<int64_t>(1, kPoolTileFloats / W);
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
        const int64_t nr = std::min(block, rows - r0);
        const float* __restrict src = x + r0 * KH * W;
        if (KH == 2) {
            for (int64_t r = 0; r < nr; ++r) {
                const float* __restrict a = src + 2 * r * W;
                const float* __restrict b = a + W;
                float* __restrict tr = t + r * W;
                for (int64_t i = 0; i < W; ++i) tr[i] = pool_max(b[i], pool_max(a[i], -INFINITY));
            }
            src = t;
        }
        float* __restrict yb = y + r0 * OW;
        const int64_t n = nr * OW;
        for (int64_t o = 0; o < n; ++o)
            yb[o] = pool_max(src[2 * o + 1], pool_max(src[2 * o], -INFINITY));
    }
}

template <bool MAX>
void pool2d_impl(const Pool2d& p, const float* x, float* y, int64_t planes, float* scratch) {
    if (MAX && p.tile_rows == 2) return pool_max_tiled<2>(x, y, planes * p.OH, p.OW, scratch);
    if (MAX && p.tile_rows == 1) return pool_max_tiled<1>(x, y, planes * p.OH, p.OW, scratch);
    const PoolHFn h = pool_pick_h<MAX>(p.kw, p.sw, p.dw);
    const float pad_value = MAX ? -INFINITY : 0.0f;
    const int64_t right = p.Wp - p.pw - p.W;
    // The row buffer's padding never changes: write it once per call.
    for (int64_t i = 0; i < p.pw; ++i) scratch[i] = pad_value;
    for (int64_t i = 0; i < right; ++i) scratch[p.pw + p.W + i] = pad_value;
    float* t = scratch + p.pw;
    const bool direct_ok = p.pw == 0 && right <= 0;
    const int64_t inP = p.H * p.W, outP = p.OH * p.OW;
    for (int64_t c = 0; c < planes; ++c) {
        const float* xp = x + c * inP;
        float* yp = y + c * outP;
        for (int64_t oh = 0; oh < p.OH; ++oh, yp += p.OW) {
            const int64_t first = p.row_first[size_t(oh)], n = p.row_n[size_t(oh)];
            const float* src;
            if (n == 1 && direct_ok) {
                src = xp + first * p.W;
            } else {
                pool_vertical<MAX>(xp, p.W, first, n, p.dh, t);
                src = scratch;
            }
            const float rc = p.row_cnt[size_t(oh)];
            if (h) h(src, p.OW, rc, p.col_cnt.data(), yp);
            else pool_horizontal_any<MAX>(src, p.OW, p.kw, p.sw, p.dw, rc, p.col_cnt.data(), yp);
        }
    }
}

inline void pool2d_run(const Pool2d& p, const float* x, float* y, int64_t planes, float* scratch) {
    if (p.max) pool2d_impl<true>(p, x, y, planes, scratch);
    else pool2d_impl<false>(p, x, y, planes, scratch);
}

// Channels-last global average: x is n images of `size` pixels x C channels (channels inner),
// y[i * C + c] = (sum over the pixels of image i) / size, summed in float pixel by pixel into y
// itself (each row of C adds one vector per 16 / 8 channels). Model exits read the last conv's
// NHWC output in place (passes::mean_nhwc): no Transpose back to NCHW before the mean.
inline void global_avg_nhwc_run(const float* __restrict x, float* __restrict y, int64_t n, int64_t size,
                                int64_t C) {
    const float inv = 1.0f / float(size);
    for (int64_t i = 0; i < n; ++i, y += C) {
        for (int64_t c = 0; c < C; ++c) y[c] = x[c];
        x += C;
        for (int64_t p = 1; p < size; ++p, x += C)
            for (int64_t c = 0; c < C; ++c) y[c] += x[c];
        for (int64_t c = 0; c < C; ++c) y[c] *= inv;
    }
}

// PoolNhwc (kernels/pool.h): each output pixel's C channels reduced over its valid taps.
inline void pool_nhwc_run(const PoolNhwc& p, const float* __restrict x, float* __restrict y, int64_t r0,
                          int64_t r1) {
    const int64_t C = p.C, rs = p.W * C, hs = p.dh * rs, ws = p.dw * C;
    y += r0 * p.OW * C;
    for (int64_t r = r0; r < r1; ++r) {
        const int64_t oh = r % p.OH;
        const int64_t nh = p.row_n[size_t(oh)];
        const float* xr = x + (r / p.OH) * p.H * rs + p.row_first[size_t(oh)] * rs;
        for (int64_t ow = 0; ow < p.OW; ++ow, y += C) {
            const int64_t nw = p.col_n[size_t(ow)];
            const float* x0 = xr + p.col_first[size_t(ow)] * C;
            if (p.max) {
                for (int64_t c = 0; c < C; ++c) y[c] = -INFINITY;
                for (int64_t a = 0; a < nh; ++a)
                    for (int64_t b = 0; b < nw; ++b) {
                        const float* q = x0 + a * hs + b * ws;
                        for (int64_t c = 0; c < C; ++c) y[c] = pool_max(q[c], y[c]);
                    }
            } else {
                for (int64_t c = 0; c < C; ++c) y[c] = 0.0f;
                for (int64_t a = 0; a < nh; ++a)
                    for (int64_t b = 0; b < nw; ++b) {
                        const float* q = x0 + a * hs + b * ws;
                        for (int64_t c = 0; c < C; ++c) y[c] += q[c];
                    }
                const float inv = 1.0f / (p.row_div[size_t(oh)] * p.col_div[size_t(ow)]);
                for (int64_t c = 0; c < C; ++c) y[c] *= inv;
            }
        }
    }
}
