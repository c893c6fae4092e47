// The float64 reference of the conv kernel tests: activation and direct convolution of one image
// (any kernel size, strides, dilations, pads and groups), y = act(conv(x, w) + bias + res).
// Header-only and engine-free like isa_util.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/conv.h"

namespace jiffy::testisa {

inline double act_ref(double v, const kernels::ConvEpi& e) {
    using kernels::ConvAct;
    switch (e.act) {
        case ConvAct::kNone: break;
        case ConvAct::kRelu: v = v > 0 ? v : 0; break;
        case ConvAct::kLeakyRelu: v = v < 0 ? v * e.alpha : v; break;
        case ConvAct::kClip: v = std::min(std::max(v, double(e.alpha)), double(e.beta)); break;
        case ConvAct::kHardSigmoid: v = std::min(std::max(e.alpha * v + e.beta, 0.0), 1.0); break;
        case ConvAct::kHardSwish: v = v * std::min(std::max(v / 6 + 0.5, 0.0), 1.0); break;
        case ConvAct::kSigmoid: v = 1 / (1 + std::exp(-v)); break;
        case ConvAct::kTanh: v = std::tanh(v); break;
        case ConvAct::kSilu: v = v / (1 + std::exp(-v)); break;
    }
    return e.clamp ? std::min(std::max(v, double(e.lo)), double(e.hi)) : v;
}

// The geometry of a square k x k conv (stride s, dilation d, padding p on every side), OH / OW
// computed as ONNX does.
inline kernels::Conv2DGeom square_geom(int64_t C, int64_t M, int64_t H, int64_t W, int64_t k, int64_t s = 1,
                                       int64_t d = 1, int64_t p = 0) {
    kernels::Conv2DGeom g;
    g.C = C;
    g.M = M;
    g.H = H;
    g.W = W;
    g.kh = g.kw = k;
    g.sh = g.sw = s;
    g.dh = g.dw = d;
    g.ph = g.pw = p;
    g.OH = (H + 2 * p - (k - 1) * d - 1) / s + 1;
    g.OW = (W + 2 * p - (k - 1) * d - 1) / s + 1;
    return g;
}

// g: the whole conv's geometry (g.C input and g.M output channels in all), G groups; w is
// M x (C / G) x kh x kw; bias (M) and res (M x OH x OW) may be null.
inline std::vector<double> conv_ref(const kernels::Conv2DGeom& g, const std::vector<float>& x,
                                    const std::vector<float>& w, const float* bias, const float* res,
                                    const kernels::ConvEpi& e, int64_t G = 1) {
    const int64_t cg = g.C / G, mg = g.M / G;
    std::vector<double> y(size_t(g.M * g.OH * g.OW));
    for (int64_t m = 0; m < g.M; ++m)
        for (int64_t oy = 0; oy < g.OH; ++oy)
            for (int64_t ox = 0; ox < g.OW; ++ox) {
                double s = bias ? bias[m] : 0.0;
                const int64_t c0 = m / mg * cg;
                for (int64_t ci = 0; ci < cg; ++ci)
                    for (int64_t ky = 0; ky < g.kh; ++ky)
                        for (int64_t kx = 0; kx < g.kw; ++kx) {
                            const int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
                            if (iy < 0 || iy >= g.H || ix < 0 || ix >= g.W) continue;
                            s += double(w[size_t(((m * cg + ci) * g.kh + ky) * g.kw + kx)]) *
                                 x[size_t(((c0 + ci) * g.H + iy) * g.W + ix)];
                        }
                const size_t o = size_t((m * g.OH + oy) * g.OW + ox);
                if (res) s += res[o];
                y[o] = act_ref(s, e);
            }
    return y;
}

// [C][P] -> [P][C]: a channels-first plane set as channels-last.
inline std::vector<float> to_nhwc(const std::vector<float>& x, int64_t C, int64_t P) {
    std::vector<float> y(x.size());
    for (int64_t c = 0; c < C; ++c)
        for (int64_t p = 0; p < P; ++p) y[size_t(p * C + c)] = x[size_t(c * P + p)];
    return y;
}

}  // namespace jiffy::testisa
