// Pool rows, baseline ISA (SSE2 on x86-64, NEON on aarch64), table set-up and dispatch.
#include "kernels/pool.h"
#include "kernels/resize.h"

#include <algorithm>
#include <climits>
#include <cmath>

namespace jiffy::kernels {
namespace {
#include "kernels/pool_impl.h"

int64_t floor_div64(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Valid taps [k0, k1) of output index o along one dim, and taps inside the padded range.
void taps(int64_t o, int64_t n, int64_t kk, int64_t ss, int64_t dd, int64_t b, int64_t e, int64_t* k0,
          int64_t* k1, int64_t* kp) {
    const int64_t start = o * ss - b;
    *k0 = start >= 0 ? 0 : (-start + dd - 1) / dd;
    *k1 = std::min<int64_t>(kk, floor_div64(n - 1 - start, dd) + 1);
    *kp = std::min<int64_t>(kk, floor_div64(n + e - 1 - start, dd) + 1);
}
}  // namespace

bool pool2d_setup(bool max, bool count_include_pad, const int64_t in[2], const int64_t out[2],
                  const int64_t k[2], const int64_t s[2], const int64_t d[2], const int64_t pb[2],
                  const int64_t pe[2], Pool2d* p) {
    *p = Pool2d{};
    p->max = max;
    p->H = in[0], p->W = in[1], p->OH = out[0], p->OW = out[1];
    p->kw = k[1], p->sw = s[1], p->dw = d[1], p->pw = pb[1], p->dh = d[0];
    for (int64_t o = 0; o < out[0]; ++o) {
        int64_t k0, k1, kp;
        taps(o, in[0], k[0], s[0], d[0], pb[0], pe[0], &k0, &k1, &kp);
        if (k1 <= k0) return false;
        p->row_first.push_back(o * s[0] - pb[0] + k0 * d[0]);
        p->row_n.push_back(k1 - k0);
        p->row_cnt.push_back(float(count_include_pad ? kp : k1 - k0));
    }
    int64_t need = in[1] + pb[1];
    for (int64_t o = 0; o < out[1]; ++o) {
        int64_t k0, k1, kp;
        taps(o, in[1], k[1], s[1], d[1], pb[1], pe[1], &k0, &k1, &kp);
        if (k1 <= k0) return false;
        p->col_cnt.push_back(float(count_include_pad ? kp : k1 - k0));
        need = std::max(need, o * s[1] + (k[1] - 1) * d[1] + 1);  // last tap, padded coordinates
    }
    p->Wp = need;
    const bool exact = in[0] == out[0] * k[0] && in[1] == out[1] * k[1] && s[0] == k[0] && s[1] == k[1] &&
                       d[0] == 1 && d[1] == 1 && pb[0] == 0 && pb[1] == 0 && pe[0] == 0 && pe[1] == 0;
    if (max && exact && k[1] == 2 && (k[0] == 1 || k[0] == 2)) p->tile_rows = int(k[0]);
    return true;
}

bool pool_nhwc_setup(bool max, bool count_include_pad, const int64_t in[2], const int64_t out[2],
                     const int64_t k[2], const int64_t s[2], const int64_t d[2], const int64_t pb[2],
                     const int64_t pe[2], int64_t C, PoolNhwc* p) {
    *p = PoolNhwc{};
    p->max = max;
    p->H = in[0], p->W = in[1], p->C = C, p->OH = out[0], p->OW = out[1], p->dh = d[0], p->dw = d[1];
    for (int dim = 0; dim < 2; ++dim)
        for (int64_t o = 0; o < out[dim]; ++o) {
            int64_t k0, k1, kp;
            taps(o, in[dim], k[dim], s[dim], d[dim], pb[dim], pe[dim], &k0, &k1, &kp);
            if (k1 <= k0) return false;
            (dim ? p->col_first : p->row_first).push_back(o * s[dim] - pb[dim] + k0 * d[dim]);
            (dim ? p->col_n : p->row_n).push_back(k1 - k0);
            (dim ? p->col_div : p->row_div).push_back(float(count_include_pad ? kp : k1 - k0));
        }
    return true;
}

void pool2d_scalar(const Pool2d& p, const float* x, float* y, int64_t planes, float* scratch) {
    pool2d_run(p, x, y, planes, scratch);
}

void global_avg_nhwc_scalar(const float* x, float* y, int64_t n, int64_t size, int64_t C) {
    global_avg_nhwc_run(x, y, n, size, C);
}

bool resize_cols2_setup(const int64_t* off, const float* w, int64_t OW, ResizeCols2* p) {
    *p = ResizeCols2{};
    p->OW = OW;
    for (int64_t j0 = 0; j0 < OW; j0 += 16) {
        const int64_t n = std::min<int64_t>(16, OW - j0);
        // The window spans the taps with a weight; a zero-weight tap (the padding of a column with
        // one tap, at offset 0) reads the window's first element instead, times 0 as before.
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (int64_t j = j0; j < j0 + n; ++j)
            for (int t = 0; t < 2; ++t)
                if (w[2 * j + t] != 0.0f) lo = std::min(lo, off[2 * j + t]), hi = std::max(hi, off[2 * j + t]);
        if (lo == INT64_MAX) lo = hi = off[2 * j0];
        if (lo < 0 || hi - lo >= 32 || lo > INT32_MAX) return false;
        p->base.push_back(int32_t(lo));
        const size_t b = p->idx.size();
        p->idx.resize(b + 32, 0);
        p->w.resize(b + 32, 0.0f);
        for (int64_t j = 0; j < n; ++j)
            for (int t = 0; t < 2; ++t) {
                const float wt = w[2 * (j0 + j) + t];
                p->idx[b + size_t(16 * t + j)] = wt != 0.0f ? int32_t(off[2 * (j0 + j) + t] - lo) : 0;
                p->w[b + size_t(16 * t + j)] = wt;
            }
    }
    return true;
}

void resize_cols2_scalar(const ResizeCols2& p, const float* v, float* y) {
    for (int64_t j = 0; j < p.OW; ++j) {
        const size_t blk = size_t(j / 16), l = size_t(j % 16), b = 32 * blk;
        const float* vb = v + p.base[blk];
        y[j] = p.w[b + l] * vb[p.idx[b + l]] + p.w[b + 16 + l] * vb[p.idx[b + 16 + l]];
    }
}

ResizeCols2Fn resize_cols2_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return resize_cols2_avx512;
#endif
    (void)isa;
    return nullptr;
}

void pool_nhwc_scalar(const PoolNhwc& p, const float* x, float* y, int64_t r0, int64_t r1) {
    pool_nhwc_run(p, x, y, r0, r1);
}

PoolNhwcFn pool_nhwc_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return pool_nhwc_avx512;
    if (isa == Isa::kAvx2) return pool_nhwc_avx2;
#endif
    (void)isa;
    return pool_nhwc_scalar;
}

GlobalAvgNhwcFn global_avg_nhwc_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return global_avg_nhwc_avx512;
    if (isa == Isa::kAvx2) return global_avg_nhwc_avx2;
#endif
    (void)isa;
    return global_avg_nhwc_scalar;
}

Pool2dFn pool2d_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return pool2d_avx512;
    if (isa == Isa::kAvx2) return pool2d_avx2;
#endif
    (void)isa;
    return pool2d_scalar;
}

// Eight partial sums per plane (one dependent add chain per plane costs ~4 cycles an element).
void global_avg_scalar(const float* x, float* y, int64_t planes, int64_t size) {
    const float inv = 1.0f / float(size);
    for (int64_t q = 0; q < planes; ++q) {
        const float* p = x + q * size;
        float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 8 <= size; i += 8)
            for (int u = 0; u < 8; ++u) s[u] += p[i + u];
        float acc = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
        for (; i < size; ++i) acc += p[i];
        y[q] = acc * inv;
    }
}

GlobalAvgFn global_avg_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return global_avg_avx512;
    if (isa == Isa::kAvx2) return global_avg_avx2;
#endif
    (void)isa;
    return global_avg_scalar;
}

}  // namespace jiffy::kernels
