// Losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss), quantization
// (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear), window functions
// (Hann/Hamming/BlackmanWindow) and training optimizers. Reference kernels.
#include <cmath>
#include <limits>
#include <numbers>

#include "ops/util.h"

namespace jiffy {
namespace {

// ---------------------------------------------------------------- losses

enum class Reduction { kNone, kSum, kMean };

Status parse_reduction(OpContext& ctx, Reduction* r) {
    std::string s = ctx.attr_str("reduction", "mean");
    if (s == "none") *r = Reduction::kNone;
    else if (s == "sum") *r = Reduction::kSum;
    else if (s == "mean") *r = Reduction::kMean;
    else return ctx.fail("reduction must be none, sum or mean, got '", s, "'");
    return {};
}

// Shared by NLL and SoftmaxCrossEntropy: loss[n, d] = -logp[n, t[n, d], d] * w[t].
// logp is [N, C, D] (D = product of trailing dims), targets [N, D].
template <typename T, typename I>
Status nll(const T* logp, const I* target, const T* weight, int64_t N, int64_t C, int64_t D,
           bool has_ignore, int64_t ignore, Reduction red, T* out) {
    double sum = 0, wsum = 0;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t d = 0; d < D; ++d) {
            int64_t t = int64_t(target[n * D + d]);
            double l = 0, w = 0;
            if (!(has_ignore && t == ignore)) {
                if (t < 0 || t >= C)
                    return invalid("target value ", t, " is out of range [0, ", C, ")");
                w = weight ? double(weight[t]) : 1.0;
                l = -double(logp[(n * C + t) * D + d]) * w;
            }
            if (red == Reduction::kNone) out[n * D + d] = T(l);
            sum += l;
            wsum += w;
        }
    if (red == Reduction::kSum) out[0] = T(sum);
    if (red == Reduction::kMean) out[0] = T(wsum == 0 ? 0.0 : sum / wsum);
    return {};
}

template <typename T, typename I>
class NllKernel : public Kernel {
public:
    NllKernel(int64_t N, int64_t C, int64_t D, bool has_ignore, int64_t ignore, Reduction red, bool softmax)
        : N_(N), C_(C), D_(D), has_ignore_(has_ignore), ignore_(ignore), red_(red), softmax_(softmax) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        const I* t = static_cast<const I*>(in[1]);
        const T* w = static_cast<const T*>(in[2]);
        if (!softmax_) return nll(x, t, w, N_, C_, D_, has_ignore_, ignore_, red_, static_cast<T*>(out[0]));
        // log_softmax over C into out[1] (the optional log_prob output, or scratch-free: compute
        // into out[1] when present, else compute each loss term on the fly).
        T* lp = static_cast<T*>(out[1]);
        if (lp) {
            log_softmax(x, lp);
            return nll(lp, t, w, N_, C_, D_, has_ignore_, ignore_, red_, static_cast<T*>(out[0]));
        }
        double sum = 0, wsum = 0;
        T* y = static_cast<T*>(out[0]);
        for (int64_t n = 0; n < N_; ++n)
            for (int64_t d = 0; d < D_; ++d) {
                int64_t tv = int64_t(t[n * D_ + d]);
                double l = 0, wt = 0;
                if (!(has_ignore_ && tv == ignore_)) {
                    if (tv < 0 || tv >= C_) return invalid("target value ", tv, " is out of range [0, ", C_, ")");
                    wt = w ? double(w[tv]) : 1.0;
                    l = -log_prob(x, n, tv, d) * wt;
                }
                if (red_ == Reduction::kNone) y[n * D_ + d] = T(l);
                sum += l;
                wsum += wt;
            }
        if (red_ == Reduction::kSum) y[0] = T(sum);
        if (red_ == Reduction::kMean) y[0] = T(wsum == 0 ? 0.0 : sum / wsum);
        return {};
    }

private:
    double log_prob(const T* x, int64_t n, int64_t c, int64_t d) const {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t k = 0; k < C_; ++k) mx = std::max(mx, double(x[(n * C_ + k) * D_ + d]));
        double s = 0;
        for (int64_t k = 0; k < C_; ++k) s += std::exp(double(x[(n * C_ + k) * D_ + d]) - mx);
        return double(x[(n * C_ + c) * D_ + d]) - mx - std::log(s);
    }
    void log_softmax(const T* x, T* lp) const {
        for (int64_t n = 0; n < N_; ++n)
            for (int64_t d = 0; d < D_; ++d)
                for (int64_t c = 0; c < C_; ++c) lp[(n * C_ + c) * D_ + d] = T(log_prob(x, n, c, d));
    }
    int64_t N_, C_, D_;
    bool has_ignore_;
    int64_t ignore_;
    Reduction red_;
    bool softmax_;
};

Status prep_loss(OpContext& ctx, bool softmax) {
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kF32, DType::kF64}));
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(1, {DType::kI32, DType::kI64}));
    const Shape& xs = ctx.in_shape(0);
    const Shape& ts = ctx.in_shape(1);
    if (xs.size() < 2) return ctx.fail("input must have rank >= 2 (N, C, ...), got ", shape_str(xs));
    Shape expect_t = xs;
    expect_t.erase(expect_t.begin() + 1);
    if (ts != expect_t)
        return ctx.fail("target shape ", shape_str(ts), " does not match input ", shape_str(xs),
                        " (expected ", shape_str(expect_t), ")");
    int64_t C = xs[1];
    if (ctx.has_input(2)) {
        if (ctx.in_dtype(2) != ctx.in_dtype(0) || ctx.in_shape(2) != Shape{C})
            return ctx.fail("weight must be ", dtype_name(ctx.in_dtype(0)), " of shape [", C, "], got ",
                            shape_str(ctx.in_shape(2)));
    }
    Reduction red = Reduction::kNone;
    JIFFY_RETURN_IF_ERROR(parse_reduction(ctx, &red));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), red == Reduction::kNone ? ts : Shape{}));
    if (softmax && ctx.has_output(1)) JIFFY_RETURN_IF_ERROR(ctx.set_output(1, ctx.in_dtype(0), xs));
    int64_t N = xs[0], D = 1;
    for (size_t i = 2; i < xs.size(); ++i) D *= xs[i];
    bool has_ignore = ctx.has_attr("ignore_index");
    int64_t ignore = ctx.attr_int("ignore_index", 0);
    return visit_float(ctx.in_dtype(0), [&](auto tt) -> Status {
        using T = typename decltype(tt)::type;
        if (ctx.in_dtype(1) == DType::kI32)
            ctx.set_kernel(std::make_unique<NllKernel<T, int32_t>>(N, C, D, has_ignore, ignore, red, softmax));
        else
            ctx.set_kernel(std::make_unique<NllKernel<T, int64_t>>(N, C, D, has_ignore, ignore, red, softmax));
        return {};
    });
}
Status prep_NegativeLogLikelihoodLoss(OpContext& ctx) { return prep_loss(ctx, false); }
Status prep_SoftmaxCrossEntropyLoss(OpContext& ctx) { return prep_loss(ctx, true); }

// ---------------------------------------------------------------- quantization

// Per-tensor or per-axis parameters: element i uses parameter (i / inner) % count.
struct QuantLayout {
    int64_t n = 0, inner = 1, count = 1;
};

Status quant_layout(OpContext& ctx, int scale_input, QuantLayout* q) {
    const Shape& xs = ctx.in_shape(0);
    const Shape& ss = ctx.in_shape(scale_input);
    q->n = shape_numel(xs);
    int64_t count = shape_numel(ss);
    if (ss.size() > 1) return ctx.fail_unsupported("blocked quantization (scale of rank ", ss.size(), ")");
    if (count == 1) return {};
    int64_t axis;
    if (!normalize_axis(ctx.attr_int("axis", 1), int64_t(xs.size()), &axis))
        return ctx.fail("axis out of range for input ", shape_str(xs));
    if (xs[size_t(axis)] != count)
        return ctx.fail("scale has ", count, " values but input dim ", axis, " is ", xs[size_t(axis)]);
    q->count = count;
    for (size_t i = size_t(axis) + 1; i < xs.size(); ++i) q->inner *= xs[i];
    return {};
}

template <typename Q>
Q saturate_round(double v) {
    double r = std::nearbyint(v);  // round half to even
    r = std::min<double>(std::max<double>(r, std::numeric_limits<Q>::lowest()), std::numeric_limits<Q>::max());
    return Q(r);
}

template <typename Q>
class QuantizeKernel : public Kernel {
public:
    explicit QuantizeKernel(QuantLayout q) : q_(q) {}
    Status run(const void* const* in, void* const* out) const override {
        const float* x = static_cast<const float*>(in[0]);
        const float* s = static_cast<const float*>(in[1]);
        const Q* zp = static_cast<const Q*>(in[2]);
        Q* y = static_cast<Q*>(out[0]);
        for (int64_t i = 0; i < q_.n; ++i) {
            int64_t c = (i / q_.inner) % q_.count;
            y[i] = saturate_round<Q>(std::nearbyint(double(x[i] / s[c])) + (zp ? double(zp[c]) : 0.0));
        }
        return {};
    }

private:
    QuantLayout q_;
};

Status prep_QuantizeLinear(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kF32}));
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(1, {DType::kF32}));
    DType qt = ctx.has_input(2) ? ctx.in_dtype(2) : DType::kU8;
    if (ctx.has_attr("output_dtype") && ctx.attr_int("output_dtype", 0) != 0) qt = DType(ctx.attr_int("output_dtype", 0));
    if (qt != DType::kU8 && qt != DType::kI8 && qt != DType::kU16 && qt != DType::kI16)
        return ctx.fail_unsupported("quantized type ", dtype_name(qt));
    if (ctx.has_input(2) && ctx.in_shape(2) != ctx.in_shape(1))
        return ctx.fail("zero point shape ", shape_str(ctx.in_shape(2)), " differs from scale shape ",
                        shape_str(ctx.in_shape(1)));
    QuantLayout q;
    JIFFY_RETURN_IF_ERROR(quant_layout(ctx, 1, &q));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, qt, ctx.in_shape(0)));
    return visit_int(qt, [&](auto tag) -> Status {
        using Q = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<QuantizeKernel<Q>>(q));
        return {};
    });
}

template <typename Q>
class DequantizeKernel : public Kernel {
public:
    explicit DequantizeKernel(QuantLayout q) : q_(q) {}
    Status run(const void* const* in, void* const* out) const override {
        const Q* x = static_cast<const Q*>(in[0]);
        const float* s = static_cast<const float*>(in[1]);
        const Q* zp = static_cast<const Q*>(in[2]);
        float* y = static_cast<float*>(out[0]);
        for (int64_t i = 0; i < q_.n; ++i) {
            int64_t c = (i / q_.inner) % q_.count;
            y[i] = float((double(x[i]) - (zp ? double(zp[c]) : 0.0)) * double(s[c]));
        }
        return {};
    }

private:
    QuantLayout q_;
};

Status prep_DequantizeLinear(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kU8, DType::kI8, DType::kI32, DType::kU16, DType::kI16}));
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(1, {DType::kF32}));
    if (ctx.has_input(2) && (ctx.in_dtype(2) != ctx.in_dtype(0) || ctx.in_shape(2) != ctx.in_shape(1)))
        return ctx.fail("zero point must match x's dtype and scale's shape");
    QuantLayout q;
    JIFFY_RETURN_IF_ERROR(quant_layout(ctx, 1, &q));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kF32, ctx.in_shape(0)));
    return visit_int(ctx.in_dtype(0), [&](auto tag) -> Status {
        using Q = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<DequantizeKernel<Q>>(q));
        return {};
    });
}

class DynamicQuantizeKernel : public Kernel {
public:
    explicit DynamicQuantizeKernel(int64_t n) : n_(n) {}
    Status run(const void* const* in, void* const* out) const override {
        const float* x = static_cast<const float*>(in[0]);
        float lo = 0, hi = 0;
        for (int64_t i = 0; i < n_; ++i) {
            lo = std::min(lo, x[i]);
            hi = std::max(hi, x[i]);
        }
        float scale = (hi - lo) / 255.0f;
        uint8_t zp = scale == 0 ? 0 : saturate_round<uint8_t>(double(0.0f - lo / scale));
        uint8_t* y = static_cast<uint8_t*>(out[0]);
        for (int64_t i = 0; i < n_; ++i)
            y[i] = scale == 0 ? zp : saturate_round<uint8_t>(double(std::nearbyint(x[i] / scale)) + zp);
        if (out[1]) *static_cast<float*>(out[1]) = scale;
        if (out[2]) *static_cast<uint8_t*>(out[2]) = zp;
        return {};
    }

private:
    int64_t n_;
};

Status prep_DynamicQuantizeLinear(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kF32}));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kU8, ctx.in_shape(0)));
    if (ctx.has_output(1)) JIFFY_RETURN_IF_ERROR(ctx.set_output(1, DType::kF32, {}));
    if (ctx.has_output(2)) JIFFY_RETURN_IF_ERROR(ctx.set_output(2, DType::kU8, {}));
    ctx.set_kernel(std::make_unique<DynamicQuantizeKernel>(shape_numel(ctx.in_shape(0))));
    return {};
}

// ---------------------------------------------------------------- windows

Status prep_window(OpContext& ctx, int kind) {
    if (!ctx.has_input(0)) return ctx.fail("input 'size' is missing");
    const Tensor* size = ctx.in_const(0);
    if (!size) return ctx.need_value(0);
    if (size->numel() != 1 || !dtype_is_int(size->dtype())) return ctx.fail("size must be an integer scalar");
    int64_t n = size->get_i64(0);
    if (n < 0) return ctx.fail("size must be >= 0, got ", n);
    DType out = DType(ctx.attr_int("output_datatype", 1));
    bool periodic = ctx.attr_int("periodic", 1) != 0;
    auto t = std::make_shared<Tensor>(out == DType::kF64 ? DType::kF64 : DType::kF32, Shape{n});
    if (out != DType::kF32 && out != DType::kF64)
        return ctx.fail_unsupported("output_datatype ", dtype_name(out));
    double denom = periodic ? double(n) : double(n - 1);
    for (int64_t i = 0; i < n; ++i) {
        double a = denom > 0 ? 2 * std::numbers::pi * double(i) / denom : 0;
        double v = kind == 0 ? 0.5 - 0.5 * std::cos(a)
                   : kind == 1 ? 25.0 / 46.0 - 21.0 / 46.0 * std::cos(a)
                               : 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a);
        if (out == DType::kF64) t->as<double>()[i] = v;
        else t->as<float>()[i] = float(v);
    }
    ctx.set_output_const(0, t);
    return {};
}
Status prep_HannWindow(OpContext& ctx) { return prep_window(ctx, 0); }
Status prep_HammingWindow(OpContext& ctx) { return prep_window(ctx, 1); }
Status prep_BlackmanWindow(OpContext& ctx) { return prep_window(ctx, 2); }

// ---------------------------------------------------------------- training optimizers
// ai.onnx.preview.training Adagrad / Momentum / Adam: one step of the update rule for n tensors.
// Inputs: R (learning rate), T (step count), then n X, n G and (per optimizer) n V / n H.

enum class Optim { kAdagrad, kMomentum, kAdam };

template <Optim O>
class OptimKernel : public Kernel {
public:
    OptimKernel(int n, std::vector<int64_t> sizes, const OpContext& ctx) : n_(n), sizes_(std::move(sizes)) {
        decay_ = ctx.attr_float("decay_factor", 0);
        eps_ = ctx.attr_float("epsilon", O == Optim::kAdam ? 1e-6f : 0.0f);
        norm_ = ctx.attr_float("norm_coefficient", 0);
        norm_post_ = ctx.attr_float("norm_coefficient_post", 0);
        alpha_ = ctx.attr_float("alpha", O == Optim::kAdam ? 0.9f : 0.0f);
        beta_ = ctx.attr_float("beta", O == Optim::kAdam ? 0.999f : 0.0f);
        nesterov_ = ctx.attr_str("mode", "standard") == "nesterov";
    }
    Status run(const void* const* in, void* const* out) const override {
        double R = *static_cast<const float*>(in[0]);
        double T = double(*static_cast<const int64_t*>(in[1]));
        for (int k = 0; k < n_; ++k) {
            const float* X = static_cast<const float*>(in[2 + k]);
            const float* G = static_cast<const float*>(in[2 + n_ + k]);
            const float* A = static_cast<const float*>(in[2 + 2 * n_ + k]);  // H (Adagrad) or V
            float* Xn = static_cast<float*>(out[k]);
            float* An = static_cast<float*>(out[n_ + k]);
            for (int64_t i = 0; i < sizes_[size_t(k)]; ++i) {
                double g = double(norm_) * X[i] + G[i];
                if constexpr (O == Optim::kAdagrad) {
                    double r = R / (1 + T * decay_);
                    double h = double(A[i]) + g * g;
                    An[i] = float(h);
                    Xn[i] = float(X[i] - r * g / (std::sqrt(h) + eps_));
                } else if constexpr (O == Optim::kMomentum) {
                    double b = T > 0 ? double(beta_) : 1.0;
                    double v = double(alpha_) * A[i] + b * g;
                    An[i] = float(v);
                    Xn[i] = float(X[i] - R * (nesterov_ ? g + alpha_ * v : v));
                } else {
                    const float* H = static_cast<const float*>(in[2 + 3 * n_ + k]);
                    float* Hn = static_cast<float*>(out[2 * n_ + k]);
                    double v = double(alpha_) * A[i] + (1 - double(alpha_)) * g;
                    double h = double(beta_) * H[i] + (1 - double(beta_)) * g * g;
                    double r = T > 0 ? R * std::sqrt(1 - std::pow(double(beta_), T)) / (1 - std::pow(double(alpha_), T)) : R;
                    double x = X[i] - r * (v / (std::sqrt(h) + eps_));
                    An[i] = float(v);
                    Hn[i] = float(h);
                    Xn[i] = float((1 - double(norm_post_)) * x);
                }
            }
        }
        return {};
    }

private:
    int n_;
    std::vector<int64_t> sizes_;
    float decay_, eps_, norm_, norm_post_, alpha_, beta_;
    bool nesterov_;
};

template <Optim O>
Status prep_optim(OpContext& ctx) {
    int groups = O == Optim::kAdam ? 4 : 3;  // X, G, V[, H]
    int rest = ctx.num_inputs() - 2;
    if (rest <= 0 || rest % groups != 0) return ctx.fail("expects R, T and ", groups, " groups of tensors");
    int n = rest / groups;
    if (ctx.num_outputs() != (groups - 1) * n) return ctx.fail("expects ", (groups - 1) * n, " outputs");
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kF32}));
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(1, {DType::kI64}));
    std::vector<int64_t> sizes;
    for (int k = 0; k < n; ++k) {
        for (int gi = 0; gi < groups; ++gi) {
            JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(2 + gi * n + k, {DType::kF32}));
            if (ctx.in_shape(2 + gi * n + k) != ctx.in_shape(2 + k))
                return ctx.fail("tensor group ", gi, " item ", k, " has shape ", shape_str(ctx.in_shape(2 + gi * n + k)),
                                ", expected ", shape_str(ctx.in_shape(2 + k)));
        }
        sizes.push_back(shape_numel(ctx.in_shape(2 + k)));
        for (int o = 0; o < groups - 1; ++o) JIFFY_RETURN_IF_ERROR(ctx.set_output(o * n + k, DType::kF32, ctx.in_shape(2 + k)));
    }
    ctx.set_kernel(std::make_unique<OptimKernel<O>>(n, sizes, ctx));
    return {};
}

}  // namespace

void register_misc_ops(OpRegistry& r) {
    r.add("Adagrad", prep_optim<Optim::kAdagrad>, "ai.onnx.preview.training");
    r.add("Momentum", prep_optim<Optim::kMomentum>, "ai.onnx.preview.training");
    r.add("Adam", prep_optim<Optim::kAdam>, "ai.onnx.preview.training");
#define REG(NAME) r.add(#NAME, prep_##NAME);
    REG(NegativeLogLikelihoodLoss) REG(SoftmaxCrossEntropyLoss) REG(QuantizeLinear) REG(DequantizeLinear)
    REG(DynamicQuantizeLinear) REG(HannWindow) REG(HammingWindow) REG(BlackmanWindow)
#undef REG
}

}  // namespace jiffy
