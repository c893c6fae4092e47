// Convolution, pooling and normalization ops: Conv, ConvTranspose, MaxPool, AveragePool, LpPool,
// the Global* pools, BatchNormalization (inference), InstanceNormalization, LayerNormalization,
// GroupNormalization, LpNormalization, MeanVarianceNormalization and LRN.
//
// Spatial ops work on 1-3 spatial dims, normalized at prepare to three (leading dims of size 1).
// Conv is im2col-free: for each output channel and output row it accumulates over the input
// channels and kernel taps; every index range (valid rows per tap, valid x positions per kernel
// column) is precomputed at prepare, so the innermost loop is a plain multiply-add over a
// contiguous stretch of output x positions. 1x1 stride-1 unpadded convs are a GEMM-shaped loop.
// That reference path serves float64, 3-D convs and odd grouped convs; float32 1-D/2-D convs
// with group 1 (or >= 8 channels per group) run im2col + packed GEMM and depthwise convs a direct
// vectorized kernel (src/kernels/conv.h).
//
// Fused epilogue (set by a graph pass): the internal attribute _fused_act (Relu, LeakyRelu, Clip,
// HardSigmoid, HardSwish, Sigmoid, Tanh) with _fused_alpha / _fused_beta, and with
// _fused_residual = 1 an input 3 of the output's shape added after the bias, before the
// activation. Every Conv path applies it to each output tile while it is in cache.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/env.h"
#include "kernels/amx.h"
#include "kernels/conv.h"
#include "kernels/conv_nhwc.h"
#include "kernels/conv_stem.h"
#include "kernels/cpu.h"
#include "kernels/norm.h"
#include "kernels/pool.h"
#include "kernels/weight_alloc.h"
#include "kernels/winograd.h"
#include "ops/conv_small.h"
#include "ops/linalg.h"
#include "ops/util.h"
#include "runtime/plan.h"

namespace jiffy {
namespace {

// ---------------------------------------------------------------- shared helpers

int64_t floor_div(int64_t a, int64_t b) {  // b > 0
    int64_t q = a / b;
    if (a % b != 0 && a < 0) --q;
    return q;
}
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

std::string ints_str(const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s + "]";
}

// Reads element i of a float32/float64 tensor as double (per-channel parameters).
inline double load_f(const void* p, DType t, int64_t i) {
    return t == DType::kF64 ? static_cast<const double*>(p)[i]
                            : double(static_cast<const float*>(p)[i]);
}
inline void store_f(void* p, DType t, int64_t i, double v) {
    if (t == DType::kF64) static_cast<double*>(p)[i] = v;
    else static_cast<float*>(p)[i] = float(v);
}

Status expect_float(const OpContext& ctx, int i, const char* what) {
    if (!ctx.has_input(i)) return ctx.fail("input ", i, " (", what, ") is missing");
    DType t = ctx.in_dtype(i);
    if (t != DType::kF32 && t != DType::kF64)
        return ctx.fail_unsupported("input ", i, " (", what, ") has dtype ", dtype_name(t),
                                    "; only float32 and float64 are supported");
    return {};
}

Status expect_same_dtype(const OpContext& ctx, int i, const char* what) {
    if (!ctx.has_input(i)) return ctx.fail("input ", i, " (", what, ") is missing");
    if (ctx.in_dtype(i) != ctx.in_dtype(0))
        return ctx.fail("input ", i, " (", what, ") has dtype ", dtype_name(ctx.in_dtype(i)),
                        " but X has ", dtype_name(ctx.in_dtype(0)));
    return {};
}

// Checks that a per-channel parameter input holds exactly n elements (rank-1 [n], or any shape of
// n elements when `lenient`).
Status expect_vec(const OpContext& ctx, int i, const char* what, int64_t n, bool lenient = false) {
    const Shape& s = ctx.in_shape(i);
    bool ok = lenient ? shape_numel(s) == n : (s.size() == 1 && s[0] == n);
    if (!ok)
        return ctx.fail("input ", i, " (", what, ") must have shape [", n, "], got ",
                        shape_str(s));
    return {};
}

enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };

Status parse_auto_pad(const OpContext& ctx, AutoPad* ap) {
    std::string s = ctx.attr_str("auto_pad", "NOTSET");
    if (s == "NOTSET" || s.empty()) *ap = AutoPad::kNotSet;
    else if (s == "SAME_UPPER") *ap = AutoPad::kSameUpper;
    else if (s == "SAME_LOWER") *ap = AutoPad::kSameLower;
    else if (s == "VALID") *ap = AutoPad::kValid;
    else
        return ctx.fail("auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '", s, "'");
    return {};
}

// Reads an ints attribute of exactly n entries, each >= min_value (default when absent).
Status read_ints(const OpContext& ctx, const char* name, size_t n, int64_t def, int64_t min_value,
                 std::vector<int64_t>* out) {
    const Attr* a = ctx.attr(name);
    if (!a) {
        out->assign(n, def);
        return {};
    }
    if (a->ints.size() != n)
        return ctx.fail("attribute ", name, " must have ", n, " values, got ", a->ints.size(), " ",
                        ints_str(a->ints));
    for (int64_t v : a->ints)
        if (v < min_value)
            return ctx.fail("attribute ", name, " values must be >= ", min_value, ", got ",
                            ints_str(a->ints));
    *out = a->ints;
    return {};
}

// Spatial geometry of a windowed op, normalized to 3 spatial dims (leading dims of size 1).
struct Geom {
    int nd = 0;  // true number of spatial dims
    std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1},
        pb{0, 0, 0}, pe{0, 0, 0};
    int64_t in_plane() const { return in[0] * in[1] * in[2]; }
    int64_t out_plane() const { return out[0] * out[1] * out[2]; }
    int64_t ksize() const { return k[0] * k[1] * k[2]; }
};

// Reads strides/dilations/pads/auto_pad and computes the output size of a forward window op
// (Conv, pools). `kernel` holds the nd kernel dims (already validated >= 1).
Status forward_geometry(const OpContext& ctx, const Shape& in_sp, const Shape& kernel,
                        bool ceil_mode, Geom* g) {
    const size_t nd = in_sp.size();
    if (nd < 1 || nd > 3)
        return ctx.fail_unsupported(nd, " spatial dims are not supported (1 to 3 are)");
    AutoPad ap;
    JIFFY_RETURN_IF_ERROR(parse_auto_pad(ctx, &ap));
    std::vector<int64_t> strides, dils, pads;
    JIFFY_RETURN_IF_ERROR(read_ints(ctx, "strides", nd, 1, 1, &strides));
    JIFFY_RETURN_IF_ERROR(read_ints(ctx, "dilations", nd, 1, 1, &dils));
    JIFFY_RETURN_IF_ERROR(read_ints(ctx, "pads", 2 * nd, 0, 0, &pads));
    g->nd = int(nd);
    const size_t o = 3 - nd;
    for (size_t i = 0; i < nd; ++i) {
        int64_t in = in_sp[i], k = kernel[i], s = strides[i], d = dils[i];
        int64_t ext = (k - 1) * d + 1, pb = 0, pe = 0, out = 0;
        if (in < 0) return ctx.fail("negative spatial dim in input shape");
        switch (ap) {
            case AutoPad::kNotSet:
            case AutoPad::kValid: {
                if (ap == AutoPad::kNotSet) {
                    pb = pads[i];
                    pe = pads[i + nd];
                }
                int64_t num = in + pb + pe - ext;
                if (num < 0)
                    return ctx.fail("spatial dim ", i, ": input size ", in, " plus pads ", pb, "+",
                                    pe, " is smaller than the kernel extent ", ext);
                out = ceil_mode ? ceil_div(num, s) + 1 : num / s + 1;
                // The last window must start inside the input or the begin padding.
                if (ceil_mode && (out - 1) * s >= in + pb) --out;
                break;
            }
            case AutoPad::kSameUpper:
            case AutoPad::kSameLower: {
                out = ceil_div(in, s);
                int64_t total = std::max<int64_t>(0, (out - 1) * s + ext - in);
                if (ap == AutoPad::kSameUpper) {
                    pb = total / 2;
                    pe = total - pb;
                } else {
                    pe = total / 2;
                    pb = total - pe;
                }
                break;
            }
        }
        g->in[o + i] = in;
        g->out[o + i] = out;
        g->k[o + i] = k;
        g->s[o + i] = s;
        g->d[o + i] = d;
        g->pb[o + i] = pb;
        g->pe[o + i] = pe;
    }
    return {};
}

// The 2-D kernel geometry (channels left 0) of a forward window op with at most 2 spatial dims.
kernels::Conv2DGeom conv2d_geom(const Geom& g) {
    kernels::Conv2DGeom geo;
    geo.H = g.in[1];
    geo.W = g.in[2];
    geo.OH = g.out[1];
    geo.OW = g.out[2];
    geo.kh = g.k[1];
    geo.kw = g.k[2];
    geo.sh = g.s[1];
    geo.sw = g.s[2];
    geo.dh = g.d[1];
    geo.dw = g.d[2];
    geo.ph = g.pb[1];
    geo.pw = g.pb[2];
    return geo;
}

// Row tables for the two outer spatial dims. For iteration row a = (a0, a1) over A0 x A1 and
// outer kernel tap t = (k0, k1), the mapped row is b_j = a_j * s_j - p_j + k_j * d_j; entries
// [begin[a], begin[a+1]) list the taps whose mapped row lies inside [0, B_j), with the tap index
// t = k0 * K1 + k1 and the element offset of the mapped row (b0 * B1 + b1) * row_len.
struct Rows {
    std::vector<int64_t> begin, tap, off;
};

Rows build_rows(const Geom& g, bool transpose) {
    // Forward: iterate output rows, map to input rows. Transpose: iterate input rows, map to
    // output rows.
    const auto& A = transpose ? g.in : g.out;
    const auto& B = transpose ? g.out : g.in;
    const int64_t row_len = B[2];
    Rows r;
    r.begin.reserve(size_t(A[0] * A[1] + 1));
    r.begin.push_back(0);
    for (int64_t a0 = 0; a0 < A[0]; ++a0)
        for (int64_t a1 = 0; a1 < A[1]; ++a1) {
            for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
                int64_t b0 = a0 * g.s[0] - g.pb[0] + k0 * g.d[0];
                if (b0 < 0 || b0 >= B[0]) continue;
                for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
                    int64_t b1 = a1 * g.s[1] - g.pb[1] + k1 * g.d[1];
                    if (b1 < 0 || b1 >= B[1]) continue;
                    r.tap.push_back(k0 * g.k[1] + k1);
                    r.off.push_back((b0 * B[1] + b1) * row_len);
                }
            }
            r.begin.push_back(int64_t(r.tap.size()));
        }
    return r;
}

// For kernel column kx: positions a in [lo, hi) of the iterated row map to b = a * s + off inside
// [0, B), where off = kx * d - p.
struct XRange {
    int64_t lo, hi, off;
};

std::vector<XRange> build_xr(const Geom& g, bool transpose) {
    const int64_t A = transpose ? g.in[2] : g.out[2];
    const int64_t B = transpose ? g.out[2] : g.in[2];
    const int64_t s = g.s[2];
    std::vector<XRange> xr;
    for (int64_t kx = 0; kx < g.k[2]; ++kx) {
        int64_t off = kx * g.d[2] - g.pb[2];
        int64_t lo = std::max<int64_t>(0, ceil_div(-off, s));
        int64_t hi = std::min<int64_t>(A, floor_div(B - 1 - off, s) + 1);
        if (hi < lo) hi = lo;
        xr.push_back({lo, hi, off});
    }
    return xr;
}

// ---------------------------------------------------------------- Conv

// Reads the fused-epilogue attributes; *has_res reports the residual input 3.
// The fused activation, clamp and affine: attributes `prefix`_fused_act / _alpha / _beta / _lo /
// _hi / _scale / _shift (prefix "": the conv's own; "_pw": ConvNhwcBand's expand 1x1).
Status parse_fused_act(const OpContext& ctx, const std::string& prefix, kernels::ConvEpi* e) {
    using kernels::ConvAct;
    const std::string act = ctx.attr_str((prefix + "_fused_act").c_str(), "");
    float da = 0, db = 0;
    if (act.empty()) e->act = ConvAct::kNone;
    else if (act == "Relu") e->act = ConvAct::kRelu;
    else if (act == "LeakyRelu") e->act = ConvAct::kLeakyRelu, da = 0.01f;
    else if (act == "Clip")
        e->act = ConvAct::kClip, da = -std::numeric_limits<float>::infinity(),
        db = std::numeric_limits<float>::infinity();
    else if (act == "HardSigmoid") e->act = ConvAct::kHardSigmoid, da = 0.2f, db = 0.5f;
    else if (act == "HardSwish") e->act = ConvAct::kHardSwish;
    else if (act == "Sigmoid") e->act = ConvAct::kSigmoid;
    else if (act == "Tanh") e->act = ConvAct::kTanh;
    else if (act == "Silu") e->act = ConvAct::kSilu;
    else
        return ctx.fail(prefix, "_fused_act must be Relu, LeakyRelu, Clip, HardSigmoid, HardSwish, ",
                        "Sigmoid, Tanh or Silu, got '", act, "'");
    e->alpha = ctx.attr_float((prefix + "_fused_alpha").c_str(), da);
    e->beta = ctx.attr_float((prefix + "_fused_beta").c_str(), db);
    const float inf = std::numeric_limits<float>::infinity();
    e->lo = ctx.attr_float((prefix + "_fused_lo").c_str(), -inf);
    e->hi = ctx.attr_float((prefix + "_fused_hi").c_str(), inf);
    e->clamp = e->lo != -inf || e->hi != inf;
    if (e->clamp && e->act == ConvAct::kNone)
        return ctx.fail(prefix, "_fused_lo / ", prefix, "_fused_hi need a ", prefix, "_fused_act");
    if (std::isnan(e->lo) || std::isnan(e->hi))
        return ctx.fail(prefix, "_fused_lo / ", prefix, "_fused_hi must not be NaN");
    e->scale = ctx.attr_float((prefix + "_fused_scale").c_str(), 1.0f);
    e->shift = ctx.attr_float((prefix + "_fused_shift").c_str(), 0.0f);
    e->affine = ctx.attr((prefix + "_fused_scale").c_str()) || ctx.attr((prefix + "_fused_shift").c_str());
    if (e->affine && e->act == ConvAct::kNone)
        return ctx.fail(prefix, "_fused_scale / ", prefix, "_fused_shift need a ", prefix, "_fused_act");
    if (!std::isfinite(e->scale) || !std::isfinite(e->shift))
        return ctx.fail(prefix, "_fused_scale / ", prefix, "_fused_shift must be finite");
    return {};
}

Status parse_fused(const OpContext& ctx, kernels::ConvEpi* e, bool* has_res) {
    JIFFY_RETURN_IF_ERROR(parse_fused_act(ctx, "", e));
    *has_res = ctx.attr_int("_fused_residual", 0) != 0;
    if (!*has_res && ctx.num_inputs() > 3)
        return ctx.fail("has ", ctx.num_inputs(), " inputs; at most 3 without _fused_residual");
    if (*has_res && ctx.num_inputs() != 4)
        return ctx.fail("_fused_residual needs exactly 4 inputs, got ", ctx.num_inputs());
    if (*has_res) JIFFY_RETURN_IF_ERROR(expect_same_dtype(ctx, 3, "_fused_add"));
    return {};
}

template <typename T>
inline T fused_act_raw(T v, const kernels::ConvEpi& e) {
    using kernels::ConvAct;
    switch (e.act) {
        case ConvAct::kNone: return v;
        case ConvAct::kRelu: return v > T(0) ? v : T(0);
        case ConvAct::kLeakyRelu: return v < T(0) ? v * T(e.alpha) : v;
        case ConvAct::kClip: return std::min(std::max(v, T(e.alpha)), T(e.beta));
        case ConvAct::kHardSigmoid:
            return std::min(std::max(T(e.alpha) * v + T(e.beta), T(0)), T(1));
        case ConvAct::kHardSwish: return v * std::min(std::max(v / T(6) + T(0.5), T(0)), T(1));
        case ConvAct::kSigmoid: return T(1) / (T(1) + std::exp(-v));
        case ConvAct::kTanh: return std::tanh(v);
        case ConvAct::kSilu: return v / (T(1) + std::exp(-v));
    }
    return v;
}

// The activation, then the optional clamp (std::max then std::min, as the Max / Min ops) and
// affine (one rounding, as the kernels' FMA).
template <typename T>
inline T fused_act(T v, const kernels::ConvEpi& e) {
    v = fused_act_raw<T>(v, e);
    if (e.clamp) v = std::min(std::max(v, T(e.lo)), T(e.hi));
    if (e.affine) v = std::fma(v, T(e.scale), T(e.shift));
    return v;
}

struct ConvDims {
    int64_t N = 0, C = 0, M = 0, G = 1, Cg = 0, Mg = 0;
    int64_t in_plane = 0, out_plane = 0, ksize = 0, kw = 0;
    int64_t rows = 0;      // iterated rows (output rows for Conv, input rows for ConvTranspose)
    int64_t row_len = 0;   // elements per iterated row
    int64_t sx = 1;
    bool has_bias = false;
};

// Forward convolution. Output channels are processed in blocks of up to 4 (sharing every input
// load); each output row is computed as (1) the border positions where some kernel column falls
// into the padding, accumulated tap by tap over their precomputed valid ranges, and (2) the
// interior [L, H) where every kernel column is valid, in strips of 8 positions whose partial
// sums stay in registers across all input channels and taps.
template <typename T>
class ConvKernel : public Kernel {
public:
    // A strip of 8 output positions held in 16-byte vectors (GCC/Clang vector extensions).
    static constexpr int kStrip = 8;
    static constexpr int kVecs = int(kStrip * sizeof(T) / 16);
    typedef T V __attribute__((vector_size(16)));
    static constexpr int64_t kTile = 512;  // pointwise: positions per tile

    ConvKernel(ConvDims d, Rows rows, std::vector<XRange> xr, bool pointwise,
               kernels::ConvEpi epi = {}, bool has_res = false)
        : d_(d), rows_(std::move(rows)), xr_(std::move(xr)), pointwise_(pointwise), epi_(epi),
          has_res_(has_res) {
        L_ = 0;
        H_ = d_.row_len;
        for (const XRange& q : xr_) {
            L_ = std::max(L_, q.lo);
            H_ = std::min(H_, q.hi);
        }
        if (H_ < L_) H_ = L_;
    }

    Status run(const void* const* in, void* const* out) const override {
        const T* X = static_cast<const T*>(in[0]);
        const T* W = static_cast<const T*>(in[1]);
        const T* B = d_.has_bias ? static_cast<const T*>(in[2]) : nullptr;
        T* Y = static_cast<T*>(out[0]);
        const T* R = has_res_ ? static_cast<const T*>(in[3]) : nullptr;
        const bool epi = has_res_ || epi_.act != kernels::ConvAct::kNone;
        // Applies the fused epilogue to positions [yoff, yoff + len) of group g's channels.
        auto finish = [&](int64_t n, int64_t g, int64_t yoff, int64_t len) {
            for (int64_t m = g * d_.Mg; m < (g + 1) * d_.Mg; ++m) {
                const int64_t o = (n * d_.M + m) * d_.out_plane + yoff;
                T* y = Y + o;
                if (R)
                    for (int64_t i = 0; i < len; ++i) y[i] = fused_act<T>(y[i] + R[o + i], epi_);
                else
                    for (int64_t i = 0; i < len; ++i) y[i] = fused_act<T>(y[i], epi_);
            }
        };
        for (int64_t n = 0; n < d_.N; ++n)
            for (int64_t g = 0; g < d_.G; ++g) {
                const T* xg = X + (n * d_.C + g * d_.Cg) * d_.in_plane;
                if (pointwise_) {
                    // One "row" per tile of the plane, one tap, every position interior.
                    const int64_t tap = 0;
                    for (int64_t t0 = 0; t0 < d_.out_plane; t0 += kTile) {
                        const int64_t len = std::min(kTile, d_.out_plane - t0);
                        const XRange q{0, len, 0};
                        blocks(xg, W, B, Y, n, g, t0, len, 0, 1, &tap, &t0, &q, 0, len);
                        if (epi) finish(n, g, t0, len);
                    }
                } else {
                    for (int64_t r = 0; r < d_.rows; ++r) {
                        blocks(xg, W, B, Y, n, g, r * d_.row_len, d_.row_len,
                               rows_.begin[size_t(r)], rows_.begin[size_t(r) + 1],
                               rows_.tap.data(), rows_.off.data(), xr_.data(), L_, H_);
                        if (epi) finish(n, g, r * d_.row_len, d_.row_len);
                    }
                }
            }
        return {};
    }

private:
    // Computes one output row (offset yoff, length len) for every output channel of group g.
    void blocks(const T* xg, const T* W, const T* B, T* Y, int64_t n, int64_t g, int64_t yoff,
                int64_t len, int64_t e0, int64_t e1, const int64_t* tap, const int64_t* off,
                const XRange* xr, int64_t L, int64_t H) const {
        int64_t ml = 0;
        for (; ml + 4 <= d_.Mg; ml += 4)
            block<4>(xg, W, B, Y, n, g * d_.Mg + ml, yoff, len, e0, e1, tap, off, xr, L, H);
        for (; ml < d_.Mg; ++ml)
            block<1>(xg, W, B, Y, n, g * d_.Mg + ml, yoff, len, e0, e1, tap, off, xr, L, H);
    }

    template <int MB>
    void block(const T* xg, const T* W, const T* B, T* Y, int64_t n, int64_t m0, int64_t yoff,
               int64_t len, int64_t e0, int64_t e1, const int64_t* tap, const int64_t* off,
               const XRange* xr, int64_t L, int64_t H) const {
        if (d_.sx == 1)
            block_s<MB, true>(xg, W, B, Y, n, m0, yoff, len, e0, e1, tap, off, xr, L, H);
        else
            block_s<MB, false>(xg, W, B, Y, n, m0, yoff, len, e0, e1, tap, off, xr, L, H);
    }

    template <int MB, bool S1>
    void block_s(const T* xg, const T* W, const T* B, T* Y, int64_t n, int64_t m0, int64_t yoff,
                 int64_t len, int64_t e0, int64_t e1, const int64_t* tap, const int64_t* off,
                 const XRange* xr, int64_t L, int64_t H) const {
        const int64_t sx = S1 ? 1 : d_.sx, kw = d_.kw, ks = d_.ksize, Cg = d_.Cg;
        T* y[MB];
        const T* wm[MB];
        for (int j = 0; j < MB; ++j) {
            y[j] = Y + (n * d_.M + m0 + j) * d_.out_plane + yoff;
            wm[j] = W + (m0 + j) * Cg * ks;
            const T bias = B ? B[m0 + j] : T(0);
            for (int64_t a = 0; a < len; ++a) y[j][a] = bias;
        }
        // (1) Border positions, tap by tap.
        if (L > 0 || H < len) {
            for (int64_t c = 0; c < Cg; ++c) {
                const T* xc = xg + c * d_.in_plane;
                for (int64_t e = e0; e < e1; ++e) {
                    const T* xrow = xc + off[e];
                    const int64_t wo = c * ks + tap[e] * kw;
                    for (int64_t kx = 0; kx < kw; ++kx) {
                        const XRange& q = xr[kx];
                        const T* xs = xrow + q.off;
                        const int64_t r0 = std::min(q.hi, L), r1 = std::max(q.lo, H);
                        for (int j = 0; j < MB; ++j) {
                            const T w = wm[j][wo + kx];
                            T* yj = y[j];
                            for (int64_t a = q.lo; a < r0; ++a) yj[a] += w * xs[a * sx];
                            for (int64_t a = r1; a < q.hi; ++a) yj[a] += w * xs[a * sx];
                        }
                    }
                }
            }
        }
        // (2) Interior strips with register accumulators.
        int64_t a0 = L;
        for (; a0 + kStrip <= H; a0 += kStrip) {
            V acc[MB][kVecs] = {};
            for (int64_t c = 0; c < Cg; ++c) {
                const T* xc = xg + c * d_.in_plane + a0 * sx;
                for (int64_t e = e0; e < e1; ++e) {
                    const T* xrow = xc + off[e];
                    const int64_t wo = c * ks + tap[e] * kw;
                    for (int64_t kx = 0; kx < kw; ++kx) {
                        const T* xs = xrow + xr[kx].off;
                        V xv[kVecs];
                        if constexpr (S1) {
                            std::memcpy(xv, xs, sizeof(xv));
                        } else {
                            T tmp[kStrip];
                            for (int i = 0; i < kStrip; ++i) tmp[i] = xs[i * sx];
                            std::memcpy(xv, tmp, sizeof(xv));
                        }
                        for (int j = 0; j < MB; ++j) {
                            const V w = V{} + wm[j][wo + kx];
                            for (int v = 0; v < kVecs; ++v) acc[j][v] += w * xv[v];
                        }
                    }
                }
            }
            for (int j = 0; j < MB; ++j) {
                T tmp[kStrip];
                std::memcpy(tmp, acc[j], sizeof(tmp));
                for (int i = 0; i < kStrip; ++i) y[j][a0 + i] += tmp[i];
            }
        }
        // Interior tail (fewer than kStrip positions), one position at a time.
        for (; a0 < H; ++a0) {
            T acc[MB] = {};
            for (int64_t c = 0; c < Cg; ++c) {
                const T* xc = xg + c * d_.in_plane + a0 * sx;
                for (int64_t e = e0; e < e1; ++e) {
                    const T* xrow = xc + off[e];
                    const int64_t wo = c * ks + tap[e] * kw;
                    for (int64_t kx = 0; kx < kw; ++kx) {
                        const T xv = xrow[xr[kx].off];
                        for (int j = 0; j < MB; ++j) acc[j] += wm[j][wo + kx] * xv;
                    }
                }
            }
            for (int j = 0; j < MB; ++j) y[j][a0] += acc[j];
        }
    }

    ConvDims d_;
    Rows rows_;
    std::vector<XRange> xr_;
    bool pointwise_;
    kernels::ConvEpi epi_;
    bool has_res_ = false;
    int64_t L_ = 0, H_ = 0;
};

// Float32 1-D/2-D Conv on the fast kernels: im2col + packed GEMM (ConvGemm) or, for depthwise
// convs, the direct vectorized kernel. The ISA is chosen at prepare. NOT REENTRANT: the im2col
// tile and the other per-run buffers live in the plan's shared scratch (bind_scratch), the packed
// weights when W is not constant in a mutable member.
class ConvFastKernel : public Kernel {
public:
    ConvFastKernel(const ConvDims& d, kernels::Isa isa, const kernels::Conv2DGeom& geo,
                   bool depthwise, const float* w_const, kernels::ConvEpi epi, bool has_res)
        : d_(d), isa_(isa), geo_(geo), depthwise_(depthwise), epi_(epi), has_res_(has_res) {
        if (depthwise_) {
            dw_mode_ = kernels::conv_dw_mode(isa, geo);
            scratch_n_ = kernels::conv_dw_scratch_floats(geo);
            return;
        }
        // 3x3 / 1x3 / 3x1 stride-1 convs with known weights: Winograd where its cost model says it wins.
        if (d.G == 1 && w_const) wino_ = kernels::winograd_choice(isa, geo);
        wino_m_ = wino_.m;
        if (wino_m_) {
            wino_k_ = kernels::Winograd(isa, geo, wino_m_, wino_.trans);
            scratch_n_ = wino_k_.scratch_floats();
            wpacked_ = kernels::alloc_weights(wino_k_.packed_w_floats());
            w_const_ = true;
            wino_k_.pack_w(w_const, wpacked_.get());
            setup_amx(w_const);
            return;
        }
        gemm_ = kernels::ConvGemm(isa, geo, d.G);
        scratch_n_ = gemm_.scratch_floats();
        wpacked_ = kernels::alloc_weights(gemm_.packed_w_floats());
        w_const_ = w_const != nullptr;
        if (w_const_) gemm_.pack_w(w_const, wpacked_.get());
        setup_amx(w_const);
    }

    // Known weights on a core with AMX, where it pays (amx_pays): the AMX kernel (kernels/amx.h)
    // first, the AVX-512 one (prepared above, Winograd or GEMM) kept for the inputs whose values
    // AMX's BF16 parts cannot carry (then it runs instead, that run).
    void setup_amx(const float* w_const) {
        if (d_.G != 1 || !w_const || !amx_pays(isa_, geo_, wino_m_ != 0)) return;
        amx_ = kernels::AmxConv(geo_);
        amx_w_ = kernels::alloc_weights((amx_.packed_w_halves() + 1) / 2);
        if (!amx_.pack_w(w_const, reinterpret_cast<uint16_t*>(amx_w_.get()))) {
            amx_w_.reset();
            return;
        }
        scratch_n_ = std::max(scratch_n_, amx_.scratch_floats());
    }

    Status run(const void* const* in, void* const* out) const override {
        const float* X = static_cast<const float*>(in[0]);
        const float* W = static_cast<const float*>(in[1]);
        const float* B = d_.has_bias ? static_cast<const float*>(in[2]) : nullptr;
        const float* R = has_res_ ? static_cast<const float*>(in[3]) : nullptr;
        float* Y = static_cast<float*>(out[0]);
        const int64_t in_img = d_.C * d_.in_plane, out_img = d_.M * d_.out_plane;
        if (!depthwise_ && !w_const_) gemm_.pack_w(W, wpacked_.get());
        // The pool in caller-only mode (Session's threads choice): the one-thread path, not the
        // parts one after the other (Winograd by tiles run so: the embedding model 1.25x slower).
        if (!parts_.empty() && !pool_->serial()) return run_parallel(X, W, B, R, Y);
        float* scratch = scr_->data();
        for (int64_t n = 0; n < d_.N; ++n) {
            const float* r = R ? R + n * out_img : nullptr;
            if (amx_w_ && amx_.run(X + n * in_img, amx_wp(), B, r, Y + n * out_img, scratch, epi_)) continue;
            run_avx(X + n * in_img, W, B, r, Y + n * out_img, scratch);
        }
        return {};
    }

    // One image on the caller with the AVX-512 / AVX2 / portable kernels (depthwise, Winograd or
    // GEMM): the serial path, and AMX's fallback.
    void run_avx(const float* x, const float* W, const float* B, const float* r, float* y, float* scratch) const {
        if (depthwise_)
            kernels::conv_depthwise(isa_, geo_, x, W, B, r, y, epi_, scratch, dw_mode_);
        else if (wino_m_)
            wino_k_.run(x, wpacked_.get(), B, r, y, scratch, epi_);
        else
            gemm_.run(x, wpacked_.get(), B, r, y, scratch, epi_);
    }

    // The weights to 17 bits on AMX (BF16x3 without W's lo parts; Kernel::set_fast_weights).
    FastWeights set_fast_weights(bool fast) override {
        return amx_fast_weights(amx_, amx_w_ != nullptr, fast, FastWeights::kConv);
    }
    std::string describe() const override {
        const std::string isa = kernels::isa_name(isa_);
        if (depthwise_) {
            std::string r = "conv_dw " + std::string(kernels::conv_dw_kernel_name(isa_, dw_mode_, geo_)) + " " + isa;
            if (!parts_.empty()) r += " x" + std::to_string(parts_.size()) + " threads";
            return r;
        }
        std::string r = amx_w_ ? std::string("conv_") + amx_.mode_name() + " 32x32"
                        : wino_m_ ? std::string(wino_k_.name()) : "conv_gemm_" + std::string(gemm_.name());
        if (!wino_m_ && !amx_w_) {
            const kernels::ConvGemmArgs& a = gemm_.args();
            const int64_t mr = kernels::conv_mr(isa_), nr = kernels::conv_nr(isa_);
            r += " " + std::to_string(a.trans ? nr : mr) + "x" + std::to_string(a.trans ? mr : nr) + " " + isa;
            if (a.pad_copy) r += " padcopy";
        }
        if (!parts_.empty())
            r += " x" + std::to_string(parts_.size()) + " threads" +
                 (split_ == Split::kTiles ? " by tiles" : split_ == Split::kPixels ? " by pixels" : "");
        return r;
    }

    // Splits the conv across `pool` in `chunks` parts (docs/threading.md), each part with its own
    // scratch and every output summed in the same order as on one thread (bitwise equal):
    //  - by output channels: GEMM path with large weights: one ConvGemm, each part a range of
    //    the whole packing's row blocks / channel panels (run_channels); Winograd and depthwise:
    //    fixed ranges, each Winograd part its own transformed weights;
    //  - by pixels (GEMM im2col mode, small weights, many pixels; the transposed mode on planes of
    //    >= 4 x chunks x MR pixels): one ConvGemm, each part a range of output pixels with only
    //    its im2col / padded rows (no copy done twice);
    //  - by tiles (Winograd, transformed weights <= 8 MiB): each part transforms, multiplies
    //    and back-transforms its own tiles (the transposed orientation then finishes the tile
    //    rows two parts share on the caller).
    // The GEMM channel, pixel and tile splits are balanced: one part per thread, the ranges cut
    // per run in proportion to the threads' measured speeds (ThreadPool::split).
    // Needs one group and constant weights for the GEMM path; otherwise the kernel stays serial.
    // JIFFY_CONV_SPLIT=channels forces the channel split, =tiles (or pixels) the others wherever
    // they apply (measurements).
    // JIFFY_TRANS_SPLIT=channels: the transposed mode split by channels everywhere (measurements).
    static bool trans_channels() {
        static const bool on = [] {
            const char* e = std::getenv("JIFFY_TRANS_SPLIT");
            return e && std::string(e) == "channels";
        }();
        return on;
    }
    void set_parallel(ThreadPool* pool, int chunks, const float* w_const) {
        if (!pool || chunks < 2) return;
        if (amx_w_) {
            // AMX: by 32-pixel blocks where each part gets two or more, else by 32-channel
            // blocks; any range gives the same bits. The AVX-512 fallback then runs on the caller.
            // Under 256 pixels with >= 8 channel blocks by channels too (session 39): split by
            // pixels each core reads all the weights for few pixels; SqueezeNet's classifier
            // 1x1 512 -> 1000 on 13x13 at two threads 358 -> 288-298 us, its 64 -> 256 37 -> 30
            // (the model 2.46 -> 2.33 ms; ResNet-50, MobileNetV2, EfficientNet-B0 the same).
            if (chunks != pool->threads()) return;
            const bool few_pixels = amx_.pixels() < 256 && amx_.channel_blocks() >= 8;
            if (amx_.pixels() >= 64 * chunks && !few_pixels)
                balanced_parts(pool, chunks, Split::kPixels, scratch_n_);
            else if (amx_.channel_blocks() >= chunks)
                balanced_parts(pool, chunks, Split::kChannels, scratch_n_);
            return;
        }
        const int64_t M = geo_.M;
        static const int forced = [] {  // 1: channels, 2: tiles / pixels wherever they work
            const char* e = std::getenv("JIFFY_CONV_SPLIT");
            const std::string v = e ? e : "";
            return v == "channels" ? 1 : v == "tiles" || v == "pixels" ? 2 : 0;
        }();
        const bool force_channels = forced == 1, force_other = forced == 2;
        if (!depthwise_) {
            const int64_t mr = kernels::conv_mr(isa_), nr = kernels::conv_nr(isa_);
            if (d_.G != 1 || !w_const) return;  // the weights must be known
            if (wino_m_) {
                const kernels::WinoArgs& a = wino_k_.args();
                // Tiles unless the transformed weights are large (each part streams all of them:
                // 3x3 512 -> 512 on 7x7, 16 MiB, measured faster split by channels).
                const double u_bytes = 4.0 * double(a.npts * geo_.C * (a.trans ? a.Mpad : M));
                if (!force_channels && a.T >= 2 * chunks && chunks == pool->threads() &&
                    (force_other || u_bytes <= 8.0 * (1 << 20))) {
                    balanced_parts(pool, chunks, Split::kTiles, size_t(wino_k_.scratch_floats()));
                    yt_n_ = wino_k_.yt_floats();
                    return;
                }
            } else if (const kernels::ConvGemmArgs& a = gemm_.args();
                       !force_channels && gemm_.pixel_align() > 0 && chunks == pool->threads() &&
                       (a.trans ? !trans_channels() && a.P >= 4 * chunks * mr
                                : a.P >= chunks * nr &&
                                      (force_other ||
                                       (M * a.K <= 262144 && a.P >= (M <= 4 * mr ? 2 : 4) * chunks * nr)))) {
                // Pixels where the weights fit L2 (each part reads all of them; 3x3 s2 128 -> 128
                // on 56x56, 0.6 MiB: pixels, 256 -> 256 on 28x28, 2.3 MiB: channels, measured)
                // and each part gets several NR-wide panels: two or more with at most 4 channel
                // blocks (split by channels, each part reads all of the input for a few rows:
                // SqueezeNet's 1x1 384 -> 48 on 13x13 at two threads 45 -> 33 and 67 -> 55 us).
                balanced_parts(pool, chunks, Split::kPixels, size_t(gemm_.scratch_floats()));
                return;
            }
            // Parts of >= 8 rows keep the microkernel's efficiency.
            if (M < 16) return;
            if (!wino_m_) {
                // By channels on the GEMM path: one part per thread, a range of the whole conv's
                // weight row blocks (transposed: channel panels) chosen per run; each part packs
                // or pads the input it reads on its own scratch.
                if (gemm_.channel_blocks() >= chunks && chunks == pool->threads())
                    balanced_parts(pool, chunks, Split::kChannels, size_t(gemm_.scratch_floats()));
                return;
            }
            // Winograd by channels (each part its own transformed weights), at MR-row edges.
            const int64_t align = M >= chunks * mr ? mr : 8;
            chunks = int(std::min<int64_t>(chunks, M / 8));
            for (int t = 0; t < chunks; ++t) {
                Part p;
                chunk_range(M, chunks, t, align, &p.c0, &p.c1);
                if (p.c1 <= p.c0) continue;
                kernels::Conv2DGeom g = geo_;
                g.M = p.c1 - p.c0;
                // Winograd: each part transforms the whole input (sums as on one thread).
                p.wino = kernels::Winograd(isa_, g, wino_m_, wino_.trans);
                p.sn = size_t(p.wino.scratch_floats());
                p.w = kernels::alloc_weights(p.wino.packed_w_floats());
                p.wino.pack_w(w_const + p.c0 * geo_.C * geo_.kh * geo_.kw, p.w.get());
                parts_.push_back(std::move(p));
            }
        } else {
            chunks = int(std::min<int64_t>(chunks, M));
            for (int t = 0; t < chunks; ++t) {
                Part p;
                chunk_range(M, chunks, t, 1, &p.c0, &p.c1);
                if (p.c1 <= p.c0) continue;
                p.sn = size_t(kernels::conv_dw_scratch_floats(geo_));
                parts_.push_back(std::move(p));
            }
        }
        if (parts_.size() < 2) {
            parts_.clear();
            return;
        }
        pool_ = pool;
    }

    // After set_parallel: the conv's scratch in the plan's shared scratch (runtime/scratch.h); a
    // split puts part i at i * part_stride() and the transposed Winograd tile split's shared
    // output after the parts.
    void bind_scratch(SharedScratch* s) {
        scr_ = s;
        if (parts_.empty()) {
            s->reserve(scratch_n_);
            return;
        }
        size_t biggest = 0;
        for (const Part& p : parts_) biggest = std::max(biggest, p.sn);
        s->reserve_parts(int(parts_.size()), biggest, yt_n_);
        s->reserve(scratch_n_);  // the one-thread path too (caller-only mode)
    }

private:
    enum class Split { kChannels, kPixels, kTiles };
    struct Part {
        int64_t c0 = 0, c1 = 0;  // output channels [c0, c1)
        kernels::Winograd wino;  // by channels, Winograd: the conv restricted to those channels
        std::shared_ptr<float> w;  // its packed weights (kernels::alloc_weights: huge pages)
        size_t sn = 0;  // its scratch floats (at i * part_stride() of the shared scratch)
    };

    // A balanced split: one part per thread (its range cut per run), each with `scratch` floats.
    void balanced_parts(ThreadPool* pool, int chunks, Split split, size_t scratch) {
        split_ = split;
        bal_ = std::make_unique<Balance>(chunks);
        parts_.assign(size_t(chunks), Part{});
        for (Part& p : parts_) p.sn = scratch;
        pool_ = pool;
    }

    Status run_parallel(const float* X, const float* W, const float* B, const float* R, float* Y) const {
        const int64_t in_img = d_.C * d_.in_plane, out_img = d_.M * d_.out_plane;
        const int64_t P = geo_.OH * geo_.OW, HW = geo_.H * geo_.W, khw = geo_.kh * geo_.kw;
        const int n_parts = int(parts_.size());
        float* base = scr_->data();
        const size_t stride = scr_->part_stride();
        for (int64_t n = 0; n < d_.N; ++n) {
            const float* x = X + n * in_img;
            const float* r = R ? R + n * out_img : nullptr;
            float* y = Y + n * out_img;
            // Pixels, tiles and GEMM channel blocks: one part per thread, sized by the threads'
            // measured speeds (ThreadPool::split; any boundary gives the same bits).
            if (amx_w_) {
                bool ok[ThreadPool::kMaxThreads];
                for (int t = 0; t < n_parts; ++t) ok[t] = true;
                if (split_ == Split::kPixels)
                    pool_->for_balanced(P, 32, bal_.get(), [&](int t, int64_t pb, int64_t pe) {
                        ok[t] = amx_.run(x, amx_wp(), B, r, y, base + size_t(t) * stride, epi_, pb, pe);
                    });
                else
                    pool_->for_balanced(amx_.channel_blocks(), 1, bal_.get(), [&](int t, int64_t cb, int64_t ce) {
                        ok[t] = amx_.run(x, amx_wp(), B, r, y, base + size_t(t) * stride, epi_, 0, -1, cb, ce);
                    });
                bool all = true;
                for (int t = 0; t < n_parts; ++t) all = all && ok[t];
                if (all) continue;
                run_avx(x, W, B, r, y, base);  // a value AMX's parts cannot carry, on the caller
                continue;
            }
            if (split_ == Split::kTiles) {
                const kernels::WinoArgs& wa = wino_k_.args();
                int64_t b[ThreadPool::kMaxThreads + 1];
                float* yt = base + size_t(n_parts) * stride;
                pool_->split(wa.T, 1, b, bal_.get());
                auto tiles = [&](int t) {
                    wino_k_.run_tiles(x, wpacked_.get(), B, r, y, base + size_t(t) * stride, epi_, b[t], b[t + 1], yt);
                };
                pool_->parallel_balanced(b, tiles, bal_.get());
                // The few tile rows two parts share (at most one per part boundary), on the caller.
                for (int64_t i = 1, last = -1; i < n_parts; ++i)
                    if (const int64_t tr = wino_k_.shared_row(b[i]); tr >= 0 && tr != last) {
                        wino_k_.finish_rows(yt, B, r, y, epi_, tr, tr + 1);
                        last = tr;
                    }
                continue;
            }
            if (split_ == Split::kChannels && !depthwise_ && !wino_m_) {
                pool_->for_balanced(gemm_.channel_blocks(), 1, bal_.get(), [&](int t, int64_t cb, int64_t ce) {
                    gemm_.run_channels(x, wpacked_.get(), B, r, y, base + size_t(t) * stride, epi_, cb, ce);
                });
                continue;
            }
            if (split_ == Split::kPixels) {
                pool_->for_balanced(gemm_.args().P, gemm_.pixel_align(), bal_.get(), [&](int t, int64_t pb, int64_t pe) {
                    gemm_.run_pixels(x, wpacked_.get(), B, r, y, base + size_t(t) * stride, epi_, pb, pe);
                });
                continue;
            }
            auto part = [&](int t) {
                const Part& p = parts_[size_t(t)];
                float* ps = base + size_t(t) * stride;
                const float* b = B ? B + p.c0 : nullptr;
                const float* rr = r ? r + p.c0 * P : nullptr;
                if (depthwise_) {
                    kernels::Conv2DGeom g = geo_;
                    g.C = g.M = p.c1 - p.c0;
                    kernels::conv_depthwise(isa_, g, x + p.c0 * HW, W + p.c0 * khw, b, rr, y + p.c0 * P, epi_,
                                            ps, dw_mode_);
                } else {
                    p.wino.run(x, p.w.get(), b, rr, y + p.c0 * P, ps, epi_);
                }
            };
            pool_->parallel_for(n_parts, part);
        }
        return {};
    }

    // AMX where this core has it and it measured faster (docs/amx.md; ResNet-50's and PP-OCR
    // det's layers, one thread): the packing of the input is shared by the output channels, so
    // only with many of them (>= 64, in 32-channel blocks at least three quarters full), and the
    // weights are streamed once per pixel tile, so only on planes of >= 64 pixels (ResNet-50's
    // 7x7 layers: 512 x 2048 weights from DRAM as three BF16 parts, 0.8-1.3x; YOLO's 10x10 1x1s
    // 0.73-0.84x); kernels larger than 1x1 (they gather their input per tap) from 32 input
    // channels (the 7x7 stem, 3 -> 64 on 224 -> 112: 1465 against 1206 us): 3x3 s2 128 -> 128
    // on 56 -> 28 1.46x faster, YOLO's 3x3 s2 64 -> 128 on 40 -> 20 and 128 -> 256 on 20 -> 10
    // 340 -> 216 and 334 -> 231 us, ResNet-50's 256 -> 256 on 28 -> 14 even (session 25 held
    // these to >= 784 pixels and 1x1s to >= 196: YOLO 0.94x with the lower bounds). BF16x3 lost
    // to the Winograd layers everywhere (1.2-1.7x slower), BF16x2 won on all of ResNet-50's, 7x7
    // planes included.
    // JIFFY_AMX_CONV=0 turns it off for convs only.
    static bool amx_pays(kernels::Isa isa, const kernels::Conv2DGeom& g, bool winograd) {
        if (env_zero("JIFFY_AMX_CONV") || isa != kernels::Isa::kAvx512 || !kernels::amx_usable()) return false;
        const bool x2 = kernels::amx_parts() == 2;
        const int64_t khw = g.kh * g.kw, K = g.C * khw, P = g.OH * g.OW;
        if (khw > kernels::kAmxMaxTaps || K < 64 || g.M < 64 || (g.M % 32 != 0 && g.M < 96)) return false;
        if (winograd && !x2) return false;
        return P >= (x2 ? 49 : 64) && (khw == 1 || g.C >= 32 || (x2 && winograd));
    }
    const uint16_t* amx_wp() const { return reinterpret_cast<const uint16_t*>(amx_w_.get()); }

    Split split_ = Split::kChannels;
    size_t yt_n_ = 0;  // by tiles, transposed Winograd: the shared P x Mpad output
    ThreadPool* pool_ = nullptr;
    std::vector<Part> parts_;
    std::unique_ptr<Balance> bal_;  // the balanced splits' per-thread speeds on this conv
    ConvDims d_;
    kernels::Isa isa_;
    kernels::Conv2DGeom geo_;
    bool depthwise_;
    kernels::ConvDwMode dw_mode_ = kernels::ConvDwMode::kRows;  // depthwise: chosen at prepare
    kernels::ConvEpi epi_;
    bool has_res_;
    bool w_const_ = false;
    kernels::ConvGemm gemm_;
    kernels::AmxConv amx_;          // where amx_w_ is set (setup_amx)
    std::shared_ptr<float> amx_w_;  // its packed weights (BF16 parts)
    kernels::WinoPick wino_;  // m = 2 or 4: Winograd F(m,3) (wino_k_) instead of gemm_
    int wino_m_ = 0;          // wino_.m
    kernels::Winograd wino_k_;
    size_t scratch_n_ = 0;          // floats of scratch on one thread (the parts': Part::sn)
    SharedScratch* scr_ = nullptr;  // the plan's (bind_scratch)
    // Packed weights (filled per run when W is not constant): kernels::alloc_weights, on huge pages
    // from 64 KiB up (ResNet-50's ~100 MB of them stream from DRAM every run).
    std::shared_ptr<float> wpacked_;
};

template <typename T>
class ConvTransposeKernel : public Kernel {
public:
    ConvTransposeKernel(ConvDims d, Rows rows, std::vector<XRange> xr, kernels::ConvEpi epi)
        : d_(d), rows_(std::move(rows)), xr_(std::move(xr)), epi_(epi) {}

    Status run(const void* const* in, void* const* out) const override {
        const T* X = static_cast<const T*>(in[0]);
        const T* W = static_cast<const T*>(in[1]);
        const T* B = d_.has_bias ? static_cast<const T*>(in[2]) : nullptr;
        T* Y = static_cast<T*>(out[0]);
        const int64_t iw = d_.row_len, sx = d_.sx;
        for (int64_t n = 0; n < d_.N; ++n)
            for (int64_t m = 0; m < d_.M; ++m) {
                const int64_t g = m / d_.Mg, ml = m % d_.Mg;
                T* __restrict y = Y + (n * d_.M + m) * d_.out_plane;
                const T bias = B ? B[m] : T(0);
                for (int64_t i = 0; i < d_.out_plane; ++i) y[i] = bias;
                for (int64_t c = 0; c < d_.Cg; ++c) {
                    const int64_t ic = g * d_.Cg + c;
                    const T* xc = X + (n * d_.C + ic) * d_.in_plane;
                    const T* wc = W + (ic * d_.Mg + ml) * d_.ksize;
                    for (int64_t r = 0; r < d_.rows; ++r) {
                        const T* __restrict xrow = xc + r * iw;
                        const int64_t e0 = rows_.begin[size_t(r)], e1 = rows_.begin[size_t(r) + 1];
                        for (int64_t e = e0; e < e1; ++e) {
                            T* __restrict yrow = y + rows_.off[size_t(e)];
                            const T* wt = wc + rows_.tap[size_t(e)] * d_.kw;
                            for (int64_t kx = 0; kx < d_.kw; ++kx) {
                                const XRange& q = xr_[size_t(kx)];
                                const T w = wt[kx];
                                T* __restrict ys = yrow + q.off;
                                if (sx == 1)
                                    for (int64_t a = q.lo; a < q.hi; ++a) ys[a] += w * xrow[a];
                                else
                                    for (int64_t a = q.lo; a < q.hi; ++a) ys[a * sx] += w * xrow[a];
                            }
                        }
                    }
                }
                if (epi_.act != kernels::ConvAct::kNone)
                    for (int64_t i = 0; i < d_.out_plane; ++i) y[i] = fused_act<T>(y[i], epi_);
            }
        return {};
    }

private:
    ConvDims d_;
    Rows rows_;
    std::vector<XRange> xr_;
    kernels::ConvEpi epi_;
};

// Float32 1-D/2-D ConvTranspose with group 1 and constant W: a pointwise GEMM
// col[(m, ky, kx), p] = sum_c W[c, m, ky, kx] . X[c, p] on the fast conv kernels, then col2im
// (Y = bias, plus each col row scattered onto its output taps), then the fused epilogue.
// Where the taps do not overlap (kernel == stride, no padding, no dilation, output = input x
// stride: PP-OCR det's 2x2 stride-2 upsamplers, U-Net decoders), each output pixel is one col
// value plus the bias, written once: the input goes through in bands of rows whose col stays in
// L2 (~256 KiB), each band's rows interleaved straight into the output with the epilogue on them.
// PP-OCRv4 det's 24 -> 24 on 160x160 -> 320x320 and its ReLU step, 2130 + 600 -> ~1160 us.
// The col of the general case is the kernel's own (not reentrant, like the plan's scratch).
class ConvTransposeFastKernel : public Kernel {
public:
    ConvTransposeFastKernel(const ConvDims& d, const Geom& g, kernels::Isa isa, const float* W,
                            kernels::ConvEpi epi)
        : d_(d), g_(g), isa_(isa), epi_(epi) {
        const int64_t taps = g.k[1] * g.k[2], rows = d.M * taps, IH = g.in[1], IW = g.in[2];
        std::vector<float> a(size_t(rows * d.C));  // A[(m, tap), c] = W[c, m, tap]
        for (int64_t c = 0; c < d.C; ++c)
            for (int64_t m = 0; m < d.M; ++m)
                for (int64_t t = 0; t < taps; ++t)
                    a[size_t((m * taps + t) * d.C + c)] = W[(c * d.M + m) * taps + t];
        banded_ = g.k[1] == g.s[1] && g.k[2] == g.s[2] && g.d[1] == 1 && g.d[2] == 1 && g.pb[1] == 0 &&
                  g.pb[2] == 0 && g.out[1] == IH * g.s[1] && g.out[2] == IW * g.s[2];
        if (banded_) {
            band_ = std::clamp<int64_t>(kBandBytes / int64_t(sizeof(float)) / std::max<int64_t>(1, rows * IW), 1, IH);
            // A band's planes a multiple of ~4 KiB apart would send the GEMM to its packed mode
            // (kernels/conv.cpp: the rows collide in L1): one row fewer where that helps.
            for (int64_t b = band_; b > std::max<int64_t>(1, band_ / 2) && b < IH; --b)
                if (!kernels::plane_aliased(b * IW)) {
                    band_ = b;
                    break;
                }
            full_ = Band(isa, d.C, rows, band_, IW, a.data());
            if (IH % band_) tail_ = Band(isa, d.C, rows, IH % band_, IW, a.data());
        } else {
            full_ = Band(isa, d.C, rows, IH, IW, a.data());
            col_.resize(size_t(rows * d.in_plane));
        }
    }

    // The band's X copy, its col and the GEMM's scratch in the plan's shared scratch.
    void bind_scratch(SharedScratch* s) {
        scr_ = s;
        const size_t xb = banded_ && band_ < g_.in[1] ? size_t(d_.C * band_ * g_.in[2]) : 0;
        const size_t cb = banded_ ? size_t(d_.M * g_.k[1] * g_.k[2] * band_ * g_.in[2]) : 0;
        s->reserve(round16(xb) + round16(cb) + std::max(full_.scratch(), tail_.scratch()));
    }

    Status run(const void* const* in, void* const* out) const override {
        const float* X = static_cast<const float*>(in[0]);
        const float* B = d_.has_bias ? static_cast<const float*>(in[2]) : nullptr;
        float* Y = static_cast<float*>(out[0]);
        for (int64_t n = 0; n < d_.N; ++n) {
            const float* x = X + n * d_.C * d_.in_plane;
            float* y = Y + n * d_.M * d_.out_plane;
            if (banded_) run_banded(x, B, y);
            else run_general(x, B, y);
        }
        return {};
    }

    std::string describe() const override {
        return std::string(banded_ ? "convtranspose_banded " : "convtranspose_col2im ") + full_.gemm.name() + " " +
               kernels::isa_name(isa_);
    }

private:
    static constexpr int64_t kBandBytes = 256 << 10;
    static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

    // The pointwise GEMM over `h` rows of the input, its weights packed for that shape.
    struct Band {
        Band() = default;
        Band(kernels::Isa isa, int64_t C, int64_t rows, int64_t h, int64_t w, const float* a) {
            kernels::Conv2DGeom pg;
            pg.C = C;
            pg.H = pg.OH = h;
            pg.W = pg.OW = w;
            pg.M = rows;
            gemm = kernels::ConvGemm(isa, pg, 1);
            wp = kernels::alloc_weights(gemm.packed_w_floats());
            gemm.pack_w(a, wp.get());
        }
        size_t scratch() const { return wp ? gemm.scratch_floats() : 0; }
        kernels::ConvGemm gemm;
        std::shared_ptr<float> wp;  // kernels::alloc_weights
    };

    // Bands of band_ input rows: (copy the rows,) the GEMM into the band's col, then every output
    // row written once from its col rows (kw of them interleaved) plus the bias, epilogue applied.
    void run_banded(const float* x, const float* B, float* y) const {
        const int64_t IH = g_.in[1], IW = g_.in[2], OW = g_.out[2], kh = g_.k[1], kw = g_.k[2];
        const int64_t taps = kh * kw;
        const bool copy = band_ < IH;
        float* xb = scr_->data();
        float* col = xb + (copy ? round16(size_t(d_.C * band_ * IW)) : 0);
        float* gs = col + round16(size_t(d_.M * taps * band_ * IW));
        const bool epi = epi_.act != kernels::ConvAct::kNone;
        for (int64_t r0 = 0; r0 < IH; r0 += band_) {
            const int64_t h = std::min(band_, IH - r0), bp = h * IW;
            const Band& bd = h == band_ ? full_ : tail_;
            const float* xin = x + r0 * IW;
            if (copy) {
                for (int64_t c = 0; c < d_.C; ++c)
                    std::memcpy(xb + c * bp, x + c * d_.in_plane + r0 * IW, sizeof(float) * size_t(bp));
                xin = xb;
            }
            bd.gemm.run(xin, bd.wp.get(), nullptr, nullptr, col, gs, kernels::ConvEpi{});
            for (int64_t m = 0; m < d_.M; ++m) {
                const float b = B ? B[m] : 0.0f;
                for (int64_t i = 0; i < h; ++i)
                    for (int64_t ky = 0; ky < kh; ++ky) {
                        float* __restrict yr = y + (m * g_.out[1] + (r0 + i) * kh + ky) * OW;
                        const float* c0 = col + (m * taps + ky * kw) * bp + i * IW;
                        if (kw == 2) {
                            const float* __restrict a0 = c0;
                            const float* __restrict a1 = c0 + bp;
                            for (int64_t ix = 0; ix < IW; ++ix) {
                                yr[2 * ix] = a0[ix] + b;
                                yr[2 * ix + 1] = a1[ix] + b;
                            }
                        } else {
                            for (int64_t kx = 0; kx < kw; ++kx) {
                                const float* __restrict a = c0 + kx * bp;
                                for (int64_t ix = 0; ix < IW; ++ix) yr[ix * kw + kx] = a[ix] + b;
                            }
                        }
                        if (epi) kernels::conv_epilogue(isa_, yr, nullptr, OW, epi_);
                    }
            }
        }
    }

    void run_general(const float* x, const float* B, float* y) const {
        const int64_t IH = g_.in[1], IW = g_.in[2], OH = g_.out[1], OW = g_.out[2];
        const int64_t kh = g_.k[1], kw = g_.k[2], sh = g_.s[1], sw = g_.s[2];
        const int64_t dh = g_.d[1], dw = g_.d[2], ph = g_.pb[1], pw = g_.pb[2];
        full_.gemm.run(x, full_.wp.get(), nullptr, nullptr, col_.data(), scr_->data(), kernels::ConvEpi{});
        for (int64_t m = 0; m < d_.M; ++m) {
            float* ym = y + m * d_.out_plane;
            const float b = B ? B[m] : 0.0f;
            for (int64_t i = 0; i < d_.out_plane; ++i) ym[i] = b;
            for (int64_t ky = 0; ky < kh; ++ky)
                for (int64_t kx = 0; kx < kw; ++kx) {
                    const float* c = col_.data() + ((m * kh + ky) * kw + kx) * d_.in_plane;
                    const int64_t off = kx * dw - pw;  // ox = ix * sw + off
                    const int64_t lo = std::max<int64_t>(0, ceil_div(-off, sw));
                    const int64_t hi = std::min<int64_t>(IW, floor_div(OW - 1 - off, sw) + 1);
                    for (int64_t iy = 0; iy < IH; ++iy) {
                        const int64_t oy = iy * sh - ph + ky * dh;
                        if (oy < 0 || oy >= OH) continue;
                        float* yr = ym + oy * OW + off;
                        const float* cr = c + iy * IW;
                        for (int64_t ix = lo; ix < hi; ++ix) yr[ix * sw] += cr[ix];
                    }
                }
            if (epi_.act != kernels::ConvAct::kNone) kernels::conv_epilogue(isa_, ym, nullptr, d_.out_plane, epi_);
        }
    }

    ConvDims d_;
    Geom g_;
    kernels::Isa isa_;
    kernels::ConvEpi epi_;
    bool banded_ = false;
    int64_t band_ = 0;        // input rows per band (banded)
    Band full_, tail_;        // the GEMM of a whole band and of the last, shorter one (if any)
    mutable std::vector<float> col_;  // the general case's col
    SharedScratch* scr_ = nullptr;    // the plan's (bind_scratch)
};

// Common input checks for Conv / ConvTranspose: dtypes, ranks, kernel_shape.
Status check_conv_inputs(const OpContext& ctx, Shape* kernel) {
    if (!ctx.has_input(0) || !ctx.has_input(1)) return ctx.fail("needs inputs X and W");
    JIFFY_RETURN_IF_ERROR(expect_float(ctx, 0, "X"));
    JIFFY_RETURN_IF_ERROR(expect_same_dtype(ctx, 1, "W"));
    if (ctx.has_input(2)) JIFFY_RETURN_IF_ERROR(expect_same_dtype(ctx, 2, "B"));
    const Shape& x = ctx.in_shape(0);
    const Shape& w = ctx.in_shape(1);
    if (x.size() < 3)
        return ctx.fail("X must have rank >= 3 (N x C x spatial...), got shape ", shape_str(x));
    if (x.size() > 5)
        return ctx.fail_unsupported("X has ", x.size() - 2, " spatial dims; 1 to 3 are supported");
    if (w.size() != x.size())
        return ctx.fail("W must have the same rank as X (", x.size(), "), got shape ",
                        shape_str(w));
    kernel->assign(w.begin() + 2, w.end());
    for (int64_t k : *kernel)
        if (k < 1) return ctx.fail("W has an empty kernel: shape ", shape_str(w));
    if (const Attr* a = ctx.attr("kernel_shape")) {
        if (a->ints != *kernel)
            return ctx.fail("kernel_shape ", ints_str(a->ints), " does not match W's kernel dims ",
                            ints_str(*kernel));
    }
    return {};
}

// A single-group conv with one output pixel whose taps cover the whole input plane (H * W <=
// kh * kw: e.g. a 1x1 conv on a 1x1 plane, squeeze-and-excitation's squeeze and excite, or a
// kernel as large as its input) is a matrix-vector product per image: y[M] = W'[M, C*H*W] . x,
// W' holding for every input pixel the weight of the one tap that reads it (0 where none does:
// taps in the padding drop out). It runs as the Gemm's weight-streaming GEMV (gemm.h, M = 1;
// packed-B GEMM for a batch) with the bias and activation applied on the registers. Before, the
// transposed GEMM of small_conv.h ran these with M = 1 on the 8x32 microkernel: 2 accumulators
// per k (MobileNetV3's 960 -> 240: 61 -> 54 us with the GEMV, -> ~30 with its weights on huge
// pages, weight_alloc.h; docs/benchmarks.md "MobileNetV3").
// nullptr when the conv does not qualify (several pixels, a residual, a clamp, or H*W > kh*kw).
// Dilated stride-1 convs, dilation dl on both axes, "same" padding dl (k - 1) / 2 on every side,
// H and W multiples of dl, one group, constant weights, no residual: output phase (a, b) (rows a,
// a + dl, ..., columns b, b + dl, ...) reads only input phase (a, b), with the kernel undilated
// and padding (k - 1) / 2. The dl x dl phase images (H / dl x W / dl each) are laid out as one
// mosaic, phase (a, b) at row a (H / dl + kh - 1), column b (W / dl + kw - 1): the kh - 1 rows and
// kw - 1 columns of zeros between neighbours are exactly the padding each one reads, so one
// undilated conv over the mosaic (ConvFastKernel's choice: Winograd for 3x3) computes every phase;
// its outputs on the separators are dropped. Split into and merged out of the mosaic by lane
// permutes (kernels::phase_split / phase_merge). The line detector's 3x3 32 -> 32, dilation 5,
// on 160x160 (Zen 4, in the model): 5.2 ms on the dilated taps (implicit GEMM), 4.4 ms as 25
// separate 32x32 Winograd convs (40% of it in their input transforms: 8 tiles a row on 16 lanes,
// and a scalar gather / scatter), 3.7 ms as the 168x168 mosaic.
class DilatedPhaseConvKernel : public Kernel {
public:
    // inner: the conv over the mosaic (mosaic(H, kh, dl) x mosaic(W, kw, dl), pads (k - 1) / 2).
    DilatedPhaseConvKernel(const ConvDims& d, int64_t dl, int64_t H, int64_t W, int64_t kh, int64_t kw,
                           std::unique_ptr<ConvFastKernel> inner)
        : d_(d), isa_(kernels::active_isa()), inner_(std::move(inner)) {
        p_.H = H, p_.W = W, p_.dl = dl;
        p_.sh = H / dl + kh - 1, p_.sw = W / dl + kw - 1;
        p_.MW = mosaic(W, kw, dl), p_.MP = mosaic(H, kh, dl) * p_.MW;
        xp_.assign(size_t(d.C * p_.MP), 0.0f);  // the separators are never written: zeroed once
        yp_.resize(size_t(d.M * p_.MP));
    }
    // Rows (columns) of the mosaic of an H-row (W-column) plane: dl phases of H / dl, k - 1 apart.
    static int64_t mosaic(int64_t H, int64_t k, int64_t dl) { return H + (dl - 1) * (k - 1); }
    // With a pool the split and the merge go by channels (the inner conv splits itself).
    void set_parallel(ThreadPool* pool) {
        if (pool && pool->threads() >= 2) {
            pool_ = pool;
            bal_ = std::make_unique<Balance>(pool->threads());
        }
    }
    Status run(const void* const* in, void* const* out) const override {
        const float* X = static_cast<const float*>(in[0]);
        float* Y = static_cast<float*>(out[0]);
        const int64_t HW = p_.H * p_.W, C = d_.C, M = d_.M;
        float* xp = xp_.data();
        float* yp = yp_.data();
        const void* sub_in[4] = {xp, in[1], d_.has_bias ? in[2] : nullptr, nullptr};
        void* sub_out[1] = {yp};
        for (int64_t n = 0; n < d_.N; ++n) {
            const float* xn = X + n * C * HW;
            float* yn = Y + n * M * HW;
            for_balanced_or_caller(pool_, C, 1, bal_.get(), [&](int, int64_t b, int64_t e) {
                kernels::phase_split(isa_, p_, xn, xp, b, e);
            });
            JIFFY_RETURN_IF_ERROR(inner_->run(sub_in, sub_out));
            for_balanced_or_caller(pool_, M, 1, bal_.get(), [&](int, int64_t b, int64_t e) {
                kernels::phase_merge(isa_, p_, yp, yn, b, e);
            });
        }
        return {};
    }
    FastWeights set_fast_weights(bool fast) override { return inner_->set_fast_weights(fast); }
    std::string describe() const override {
        return "dilated " + std::to_string(p_.dl) + "x" + std::to_string(p_.dl) + " phase mosaic: " + inner_->describe();
    }

private:
    ConvDims d_;
    kernels::Isa isa_;
    kernels::PhaseMosaic p_;
    std::unique_ptr<ConvFastKernel> inner_;
    ThreadPool* pool_ = nullptr;
    std::unique_ptr<Balance> bal_;
    mutable std::vector<float> xp_, yp_;  // the input / output mosaic (not reentrant)
};

// Strided convs as a stride-1 conv (ConvFastKernel, with its own mode and thread split) over a
// copy of their input, made per image and split by channels across the same pool:
//  - subsample (stack_ 0): 1x1 convs with stride > 1 and no padding (ResNet-50's projection
//    shortcuts) read the input subsampled. Through ConvGemm's strided modes (im2col, transposed or
//    its own subsampled copy) each part of a two-thread split by channels read and copied the whole
//    input itself, and the stride-1 shape's better modes (1x1-direct on 14x14) were out of reach:
//    docs/benchmarks.md "Session 15".
//  - row stack (stack_ = kh): a kh x kw conv with stride (sh, 1) (text recognizers' 3x3 stride
//    (2, 1) convs, which halve the height and keep the width) is a 1 x kw stride-1 conv over kh C
//    channels: channel k C + c of the copy holds, at row i, input row i sh - ph + k of channel c
//    (zeros where that row is padding), and its weights are W'[m][k C + c][0][j] = W[m][c][k][j].
//    Its 1 x 3 conv runs as 1-D Winograd F(4, 3) (6 multiplies per 4 outputs and tap row instead
//    of 12): the SVTR-like probe's 3x3 (2, 1) layers on 24 / 12 / 6 x 160 planes 666 -> 357,
//    1237 -> 745, 1154 -> 641 us (Zen 4, the 1 x 3 conv over the stacked copy as its own model).
//    Taken only where winograd_choice picks Winograd for the 1 x kw conv.
class SubsampledConvKernel : public Kernel {
public:
    // stack: 0 (subsample) or the kernel height of a row-stacked conv.
    // The copy lives at the top of the plan's shared scratch (SharedScratch::reserve_top: warm from
    // the steps before; the inner conv uses its bottom).
    SubsampledConvKernel(const ConvDims& d, const kernels::Conv2DGeom& g, bool has_res, int64_t stack,
                         std::unique_ptr<ConvFastKernel> inner, SharedScratch* scratch, ThreadPool* pool, int chunks)
        : d_(d), g_(g), has_res_(has_res), stack_(stack), isa_(kernels::active_isa()), inner_(std::move(inner)),
          scr_(scratch) {
        planes_ = stack_ ? stack_ * d.C : d.C;
        plane_ = stack_ ? g.OH * g.W : g.OH * g.OW;
        scr_->reserve_top(size_t(planes_ * plane_));
        if (pool && chunks > 1 && chunks == pool->threads() && planes_ >= 2 * chunks) {
            pool_ = pool;
            bal_ = std::make_unique<Balance>(chunks);  // the copy's planes cut per run
        }
    }
    // The row-stacked conv's geometry (1 x kw, stride 1, kh C input channels, OH x W input).
    static kernels::Conv2DGeom stacked(const kernels::Conv2DGeom& g) {
        kernels::Conv2DGeom s = g;
        s.C = g.kh * g.C;
        s.H = g.OH;
        s.kh = 1;
        s.sh = 1;
        s.ph = 0;
        return s;
    }
    // W (M x C x kh x kw) as the stacked conv's (M x kh C x 1 x kw).
    static std::vector<float> stacked_weights(const float* w, const kernels::Conv2DGeom& g) {
        std::vector<float> r(size_t(g.M * g.C * g.kh * g.kw));
        for (int64_t m = 0; m < g.M; ++m)
            for (int64_t c = 0; c < g.C; ++c)
                for (int64_t k = 0; k < g.kh; ++k)
                    std::memcpy(&r[size_t(((m * g.kh + k) * g.C + c) * g.kw)],
                                w + ((m * g.C + c) * g.kh + k) * g.kw, size_t(g.kw) * sizeof(float));
        return r;
    }
    Status run(const void* const* in, void* const* out) const override {
        const float* X = static_cast<const float*>(in[0]);
        float* Y = static_cast<float*>(out[0]);
        const float* R = has_res_ ? static_cast<const float*>(in[3]) : nullptr;
        const int64_t in_img = d_.C * d_.in_plane, out_img = d_.M * d_.out_plane;
        float* xs = scr_->top(size_t(planes_ * plane_));
        for (int64_t n = 0; n < d_.N; ++n) {
            const float* x = X + n * in_img;
            for_balanced_or_caller(pool_, planes_, 1, bal_.get(), [&](int, int64_t c0, int64_t c1) {
                if (c1 <= c0) return;
                if (stack_)
                    row_stack(x, xs, c0, c1);
                else
                    kernels::conv_subsample(isa_, x, g_.H, g_.W, g_.sh, g_.sw, g_.OH, g_.OW, xs, c0, c1);
            });
            // The inner conv's weights are packed (constant): it does not read input 1.
            const void* sub_in[4] = {xs, stack_ ? nullptr : in[1], d_.has_bias ? in[2] : nullptr,
                                     R ? R + n * out_img : nullptr};
            void* sub_out[1] = {Y + n * out_img};
            JIFFY_RETURN_IF_ERROR(inner_->run(sub_in, sub_out));
        }
        return {};
    }
    FastWeights set_fast_weights(bool fast) override { return inner_->set_fast_weights(fast); }
    std::string describe() const override {
        return (stack_ ? "rows stacked " + std::to_string(stack_) + "x" : "subsampled ") + std::to_string(g_.sh) + "x" +
               std::to_string(g_.sw) + ": " + inner_->describe();
    }

private:
    // Planes [p0, p1) of the row stack (plane k C + c: channel c's rows i sh - ph + k).
    void row_stack(const float* x, float* xs, int64_t p0, int64_t p1) const {
        const int64_t W = g_.W;
        for (int64_t p = p0; p < p1; ++p) {
            const int64_t k = p / d_.C, c = p % d_.C;
            float* dst = xs + p * plane_;
            for (int64_t i = 0; i < g_.OH; ++i) {
                const int64_t r = i * g_.sh - g_.ph + k;
                if (r >= 0 && r < g_.H)
                    std::memcpy(dst + i * W, x + (c * g_.H + r) * W, size_t(W) * sizeof(float));
                else
                    std::memset(dst + i * W, 0, size_t(W) * sizeof(float));  // padding
            }
        }
    }

    ConvDims d_;
    kernels::Conv2DGeom g_;
    bool has_res_;
    int64_t stack_;
    int64_t planes_ = 0, plane_ = 0;  // the copy: planes_ planes of plane_ floats
    kernels::Isa isa_;
    std::unique_ptr<ConvFastKernel> inner_;
    SharedScratch* scr_;  // the plan's: the copy at its top
    ThreadPool* pool_ = nullptr;
    std::unique_ptr<Balance> bal_;
};

// The stride-1 conv that a wrapping kernel (DilatedPhaseConvKernel, SubsampledConvKernel) runs on
// its copy of one image: geometry `sub` (sub.C input channels), weights w (M x sub.C x kh x kw,
// packed here: w need not outlive the call), split across the pool as a conv of its own would be
// (*chunks: the parts asked for) and bound to the plan's shared scratch.
std::unique_ptr<ConvFastKernel> wrapped_conv(OpContext& ctx, const ConvDims& d, const kernels::Conv2DGeom& sub,
                                             const float* w, const kernels::ConvEpi& epi, bool has_res, int* chunks) {
    ConvDims ds = d;
    ds.N = 1;
    ds.C = ds.Cg = sub.C;
    ds.in_plane = sub.H * sub.W;
    ds.out_plane = sub.OH * sub.OW;
    ds.ksize = sub.kh * sub.kw;
    ds.kw = sub.kw;
    ds.rows = sub.OH;
    ds.row_len = sub.OW;
    ds.sx = 1;
    auto inner = std::make_unique<ConvFastKernel>(ds, kernels::active_isa(), sub, false, w, epi, has_res);
    *chunks = parallel_chunks(ctx.options(), 2 * d.M * sub.C * sub.kh * sub.kw * sub.OH * sub.OW);
    inner->set_parallel(ctx.options().pool.get(), *chunks, w);
    inner->bind_scratch(ctx.options().scratch.get());
    return inner;
}

std::unique_ptr<Kernel> make_one_pixel_conv(OpContext& ctx, const kernels::Conv2DGeom& g, const ConvDims& d,
                                            const kernels::ConvEpi& epi, bool has_res) {
    if (g.OH * g.OW != 1 || has_res || epi.clamp || epi.affine || g.H * g.W > g.kh * g.kw || g.C * g.H * g.W == 0) return nullptr;
    kernels::Activation act;
    switch (epi.act) {
        case kernels::ConvAct::kNone: act.kind = kernels::ActKind::kNone; break;
        case kernels::ConvAct::kRelu: act.kind = kernels::ActKind::kRelu; break;
        case kernels::ConvAct::kLeakyRelu: act.kind = kernels::ActKind::kLeakyRelu; break;
        case kernels::ConvAct::kClip: act.kind = kernels::ActKind::kClip; break;
        case kernels::ConvAct::kHardSigmoid: act.kind = kernels::ActKind::kHardSigmoid; break;
        case kernels::ConvAct::kHardSwish: act.kind = kernels::ActKind::kHardSwish; break;
        case kernels::ConvAct::kSigmoid: act.kind = kernels::ActKind::kSigmoid; break;
        case kernels::ConvAct::kTanh: act.kind = kernels::ActKind::kTanh; break;
        case kernels::ConvAct::kSilu: act.kind = kernels::ActKind::kSilu; break;
    }
    act.alpha = epi.alpha;
    act.beta = epi.beta;
    const float* w = ctx.in_const(1)->as<float>();
    const int64_t taps = g.kh * g.kw, plane = g.H * g.W, K = g.C * plane;
    std::vector<float> wflat;
    if (!(g.kh == g.H && g.kw == g.W && g.ph == 0 && g.pw == 0)) {  // else W is already M x K
        wflat.assign(size_t(g.M * K), 0.0f);
        for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t ih = i * g.dh - g.ph;
            if (ih < 0 || ih >= g.H) continue;
            for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t iw = j * g.dw - g.pw;
                if (iw < 0 || iw >= g.W) continue;
                for (int64_t m = 0; m < g.M; ++m)
                    for (int64_t c = 0; c < g.C; ++c)
                        wflat[size_t(m * K + c * plane + ih * g.W + iw)] = w[(m * g.C + c) * taps + i * g.kw + j];
            }
        }
        w = wflat.data();
    }
    const int64_t flops = 2 * d.N * g.M * K;
    const int chunks = d.N == 1 ? parallel_chunks_gemv(ctx.options(), flops, 4 * g.M * K)
                                : parallel_chunks(ctx.options(), flops);
    return make_gemm_f32_nk_kernel(d.N, K, g.M, w, d.has_bias, act, ctx.options().pool.get(), chunks,
                                   std::string("conv_1px ") + kernels::isa_name(kernels::active_isa()) + " ",
                                   ctx);
}

Status prep_Conv(OpContext& ctx) {
    Shape kernel;
    JIFFY_RETURN_IF_ERROR(check_conv_inputs(ctx, &kernel));
    const Shape& x = ctx.in_shape(0);
    const Shape& w = ctx.in_shape(1);
    ConvDims d;
    d.N = x[0];
    d.C = x[1];
    d.M = w[0];
    d.G = ctx.attr_int("group", 1);
    if (d.G < 1) return ctx.fail("group must be >= 1, got ", d.G);
    if (d.C % d.G != 0 || w[1] * d.G != d.C)
        return ctx.fail("X has ", d.C, " channels but W expects ", w[1], " x group ", d.G, " = ",
                        w[1] * d.G);
    if (d.M % d.G != 0)
        return ctx.fail("W has ", d.M, " output channels, not divisible by group ", d.G);
    d.Cg = d.C / d.G;
    d.Mg = d.M / d.G;
    if (ctx.has_input(2)) JIFFY_RETURN_IF_ERROR(expect_vec(ctx, 2, "B", d.M));
    d.has_bias = ctx.has_input(2);

    Geom g;
    Shape in_sp(x.begin() + 2, x.end());
    JIFFY_RETURN_IF_ERROR(forward_geometry(ctx, in_sp, kernel, false, &g));
    Shape out = {d.N, d.M};
    for (int i = 0; i < g.nd; ++i) out.push_back(g.out[size_t(3 - g.nd + i)]);
    kernels::ConvEpi epi;
    bool has_res = false;
    JIFFY_RETURN_IF_ERROR(parse_fused(ctx, &epi, &has_res));
    if (has_res && ctx.in_shape(3) != out)
        return ctx.fail("_fused_add (input 3) must have the output's shape ", shape_str(out),
                        ", got ", shape_str(ctx.in_shape(3)));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));

    d.in_plane = g.in_plane();
    d.out_plane = g.out_plane();
    d.ksize = g.ksize();
    d.kw = g.k[2];
    d.rows = g.out[0] * g.out[1];
    d.row_len = g.out[2];
    d.sx = g.s[2];
    bool pointwise = true;
    for (int i = 0; i < 3; ++i)
        if (g.k[size_t(i)] != 1 || g.s[size_t(i)] != 1 || g.pb[size_t(i)] != 0 ||
            g.pe[size_t(i)] != 0)
            pointwise = false;
    if (ctx.in_dtype(0) == DType::kF32 && g.nd <= 2 && d.out_plane > 0 && d.N > 0) {
        kernels::Conv2DGeom geo = conv2d_geom(g);
        const bool depthwise = d.G > 1 && d.Cg == 1 && d.Mg == 1;
        // Small planes (stride 1, OW == W): output channels on the vector (conv_cv.h); few output
        // pixels (strided 1-D audio convs): the transposed GEMM of small_conv.h.
        if (d.G == 1 && ctx.in_const(1)) {
            geo.C = d.C;
            geo.M = d.M;
            if (auto k = make_one_pixel_conv(ctx, geo, d, epi, has_res)) {
                ctx.set_kernel(std::move(k));
                return {};
            }
            if (one_channel_conv_preferred(geo)) {
                const int64_t flops = 2 * d.N * d.M * geo.kh * geo.kw * geo.OH * geo.OW;
                // Depthwise-rate work: its FLOPs x3 against the split threshold (as depthwise's).
                ctx.set_kernel(make_one_channel_conv_kernel(kernels::active_isa(), geo, d.N, d.has_bias, has_res, epi,
                                                            ctx.options().pool.get(),
                                                            parallel_chunks(ctx.options(), 3 * flops)));
                return {};
            }
            // 1x3 / 3x1 convs where 1-D Winograd wins go to ConvFastKernel (winograd.h).
            const bool wino1d = kernels::Winograd::suits(geo) && kernels::Winograd::kind_of(geo) != 0 &&
                                kernels::winograd_choice(kernels::active_isa(), geo).m != 0;
            if (!wino1d && kernels::ConvChanVec::preferred(kernels::active_isa(), geo)) {
                const int64_t flops = 2 * d.N * d.M * d.C * geo.kh * geo.kw * geo.OH * geo.OW;
                ctx.set_kernel(make_chanvec_conv_kernel(kernels::active_isa(), geo, ctx.in_const(1)->as<float>(),
                                                        d.N, d.has_bias, has_res, epi, ctx.options().pool.get(),
                                                        parallel_chunks(ctx.options(), flops)));
                return {};
            }
            // Dilated "same" convs as one undilated conv over the mosaic of their dl x dl phases
            // (DilatedPhaseConvKernel) where that conv runs as Winograd (one-node, hot, Zen 4,
            // against the implicit GEMM on the dilated taps: 3x3 64 -> 64 on 80x80, dilation 2 / 5,
            // 2.3x / 2.2x faster; 128 on 40x40 dilation 4 2.4x; 32 on 160x160 dilation 5 1.6x); with
            // another inner conv the split and merge cost more than they save (5x5 32 -> 32 on 64x64
            // dilation 2: 0.93x; 3x3 16 -> 16 dilation 3 0.89x; 8 -> 8 0.81x). JIFFY_DIL_PHASES=0 / 1
            // forces the choice (where the shapes allow phases).
            const int64_t dl = geo.dh;
            if (dl > 1 && geo.dw == dl && geo.sh == 1 && geo.sw == 1 && geo.kh % 2 == 1 && geo.kw % 2 == 1 &&
                geo.ph == dl * (geo.kh - 1) / 2 && geo.pw == dl * (geo.kw - 1) / 2 && g.pe[1] == geo.ph &&
                g.pe[2] == geo.pw && geo.H % dl == 0 && geo.W % dl == 0 && !has_res && g.nd == 2) {
                kernels::Conv2DGeom sub = geo;
                sub.H = sub.OH = DilatedPhaseConvKernel::mosaic(geo.H, geo.kh, dl);
                sub.W = sub.OW = DilatedPhaseConvKernel::mosaic(geo.W, geo.kw, dl);
                sub.dh = sub.dw = 1;
                sub.ph = (geo.kh - 1) / 2;
                sub.pw = (geo.kw - 1) / 2;
                const char* force = std::getenv("JIFFY_DIL_PHASES");
                const bool phases = force && *force ? *force != '0'
                                                    : kernels::winograd_choice(kernels::active_isa(), sub).m != 0;
                if (phases) {
                    int chunks = 1;
                    auto inner = wrapped_conv(ctx, d, sub, ctx.in_const(1)->as<float>(), epi, false, &chunks);
                    auto k = std::make_unique<DilatedPhaseConvKernel>(d, dl, geo.H, geo.W, geo.kh, geo.kw, std::move(inner));
                    if (chunks >= 2) k->set_parallel(ctx.options().pool.get());
                    ctx.set_kernel(std::move(k));
                    return {};
                }
            }
            // kh x kw convs with stride (sh, 1): a 1 x kw conv over the row stack where that one
            // runs as 1-D Winograd (SubsampledConvKernel). JIFFY_ROW_STACK=0 turns it off.
            static const bool stack_on = [] {
                const char* e = std::getenv("JIFFY_ROW_STACK");
                return !(e && std::string(e) == "0");
            }();
            if (stack_on && g.nd == 2 && geo.sh > 1 && geo.sw == 1 && geo.kh > 1 && geo.dh == 1 && geo.dw == 1 &&
                geo.OH >= 1) {
                const kernels::Conv2DGeom sub = SubsampledConvKernel::stacked(geo);
                if (kernels::Winograd::suits(sub) && kernels::winograd_choice(kernels::active_isa(), sub).m != 0) {
                    const std::vector<float> ws = SubsampledConvKernel::stacked_weights(ctx.in_const(1)->as<float>(), geo);
                    int chunks = 1;
                    auto inner = wrapped_conv(ctx, d, sub, ws.data(), epi, has_res, &chunks);
                    ctx.set_kernel(std::make_unique<SubsampledConvKernel>(d, geo, has_res, geo.kh, std::move(inner),
                                                                          ctx.options().scratch.get(),
                                                                          ctx.options().pool.get(), chunks));
                    return {};
                }
            }
            // RGB stems (3x3 stride 2, <= 4 input channels): the direct kernel (conv_stem.h).
            if ((!d.has_bias || ctx.in_const(2)) && stem_conv_preferred(kernels::active_isa(), geo)) {
                const int64_t flops = 2 * d.N * d.M * d.C * 9 * geo.OH * geo.OW;
                ctx.set_kernel(make_stem_conv_kernel(
                    kernels::active_isa(), geo, ctx.in_const(1)->as<float>(),
                    d.has_bias ? ctx.in_const(2)->as<float>() : nullptr, d.N, has_res, epi,
                    ctx.options().pool.get(), parallel_chunks(ctx.options(), flops)));
                return {};
            }
            if (!wino1d && kernels::SmallConv::suits(geo)) {
                ctx.set_kernel(make_small_conv_kernel(kernels::active_isa(), geo, ctx.in_const(1)->as<float>(),
                                                      d.N, d.has_bias, has_res, epi));
                return {};
            }
            // Strided 1x1 without padding: subsampled, then the stride-1 conv (SubsampledConvKernel).
            // JIFFY_SUBSAMPLE=0 keeps ConvGemm's strided modes (measurements).
            static const bool subsample_on = [] {
                const char* e = std::getenv("JIFFY_SUBSAMPLE");
                return !(e && std::string(e) == "0");
            }();
            if (subsample_on && g.nd == 2 && geo.kh == 1 && geo.kw == 1 && (geo.sh > 1 || geo.sw > 1) &&
                geo.ph == 0 && geo.pw == 0 && g.pe[1] == 0 && g.pe[2] == 0 && geo.OH * geo.OW >= 16) {
                kernels::Conv2DGeom sub = geo;
                sub.H = geo.OH;
                sub.W = geo.OW;
                sub.sh = sub.sw = 1;
                int chunks = 1;
                auto inner = wrapped_conv(ctx, d, sub, ctx.in_const(1)->as<float>(), epi, has_res, &chunks);
                ctx.set_kernel(std::make_unique<SubsampledConvKernel>(d, geo, has_res, 0, std::move(inner),
                                                                      ctx.options().scratch.get(),
                                                                      ctx.options().pool.get(), chunks));
                return {};
            }
        }
        if (depthwise || d.G == 1 || d.Cg >= 8) {
            geo.C = depthwise ? d.C : d.Cg;
            geo.M = depthwise ? d.M : d.Mg;
            const Tensor* wc = ctx.in_const(1);
            auto k = std::make_unique<ConvFastKernel>(d, kernels::active_isa(), geo, depthwise,
                                                      wc ? wc->as<float>() : nullptr, epi, has_res);
            const int64_t flops = 2 * d.N * d.M * geo.C * geo.kh * geo.kw * geo.OH * geo.OW /
                                  (depthwise ? geo.C : 1);
            // Depthwise runs at a third or less of the GEMM's FLOP rate (bound by moving its
            // planes): weigh its FLOPs x3 against the threshold. The face detector's 256 x 8x10
            // and 64 x 30 -> 15 layers now split: 2 threads, median of per-round A/B ratios 0.965
            // (9 rounds; MobileNetV2 / V3 unchanged within noise).
            k->set_parallel(ctx.options().pool.get(), parallel_chunks(ctx.options(), depthwise ? 3 * flops : flops),
                            wc ? wc->as<float>() : nullptr);
            k->bind_scratch(ctx.options().scratch.get());
            ctx.set_kernel(std::move(k));
            return {};
        }
    }
    Rows rows = pointwise ? Rows{} : build_rows(g, false);
    std::vector<XRange> xr = pointwise ? std::vector<XRange>{} : build_xr(g, false);
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<ConvKernel<T>>(d, std::move(rows), std::move(xr),
                                                       pointwise, epi, has_res));
        return {};
    });
}

// ---------------------------------------------------------------- ConvNhwc
// ConvNhwc (domain "jiffy", made by the layout_nhwc pass; docs/layout.md): a float32 Conv whose
// input X, output Y and fused residual (input 3) are channels-last, N x H x W x C; W (M x C/group
// x kh x kw) and B as in Conv, both constant; the Conv's attributes and fused epilogue. Two
// shapes: pointwise (1x1, stride 1, no padding, one group) and depthwise (group == C == M).
// Attribute _x_nchw = 1 (pointwise only): X is NCHW (N x C x H x W), read in place by the
// pointwise kernel; Y and the residual stay channels-last (a chain entry read only by 1x1s needs
// no Transpose before it). Attribute _y_nchw = 1 (depthwise only, kernels::nhwc_dw_writes_nchw,
// no residual): Y is NCHW, written by the kernel (a chain exit read only by NCHW nodes: no
// Transpose after it). Attribute _x_scale = 1 (pointwise only; made by fuse_channel_scale): input 4
// holds a per-channel scale of X (N x C x 1 x 1, or 1 x C x 1 x 1 for every image; input 3 is the
// residual or empty): the conv reads X * scale, as squeeze-and-excite's Mul would have written it,
// with each run's weights scaled instead (K x M multiplies against the Mul's H x W x K).
class ConvNhwcKernel : public Kernel {
public:
    // dot: a dense conv with few outputs (NhwcDot: 1 to 15, X channels-last, no scale).
    ConvNhwcKernel(int64_t N, kernels::Conv2DGeom g, bool depthwise, const float* W, const float* B,
                   kernels::ConvEpi epi, bool has_res, bool x_nchw, bool y_nchw, int64_t scale_rows = 0,
                   bool dot = false)
        : N_(N), g_(g), depthwise_(depthwise), dot_on_(dot), epi_(epi), has_res_(has_res),
          x_plane_(x_nchw ? g.H * g.W : 0), y_nchw_(y_nchw), scale_rows_(scale_rows) {
        const kernels::Isa isa = kernels::active_isa();
        mr_ = kernels::conv_mr(isa);
        size_t n;
        if (dot_on_) {
            dot_ = kernels::NhwcDot(isa, g_);
            packed_ = kernels::alloc_weights(dot_.packed_floats());
            dot_.pack(W, B, packed_.get());
            return;
        }
        if (depthwise_) {
            dw_ = kernels::NhwcDepthwise(isa, g_);
            n = dw_.packed_floats();
        } else {
            pw_ = kernels::NhwcPointwise(isa, g_.C, g_.M);
            n = pw_.packed_floats();
        }
        packed_ = kernels::alloc_weights(n);
        if (depthwise_) dw_.pack(W, B, packed_.get());
        else pw_.pack(W, B, packed_.get());
        // A channels-last 1x1 is a plain product Y[P, M] = X[P, C] . W^T: on AMX where it pays
        // (amx_pays_nhwc); the AVX-512 kernel stays packed for inputs AMX's parts cannot carry.
        // An NCHW or scaled X (squeeze-and-excite's) first goes channels-last and scaled into the
        // scratch (one pass over X in L2; the weights' parts cannot take the scale): PP-OCRv4
        // rec's 480 -> 480 on 6x80 1234 -> ~650 us.
        if (!depthwise_ && amx_pays_nhwc(isa, g_)) {
            amx_xt_ = x_nchw || scale_rows > 0;
            amx_ = kernels::AmxGemm(g_.OH * g_.OW, g_.C, g_.M);
            amx_w_ = kernels::alloc_weights((amx_.packed_b_halves() + 1) / 2);
            if (!amx_.pack_b(W, g_.C, true, reinterpret_cast<uint16_t*>(amx_w_.get()))) amx_w_.reset();
            if (B) amx_bias_v_.assign(B, B + g_.M);
        }
    }
    // AMX for a channels-last 1x1 (kernels/amx.h) where it measured faster than the AVX-512
    // kernel: >= 64 input and >= 96 output channels (fewer: splitting X into parts costs more than
    // the products save), K and M padded to 32s at least 85% full, >= 49 pixels.
    // MobileNetV2 / V3, EfficientNet-B0, the detectors' 14x14 and 7x7 layers: 0.75-0.95x the
    // AVX-512 time; 28x28 with 32 outputs 1.4-1.6x, M = 80 or K = 80 (padded to 96) 1.0-1.1x.
    // A split X past 1 MiB goes in row chunks (AmxGemm, session 27): PP-OCRv4 rec's 240 -> 240
    // on 12x80 (1.5 MB of parts) 490 -> 350 us (it stayed on AVX-512 before).
    // JIFFY_AMX_CONV=0: off.
    static bool amx_pays_nhwc(kernels::Isa isa, const kernels::Conv2DGeom& g) {
        if (env_zero("JIFFY_AMX_CONV") || isa != kernels::Isa::kAvx512 || !kernels::amx_usable()) return false;
        const int64_t P = g.OH * g.OW, Kp = (g.C + 31) / 32 * 32, Np = (g.M + 31) / 32 * 32;
        const double eff = double(g.C) / double(Kp) * double(g.M) / double(Np);
        return g.C >= 64 && g.M >= 96 && eff >= 0.85 && P >= 49;
    }
    // Splits each image's output rows (depthwise) or pixels (pointwise) into `chunks` parts.
    void set_parallel(ThreadPool* pool, int chunks) {
        if (pool && chunks >= 2 && chunks == pool->threads()) {
            pool_ = pool, chunks_ = chunks;
            bal_ = std::make_unique<Balance>(chunks);  // rows / pixels / channels cut per run
        }
        // A channels-first output of small planes splits by channels (whole planes per thread):
        // split by rows, both threads write into every 7x7 plane's 3-4 cache lines, and the
        // squeeze-excite readers (GlobalAveragePool, the channel scale) split by channels too.
        // EfficientNet-B0's 1152 x 7x7: 120 -> 55 us at two threads; from 10x10 up the rows split
        // stays (channels read each pixel's input in halves that the prefetchers fetch whole:
        // 144 x 56x56 192 -> 308 us; 14x14 even). EfficientNet-B0 at 2T 0.95x, MobileNetV3 0.99x.
        csplit_ = depthwise_ && y_nchw_ && g_.OH * g_.OW < 100;
    }
    // With a scale (_x_scale): each run's scaled weights in the plan's shared scratch.
    void bind_scratch(SharedScratch* s) {
        scr_ = s;
        if (dot_on_) s->reserve(dot_.scratch_floats());
        if (scale_rows_ > 0) s->reserve(pw_.packed_floats());
        if (amx_w_) {
            // AMX across the pool: by 32-pixel blocks from 128 pixels (each part splits only its
            // rows of X), else by 32-column blocks where each part gets one (each splits all of
            // X: cheap on small planes, and 7x7's 49 pixels would split 32 / 17); else on the
            // caller. By columns everywhere, two threads read MobileNetV2 0.87 / face detector
            // 0.89 of ORT; by pixels 0.73-0.74 / 0.81-0.82 (AMX off: 0.77 / 0.80).
            const int64_t P = g_.OH * g_.OW;
            amx_rows_ = pool_ && P >= 128;
            amx_par_ = pool_ && (amx_rows_ || (g_.M + 31) / 32 >= chunks_);
            // amx_xt_: X channels-last and scaled after the parts' scratch.
            s->reserve_parts(amx_par_ ? chunks_ : 1, amx_.scratch_floats(), amx_xt_ ? size_t(P * g_.C) : 0);
        }
    }
    Status run(const void* const* in, void* const* out) const override {
        const float* X = static_cast<const float*>(in[0]);
        const float* R = has_res_ ? static_cast<const float*>(in[3]) : nullptr;
        const float* S = scale_rows_ > 0 ? static_cast<const float*>(in[4]) : nullptr;
        float* Y = static_cast<float*>(out[0]);
        const int64_t in_img = g_.H * g_.W * g_.C, out_img = g_.OH * g_.OW * g_.M;
        const int64_t total = depthwise_ ? g_.OH : g_.OH * g_.OW;
        const int64_t align = depthwise_ ? 1 : dot_on_ ? 16 : mr_;
        const float* wp = packed_.get();
        for (int64_t n = 0; n < N_; ++n) {
            const float* x = X + n * in_img;
            const float* r = R ? R + n * out_img : nullptr;
            float* y = Y + n * out_img;
            const float* sn = S ? S + (scale_rows_ > 1 ? n * g_.C : 0) : nullptr;
            if (amx_w_ && run_amx(amx_xt_ ? amx_input(x, sn) : x, r, y)) continue;
            // this image's scale on the weights (again after AMX, whose scratch it shares)
            if (S && (n == 0 || scale_rows_ > 1 || amx_w_)) {
                wp = scr_->data();
                pw_.scale_inputs(packed_.get(), sn, scr_->data());
            }
            const float* xd = dot_on_ ? dot_.pad_input(x, scr_->data()) : nullptr;  // on the caller
            auto part = [&](int64_t b, int64_t e) {
                if (dot_on_) dot_.run(xd, wp, r, y, epi_, b, e);
                else if (depthwise_) dw_.run(x, wp, r, y, epi_, b, e, y_nchw_);
                else pw_.run(x, wp, r, y, epi_, b, e, x_plane_);
            };
            if (!pool_) {
                part(0, total);
                continue;
            }
            if (csplit_) {
                pool_->for_balanced(g_.C, 1, bal_.get(), [&](int, int64_t c0, int64_t c1) {
                    if (c1 > c0) dw_.run(x, packed_.get(), r, y, epi_, 0, g_.OH, true, c0, c1);
                });
                continue;
            }
            pool_->for_balanced(total, align, bal_.get(), [&](int, int64_t b, int64_t e) {
                if (e > b) part(b, e);
            });
        }
        return {};
    }
    // X channels-last (transposed where NCHW) and times the scale s (may be null) in the scratch
    // after the AMX parts' stretches.
    const float* amx_input(const float* x, const float* s) const {
        const int64_t P = g_.OH * g_.OW, C = g_.C;
        float* xt = scr_->data() + size_t(amx_par_ ? chunks_ : 1) * scr_->part_stride();
        if (x_plane_) kernels::transpose32(kernels::active_isa(), x, xt, 1, C, P);
        if (!s) return xt;
        for (int64_t p = 0; p < P; ++p) {
            float* b = xt + p * C;
            const float* a = x_plane_ ? b : x + p * C;  // in place after the transpose
            for (int64_t c = 0; c < C; ++c) b[c] = a[c] * s[c];
        }
        return xt;
    }
    // One image on AMX (across the pool where amx_par_: by 32-pixel blocks where amx_rows_, else
    // by 32-column blocks); false where the input holds a value the BF16 parts cannot carry
    // (then the AVX-512 kernel runs it).
    bool run_amx(const float* x, const float* r, float* y) const {
        const uint16_t* w = reinterpret_cast<const uint16_t*>(amx_w_.get());
        const float* bias = amx_bias_v_.empty() ? nullptr : amx_bias_v_.data();
        const int64_t C = g_.C, M = g_.M;
        // One part on the caller, also in caller-only mode (Session's threads choice): split by
        // columns, each part would split all of X again.
        if (!amx_par_ || pool_->serial()) return amx_.run(x, C, w, bias, y, M, scr_->data(), 0, -1, r, &epi_);
        bool ok[ThreadPool::kMaxThreads];
        for (int t = 0; t < chunks_; ++t) ok[t] = true;
        float* base = scr_->data();
        const size_t stride = scr_->part_stride();
        if (amx_rows_) {
            const int64_t P = g_.OH * g_.OW;
            pool_->for_balanced((P + 31) / 32, 1, bal_.get(), [&](int t, int64_t b, int64_t e) {
                if (e > b)
                    ok[t] = amx_.run(x, C, w, bias, y, M, base + size_t(t) * stride, 0, -1, r, &epi_, b * 32,
                                     std::min(P, e * 32));
            });
        } else {
            pool_->for_balanced((M + 31) / 32, 1, bal_.get(), [&](int t, int64_t b, int64_t e) {
                if (e > b)
                    ok[t] = amx_.run(x, C, w, bias, y, M, base + size_t(t) * stride, b * 32, std::min(M, e * 32), r,
                                     &epi_);
            });
        }
        for (int t = 0; t < chunks_; ++t)
            if (!ok[t]) return false;
        return true;
    }
    // The weights to 17 bits on AMX (W^T is AmxGemm's B; Kernel::set_fast_weights).
    FastWeights set_fast_weights(bool fast) override {
        return amx_fast_weights(amx_, amx_w_ != nullptr, fast, FastWeights::kConv);
    }
    std::string describe() const override {
        if (amx_w_) {
            std::string k = std::string("conv_nhwc_1x1 ") + (x_plane_ ? "nchw-in " : "") +
                            (scale_rows_ > 0 ? "x-scaled " : "") + amx_.mode_name();
            if (amx_par_)
                k += std::string(amx_rows_ ? " by pixels" : " by columns") + " threaded x" + std::to_string(chunks_);
            return k;
        }
        if (dot_on_)
            return "conv_nhwc_dot " + std::to_string(g_.kh) + "x" + std::to_string(g_.kw) + " " +
                   kernels::isa_name(kernels::active_isa());
        return std::string(depthwise_ ? (y_nchw_ ? "conv_nhwc_dw nchw-out " : "conv_nhwc_dw ")
                           : x_plane_ ? "conv_nhwc_1x1 nchw-in "
                                      : "conv_nhwc_1x1 ") +
               (scale_rows_ > 0 ? "x-scaled " : "") + kernels::isa_name(kernels::active_isa());
    }

private:
    int64_t N_;
    kernels::Conv2DGeom g_;
    bool depthwise_;
    bool dot_on_;  // dot_ (few outputs) runs it
    kernels::ConvEpi epi_;
    bool has_res_;
    int64_t x_plane_;  // > 0: X is NCHW (pointwise), planes of this many pixels
    bool y_nchw_;      // Y is NCHW (depthwise)
    int64_t scale_rows_;  // _x_scale: the scale's images (1: one for all, N: one each); 0: none
    bool csplit_ = false;
    bool amx_xt_ = false;  // AMX reads X channels-last and scaled from the scratch (amx_input)
    kernels::NhwcPointwise pw_;
    kernels::NhwcDepthwise dw_;
    kernels::NhwcDot dot_;
    std::shared_ptr<float> packed_;
    ThreadPool* pool_ = nullptr;
    int chunks_ = 1;
    std::unique_ptr<Balance> bal_;
    int64_t mr_ = 1;  // the pixel split's alignment (the ISA's microkernel rows)
    SharedScratch* scr_ = nullptr;
    kernels::AmxGemm amx_;          // channels-last 1x1 on AMX where amx_w_ is set
    std::shared_ptr<float> amx_w_;  // its packed weights (BF16 parts)
    std::vector<float> amx_bias_v_;  // B (the graph's constant, copied: it outlives prepare)
    bool amx_par_ = false;          // split across the pool: by 32-pixel blocks where amx_rows_,
    bool amx_rows_ = false;         // else by 32-column blocks
};

Status prep_ConvNhwc(OpContext& ctx) {
    Shape kernel;
    JIFFY_RETURN_IF_ERROR(check_conv_inputs(ctx, &kernel));
    const Shape& x = ctx.in_shape(0);
    const Shape& w = ctx.in_shape(1);
    if (ctx.in_dtype(0) != DType::kF32) return ctx.fail_unsupported("X must be float32");
    const bool x_nchw = ctx.attr_int("_x_nchw", 0) != 0, y_nchw = ctx.attr_int("_y_nchw", 0) != 0;
    if (x.size() != 4)
        return ctx.fail("X must be ", x_nchw ? "N x C x H x W" : "N x H x W x C", ", got shape ", shape_str(x));
    if (!ctx.in_const(1)) return ctx.fail("W must be a constant");
    if (ctx.has_input(2) && !ctx.in_const(2)) return ctx.fail("B must be a constant");
    const int64_t N = x[0], C = x_nchw ? x[1] : x[3], M = w[0], G = ctx.attr_int("group", 1);
    if (ctx.has_input(2)) JIFFY_RETURN_IF_ERROR(expect_vec(ctx, 2, "B", M));
    Geom g;
    JIFFY_RETURN_IF_ERROR(forward_geometry(ctx, x_nchw ? Shape{x[2], x[3]} : Shape{x[1], x[2]}, kernel, false, &g));
    const bool depthwise = G == C && M == C && w[1] == 1 && C > 1;
    const bool pointwise = G == 1 && w[1] == C && g.k[1] == 1 && g.k[2] == 1 && g.s[1] == 1 && g.s[2] == 1 &&
                           g.pb[1] == 0 && g.pb[2] == 0 && g.pe[1] == 0 && g.pe[2] == 0;
    kernels::Conv2DGeom geo = conv2d_geom(g);
    geo.C = C;
    geo.M = M;
    // An RGB stem (3x3 stride 2, few input channels) reading NCHW and writing channels-last: the
    // direct stem kernel with a transposing store (the first conv of a chain, layout_nhwc).
    const bool stem = x_nchw && G == 1 && w[1] == C && stem_conv_preferred(kernels::active_isa(), geo);
    // A dense conv with 1 to 15 outputs (any kernel; layout_nhwc's detection heads): NhwcDot.
    const bool dot = G == 1 && w[1] == C && !x_nchw && !stem && ctx.attr_int("_x_scale", 0) == 0 &&
                     kernels::NhwcDot::supports(geo);
    if (!depthwise && !pointwise && !stem && !dot)
        return ctx.fail_unsupported("only pointwise (1x1, stride 1, no padding, group 1), depthwise and ",
                                    "dense convs of 1 to ", kernels::NhwcDot::kMaxM, " outputs (64 taps at most) ",
                                    "are supported channels-last; W ", shape_str(w), ", group ", G, ", X ",
                                    shape_str(x));
    if (x_nchw && !pointwise && !stem)
        return ctx.fail_unsupported("_x_nchw (an NCHW X) only for a pointwise or a 3x3 stride-2 stem conv");
    kernels::ConvEpi epi;
    bool has_res = false;
    int64_t scale_rows = 0;
    if (ctx.attr_int("_x_scale", 0) != 0) {
        // Inputs X, W, B (may be empty), the residual (empty without _fused_residual), the scale.
        if (!pointwise) return ctx.fail_unsupported("_x_scale (a per-channel scale of X) only for a pointwise conv");
        JIFFY_RETURN_IF_ERROR(parse_fused_act(ctx, "", &epi));
        has_res = ctx.attr_int("_fused_residual", 0) != 0;
        if (ctx.num_inputs() != 5 || !ctx.has_input(4) || has_res != ctx.has_input(3))
            return ctx.fail("_x_scale needs 5 inputs: X, W, B (may be empty), the residual (empty without ",
                            "_fused_residual) and the scale; got ", ctx.num_inputs());
        if (has_res) JIFFY_RETURN_IF_ERROR(expect_same_dtype(ctx, 3, "_fused_add"));
        JIFFY_RETURN_IF_ERROR(expect_same_dtype(ctx, 4, "_x_scale"));
        const Shape& sc = ctx.in_shape(4);
        if (sc.size() != 4 || (sc[0] != 1 && sc[0] != N) || sc[1] != C || sc[2] != 1 || sc[3] != 1)
            return ctx.fail("_x_scale (input 4) must be 1 x ", C, " x 1 x 1 or ", N, " x ", C, " x 1 x 1, got shape ",
                            shape_str(sc));
        scale_rows = sc[0] == N && N > 1 ? N : 1;
    } else {
        JIFFY_RETURN_IF_ERROR(parse_fused(ctx, &epi, &has_res));
    }
    if (stem && has_res) return ctx.fail_unsupported("a channels-last stem conv takes no _fused_residual");
    if (y_nchw && (!depthwise || has_res || !kernels::nhwc_dw_writes_nchw(geo)))
        return ctx.fail_unsupported("_y_nchw (an NCHW Y) only for a depthwise conv with a 3x3 or 5x5 kernel, ",
                                    "stride 1 or 2 and no _fused_residual");
    const Shape out = y_nchw ? Shape{N, M, g.out[1], g.out[2]} : Shape{N, g.out[1], g.out[2], M};
    if (has_res && ctx.in_shape(3) != out)
        return ctx.fail("_fused_add (input 3) must have the output's shape ", shape_str(out), ", got ",
                        shape_str(ctx.in_shape(3)));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kF32, out));
    const float* B = ctx.has_input(2) ? ctx.in_const(2)->as<float>() : nullptr;
    const int64_t flops = 2 * N * M * geo.OH * geo.OW * geo.kh * geo.kw * (depthwise ? 1 : C);
    if (stem) {
        ctx.set_kernel(make_stem_conv_kernel(kernels::active_isa(), geo, ctx.in_const(1)->as<float>(), B, N, false,
                                             epi, ctx.options().pool.get(), parallel_chunks(ctx.options(), flops),
                                             true));
        return {};
    }
    auto k = std::make_unique<ConvNhwcKernel>(N, geo, depthwise, ctx.in_const(1)->as<float>(), B, epi, has_res,
                                              x_nchw, y_nchw, scale_rows, dot);
    // Depthwise weighed x3 against the threshold, as in prep_Conv (bound by moving its planes).
    k->set_parallel(ctx.options().pool.get(), parallel_chunks(ctx.options(), depthwise ? 3 * flops : flops));
    k->bind_scratch(ctx.options().scratch.get());
    ctx.set_kernel(std::move(k));
    return {};
}

// ---------------------------------------------------------------- ConvNhwcBand
// ConvNhwcBand (domain "jiffy", made by the fuse_conv_band pass; docs/layout.md): a channels-last
// expand 1x1 and the depthwise conv that is its only reader, run band by band so that the
// expanded tensor (MobileNet's and EfficientNet's 96 x 112x112, 4.8 MB) never leaves L2: the 1x1
// writes a few rows of it into a scratch band, the depthwise reads them back from L2 and writes
// its output rows, the band's last kh - sh rows move to its front for the next output rows.
// Inputs X (N x H x W x K, or N x K x H x W with _pw_x_nchw = 1), W1 (M x K x 1 x 1), B1 (M, may
// be empty), W2 (M x 1 x kh x kw), B2 (M, may be empty); all weights constant. The depthwise's
// attributes (strides, pads, dilations, group = M, _fused_act ..., _y_nchw) as in ConvNhwc; the
// 1x1's epilogue as _pw_fused_act / _pw_fused_alpha / _pw_fused_beta / _pw_fused_lo / _pw_fused_hi.
// Y is the depthwise's output, channels-last (N x OH x OW x M) or with _y_nchw channels-first.
// The same sums as the two ConvNhwc steps, bit for bit.
// The first conv may instead be an RGB stem (W1 M x C x 3 x 3, stride 2, X N x C x H x W; pads in
// _pw_pads): the direct stem conv (kernels/conv_stem.h) writes the band's rows (the face
// detector's 16 x 120x160 and MobileNetV2's 32 x 112x112 then stay in L2 too).
class ConvNhwcBandKernel : public Kernel {
public:
    // stem: the first conv is the stem of geometry sg (K = its input channels) instead of a 1x1.
    ConvNhwcBandKernel(int64_t N, int64_t K, kernels::Conv2DGeom g, const float* W1, const float* B1,
                       const float* W2, const float* B2, kernels::ConvEpi pw_epi, kernels::ConvEpi dw_epi,
                       bool x_nchw, bool y_nchw, int64_t band_bytes, bool stem = false,
                       const kernels::Conv2DGeom& sg = {})
        : N_(N), K_(K), g_(g), pw_epi_(pw_epi), dw_epi_(dw_epi), x_nchw_(x_nchw), y_nchw_(y_nchw), stem_(stem) {
        const kernels::Isa isa = kernels::active_isa();
        dw_ = kernels::NhwcDepthwise(isa, g);
        dw_packed_ = kernels::alloc_weights(dw_.packed_floats());
        if (stem) {
            stem_conv_ = kernels::ConvStem(isa, sg, true, true);
            pw_packed_ = kernels::alloc_weights(stem_conv_.packed_floats());
            stem_conv_.pack(W1, B1, pw_packed_.get());
            in_img_ = sg.C * sg.H * sg.W;
        } else {
            pw_ = kernels::NhwcPointwise(isa, K, g.M);
            pw_packed_ = kernels::alloc_weights(pw_.packed_floats());
            pw_.pack(W1, B1, pw_packed_.get());
            in_img_ = g.H * g.W * K;
        }
        dw_.pack(W2, B2, dw_packed_.get());
        // Output rows per band: as many as keep the band's input rows within band_bytes (at least
        // one output row's kh rows).
        ext_ = (g.kh - 1) * g.dh + 1;
        const int64_t row_bytes = g.W * g.M * int64_t(sizeof(float));
        const int64_t fit = std::max<int64_t>(ext_, band_bytes / std::max<int64_t>(1, row_bytes));
        orows_ = std::max<int64_t>(1, (fit - ext_) / g.sh + 1);
        band_rows_ = std::min(g.H, (orows_ - 1) * g.sh + ext_);
    }
    void set_parallel(ThreadPool* pool, int chunks) {
        if (pool && chunks >= 2 && chunks == pool->threads()) {
            pool_ = pool, chunks_ = chunks;
            bal_ = std::make_unique<Balance>(chunks);  // output rows cut per run
        }
    }
    // After set_parallel: a band per part in the plan's shared scratch.
    void bind_scratch(SharedScratch* s) {
        scr_ = s;
        band_floats_ = (band_rows_ * g_.W * g_.M + 15) / 16 * 16;
        if (pool_) s->reserve_parts(chunks_, size_t(band_floats_), 0);
        else s->reserve(size_t(band_floats_));
    }
    Status run(const void* const* in, void* const* out) const override {
        const float* X = static_cast<const float*>(in[0]);
        float* Y = static_cast<float*>(out[0]);
        const int64_t in_img = in_img_, out_img = g_.OH * g_.OW * g_.M;
        float* scratch = scr_->data();
        const size_t stride = scr_->part_stride();
        for (int64_t n = 0; n < N_; ++n) {
            const float* x = X + n * in_img;
            float* y = Y + n * out_img;
            for_balanced_or_caller(pool_, g_.OH, 1, bal_.get(), [&](int i, int64_t b, int64_t e) {
                if (e > b) rows(x, y, scratch + size_t(i) * stride, b, e);
            });
        }
        return {};
    }
    std::string describe() const override {
        return std::string(stem_ ? "conv_stem+dw band " : "conv_nhwc_1x1+dw band ") + std::to_string(orows_) +
               " rows" + (x_nchw_ && !stem_ ? " nchw-in" : "") + (y_nchw_ ? " nchw-out" : "") +
               (pool_ ? " x" + std::to_string(chunks_) + " threads by rows " : " ") +
               kernels::isa_name(kernels::active_isa());
    }

private:
    // Output rows [oy0, oy1) of one image, band after band in `band` (band_rows_ rows of W * M).
    void rows(const float* x, float* y, float* band, int64_t oy0, int64_t oy1) const {
        const int64_t rowf = g_.W * g_.M, x_row = x_nchw_ ? g_.W : g_.W * K_, x_plane = x_nchw_ ? g_.H * g_.W : 0;
        int64_t h0 = 0, h1 = 0;  // the image rows the band holds
        for (int64_t oy = oy0; oy < oy1; oy += orows_) {
            const int64_t o1 = std::min(oy1, oy + orows_);
            const int64_t need0 = std::min(g_.H, std::max<int64_t>(0, oy * g_.sh - g_.ph));
            const int64_t need1 = std::max(need0, std::min(g_.H, (o1 - 1) * g_.sh - g_.ph + ext_));
            // Rows [need0, h1) were made for the previous output rows: moved to the front.
            int64_t keep = 0;
            if (h1 > need0 && h0 <= need0) {
                keep = std::min(h1, need1) - need0;
                if (need0 > h0) std::memmove(band, band + (need0 - h0) * rowf, size_t(keep * rowf) * sizeof(float));
            }
            const int64_t start = need0 + keep;
            if (need1 > start && stem_)
                stem_conv_.run_rows(x, pw_packed_.get(), band + keep * rowf, pw_epi_, start, need1);
            else if (need1 > start)
                pw_.run(x + start * x_row, pw_packed_.get(), nullptr, band + keep * rowf, pw_epi_, 0,
                        (need1 - start) * g_.W, x_plane);
            h0 = need0, h1 = need1;
            dw_.run_band(band, h0, h1, dw_packed_.get(), y, dw_epi_, oy, o1, y_nchw_);
        }
    }

    int64_t N_, K_;
    kernels::Conv2DGeom g_;  // the depthwise's (C = M: the 1x1's output channels)
    kernels::ConvEpi pw_epi_, dw_epi_;
    bool x_nchw_, y_nchw_;
    bool stem_;              // the first conv is stem_conv_ (else pw_)
    int64_t in_img_ = 0;     // floats of one image of X
    int64_t ext_ = 1;        // input rows one output row reads: (kh - 1) * dh + 1
    int64_t orows_ = 1;      // output rows per band
    int64_t band_rows_ = 1;  // input rows a band holds at most
    int64_t band_floats_ = 0;
    kernels::NhwcPointwise pw_;
    kernels::ConvStem stem_conv_;
    kernels::NhwcDepthwise dw_;
    std::shared_ptr<float> pw_packed_, dw_packed_;  // pw_packed_: the first conv's (1x1 or stem)
    ThreadPool* pool_ = nullptr;
    int chunks_ = 1;
    std::unique_ptr<Balance> bal_;
    SharedScratch* scr_ = nullptr;
};

// The band size (bytes of the expanded tensor's rows held at once): env JIFFY_BAND_KB, else 256 KiB.
int64_t conv_band_bytes() {
    const char* e = std::getenv("JIFFY_BAND_KB");
    const long kb = e ? std::strtol(e, nullptr, 10) : 256;
    return int64_t(kb > 0 ? kb : 1) * 1024;
}

Status prep_ConvNhwcBand(OpContext& ctx) {
    if (ctx.num_inputs() != 5 || !ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(3))
        return ctx.fail("needs inputs X, W1, B1 (may be empty), W2, B2 (may be empty); got ", ctx.num_inputs());
    for (int i = 0; i < 5; ++i)
        if (ctx.has_input(i) && ctx.in_dtype(i) != DType::kF32)
            return ctx.fail_unsupported("input ", i, " must be float32");
    for (int i = 1; i < 5; ++i)
        if (ctx.has_input(i) && !ctx.in_const(i)) return ctx.fail("input ", i, " (a weight or bias) must be a constant");
    const Shape& x = ctx.in_shape(0);
    const Shape& w1 = ctx.in_shape(1);
    const Shape& w2 = ctx.in_shape(3);
    const bool x_nchw = ctx.attr_int("_pw_x_nchw", 0) != 0, y_nchw = ctx.attr_int("_y_nchw", 0) != 0;
    if (x.size() != 4)
        return ctx.fail("X must be ", x_nchw ? "N x K x H x W" : "N x H x W x K", ", got shape ", shape_str(x));
    const int64_t N = x[0], K = x_nchw ? x[1] : x[3];
    int64_t H = x_nchw ? x[2] : x[1], Wd = x_nchw ? x[3] : x[2];
    // A 3x3 W1: an RGB stem (stride 2, pads _pw_pads) as the first conv; H x Wd become its output's.
    const bool stem = w1.size() == 4 && w1[2] == 3 && w1[3] == 3;
    kernels::Conv2DGeom sg;
    if (stem) {
        if (!x_nchw) return ctx.fail_unsupported("a 3x3 W1 (a stem conv) reads an NCHW X (_pw_x_nchw = 1)");
        if (w1[1] != K) return ctx.fail("W1 must be M x ", K, " x 3 x 3 (the stem), got shape ", shape_str(w1));
        Shape pads{0, 0, 0, 0};
        if (const Attr* a = ctx.attr("_pw_pads")) pads = a->ints;
        if (pads.size() != 4 || *std::min_element(pads.begin(), pads.end()) < 0)
            return ctx.fail("_pw_pads must be 4 non-negative ints (the stem's pads)");
        if (const Attr* a = ctx.attr("_pw_strides"); a && a->ints != Shape{2, 2})
            return ctx.fail_unsupported("the band's stem conv has stride 2, got _pw_strides ", ints_str(a->ints));
        sg.C = K, sg.H = H, sg.W = Wd, sg.M = w1[0], sg.kh = sg.kw = 3, sg.sh = sg.sw = 2;
        sg.ph = pads[0], sg.pw = pads[1];
        sg.OH = (H + pads[0] + pads[2] - 3) / 2 + 1, sg.OW = (Wd + pads[1] + pads[3] - 3) / 2 + 1;
        if (sg.OH < 1 || !kernels::ConvStem::suits(kernels::active_isa(), sg))
            return ctx.fail_unsupported("the band's stem conv (", K, " -> ", w1[0], " on ", H, "x", Wd,
                                        ") is not one the direct stem kernel runs here");
        H = sg.OH, Wd = sg.OW;
    } else if (w1.size() != 4 || w1[1] != K || w1[2] != 1 || w1[3] != 1) {
        return ctx.fail("W1 must be M x ", K, " x 1 x 1 (the expand 1x1), got shape ", shape_str(w1));
    }
    const int64_t M = w1[0];
    if (w2.size() != 4 || w2[0] != M || w2[1] != 1)
        return ctx.fail("W2 must be ", M, " x 1 x kh x kw (the depthwise), got shape ", shape_str(w2));
    if (ctx.attr_int("group", 1) != M) return ctx.fail("group must be ", M, " (depthwise), got ", ctx.attr_int("group", 1));
    if (ctx.has_input(2)) JIFFY_RETURN_IF_ERROR(expect_vec(ctx, 2, "B1", M));
    if (ctx.has_input(4)) JIFFY_RETURN_IF_ERROR(expect_vec(ctx, 4, "B2", M));
    if (const Attr* a = ctx.attr("kernel_shape"); a && a->ints != Shape{w2[2], w2[3]})
        return ctx.fail("kernel_shape ", ints_str(a->ints), " does not match W2's kernel dims");
    Geom g;
    JIFFY_RETURN_IF_ERROR(forward_geometry(ctx, Shape{H, Wd}, Shape{w2[2], w2[3]}, false, &g));
    kernels::Conv2DGeom geo = conv2d_geom(g);
    geo.C = geo.M = M;
    kernels::ConvEpi pw_epi, dw_epi;
    JIFFY_RETURN_IF_ERROR(parse_fused_act(ctx, "_pw", &pw_epi));
    JIFFY_RETURN_IF_ERROR(parse_fused_act(ctx, "", &dw_epi));
    if (ctx.attr_int("_fused_residual", 0) != 0) return ctx.fail_unsupported("ConvNhwcBand takes no _fused_residual");
    if (y_nchw && !kernels::nhwc_dw_writes_nchw(geo))
        return ctx.fail_unsupported("_y_nchw (an NCHW Y) only for a 3x3 or 5x5 depthwise of stride 1 or 2");
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kF32, y_nchw ? Shape{N, M, geo.OH, geo.OW} : Shape{N, geo.OH, geo.OW, M}));
    auto k = std::make_unique<ConvNhwcBandKernel>(
        N, K, geo, ctx.in_const(1)->as<float>(), ctx.has_input(2) ? ctx.in_const(2)->as<float>() : nullptr,
        ctx.in_const(3)->as<float>(), ctx.has_input(4) ? ctx.in_const(4)->as<float>() : nullptr, pw_epi, dw_epi,
        x_nchw, y_nchw, conv_band_bytes(), stem, sg);
    // Threads as the two steps would: the first conv's FLOPs and the depthwise's x3 (prep_ConvNhwc).
    const int64_t flops = 2 * N * H * Wd * K * M * (stem ? 9 : 1) + 3 * 2 * N * M * geo.OH * geo.OW * geo.kh * geo.kw;
    k->set_parallel(ctx.options().pool.get(), parallel_chunks(ctx.options(), flops));
    k->bind_scratch(ctx.options().scratch.get());
    ctx.set_kernel(std::move(k));
    return {};
}

Status prep_ConvTranspose(OpContext& ctx) {
    Shape kernel;
    JIFFY_RETURN_IF_ERROR(check_conv_inputs(ctx, &kernel));
    const Shape& x = ctx.in_shape(0);
    const Shape& w = ctx.in_shape(1);
    const size_t nd = x.size() - 2;
    ConvDims d;
    d.N = x[0];
    d.C = x[1];
    d.G = ctx.attr_int("group", 1);
    if (d.G < 1) return ctx.fail("group must be >= 1, got ", d.G);
    if (w[0] != d.C)
        return ctx.fail("W's first dim (", w[0], ") must equal X's channel count (", d.C, ")");
    if (d.C % d.G != 0)
        return ctx.fail("X has ", d.C, " channels, not divisible by group ", d.G);
    d.Cg = d.C / d.G;
    d.Mg = w[1];
    d.M = d.Mg * d.G;
    if (ctx.has_input(2)) JIFFY_RETURN_IF_ERROR(expect_vec(ctx, 2, "B", d.M));
    d.has_bias = ctx.has_input(2);

    AutoPad ap;
    JIFFY_RETURN_IF_ERROR(parse_auto_pad(ctx, &ap));
    std::vector<int64_t> strides, dils, pads, outpad;
    JIFFY_RETURN_IF_ERROR(read_ints(ctx, "strides", nd, 1, 1, &strides));
    JIFFY_RETURN_IF_ERROR(read_ints(ctx, "dilations", nd, 1, 1, &dils));
    JIFFY_RETURN_IF_ERROR(read_ints(ctx, "pads", 2 * nd, 0, 0, &pads));
    JIFFY_RETURN_IF_ERROR(read_ints(ctx, "output_padding", nd, 0, 0, &outpad));
    std::vector<int64_t> out_shape;
    if (const Attr* a = ctx.attr("output_shape")) {
        out_shape = a->ints;
        if (out_shape.size() == nd + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
        if (out_shape.size() != nd)
            return ctx.fail("output_shape must have ", nd, " values, got ", ints_str(a->ints));
        for (int64_t v : out_shape)
            if (v < 1) return ctx.fail("output_shape values must be >= 1, got ", ints_str(a->ints));
    }

    Geom g;
    g.nd = int(nd);
    const size_t o = 3 - nd;
    for (size_t i = 0; i < nd; ++i) {
        int64_t in = x[i + 2], k = kernel[i], s = strides[i], dl = dils[i];
        int64_t natural = s * (in - 1) + outpad[i] + (k - 1) * dl + 1;
        int64_t out = 0, pb = 0;
        if (!out_shape.empty() || ap == AutoPad::kSameUpper || ap == AutoPad::kSameLower) {
            out = out_shape.empty() ? in * s : out_shape[i];
            int64_t total = std::max<int64_t>(0, natural - out);
            pb = ap == AutoPad::kSameUpper ? total / 2 : total - total / 2;
        } else if (ap == AutoPad::kValid) {
            out = natural;
        } else {
            pb = pads[i];
            out = natural - pads[i] - pads[i + nd];
        }
        if (in < 1) return ctx.fail("X has an empty spatial dim: shape ", shape_str(x));
        if (out < 1)
            return ctx.fail("spatial dim ", i, ": output size would be ", out,
                            " (pads larger than the transposed extent ", natural, ")");
        g.in[o + i] = in;
        g.out[o + i] = out;
        g.k[o + i] = k;
        g.s[o + i] = s;
        g.d[o + i] = dl;
        g.pb[o + i] = pb;
    }
    Shape out = {d.N, d.M};
    for (size_t i = 0; i < nd; ++i) out.push_back(g.out[o + i]);
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));

    d.in_plane = g.in_plane();
    d.out_plane = g.out_plane();
    d.ksize = g.ksize();
    d.kw = g.k[2];
    d.rows = g.in[0] * g.in[1];
    d.row_len = g.in[2];
    d.sx = g.s[2];
    kernels::ConvEpi epi;  // a fused activation (fuse_activation), clamp and affine
    JIFFY_RETURN_IF_ERROR(parse_fused_act(ctx, "", &epi));
    if (ctx.num_inputs() > 3) return ctx.fail("has ", ctx.num_inputs(), " inputs; at most 3");
    if (ctx.in_dtype(0) == DType::kF32 && g.nd <= 2 && d.G == 1 && ctx.in_const(1) &&
        d.N > 0 && d.in_plane > 0) {
        auto k = std::make_unique<ConvTransposeFastKernel>(d, g, kernels::active_isa(),
                                                           ctx.in_const(1)->as<float>(), epi);
        k->bind_scratch(ctx.options().scratch.get());
        ctx.set_kernel(std::move(k));
        return {};
    }
    Rows rows = build_rows(g, true);
    std::vector<XRange> xr = build_xr(g, true);
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<ConvTransposeKernel<T>>(d, std::move(rows), std::move(xr), epi));
        return {};
    });
}

// ---------------------------------------------------------------- pooling

enum class PoolKind { kMax, kAvg, kLp };

// Per spatial dim and output index o: first input index start = o*s - pb, valid taps [k0, k1)
// (input index inside [0, in)), and taps inside the padded range (for count_include_pad).
struct PoolDim {
    std::vector<int64_t> start, k0, k1, cnt_pad;
    int64_t d = 1;
};

template <typename T, PoolKind K>
class PoolKernel : public Kernel {
public:
    PoolKernel(int64_t planes, Geom g, std::array<PoolDim, 3> dims, bool count_include_pad,
               bool col_major, double p, bool indices)
        : planes_(planes), g_(g), dims_(std::move(dims)), include_pad_(count_include_pad),
          col_major_(col_major), indices_(indices), p_(p) {
        // Every window entirely inside the input (no padding reached, no dilation): the max
        // pool needs no per-tap range or index bookkeeping.
        full_ = !indices_;
        for (int j = 0; j < 3; ++j) {
            const PoolDim& D = dims_[size_t(j)];
            if (D.d != 1) full_ = false;
            for (size_t o = 0; o < D.k0.size(); ++o)
                if (D.k0[o] != 0 || D.k1[o] != g_.k[size_t(j)]) full_ = false;
        }
    }

    Status run(const void* const* in, void* const* out) const override {
        const T* X = static_cast<const T*>(in[0]);
        T* Y = static_cast<T*>(out[0]);
        int64_t* I = indices_ ? static_cast<int64_t*>(out[1]) : nullptr;
        const int64_t inP = g_.in_plane(), outP = g_.out_plane();
        const int64_t in1 = g_.in[1], in2 = g_.in[2];
        const PoolDim &D0 = dims_[0], &D1 = dims_[1], &D2 = dims_[2];
        if constexpr (K == PoolKind::kMax) {
            if (full_) {
                T lowest = std::numeric_limits<T>::lowest();
                if constexpr (std::is_floating_point_v<T>) lowest = -std::numeric_limits<T>::infinity();
                const int64_t k0n = g_.k[0], k1n = g_.k[1], k2n = g_.k[2];
                for (int64_t p = 0; p < planes_; ++p) {
                    const T* x = X + p * inP;
                    T* y = Y + p * outP;
                    for (int64_t o0 = 0; o0 < g_.out[0]; ++o0)
                        for (int64_t o1 = 0; o1 < g_.out[1]; ++o1) {
                            const int64_t s0 = D0.start[size_t(o0)], s1 = D1.start[size_t(o1)];
                            for (int64_t o2 = 0; o2 < g_.out[2]; ++o2) {
                                const int64_t s2 = D2.start[size_t(o2)];
                                T best = lowest;
                                for (int64_t k0 = 0; k0 < k0n; ++k0)
                                    for (int64_t k1 = 0; k1 < k1n; ++k1) {
                                        const T* row = x + ((s0 + k0) * in1 + s1 + k1) * in2 + s2;
                                        for (int64_t k2 = 0; k2 < k2n; ++k2)
                                            best = row[k2] > best ? row[k2] : best;
                                    }
                                *y++ = best;
                            }
                        }
                }
                return {};
            }
        }
        for (int64_t p = 0; p < planes_; ++p) {
            const T* x = X + p * inP;
            T* y = Y + p * outP;
            int64_t yi = 0;
            for (int64_t o0 = 0; o0 < g_.out[0]; ++o0)
                for (int64_t o1 = 0; o1 < g_.out[1]; ++o1)
                    for (int64_t o2 = 0; o2 < g_.out[2]; ++o2, ++yi) {
                        const size_t u0 = size_t(o0), u1 = size_t(o1), u2 = size_t(o2);
                        if constexpr (K == PoolKind::kMax) {
                            T best = std::numeric_limits<T>::lowest();
                            if constexpr (std::is_floating_point_v<T>)
                                best = -std::numeric_limits<T>::infinity();
                            int64_t b0 = D0.start[u0] + D0.k0[u0] * D0.d;
                            int64_t b1 = D1.start[u1] + D1.k0[u1] * D1.d;
                            int64_t b2 = D2.start[u2] + D2.k0[u2] * D2.d;
                            for (int64_t k0 = D0.k0[u0]; k0 < D0.k1[u0]; ++k0) {
                                const int64_t i0 = D0.start[u0] + k0 * D0.d;
                                for (int64_t k1 = D1.k0[u1]; k1 < D1.k1[u1]; ++k1) {
                                    const int64_t i1 = D1.start[u1] + k1 * D1.d;
                                    const T* row = x + (i0 * in1 + i1) * in2;
                                    for (int64_t k2 = D2.k0[u2]; k2 < D2.k1[u2]; ++k2) {
                                        const int64_t i2 = D2.start[u2] + k2 * D2.d;
                                        if (row[i2] > best) {
                                            best = row[i2];
                                            b0 = i0;
                                            b1 = i1;
                                            b2 = i2;
                                        }
                                    }
                                }
                            }
                            y[yi] = best;
                            if (I) {
                                int64_t idx = col_major_ ? b0 + b1 * g_.in[0] + b2 * g_.in[0] * in1
                                                         : (b0 * in1 + b1) * in2 + b2;
                                I[p * outP + yi] = p * inP + idx;
                            }
                        } else {
                            double acc = 0;
                            for (int64_t k0 = D0.k0[u0]; k0 < D0.k1[u0]; ++k0) {
                                const int64_t i0 = D0.start[u0] + k0 * D0.d;
                                for (int64_t k1 = D1.k0[u1]; k1 < D1.k1[u1]; ++k1) {
                                    const int64_t i1 = D1.start[u1] + k1 * D1.d;
                                    const T* row = x + (i0 * in1 + i1) * in2;
                                    for (int64_t k2 = D2.k0[u2]; k2 < D2.k1[u2]; ++k2) {
                                        const double v = double(row[D2.start[u2] + k2 * D2.d]);
                                        if constexpr (K == PoolKind::kAvg) acc += v;
                                        else acc += std::pow(std::abs(v), p_);
                                    }
                                }
                            }
                            if constexpr (K == PoolKind::kAvg) {
                                int64_t cnt = include_pad_
                                                  ? D0.cnt_pad[u0] * D1.cnt_pad[u1] * D2.cnt_pad[u2]
                                                  : (D0.k1[u0] - D0.k0[u0]) * (D1.k1[u1] - D1.k0[u1]) *
                                                        (D2.k1[u2] - D2.k0[u2]);
                                y[yi] = T(acc / double(cnt));
                            } else {
                                y[yi] = T(std::pow(acc, 1.0 / p_));
                            }
                        }
                    }
        }
        return {};
    }

private:
    int64_t planes_;
    Geom g_;
    std::array<PoolDim, 3> dims_;
    bool include_pad_, col_major_, indices_;
    bool full_ = false;
    double p_;
};

// float32 1-D / 2-D MaxPool (no Indices output) and AveragePool: the separable vector pool of
// kernels/pool.h. The row buffer is mutable scratch owned by the kernel (one per part).
// With an intra-op pool, split by planes (each part its own planes and row buffer; every output
// is computed exactly as on one thread): ResNet-50's 3x3 s2 MaxPool on 64 x 112^2 ran on one
// thread at 171 us alone but 371 us after the 2-thread stem, half its input in the other core's
// L2; each core now reads about half of it.
class Pool2dFastKernel : public Kernel {
public:
    Pool2dFastKernel(kernels::Pool2d p, int64_t planes, ThreadPool* pool, int chunks)
        : p_(std::move(p)), planes_(planes), fn_(kernels::pool2d_for(kernels::active_isa())) {
        const int n = pool && chunks > 1 && chunks == pool->threads() && planes >= chunks ? chunks : 1;
        if (n > 1) pool_ = pool, bal_ = std::make_unique<Balance>(n);  // planes cut per run
        scratch_.resize(size_t(n));
        for (auto& s : scratch_) s.resize(size_t(kernels::pool2d_scratch_floats(p_)));
    }
    Status run(const void* const* in, void* const* out) const override {
        const float* x = static_cast<const float*>(in[0]);
        float* y = static_cast<float*>(out[0]);
        const int64_t in_plane = p_.H * p_.W, out_plane = p_.OH * p_.OW;
        for_balanced_or_caller(pool_, planes_, 1, bal_.get(), [&](int t, int64_t b, int64_t e) {
            if (e > b) fn_(p_, x + b * in_plane, y + b * out_plane, e - b, scratch_[size_t(t)].data());
        });
        return {};
    }
    std::string describe() const override {
        return pool_ ? "pool2d x" + std::to_string(scratch_.size()) + " threads by planes" : std::string();
    }

private:
    kernels::Pool2d p_;
    int64_t planes_;
    kernels::Pool2dFn fn_;
    ThreadPool* pool_ = nullptr;
    std::unique_ptr<Balance> bal_;
    mutable std::vector<std::vector<float>> scratch_;
};

// Reads p of LpPool / GlobalLpPool (a float attribute in old opsets, an int since opset 2).
Status read_p(const OpContext& ctx, double* p) {
    *p = 2;
    if (const Attr* a = ctx.attr("p")) *p = a->kind == Attr::kFloat ? double(a->f) : double(a->i);
    if (!(*p > 0)) return ctx.fail("p must be > 0, got ", *p);
    return {};
}

template <PoolKind K>
Status prep_pool(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input X is missing");
    DType t = ctx.in_dtype(0);
    bool ok = t == DType::kF32 || t == DType::kF64 ||
              (K == PoolKind::kMax && (t == DType::kI8 || t == DType::kU8));
    if (!ok) return ctx.fail_unsupported("dtype ", dtype_name(t), " is not supported");
    const Shape& x = ctx.in_shape(0);
    if (x.size() < 3)
        return ctx.fail("X must have rank >= 3 (N x C x spatial...), got shape ", shape_str(x));
    if (x.size() > 5)
        return ctx.fail_unsupported("X has ", x.size() - 2, " spatial dims; 1 to 3 are supported");
    const size_t nd = x.size() - 2;
    const Attr* ka = ctx.attr("kernel_shape");
    if (!ka) return ctx.fail("attribute kernel_shape is required");
    if (ka->ints.size() != nd)
        return ctx.fail("kernel_shape must have ", nd, " values, got ", ints_str(ka->ints));
    for (int64_t k : ka->ints)
        if (k < 1) return ctx.fail("kernel_shape values must be >= 1, got ", ints_str(ka->ints));
    int64_t ceil_mode = ctx.attr_int("ceil_mode", 0);
    Geom g;
    Shape in_sp(x.begin() + 2, x.end());
    JIFFY_RETURN_IF_ERROR(forward_geometry(ctx, in_sp, ka->ints, ceil_mode != 0, &g));

    bool include_pad = false, col_major = false;
    double p = 2;
    if (K == PoolKind::kAvg) include_pad = ctx.attr_int("count_include_pad", 0) != 0;
    if (K == PoolKind::kLp) JIFFY_RETURN_IF_ERROR(read_p(ctx, &p));
    if (K == PoolKind::kMax) {
        int64_t so = ctx.attr_int("storage_order", 0);
        if (so != 0 && so != 1) return ctx.fail("storage_order must be 0 or 1, got ", so);
        col_major = so == 1;
    } else if (ctx.num_outputs() > 1 && ctx.has_output(1)) {
        return ctx.fail("has ", ctx.num_outputs(), " outputs; only MaxPool has a second output");
    }

    std::array<PoolDim, 3> dims;
    for (size_t i = 0; i < 3; ++i) {
        PoolDim& pd = dims[i];
        pd.d = g.d[i];
        for (int64_t o = 0; o < g.out[i]; ++o) {
            int64_t start = o * g.s[i] - g.pb[i];
            int64_t k0 = std::max<int64_t>(0, ceil_div(-start, g.d[i]));
            int64_t k1 = std::min<int64_t>(g.k[i], floor_div(g.in[i] - 1 - start, g.d[i]) + 1);
            if (k1 <= k0)
                return ctx.fail("a pooling window lies entirely in the padding (spatial dim ",
                                int(i) - (3 - g.nd), ", output index ", o,
                                "); pads must be smaller than the kernel");
            int64_t kp = std::min<int64_t>(g.k[i], floor_div(g.in[i] + g.pe[i] - 1 - start, g.d[i]) + 1);
            pd.start.push_back(start);
            pd.k0.push_back(k0);
            pd.k1.push_back(k1);
            pd.cnt_pad.push_back(kp);
        }
    }
    Shape out = {x[0], x[1]};
    for (size_t i = 0; i < nd; ++i) out.push_back(g.out[3 - nd + i]);
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, t, out));
    if (K == PoolKind::kMax && ctx.has_output(1))
        JIFFY_RETURN_IF_ERROR(ctx.set_output(1, DType::kI64, out));
    const int64_t planes = x[0] * x[1];
    const bool indices = K == PoolKind::kMax && ctx.has_output(1);

    if (K != PoolKind::kLp && t == DType::kF32 && !indices && g.nd <= 2) {
        kernels::Pool2d p2;
        const int64_t in2[2] = {g.in[1], g.in[2]}, out2[2] = {g.out[1], g.out[2]};
        const int64_t k2[2] = {g.k[1], g.k[2]}, s2[2] = {g.s[1], g.s[2]}, d2[2] = {g.d[1], g.d[2]};
        const int64_t pb2[2] = {g.pb[1], g.pb[2]}, pe2[2] = {g.pe[1], g.pe[2]};
        if (kernels::pool2d_setup(K == PoolKind::kMax, include_pad, in2, out2, k2, s2, d2, pb2, pe2, &p2)) {
            // Work as FLOP-equivalents for the split threshold: one compare / add per tap, and at
            // least 32 per output (from ~16 K outputs: a pool after split convs otherwise reads
            // half its input from the other core's cache on the caller alone; SqueezeNet's 3x3 s2
            // on 256 x 27x27 at two threads 77 -> 44 us).
            const int64_t outs = planes * g.out[1] * g.out[2];
            const int64_t work = std::max(outs * k2[0] * k2[1], 32 * outs);
            ctx.set_kernel(std::make_unique<Pool2dFastKernel>(std::move(p2), planes, ctx.options().pool.get(),
                                                              parallel_chunks(ctx.options(), work)));
            return {};
        }
    }
    auto make = [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<PoolKernel<T, K>>(planes, g, std::move(dims), include_pad,
                                                          col_major, p, indices));
        return {};
    };
    if constexpr (K == PoolKind::kMax) {
        if (t == DType::kI8) return make(TypeTag<int8_t>{});
        if (t == DType::kU8) return make(TypeTag<uint8_t>{});
    }
    return visit_float(t, make);
}

template <typename T, PoolKind K>
class GlobalPoolKernel : public Kernel {
public:
    GlobalPoolKernel(int64_t planes, int64_t size, double p) : planes_(planes), size_(size), p_(p) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* X = static_cast<const T*>(in[0]);
        T* Y = static_cast<T*>(out[0]);
        for (int64_t q = 0; q < planes_; ++q) {
            const T* x = X + q * size_;
            if constexpr (K == PoolKind::kMax) {
                // 16 independent maxima (the select x > b ? x : b is one vector max; NaN is
                // skipped as before: a plane of only NaN gives -inf). 256 x 20x20: ~49 -> ~19 us.
                T b[16];
                for (auto& v : b) v = -std::numeric_limits<T>::infinity();
                int64_t i = 0;
                for (; i + 16 <= size_; i += 16)
                    for (int u = 0; u < 16; ++u) b[u] = x[i + u] > b[u] ? x[i + u] : b[u];
                T best = -std::numeric_limits<T>::infinity();
                for (; i < size_; ++i) best = x[i] > best ? x[i] : best;
                for (int u = 0; u < 16; ++u) best = b[u] > best ? b[u] : best;
                Y[q] = best;
            } else if constexpr (K == PoolKind::kAvg) {
                // Eight independent partial sums: one dependent add chain per plane cost ~4
                // cycles per element (ppocr_cls's 200 x 192 pools: ~25 us each before).
                double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                int64_t i = 0;
                for (; i + 8 <= size_; i += 8)
                    for (int u = 0; u < 8; ++u) s[u] += double(x[i + u]);
                double acc = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
                for (; i < size_; ++i) acc += double(x[i]);
                Y[q] = T(acc / double(size_));
            } else {
                double acc = 0;
                for (int64_t i = 0; i < size_; ++i) acc += std::pow(std::abs(double(x[i])), p_);
                Y[q] = T(std::pow(acc, 1.0 / p_));
            }
        }
        return {};
    }

private:
    int64_t planes_, size_;
    double p_;
};

// float32 GlobalAveragePool: the per-ISA kernel (kernels/pool.h), several planes at once.
class GlobalAvgF32Kernel : public Kernel {
public:
    GlobalAvgF32Kernel(int64_t planes, int64_t size)
        : planes_(planes), size_(size), isa_(kernels::active_isa()), fn_(kernels::global_avg_for(isa_)) {}
    void set_parallel(ThreadPool* pool, int chunks) {
        if (pool && chunks >= 2 && planes_ >= 2 * chunks) pool_ = pool, chunks_ = chunks;
    }
    Status run(const void* const* in, void* const* out) const override {
        const float* x = static_cast<const float*>(in[0]);
        float* y = static_cast<float*>(out[0]);
        if (!pool_) {
            fn_(x, y, planes_, size_);
            return {};
        }
        pool_->parallel_for(chunks_, [&](int i) {
            int64_t b, e;
            chunk_range(planes_, chunks_, i, 1, &b, &e);
            if (e > b) fn_(x + b * size_, y + b, e - b, size_);
        });
        return {};
    }
    std::string describe() const override { return std::string("global_avg ") + kernels::isa_name(isa_); }

private:
    int64_t planes_, size_;
    kernels::Isa isa_;
    kernels::GlobalAvgFn fn_;
    ThreadPool* pool_ = nullptr;
    int chunks_ = 1;
};

// jiffy::GlobalAveragePoolNhwc (passes::mean_nhwc): the mean over the pixels of a channels-last
// X (N x H x W x C) of float32, written as the N x C means (an NCHW GlobalAveragePool's or a
// ReduceMean over H, W's bytes; _keepdims = 1: shape N x C x 1 x 1, 0: N x C).
class GlobalAvgNhwcKernel : public Kernel {
public:
    GlobalAvgNhwcKernel(int64_t n, int64_t size, int64_t C)
        : n_(n), size_(size), C_(C), isa_(kernels::active_isa()), fn_(kernels::global_avg_nhwc_for(isa_)) {}
    Status run(const void* const* in, void* const* out) const override {
        fn_(static_cast<const float*>(in[0]), static_cast<float*>(out[0]), n_, size_, C_);
        return {};
    }
    std::string describe() const override { return std::string("global_avg_nhwc ") + kernels::isa_name(isa_); }

private:
    int64_t n_, size_, C_;
    kernels::Isa isa_;
    kernels::GlobalAvgNhwcFn fn_;
};

class PoolNhwcKernel : public Kernel {
public:
    // Split by output rows (all images' n x OH) across the pool from parallel_chunks' threshold.
    PoolNhwcKernel(kernels::PoolNhwc p, int64_t n, ThreadPool* pool, int chunks)
        : p_(std::move(p)), rows_(n * p_.OH), isa_(kernels::active_isa()), fn_(kernels::pool_nhwc_for(isa_)) {
        if (pool && chunks > 1 && chunks == pool->threads() && rows_ >= chunks)
            pool_ = pool, bal_ = std::make_unique<Balance>(chunks);
    }
    Status run(const void* const* in, void* const* out) const override {
        const float* x = static_cast<const float*>(in[0]);
        float* y = static_cast<float*>(out[0]);
        for_balanced_or_caller(pool_, rows_, 1, bal_.get(), [&](int, int64_t b, int64_t e) {
            if (e > b) fn_(p_, x, y, b, e);
        });
        return {};
    }
    std::string describe() const override {
        return std::string("pool_nhwc ") + kernels::isa_name(isa_) + (pool_ ? " x" + std::to_string(pool_->threads()) + " threads by rows" : "");
    }

private:
    kernels::PoolNhwc p_;
    int64_t rows_;
    kernels::Isa isa_;
    kernels::PoolNhwcFn fn_;
    ThreadPool* pool_ = nullptr;
    std::unique_ptr<Balance> bal_;
};

// jiffy::MaxPoolNhwc / AveragePoolNhwc: the ONNX pool's attributes over a float32 N x H x W x C X
// (passes::layout_nhwc moves 2-D pools without an Indices output into channels-last chains).
template <PoolKind K>
Status prep_pool_nhwc(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(expect_float(ctx, 0, "X"));
    const Shape& x = ctx.in_shape(0);
    if (ctx.in_dtype(0) != DType::kF32 || x.size() != 4)
        return ctx.fail("X must be a float32 N x H x W x C tensor, got ", dtype_name(ctx.in_dtype(0)), " ",
                        shape_str(x));
    if (ctx.num_outputs() > 1 && ctx.has_output(1)) return ctx.fail_unsupported("a channels-last pool has one output");
    const Attr* ka = ctx.attr("kernel_shape");
    if (!ka) return ctx.fail("attribute kernel_shape is required");
    if (ka->ints.size() != 2) return ctx.fail("kernel_shape must have 2 values, got ", ints_str(ka->ints));
    for (int64_t k : ka->ints)
        if (k < 1) return ctx.fail("kernel_shape values must be >= 1, got ", ints_str(ka->ints));
    Geom g;
    JIFFY_RETURN_IF_ERROR(forward_geometry(ctx, Shape{x[1], x[2]}, ka->ints, ctx.attr_int("ceil_mode", 0) != 0, &g));
    const bool include_pad = K == PoolKind::kAvg && ctx.attr_int("count_include_pad", 0) != 0;
    kernels::PoolNhwc p;
    const int64_t in2[2] = {g.in[1], g.in[2]}, out2[2] = {g.out[1], g.out[2]};
    const int64_t k2[2] = {g.k[1], g.k[2]}, s2[2] = {g.s[1], g.s[2]}, d2[2] = {g.d[1], g.d[2]};
    const int64_t pb2[2] = {g.pb[1], g.pb[2]}, pe2[2] = {g.pe[1], g.pe[2]};
    if (!kernels::pool_nhwc_setup(K == PoolKind::kMax, include_pad, in2, out2, k2, s2, d2, pb2, pe2, x[3], &p))
        return ctx.fail("a pooling window lies entirely in the padding; pads must be smaller than the kernel");
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kF32, Shape{x[0], g.out[1], g.out[2], x[3]}));
    // Work as FLOP-equivalents for the split threshold: one compare / add per tap and channel.
    int64_t taps = 0;
    for (int64_t oh = 0; oh < p.OH; ++oh)
        for (int64_t ow = 0; ow < p.OW; ++ow) taps += p.row_n[size_t(oh)] * p.col_n[size_t(ow)];
    const int64_t work = x[0] * taps * x[3];
    ctx.set_kernel(std::make_unique<PoolNhwcKernel>(std::move(p), x[0], ctx.options().pool.get(),
                                                    parallel_chunks(ctx.options(), work)));
    return {};
}

Status prep_GlobalAveragePoolNhwc(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(expect_float(ctx, 0, "X"));
    const Shape& x = ctx.in_shape(0);
    if (ctx.in_dtype(0) != DType::kF32 || x.size() != 4)
        return ctx.fail("X must be a float32 N x H x W x C tensor, got ", dtype_name(ctx.in_dtype(0)), " ",
                        shape_str(x));
    const int64_t size = x[1] * x[2];
    if (size == 0 && x[0] * x[3] > 0) return ctx.fail("X has an empty spatial dim: ", shape_str(x));
    const int64_t keep = ctx.attr_int("_keepdims", 1);
    Shape out = {x[0], x[3]};
    if (keep) out.push_back(1), out.push_back(1);
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kF32, out));
    ctx.set_kernel(std::make_unique<GlobalAvgNhwcKernel>(x[0], size, x[3]));
    return {};
}

}  // namespace

std::unique_ptr<Kernel> make_global_avg_f32(OpContext& ctx, int64_t planes, int64_t size) {
    auto k = std::make_unique<GlobalAvgF32Kernel>(planes, size);
    // Split by planes from ~16 K values: after a split producer (a squeeze-excite block's
    // depthwise conv) one thread alone reads half the input across cores (1152 x 7x7: 3 us at
    // one thread, 9 at two unsplit). EfficientNet-B0 at 2T 0.975x.
    k->set_parallel(ctx.options().pool.get(), parallel_chunks(ctx.options(), 32 * planes * size));
    return k;
}

namespace {

template <PoolKind K>
Status prep_global_pool(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(expect_float(ctx, 0, "X"));
    const Shape& x = ctx.in_shape(0);
    if (x.size() < 3)
        return ctx.fail("X must have rank >= 3 (N x C x spatial...), got shape ", shape_str(x));
    double p = 2;
    if (K == PoolKind::kLp) JIFFY_RETURN_IF_ERROR(read_p(ctx, &p));
    const int64_t planes = x[0] * x[1];
    int64_t size = 1;
    for (size_t i = 2; i < x.size(); ++i) size *= x[i];
    if (size == 0 && planes > 0) return ctx.fail("X has an empty spatial dim: ", shape_str(x));
    Shape out = {x[0], x[1]};
    out.resize(x.size(), 1);
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));
    if (K == PoolKind::kAvg && ctx.in_dtype(0) == DType::kF32 && size > 0) {
        ctx.set_kernel(make_global_avg_f32(ctx, planes, size));
        return {};
    }
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<GlobalPoolKernel<T, K>>(planes, size, p));
        return {};
    });
}

// ---------------------------------------------------------------- BatchNormalization

template <typename T>
class BatchNormKernel : public Kernel {
public:
    BatchNormKernel(int64_t N, int64_t C, int64_t S, double eps, std::array<DType, 4> pt,
                    int num_out)
        : N_(N), C_(C), S_(S), eps_(eps), pt_(pt), num_out_(num_out) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* X = static_cast<const T*>(in[0]);
        T* Y = static_cast<T*>(out[0]);
        for (int64_t c = 0; c < C_; ++c) {
            const double scale = load_f(in[1], pt_[0], c), bias = load_f(in[2], pt_[1], c);
            const double mean = load_f(in[3], pt_[2], c), var = load_f(in[4], pt_[3], c);
            const T a = T(scale / std::sqrt(var + eps_)), b = T(bias), mu = T(mean);
            for (int64_t n = 0; n < N_; ++n) {
                const T* x = X + (n * C_ + c) * S_;
                T* y = Y + (n * C_ + c) * S_;
                for (int64_t i = 0; i < S_; ++i) y[i] = (x[i] - mu) * a + b;
            }
            // Optional statistics outputs (inference mode): the running statistics, unchanged.
            for (int o = 1; o < num_out_; ++o)
                if (out[o]) store_f(out[o], pt_[o % 2 ? 2 : 3], c, load_f(in[o % 2 ? 3 : 4], pt_[o % 2 ? 2 : 3], c));
        }
        return {};
    }

private:
    int64_t N_, C_, S_;
    double eps_;
    std::array<DType, 4> pt_;
    int num_out_;
};

Status prep_BatchNormalization(OpContext& ctx) {
    if (ctx.num_inputs() < 5) return ctx.fail("needs 5 inputs (X, scale, B, mean, var), got ", ctx.num_inputs());
    JIFFY_RETURN_IF_ERROR(expect_float(ctx, 0, "X"));
    const char* names[5] = {"X", "scale", "B", "input_mean", "input_var"};
    for (int i = 1; i < 5; ++i) JIFFY_RETURN_IF_ERROR(expect_float(ctx, i, names[i]));
    if (ctx.opset() >= 14 && ctx.attr_int("training_mode", 0) != 0)
        return ctx.fail_unsupported(
            "training_mode=1 is not supported (inference only: Jiffy does not compute batch "
            "statistics)");
    if (ctx.num_outputs() > 5 || (ctx.opset() >= 14 && ctx.num_outputs() > 3))
        return ctx.fail("has ", ctx.num_outputs(), " outputs; at most ",
                        ctx.opset() >= 14 ? 3 : 5, " are allowed");
    const Shape& x = ctx.in_shape(0);
    if (x.size() < 2) return ctx.fail("X must have rank >= 2 (N x C x ...), got ", shape_str(x));
    int64_t N = x[0], C = x[1], S = 1;
    for (size_t i = 2; i < x.size(); ++i) S *= x[i];
    bool spatial = ctx.opset() >= 9 || ctx.attr_int("spatial", 1) != 0;
    if (!spatial) {  // opset 7/8, spatial=0: one statistic per (C x D1 x ... x Dn) element
        C *= S;
        S = 1;
    }
    for (int i = 1; i < 5; ++i) JIFFY_RETURN_IF_ERROR(expect_vec(ctx, i, names[i], C, !spatial));
    std::array<DType, 4> pt = {ctx.in_dtype(1), ctx.in_dtype(2), ctx.in_dtype(3), ctx.in_dtype(4)};
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), x));
    for (int o = 1; o < ctx.num_outputs(); ++o)
        if (ctx.has_output(o))
            JIFFY_RETURN_IF_ERROR(ctx.set_output(o, ctx.in_dtype(o % 2 ? 3 : 4), ctx.in_shape(o % 2 ? 3 : 4)));
    double eps = ctx.attr_float("epsilon", 1e-5f);
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<BatchNormKernel<T>>(N, C, S, eps, pt, ctx.num_outputs()));
        return {};
    });
}

// ---------------------------------------------------------------- Instance / Group normalization

// Normalizes `groups` blocks of `csz` channels x S elements each (per batch item): per block
// mean and variance, then y = (x - mean) * inv_std * scale[ch] + bias[ch], where the parameter
// index is the channel (per_channel) or the group.
template <typename T>
class GroupNormKernel : public Kernel {
public:
    GroupNormKernel(int64_t N, int64_t groups, int64_t csz, int64_t S, double eps, bool per_channel)
        : N_(N), G_(groups), csz_(csz), S_(S), eps_(eps), per_channel_(per_channel) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* X = static_cast<const T*>(in[0]);
        const T* scale = static_cast<const T*>(in[1]);
        const T* bias = static_cast<const T*>(in[2]);
        T* Y = static_cast<T*>(out[0]);
        const int64_t block = csz_ * S_;
        for (int64_t n = 0; n < N_; ++n)
            for (int64_t g = 0; g < G_; ++g) {
                const T* x = X + (n * G_ + g) * block;
                T* y = Y + (n * G_ + g) * block;
                double sum = 0;
                for (int64_t i = 0; i < block; ++i) sum += double(x[i]);
                const double mean = block ? sum / double(block) : 0;
                double sq = 0;
                for (int64_t i = 0; i < block; ++i) {
                    const double v = double(x[i]) - mean;
                    sq += v * v;
                }
                const double inv = 1.0 / std::sqrt((block ? sq / double(block) : 0) + eps_);
                for (int64_t c = 0; c < csz_; ++c) {
                    const int64_t pi = per_channel_ ? g * csz_ + c : g;
                    const T a = T(inv * double(scale[pi])), b = T(bias[pi]), mu = T(mean);
                    const T* xc = x + c * S_;
                    T* yc = y + c * S_;
                    for (int64_t i = 0; i < S_; ++i) yc[i] = (xc[i] - mu) * a + b;
                }
            }
        return {};
    }

private:
    int64_t N_, G_, csz_, S_;
    double eps_;
    bool per_channel_;
};

// float32 InstanceNormalization: kernels/norm.h planes (vector partial sums; 1x64x80x80 from
// ~730 to ~77 us, double accumulation per element before).
class InstNormF32Kernel : public Kernel {
public:
    InstNormF32Kernel(int64_t N, int64_t C, int64_t S, float eps)
        : N_(N), C_(C), S_(S), eps_(eps), isa_(kernels::active_isa()), fn_(kernels::instnorm_planes_for(isa_)) {}
    Status run(const void* const* in, void* const* out) const override {
        fn_(static_cast<const float*>(in[0]), static_cast<float*>(out[0]), N_, C_, S_,
            static_cast<const float*>(in[1]), static_cast<const float*>(in[2]), eps_);
        return {};
    }
    std::string describe() const override { return std::string("instnorm_f32 ") + kernels::isa_name(isa_); }

private:
    int64_t N_, C_, S_;
    float eps_;
    kernels::Isa isa_;
    kernels::InstNormPlanesFn fn_;
};

Status prep_InstanceNormalization(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(expect_float(ctx, 0, "X"));
    JIFFY_RETURN_IF_ERROR(expect_same_dtype(ctx, 1, "scale"));
    JIFFY_RETURN_IF_ERROR(expect_same_dtype(ctx, 2, "B"));
    const Shape& x = ctx.in_shape(0);
    if (x.size() < 3)
        return ctx.fail("X must have rank >= 3 (N x C x spatial...), got shape ", shape_str(x));
    const int64_t C = x[1];
    JIFFY_RETURN_IF_ERROR(expect_vec(ctx, 1, "scale", C));
    JIFFY_RETURN_IF_ERROR(expect_vec(ctx, 2, "B", C));
    int64_t S = 1;
    for (size_t i = 2; i < x.size(); ++i) S *= x[i];
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), x));
    double eps = ctx.attr_float("epsilon", 1e-5f);
    if (ctx.in_dtype(0) == DType::kF32) {
        ctx.set_kernel(std::make_unique<InstNormF32Kernel>(x[0], C, S, float(eps)));
        return {};
    }
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<GroupNormKernel<T>>(x[0], C, 1, S, eps, true));
        return {};
    });
}

Status prep_GroupNormalization(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(expect_float(ctx, 0, "X"));
    JIFFY_RETURN_IF_ERROR(expect_same_dtype(ctx, 1, "scale"));
    JIFFY_RETURN_IF_ERROR(expect_same_dtype(ctx, 2, "bias"));
    const Shape& x = ctx.in_shape(0);
    if (x.size() < 2) return ctx.fail("X must have rank >= 2 (N x C x ...), got ", shape_str(x));
    const Attr* ga = ctx.attr("num_groups");
    if (!ga) return ctx.fail("attribute num_groups is required");
    const int64_t G = ga->i, C = x[1];
    if (G < 1 || C % G != 0)
        return ctx.fail("num_groups (", G, ") must be >= 1 and divide the channel count ", C);
    // Opset 18: scale/bias per group; opset 21: per channel. Accept either by size.
    const int64_t ns = shape_numel(ctx.in_shape(1)), nb = shape_numel(ctx.in_shape(2));
    bool per_channel = ns == C;
    if ((ns != C && ns != G) || nb != ns || ctx.in_shape(1).size() != 1 ||
        ctx.in_shape(2).size() != 1)
        return ctx.fail("scale and bias must both have shape [", C, "] (channels) or [", G,
                        "] (groups), got ", shape_str(ctx.in_shape(1)), " and ",
                        shape_str(ctx.in_shape(2)));
    int64_t S = 1;
    for (size_t i = 2; i < x.size(); ++i) S *= x[i];
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), x));
    double eps = ctx.attr_float("epsilon", 1e-5f);
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<GroupNormKernel<T>>(x[0], G, C / G, S, eps, per_channel));
        return {};
    });
}

// ---------------------------------------------------------------- LayerNormalization
// `_fused_residual` = 1 (set by the fuse_add_layernorm pass for LayerNormalization(Add(x, r))): a
// 4th input r of X's shape is added to X before normalizing (B may then be absent: input -1).

template <typename T>
class LayerNormKernel : public Kernel {
public:
    LayerNormKernel(int64_t outer, int64_t inner, double eps, std::vector<int64_t> sidx,
                    std::vector<int64_t> bidx, DType stat_t, bool has_bias, bool mean_out,
                    bool inv_out, bool has_res)
        : outer_(outer), inner_(inner), eps_(eps), sidx_(std::move(sidx)),
          bidx_(std::move(bidx)), stat_t_(stat_t), has_bias_(has_bias), mean_out_(mean_out),
          inv_out_(inv_out), has_res_(has_res) {
        // float rows with per-element scale / bias and no statistics outputs: the vector kernel.
        if (std::is_same_v<T, float> && sidx_.empty() && bidx_.empty() && !mean_out_ && !inv_out_ && inner_ > 0)
            fast_ = kernels::layernorm_rows_for(kernels::active_isa());
    }
    Status run(const void* const* in, void* const* out) const override {
        const T* X = static_cast<const T*>(in[0]);
        const T* scale = static_cast<const T*>(in[1]);
        const T* bias = has_bias_ ? static_cast<const T*>(in[2]) : nullptr;
        const T* res = has_res_ ? static_cast<const T*>(in[3]) : nullptr;
        T* Y = static_cast<T*>(out[0]);
        if constexpr (std::is_same_v<T, float>) {
            if (fast_) {
                fast_(X, Y, outer_, inner_, scale, bias, float(eps_), res);
                return {};
            }
        }
        for (int64_t r = 0; r < outer_; ++r) {
            const T* x = X + r * inner_;
            T* y = Y + r * inner_;
            if (res) {  // y = x + res, then normalize y in place
                for (int64_t i = 0; i < inner_; ++i) y[i] = T(x[i] + res[r * inner_ + i]);
                x = y;
            }
            double sum = 0;
            for (int64_t i = 0; i < inner_; ++i) sum += double(x[i]);
            const double mean = inner_ ? sum / double(inner_) : 0;
            double sq = 0;
            for (int64_t i = 0; i < inner_; ++i) {
                const double v = double(x[i]) - mean;
                sq += v * v;
            }
            const double inv = 1.0 / std::sqrt((inner_ ? sq / double(inner_) : 0) + eps_);
            for (int64_t i = 0; i < inner_; ++i) {
                const double s = double(scale[sidx_.empty() ? i : sidx_[size_t(i)]]);
                const double b = bias ? double(bias[bidx_.empty() ? i : bidx_[size_t(i)]]) : 0.0;
                y[i] = T((double(x[i]) - mean) * inv * s + b);
            }
            if (mean_out_) store_f(out[1], stat_t_, r, mean);
            if (inv_out_) store_f(out[2], stat_t_, r, inv);
        }
        return {};
    }

private:
    int64_t outer_, inner_;
    double eps_;
    std::vector<int64_t> sidx_, bidx_;
    DType stat_t_;
    bool has_bias_, mean_out_, inv_out_, has_res_;
    kernels::LayerNormRowsFn fast_ = nullptr;
};

// Index table mapping each element of the normalized shape `norm` to an element of a tensor of
// shape `p` broadcast to it; empty when p has the same element layout (no table needed). False
// if p does not broadcast to norm.
bool broadcast_table(const Shape& p, const Shape& norm, std::vector<int64_t>* table) {
    Shape q = p;
    while (!q.empty() && q.size() > norm.size() && q.front() == 1) q.erase(q.begin());
    if (q.size() > norm.size()) return false;
    for (size_t i = 0; i < q.size(); ++i) {
        int64_t a = q[q.size() - 1 - i], b = norm[norm.size() - 1 - i];
        if (a != b && a != 1) return false;
    }
    table->clear();
    if (shape_numel(q) == shape_numel(norm)) return true;
    Shape st = broadcast_strides(q, norm);
    for_each_broadcast2(norm, st, st, [&](int64_t, int64_t ia, int64_t) { table->push_back(ia); });
    return true;
}

Status prep_LayerNormalization(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(expect_float(ctx, 0, "X"));
    JIFFY_RETURN_IF_ERROR(expect_same_dtype(ctx, 1, "Scale"));
    if (ctx.has_input(2)) JIFFY_RETURN_IF_ERROR(expect_same_dtype(ctx, 2, "B"));
    const Shape& x = ctx.in_shape(0);
    const int64_t rank = int64_t(x.size());
    int64_t axis;
    if (!normalize_axis(ctx.attr_int("axis", -1), rank, &axis))
        return ctx.fail("axis ", ctx.attr_int("axis", -1), " is out of range for rank ", rank);
    int64_t stash = ctx.attr_int("stash_type", 1);
    DType stat_t;
    if (stash == 1) stat_t = DType::kF32;
    else if (stash == 11) stat_t = DType::kF64;
    else return ctx.fail_unsupported("stash_type ", stash, " is not supported (1 or 11 are)");
    Shape norm(x.begin() + axis, x.end());
    int64_t outer = 1, inner = shape_numel(norm);
    for (int64_t i = 0; i < axis; ++i) outer *= x[size_t(i)];
    std::vector<int64_t> sidx, bidx;
    if (!broadcast_table(ctx.in_shape(1), norm, &sidx))
        return ctx.fail("Scale shape ", shape_str(ctx.in_shape(1)),
                        " does not broadcast to the normalized shape ", shape_str(norm));
    if (ctx.has_input(2) && !broadcast_table(ctx.in_shape(2), norm, &bidx))
        return ctx.fail("B shape ", shape_str(ctx.in_shape(2)),
                        " does not broadcast to the normalized shape ", shape_str(norm));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), x));
    Shape st(x.begin(), x.begin() + axis);
    st.resize(x.size(), 1);
    if (ctx.has_output(1)) JIFFY_RETURN_IF_ERROR(ctx.set_output(1, stat_t, st));
    if (ctx.has_output(2)) JIFFY_RETURN_IF_ERROR(ctx.set_output(2, stat_t, st));
    double eps = ctx.attr_float("epsilon", 1e-5f);
    const bool has_res = ctx.attr_int("_fused_residual", 0) != 0;
    if (ctx.num_inputs() > (has_res ? 4 : 3))
        return ctx.fail("takes at most 3 inputs (4 with _fused_residual=1), got ", ctx.num_inputs());
    if (has_res && (!ctx.has_input(3) || ctx.in_dtype(3) != ctx.in_dtype(0) || ctx.in_shape(3) != x))
        return ctx.fail("_fused_residual=1 needs a 4th input of X's dtype and shape ", shape_str(x), ", got ",
                        ctx.has_input(3) ? shape_str(ctx.in_shape(3)) : std::string("none"));
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<LayerNormKernel<T>>(outer, inner, eps, std::move(sidx),
                                                            std::move(bidx), stat_t,
                                                            ctx.has_input(2), ctx.has_output(1),
                                                            ctx.has_output(2), has_res));
        return {};
    });
}

// ---------------------------------------------------------------- LpNormalization

template <typename T>
class LpNormKernel : public Kernel {
public:
    LpNormKernel(int64_t outer, int64_t len, int64_t inner, int p)
        : outer_(outer), len_(len), inner_(inner), p_(p) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* X = static_cast<const T*>(in[0]);
        T* Y = static_cast<T*>(out[0]);
        for (int64_t o = 0; o < outer_; ++o)
            for (int64_t i = 0; i < inner_; ++i) {
                const T* x = X + o * len_ * inner_ + i;
                T* y = Y + o * len_ * inner_ + i;
                double acc = 0;
                for (int64_t j = 0; j < len_; ++j) {
                    const double v = double(x[j * inner_]);
                    acc += p_ == 1 ? std::abs(v) : v * v;
                }
                const double norm = p_ == 1 ? acc : std::sqrt(acc);
                for (int64_t j = 0; j < len_; ++j)
                    y[j * inner_] = norm == 0 ? T(0) : T(double(x[j * inner_]) / norm);
            }
        return {};
    }

private:
    int64_t outer_, len_, inner_;
    int p_;
};

Status prep_LpNormalization(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(expect_float(ctx, 0, "input"));
    const Shape& x = ctx.in_shape(0);
    int64_t axis;
    if (!normalize_axis(ctx.attr_int("axis", -1), int64_t(x.size()), &axis))
        return ctx.fail("axis ", ctx.attr_int("axis", -1), " is out of range for rank ", x.size());
    int64_t p = ctx.attr_int("p", 2);
    if (p != 1 && p != 2) return ctx.fail("p must be 1 or 2, got ", p);
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= x[size_t(i)];
    for (size_t i = size_t(axis) + 1; i < x.size(); ++i) inner *= x[i];
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), x));
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<LpNormKernel<T>>(outer, x[size_t(axis)], inner, int(p)));
        return {};
    });
}

// ---------------------------------------------------------------- MeanVarianceNormalization

// Element offsets of every index over the given dims (row-major over them).
std::vector<int64_t> offsets_over(const Shape& shape, const Shape& strides,
                                  const std::vector<int64_t>& dims) {
    std::vector<int64_t> offs = {0};
    for (int64_t d : dims) {
        std::vector<int64_t> next;
        next.reserve(offs.size() * size_t(shape[size_t(d)]));
        for (int64_t base : offs)
            for (int64_t i = 0; i < shape[size_t(d)]; ++i) next.push_back(base + i * strides[size_t(d)]);
        offs.swap(next);
    }
    return offs;
}

template <typename T>
class MvnKernel : public Kernel {
public:
    MvnKernel(std::vector<int64_t> kept, std::vector<int64_t> red)
        : kept_(std::move(kept)), red_(std::move(red)) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* X = static_cast<const T*>(in[0]);
        T* Y = static_cast<T*>(out[0]);
        const double n = double(red_.size());
        for (int64_t base : kept_) {
            double sum = 0, sq = 0;
            for (int64_t r : red_) {
                const double v = double(X[base + r]);
                sum += v;
                sq += v * v;
            }
            const double mean = sum / n;
            const double var = std::max(0.0, sq / n - mean * mean);
            const double den = std::sqrt(var) + 1e-9;
            for (int64_t r : red_) Y[base + r] = T((double(X[base + r]) - mean) / den);
        }
        return {};
    }

private:
    std::vector<int64_t> kept_, red_;
};

Status prep_MeanVarianceNormalization(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(expect_float(ctx, 0, "X"));
    const Shape& x = ctx.in_shape(0);
    const int64_t rank = int64_t(x.size());
    std::vector<int64_t> axes = ctx.attr_ints("axes", {0, 2, 3});
    std::vector<bool> reduced(size_t(rank), false);
    for (int64_t a : axes) {
        int64_t n;
        if (!normalize_axis(a, rank, &n))
            return ctx.fail("axes ", ints_str(axes), " out of range for input rank ", rank);
        if (reduced[size_t(n)]) return ctx.fail("axes ", ints_str(axes), " has a repeated axis");
        reduced[size_t(n)] = true;
    }
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), x));
    std::vector<int64_t> kd, rd;
    for (int64_t i = 0; i < rank; ++i) (reduced[size_t(i)] ? rd : kd).push_back(i);
    Shape st = strides_of(x);
    std::vector<int64_t> kept, red;
    if (shape_numel(x) > 0) {
        kept = offsets_over(x, st, kd);
        red = offsets_over(x, st, rd);
    }
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<MvnKernel<T>>(std::move(kept), std::move(red)));
        return {};
    });
}

// ---------------------------------------------------------------- LRN

template <typename T>
class LrnKernel : public Kernel {
public:
    LrnKernel(int64_t N, int64_t C, int64_t S, int64_t size, double alpha, double beta, double bias)
        : N_(N), C_(C), S_(S), size_(size), alpha_(alpha), beta_(beta), bias_(bias) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* X = static_cast<const T*>(in[0]);
        T* Y = static_cast<T*>(out[0]);
        const int64_t lo_off = (size_ - 1) / 2, hi_off = size_ - 1 - lo_off;
        const double k = alpha_ / double(size_);
        for (int64_t n = 0; n < N_; ++n)
            for (int64_t c = 0; c < C_; ++c) {
                T* y = Y + (n * C_ + c) * S_;
                const T* x = X + (n * C_ + c) * S_;
                for (int64_t i = 0; i < S_; ++i) y[i] = T(0);  // y holds the square sum first
                const int64_t c0 = std::max<int64_t>(0, c - lo_off);
                const int64_t c1 = std::min<int64_t>(C_ - 1, c + hi_off);
                for (int64_t cc = c0; cc <= c1; ++cc) {
                    const T* xs = X + (n * C_ + cc) * S_;
                    for (int64_t i = 0; i < S_; ++i) y[i] += xs[i] * xs[i];
                }
                for (int64_t i = 0; i < S_; ++i)
                    y[i] = T(double(x[i]) / std::pow(bias_ + k * double(y[i]), beta_));
            }
        return {};
    }

private:
    int64_t N_, C_, S_, size_;
    double alpha_, beta_, bias_;
};

Status prep_LRN(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(expect_float(ctx, 0, "X"));
    const Shape& x = ctx.in_shape(0);
    if (x.size() < 2) return ctx.fail("X must have rank >= 2 (N x C x ...), got ", shape_str(x));
    const Attr* sa = ctx.attr("size");
    if (!sa) return ctx.fail("attribute size is required");
    if (sa->i < 1) return ctx.fail("size must be >= 1, got ", sa->i);
    int64_t S = 1;
    for (size_t i = 2; i < x.size(); ++i) S *= x[i];
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), x));
    double alpha = ctx.attr_float("alpha", 1e-4f), beta = ctx.attr_float("beta", 0.75f),
           bias = ctx.attr_float("bias", 1.0f);
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<LrnKernel<T>>(x[0], x[1], S, sa->i, alpha, beta, bias));
        return {};
    });
}

}  // namespace

void register_conv_ops(OpRegistry& r) {
    r.add("Conv", prep_Conv);
    r.add("ConvTranspose", prep_ConvTranspose);
    r.add("ConvNhwc", prep_ConvNhwc, "jiffy");
    r.add("ConvNhwcBand", prep_ConvNhwcBand, "jiffy");
    r.add("GlobalAveragePoolNhwc", prep_GlobalAveragePoolNhwc, "jiffy");
    r.add("MaxPool", prep_pool<PoolKind::kMax>);
    r.add("AveragePool", prep_pool<PoolKind::kAvg>);
    r.add("LpPool", prep_pool<PoolKind::kLp>);
    r.add("MaxPoolNhwc", prep_pool_nhwc<PoolKind::kMax>, "jiffy");
    r.add("AveragePoolNhwc", prep_pool_nhwc<PoolKind::kAvg>, "jiffy");
    r.add("GlobalMaxPool", prep_global_pool<PoolKind::kMax>);
    r.add("GlobalAveragePool", prep_global_pool<PoolKind::kAvg>);
    r.add("GlobalLpPool", prep_global_pool<PoolKind::kLp>);
    r.add("BatchNormalization", prep_BatchNormalization);
    r.add("InstanceNormalization", prep_InstanceNormalization);
    r.add("LayerNormalization", prep_LayerNormalization);
    r.add("GroupNormalization", prep_GroupNormalization);
    r.add("LpNormalization", prep_LpNormalization);
    r.add("MeanVarianceNormalization", prep_MeanVarianceNormalization);
    r.add("LRN", prep_LRN);
}

}  // namespace jiffy
