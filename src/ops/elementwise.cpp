// Elementwise ops: unary math, broadcasting binary arithmetic / comparison / logic, Where, Clip,
// Cast, CastLike and the parameterized activations. Reference kernels: plain loops.
#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/activation.h"
#include "kernels/binary.h"
#include "ops/util.h"
#include "runtime/plan.h"
#include "runtime/threadpool.h"

namespace jiffy {
namespace {

// ---------------------------------------------------------------- unary

template <typename T, typename F>
class UnaryKernel : public Kernel {
public:
    UnaryKernel(int64_t n, F f) : n_(n), f_(f) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out[0]);
        for (int64_t i = 0; i < n_; ++i) y[i] = f_(x[i]);
        return {};
    }

private:
    int64_t n_;
    F f_;
};

template <typename T, typename F>
void make_unary(OpContext& ctx, F f) {
    ctx.set_kernel(std::make_unique<UnaryKernel<T, F>>(shape_numel(ctx.in_shape(0)), f));
}

// float32 activations (and Exp): the vectorized array function for the active ISA, chosen here.
class ActKernel : public Kernel {
public:
    ActKernel(int64_t n, kernels::Activation a)
        : n_(n), a_(a), fn_(kernels::act_apply_for(kernels::active_isa())) {}
    Status run(const void* const* in, void* const* out) const override {
        fn_(a_, static_cast<const float*>(in[0]), static_cast<float*>(out[0]), n_);
        return {};
    }
    std::string describe() const override {
        return std::string("act_") + kernels::act_name(a_.kind) + " " + kernels::isa_name(kernels::active_isa());
    }

private:
    int64_t n_;
    kernels::Activation a_;
    kernels::ActApplyFn fn_;
};

// If input 0 is float32, declares the output and sets an ActKernel; returns true when it did.
bool try_act_kernel(OpContext& ctx, kernels::ActKind kind, float alpha = 0, float beta = 0) {
    if (!ctx.has_input(0) || ctx.in_dtype(0) != DType::kF32) return false;
    if (!ctx.set_output(0, DType::kF32, ctx.in_shape(0)).ok()) return false;  // the generic path reports it
    ctx.set_kernel(std::make_unique<ActKernel>(shape_numel(ctx.in_shape(0)), kernels::Activation{kind, alpha, beta}));
    return true;
}

// Float-only unary op given as a generic lambda over the element type.
template <typename MakeF>
Status float_unary(OpContext& ctx, MakeF make) {
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kF32, DType::kF64}));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), ctx.in_shape(0)));
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        make_unary<T>(ctx, make(T{}));
        return {};
    });
}

#define FLOAT_UNARY(NAME, EXPR)                                                           \
    Status prep_##NAME(OpContext& ctx) {                                                  \
        return float_unary(ctx, [&](auto zero) {                                          \
            using T = decltype(zero);                                                     \
            return [](T x) -> T { return EXPR; };                                         \
        });                                                                               \
    }

FLOAT_UNARY(ExpRef, std::exp(x))
FLOAT_UNARY(LogRef, std::log(x))
FLOAT_UNARY(SqrtRef, std::sqrt(x))
FLOAT_UNARY(Reciprocal, T(1) / x)
FLOAT_UNARY(SigmoidRef, x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x)))
FLOAT_UNARY(TanhRef, std::tanh(x))
FLOAT_UNARY(ErfRef, std::erf(x))
FLOAT_UNARY(FloorRef, std::floor(x))
FLOAT_UNARY(CeilRef, std::ceil(x))
FLOAT_UNARY(RoundRef, std::nearbyint(x))
FLOAT_UNARY(SoftplusRef, kernels::softplus_t(x))
FLOAT_UNARY(Softsign, x / (T(1) + std::abs(x)))
FLOAT_UNARY(Sin, std::sin(x))
FLOAT_UNARY(Cos, std::cos(x))
FLOAT_UNARY(Tan, std::tan(x))
FLOAT_UNARY(Asin, std::asin(x))
FLOAT_UNARY(Acos, std::acos(x))
FLOAT_UNARY(Atan, std::atan(x))
FLOAT_UNARY(Sinh, std::sinh(x))
FLOAT_UNARY(Cosh, std::cosh(x))
FLOAT_UNARY(Asinh, std::asinh(x))
FLOAT_UNARY(Acosh, std::acosh(x))
FLOAT_UNARY(Atanh, std::atanh(x))
FLOAT_UNARY(HardSwishRef, x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5))))
FLOAT_UNARY(MishRef, x * std::tanh(kernels::softplus_t(x)))
#undef FLOAT_UNARY

Status prep_Exp(OpContext& ctx) {
    return try_act_kernel(ctx, kernels::ActKind::kExp) ? Status{} : prep_ExpRef(ctx);
}
Status prep_Sigmoid(OpContext& ctx) {
    return try_act_kernel(ctx, kernels::ActKind::kSigmoid) ? Status{} : prep_SigmoidRef(ctx);
}
Status prep_Tanh(OpContext& ctx) {
    return try_act_kernel(ctx, kernels::ActKind::kTanh) ? Status{} : prep_TanhRef(ctx);
}
Status prep_Erf(OpContext& ctx) {
    return try_act_kernel(ctx, kernels::ActKind::kErf) ? Status{} : prep_ErfRef(ctx);
}
Status prep_Log(OpContext& ctx) {
    return try_act_kernel(ctx, kernels::ActKind::kLog) ? Status{} : prep_LogRef(ctx);
}
Status prep_Sqrt(OpContext& ctx) {
    return try_act_kernel(ctx, kernels::ActKind::kSqrt) ? Status{} : prep_SqrtRef(ctx);
}
Status prep_Softplus(OpContext& ctx) {
    return try_act_kernel(ctx, kernels::ActKind::kSoftplus) ? Status{} : prep_SoftplusRef(ctx);
}
Status prep_Mish(OpContext& ctx) {
    return try_act_kernel(ctx, kernels::ActKind::kMish) ? Status{} : prep_MishRef(ctx);
}
Status prep_Floor(OpContext& ctx) {
    return try_act_kernel(ctx, kernels::ActKind::kFloor) ? Status{} : prep_FloorRef(ctx);
}
Status prep_Ceil(OpContext& ctx) {
    return try_act_kernel(ctx, kernels::ActKind::kCeil) ? Status{} : prep_CeilRef(ctx);
}
Status prep_Round(OpContext& ctx) {
    return try_act_kernel(ctx, kernels::ActKind::kRound) ? Status{} : prep_RoundRef(ctx);
}
Status prep_HardSwish(OpContext& ctx) {
    return try_act_kernel(ctx, kernels::ActKind::kHardSwish) ? Status{} : prep_HardSwishRef(ctx);
}

// Unary ops over every signed numeric type.
template <typename MakeF>
Status numeric_unary(OpContext& ctx, MakeF make, bool allow_unsigned = true) {
    if (!ctx.has_input(0)) return ctx.fail("input 0 is missing");
    DType t = ctx.in_dtype(0);
    if (!dtype_is_float(t) && !dtype_is_int(t))
        return ctx.fail_unsupported("dtype ", dtype_name(t), " is not supported");
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, t, ctx.in_shape(0)));
    return visit_numeric(t, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        make_unary<T>(ctx, make(T{}));
        return {};
    });
}

Status prep_Relu(OpContext& ctx) {
    if (try_act_kernel(ctx, kernels::ActKind::kRelu)) return {};
    return numeric_unary(ctx, [](auto z) {
        using T = decltype(z);
        return [](T x) -> T { return x > T(0) ? x : T(0); };
    });
}
Status prep_Neg(OpContext& ctx) {
    if (try_act_kernel(ctx, kernels::ActKind::kNeg)) return {};
    return numeric_unary(ctx, [](auto z) {
        using T = decltype(z);
        return [](T x) -> T { return T(-x); };
    });
}
Status prep_Abs(OpContext& ctx) {
    if (try_act_kernel(ctx, kernels::ActKind::kAbs)) return {};
    return numeric_unary(ctx, [](auto z) {
        using T = decltype(z);
        return [](T x) -> T {
            if constexpr (std::is_unsigned_v<T>) return x;
            else return x < T(0) ? T(-x) : x;
        };
    });
}
Status prep_Sign(OpContext& ctx) {
    return numeric_unary(ctx, [](auto z) {
        using T = decltype(z);
        return [](T x) -> T { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)); };
    });
}

// Activations with float attributes.
Status prep_LeakyRelu(OpContext& ctx) {
    float a = ctx.attr_float("alpha", 0.01f);
    if (try_act_kernel(ctx, kernels::ActKind::kLeakyRelu, a)) return {};
    return float_unary(ctx, [a](auto z) {
        using T = decltype(z);
        return [a](T x) -> T { return x >= T(0) ? x : T(a) * x; };
    });
}
Status prep_Elu(OpContext& ctx) {
    float a = ctx.attr_float("alpha", 1.0f);
    if (try_act_kernel(ctx, kernels::ActKind::kElu, a)) return {};
    return float_unary(ctx, [a](auto z) {
        using T = decltype(z);
        return [a](T x) -> T { return x >= T(0) ? x : T(a) * std::expm1(x); };
    });
}
Status prep_Celu(OpContext& ctx) {
    float a = ctx.attr_float("alpha", 1.0f);
    return float_unary(ctx, [a](auto z) {
        using T = decltype(z);
        return [a](T x) -> T {
            return std::max(T(0), x) + std::min(T(0), T(a) * (std::exp(x / T(a)) - T(1)));
        };
    });
}
Status prep_Selu(OpContext& ctx) {
    float a = ctx.attr_float("alpha", 1.67326319217681884765625f);
    float g = ctx.attr_float("gamma", 1.05070102214813232421875f);
    if (try_act_kernel(ctx, kernels::ActKind::kSelu, a, g)) return {};
    return float_unary(ctx, [a, g](auto z) {
        using T = decltype(z);
        return [a, g](T x) -> T { return x > T(0) ? T(g) * x : T(g) * (T(a) * std::expm1(x)); };
    });
}
Status prep_ThresholdedRelu(OpContext& ctx) {
    float a = ctx.attr_float("alpha", 1.0f);
    return float_unary(ctx, [a](auto z) {
        using T = decltype(z);
        return [a](T x) -> T { return x > T(a) ? x : T(0); };
    });
}
Status prep_HardSigmoid(OpContext& ctx) {
    float a = ctx.attr_float("alpha", 0.2f), b = ctx.attr_float("beta", 0.5f);
    if (try_act_kernel(ctx, kernels::ActKind::kHardSigmoid, a, b)) return {};
    return float_unary(ctx, [a, b](auto z) {
        using T = decltype(z);
        return [a, b](T x) -> T { return std::max(T(0), std::min(T(1), T(a) * x + T(b))); };
    });
}
Status prep_Gelu(OpContext& ctx) {
    bool tanh_approx = ctx.attr_str("approximate", "none") == "tanh";
    if (try_act_kernel(ctx, tanh_approx ? kernels::ActKind::kGeluTanh : kernels::ActKind::kGelu)) return {};
    return float_unary(ctx, [tanh_approx](auto z) {
        using T = decltype(z);
        return [tanh_approx](T x) -> T {
            if (tanh_approx)
                return T(0.5) * x *
                       (T(1) + std::tanh(T(0.7978845608028654) * (x + T(0.044715) * x * x * x)));
            return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
        };
    });
}
Status prep_Shrink(OpContext& ctx) {
    float bias = ctx.attr_float("bias", 0.0f), lambd = ctx.attr_float("lambd", 0.5f);
    return numeric_unary(ctx, [bias, lambd](auto z) {
        using T = decltype(z);
        return [bias, lambd](T x) -> T {
            double v = double(x);
            return v < -lambd ? T(v + bias) : (v > lambd ? T(v - bias) : T(0));
        };
    });
}

// Bool / predicate unary ops.
template <typename T, typename F>
class PredKernel : public Kernel {
public:
    PredKernel(int64_t n, F f) : n_(n), f_(f) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        bool* y = static_cast<bool*>(out[0]);
        for (int64_t i = 0; i < n_; ++i) y[i] = f_(x[i]);
        return {};
    }

private:
    int64_t n_;
    F f_;
};

Status prep_Not(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kBool}));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kBool, ctx.in_shape(0)));
    auto f = [](bool x) { return !x; };
    ctx.set_kernel(std::make_unique<PredKernel<bool, decltype(f)>>(shape_numel(ctx.in_shape(0)), f));
    return {};
}
Status prep_IsNaN(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kF32, DType::kF64}));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kBool, ctx.in_shape(0)));
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        auto f = [](T x) { return std::isnan(x); };
        ctx.set_kernel(std::make_unique<PredKernel<T, decltype(f)>>(shape_numel(ctx.in_shape(0)), f));
        return {};
    });
}
Status prep_IsInf(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kF32, DType::kF64}));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kBool, ctx.in_shape(0)));
    bool pos = ctx.attr_int("detect_positive", 1) != 0, neg = ctx.attr_int("detect_negative", 1) != 0;
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        auto f = [pos, neg](T x) { return std::isinf(x) && ((x > 0 && pos) || (x < 0 && neg)); };
        ctx.set_kernel(std::make_unique<PredKernel<T, decltype(f)>>(shape_numel(ctx.in_shape(0)), f));
        return {};
    });
}

// ---------------------------------------------------------------- binary (broadcasting)

template <typename T, typename R, typename F>
class BinaryKernel : public Kernel {
public:
    BinaryKernel(Shape out, Shape sa, Shape sb, F f)
        : out_(std::move(out)), sa_(std::move(sa)), sb_(std::move(sb)), f_(f),
          n_(shape_numel(out_)), same_(sa_ == strides_of(out_) && sb_ == sa_) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* a = static_cast<const T*>(in[0]);
        const T* b = static_cast<const T*>(in[1]);
        R* y = static_cast<R*>(out[0]);
        if (same_) {
            for (int64_t i = 0; i < n_; ++i) y[i] = f_(a[i], b[i]);
        } else {
            for_each_broadcast2(out_, sa_, sb_, [&](int64_t i, int64_t ia, int64_t ib) {
                y[i] = f_(a[ia], b[ib]);
            });
        }
        return {};
    }

private:
    Shape out_, sa_, sb_;
    F f_;
    int64_t n_;
    bool same_;
};

// Shape of B as it broadcasts. Before opset 7, binary ops broadcast only with broadcast=1, B
// aligned to A at `axis` (default: trailing dims, as numpy) and A's shape is the output's.
Status legacy_b_shape(const OpContext& ctx, Shape* b) {
    *b = ctx.in_shape(1);
    if (ctx.opset() >= 7) return {};
    const Shape& a = ctx.in_shape(0);
    if (ctx.attr_int("broadcast", 0) == 0) {
        if (a != *b) return ctx.fail("shapes ", shape_str(a), " and ", shape_str(*b), " differ and broadcast=0");
        return {};
    }
    if (ctx.has_attr("axis")) {
        int64_t axis;
        if (!normalize_axis(ctx.attr_int("axis", 0), int64_t(a.size()), &axis) ||
            axis + int64_t(b->size()) > int64_t(a.size()))
            return ctx.fail("legacy broadcast axis out of range");
        b->resize(a.size() - size_t(axis), 1);
    }
    return {};
}

// float32 Add/Sub/Mul/Div/Max/Min. At prepare the broadcast is collapsed (size-1 dims dropped,
// neighbours merged where both operands stay contiguous) into outer dims x one inner row, whose
// loop is vector-vector, vector-scalar or scalar-vector (a same-shape op is one row; a scalar
// operand or a per-channel [C,1,1] one gives vector-scalar rows).
class BinaryF32Kernel : public Kernel {
public:
    BinaryF32Kernel(kernels::BinOp op, const Shape& out, const Shape& sa, const Shape& sb)
        : op_(op), rows_(kernels::binary_rows_for(kernels::active_isa(), op)) {
        for (size_t d = 0; d < out.size(); ++d) {
            if (out[d] == 1) continue;
            if (!dims_.empty() && sa_.back() == sa[d] * out[d] && sb_.back() == sb[d] * out[d]) {
                dims_.back() *= out[d];
                sa_.back() = sa[d];
                sb_.back() = sb[d];
            } else {
                dims_.push_back(out[d]);
                sa_.push_back(sa[d]);
                sb_.push_back(sb[d]);
            }
        }
        if (dims_.empty()) {  // one element
            inner_ = 1;
            mode_ = kVV;
        } else {
            inner_ = dims_.back();
            mode_ = sa_.back() && sb_.back() ? kVV : (sa_.back() ? kVS : kSV);
            dims_.pop_back();
            sa_.pop_back();
            sb_.pop_back();
        }
        outer_ = shape_numel(dims_);
    }
    // Threads (docs/threading.md): one row split into aligned ranges, or whole rows of a
    // one-level broadcast (a per-channel scale) split by rows. Past two threads' producers, half
    // of a large operand sits in the other core's cache: one thread alone reads it at the
    // cross-core rate (EfficientNet-B0's squeeze-excite Mul on 144 x 56x56: 30 -> 125 us at two
    // threads when run alone).
    // `chunks`: the split of a same-shape op; `bchunks`: of a one-level broadcast (its threshold
    // is lower: the squeeze-excite scale of 1152 x 7x7 reads a depthwise output split by
    // channels, 5 us at one thread and 27 at two unsplit; EfficientNet-B0 at 2T 0.96x).
    void set_parallel(ThreadPool* pool, int chunks, int bchunks) {
        if (!pool) return;
        if (dims_.empty() && chunks >= 2) pool_ = pool, chunks_ = chunks;
        if (dims_.size() == 1 && bchunks >= 2 && outer_ >= 2 * bchunks) pool_ = pool, chunks_ = bchunks;
        if (pool_ && chunks_ != pool->threads()) pool_ = nullptr;
        if (pool_) bal_ = std::make_unique<Balance>(chunks_);  // the ranges cut per run
    }
    Status run(const void* const* in, void* const* out) const override {
        const float* a = static_cast<const float*>(in[0]);
        const float* b = static_cast<const float*>(in[1]);
        float* y = static_cast<float*>(out[0]);
        if (pool_ && dims_.empty()) {
            pool_->for_balanced(inner_, 16, bal_.get(), [&](int, int64_t lo, int64_t hi) {
                if (hi > lo) part(a, b, y, lo, hi - lo);
            });
        } else if (pool_) {
            pool_->for_balanced(outer_, 1, bal_.get(), [&](int, int64_t lo, int64_t hi) {
                if (hi > lo) rows(a, b, y, lo, hi);
            });
        } else if (dims_.empty()) {
            row(a, b, y);
        } else if (dims_.size() == 1) {
            rows(a, b, y, 0, outer_);
        } else {
            for_each_broadcast2(dims_, sa_, sb_, [&](int64_t i, int64_t ia, int64_t ib) {
                row(a + ia, b + ib, y + i * inner_);
            });
        }
        return {};
    }

    std::string describe() const override {
        static constexpr const char* kOps[] = {"add", "sub", "mul", "div", "max", "min", "prelu"};
        static constexpr const char* kModes[] = {"vv", "vs", "sv"};
        return std::string("binary_") + kOps[int(op_)] + " " + kModes[int(mode_)] + " " +
               kernels::isa_name(kernels::active_isa()) + (pool_ ? " x" + std::to_string(chunks_) + " threads" : "");
    }

private:
    enum Mode { kVV, kVS, kSV };
    void row(const float* a, const float* b, float* y) const { part(a, b, y, 0, inner_); }
    // Rows [lo, hi) of a one-level broadcast (dims_.size() == 1).
    void rows(const float* a, const float* b, float* y, int64_t lo, int64_t hi) const {
        for (int64_t r = lo; r < hi; ++r) row(a + r * sa_[0], b + r * sb_[0], y + r * inner_);
    }
    // Elements [o, o + n) of one row (a scalar operand stays at its one element).
    void part(const float* a, const float* b, float* y, int64_t o, int64_t n) const {
        switch (mode_) {
            case kVV: rows_.vv(a + o, b + o, y + o, n); break;
            case kVS: rows_.vs(a + o, *b, y + o, n); break;
            case kSV: rows_.sv(*a, b + o, y + o, n); break;
        }
    }
    ThreadPool* pool_ = nullptr;
    int chunks_ = 1;
    std::unique_ptr<Balance> bal_;
    kernels::BinOp op_;
    kernels::BinaryRows rows_;
    Shape dims_, sa_, sb_;  // collapsed outer dims and the operands' strides on them
    int64_t inner_ = 1, outer_ = 1;
    Mode mode_ = kVV;
};

template <typename T, typename R, typename F>
Status make_binary(OpContext& ctx, DType out_dtype, F f) {
    Shape out, bshape;
    JIFFY_RETURN_IF_ERROR(legacy_b_shape(ctx, &bshape));
    if (!broadcast_shapes(ctx.in_shape(0), bshape, &out))
        return ctx.fail("cannot broadcast shapes ", shape_str(ctx.in_shape(0)), " and ",
                        shape_str(ctx.in_shape(1)));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, out_dtype, out));
    Shape sa = broadcast_strides(ctx.in_shape(0), out), sb = broadcast_strides(bshape, out);
    ctx.set_kernel(std::make_unique<BinaryKernel<T, R, F>>(out, sa, sb, f));
    return {};
}

// The float32 fast path of Add/Sub/Mul/Div (and 2-input Max/Min): same validation as make_binary.
Status make_binary_f32(OpContext& ctx, kernels::BinOp op) {
    Shape out, bshape;
    JIFFY_RETURN_IF_ERROR(legacy_b_shape(ctx, &bshape));
    if (!broadcast_shapes(ctx.in_shape(0), bshape, &out))
        return ctx.fail("cannot broadcast shapes ", shape_str(ctx.in_shape(0)), " and ",
                        shape_str(ctx.in_shape(1)));
    if (out.size() > size_t(kMaxRank)) return ctx.fail("rank ", out.size(), " is too large");
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kF32, out));
    Shape sa = broadcast_strides(ctx.in_shape(0), out), sb = broadcast_strides(bshape, out);
    auto k = std::make_unique<BinaryF32Kernel>(op, out, sa, sb);
    // Worth a hand-off (~1 us) from ~64 K elements (a quarter of a MiB per operand) up; a
    // one-level broadcast from ~16 K.
    const int64_t n = shape_numel(out);
    k->set_parallel(ctx.options().pool.get(), parallel_chunks(ctx.options(), 8 * n),
                    parallel_chunks(ctx.options(), 32 * n));
    ctx.set_kernel(std::move(k));
    return {};
}

Status check_binary(OpContext& ctx) {
    if (!ctx.has_input(0) || !ctx.has_input(1)) return ctx.fail("needs two inputs");
    if (ctx.in_dtype(0) != ctx.in_dtype(1))
        return ctx.fail("inputs have different dtypes: ", dtype_name(ctx.in_dtype(0)), " and ",
                        dtype_name(ctx.in_dtype(1)));
    return {};
}

enum class Arith { kAdd, kSub, kMul, kDiv, kMax, kMin, kPow, kMod, kFmod };

template <typename T>
T int_pow(T base, T e) {
    if constexpr (std::is_signed_v<T>)
        if (e < 0) return base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
    T r = 1;
    while (e > 0) {
        if (e & 1) r *= base;
        base *= base;
        e /= 2;
    }
    return r;
}

template <Arith A>
Status prep_arith(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_binary(ctx));
    DType t = ctx.in_dtype(0);
    if (!dtype_is_float(t) && !dtype_is_int(t))
        return ctx.fail_unsupported("dtype ", dtype_name(t), " is not supported");
    if (t == DType::kF32) {
        if constexpr (A == Arith::kAdd) return make_binary_f32(ctx, kernels::BinOp::kAdd);
        if constexpr (A == Arith::kSub) return make_binary_f32(ctx, kernels::BinOp::kSub);
        if constexpr (A == Arith::kMul) return make_binary_f32(ctx, kernels::BinOp::kMul);
        if constexpr (A == Arith::kDiv) return make_binary_f32(ctx, kernels::BinOp::kDiv);
    }
    return visit_numeric(t, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        if constexpr (A == Arith::kAdd) return make_binary<T, T>(ctx, t, [](T a, T b) { return T(a + b); });
        if constexpr (A == Arith::kSub) return make_binary<T, T>(ctx, t, [](T a, T b) { return T(a - b); });
        if constexpr (A == Arith::kMul) return make_binary<T, T>(ctx, t, [](T a, T b) { return T(a * b); });
        if constexpr (A == Arith::kDiv)
            return make_binary<T, T>(ctx, t, [](T a, T b) {
                if constexpr (std::is_integral_v<T>) return b == 0 ? T(0) : T(a / b);
                else return T(a / b);
            });
        if constexpr (A == Arith::kMax)
            return make_binary<T, T>(ctx, t, [](T a, T b) {
                if constexpr (std::is_floating_point_v<T>)
                    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
                return a > b ? a : b;
            });
        if constexpr (A == Arith::kMin)
            return make_binary<T, T>(ctx, t, [](T a, T b) {
                if constexpr (std::is_floating_point_v<T>)
                    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
                return a < b ? a : b;
            });
        if constexpr (A == Arith::kMod) {
            bool fmod = ctx.attr_int("fmod", 0) != 0;
            if (std::is_floating_point_v<T> && !fmod)
                return ctx.fail("Mod on floating point inputs requires fmod=1");
            return make_binary<T, T>(ctx, t, [fmod](T a, T b) -> T {
                if constexpr (std::is_floating_point_v<T>) {
                    return std::fmod(a, b);
                } else {
                    if (b == 0) return T(0);
                    T r = T(a % b);
                    if (!fmod && std::is_signed_v<T> && r != 0 && ((r < 0) != (b < 0))) r = T(r + b);
                    return r;
                }
            });
        }
        return ctx.fail("internal: bad arithmetic op");
    });
}

// Pow: base and exponent may differ in type; output has the base's type.
template <typename TB, typename TE>
class PowKernel : public Kernel {
public:
    PowKernel(Shape out, Shape sa, Shape sb) : out_(std::move(out)), sa_(std::move(sa)), sb_(std::move(sb)) {}
    Status run(const void* const* in, void* const* out) const override {
        const TB* a = static_cast<const TB*>(in[0]);
        const TE* b = static_cast<const TE*>(in[1]);
        TB* y = static_cast<TB*>(out[0]);
        for_each_broadcast2(out_, sa_, sb_, [&](int64_t i, int64_t ia, int64_t ib) {
            if constexpr (std::is_integral_v<TB> && std::is_integral_v<TE>)
                y[i] = int_pow<TB>(a[ia], TB(b[ib]));
            else
                y[i] = TB(std::pow(double(a[ia]), double(b[ib])));
        });
        return {};
    }

private:
    Shape out_, sa_, sb_;
};

class SquareF32Kernel : public Kernel {
public:
    explicit SquareF32Kernel(int64_t n) : n_(n) {}
    Status run(const void* const* in, void* const* out) const override {
        const float* __restrict x = static_cast<const float*>(in[0]);
        float* __restrict y = static_cast<float*>(out[0]);
        for (int64_t i = 0; i < n_; ++i) y[i] = x[i] * x[i];
        return {};
    }

private:
    int64_t n_;
};

Status prep_Pow(OpContext& ctx) {
    if (!ctx.has_input(0) || !ctx.has_input(1)) return ctx.fail("needs two inputs");
    Shape out;
    if (!broadcast_shapes(ctx.in_shape(0), ctx.in_shape(1), &out))
        return ctx.fail("cannot broadcast shapes ", shape_str(ctx.in_shape(0)), " and ",
                        shape_str(ctx.in_shape(1)));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));
    // float32 base, constant scalar exponent 2 (squares in spectrograms and norms): x * x, which
    // is exactly what pow rounds to.
    if (ctx.in_dtype(0) == DType::kF32 && out == ctx.in_shape(0) && ctx.in_const(1) &&
        ctx.in_const(1)->numel() == 1 && ctx.in_const(1)->get_f64(0) == 2.0) {
        ctx.set_kernel(std::make_unique<SquareF32Kernel>(shape_numel(out)));
        return {};
    }
    Shape sa = broadcast_strides(ctx.in_shape(0), out), sb = broadcast_strides(ctx.in_shape(1), out);
    return visit_numeric(ctx.in_dtype(0), [&](auto tb) -> Status {
        using TB = typename decltype(tb)::type;
        return visit_numeric(ctx.in_dtype(1), [&](auto te) -> Status {
            using TE = typename decltype(te)::type;
            ctx.set_kernel(std::make_unique<PowKernel<TB, TE>>(out, sa, sb));
            return {};
        });
    });
}

enum class Cmp { kEq, kLt, kGt, kLe, kGe };

template <Cmp C>
Status prep_cmp(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_binary(ctx));
    return visit_all(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        return make_binary<T, bool>(ctx, DType::kBool, [](T a, T b) {
            if constexpr (C == Cmp::kEq) return a == b;
            if constexpr (C == Cmp::kLt) return a < b;
            if constexpr (C == Cmp::kGt) return a > b;
            if constexpr (C == Cmp::kLe) return a <= b;
            return a >= b;
        });
    });
}

enum class Logic { kAnd, kOr, kXor };
template <Logic L>
Status prep_logic(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_binary(ctx));
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kBool}));
    return make_binary<bool, bool>(ctx, DType::kBool, [](bool a, bool b) {
        if constexpr (L == Logic::kAnd) return a && b;
        if constexpr (L == Logic::kOr) return a || b;
        return a != b;
    });
}

enum class Bits { kAnd, kOr, kXor };
template <Bits B>
Status prep_bits(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_binary(ctx));
    return visit_int(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        return make_binary<T, T>(ctx, ctx.in_dtype(0), [](T a, T b) {
            if constexpr (B == Bits::kAnd) return T(a & b);
            if constexpr (B == Bits::kOr) return T(a | b);
            return T(a ^ b);
        });
    });
}
Status prep_BitShift(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_binary(ctx));
    bool left = ctx.attr_str("direction", "") == "LEFT";
    return visit_int(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        return make_binary<T, T>(ctx, ctx.in_dtype(0), [left](T a, T b) {
            if (b >= T(sizeof(T) * 8)) return T(0);
            return left ? T(a << b) : T(a >> b);
        });
    });
}
Status prep_BitwiseNot(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input 0 is missing");
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), ctx.in_shape(0)));
    return visit_int(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        make_unary<T>(ctx, [](T x) { return T(~x); });
        return {};
    });
}

// PRelu: y = x < 0 ? slope * x : x, slope broadcast to x (unidirectional). Before opset 7 (the
// old PyTorch exports) a 1-D slope of X's channel count is per channel (axis 1).
Status prep_PRelu(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_binary(ctx));
    const Shape& x = ctx.in_shape(0);
    Shape slope = ctx.in_shape(1), out;
    if (ctx.opset() < 7 && slope.size() == 1 && x.size() >= 2 && slope[0] == x[1] && slope[0] != 1)
        slope.resize(x.size() - 1, 1);  // [C] -> [C, 1, ..., 1]
    if (!broadcast_shapes(x, slope, &out) || out != x)
        return ctx.fail("slope shape ", shape_str(ctx.in_shape(1)), " does not broadcast to X ", shape_str(x));
    if (out.size() > size_t(kMaxRank)) return ctx.fail("rank ", out.size(), " is too large");
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));
    const Shape sa = broadcast_strides(x, out), sb = broadcast_strides(slope, out);
    if (ctx.in_dtype(0) == DType::kF32) {
        // Vector rows over the collapsed broadcast: a per-channel [C,1,1] slope over NCHW gives
        // one x-times-scalar row per channel plane (1x64x80x80: ~3100 -> ~35 us).
        ctx.set_kernel(std::make_unique<BinaryF32Kernel>(kernels::BinOp::kPRelu, out, sa, sb));
        return {};
    }
    return visit_numeric(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        auto f = [](T v, T s) { return v < T(0) ? T(s * v) : v; };
        ctx.set_kernel(std::make_unique<BinaryKernel<T, T, decltype(f)>>(out, sa, sb, f));
        return {};
    });
}

// Variadic Sum/Mean/Max/Min: folded pairwise into one kernel over N broadcast inputs.
template <typename T>
class VariadicKernel : public Kernel {
public:
    enum Kind { kSum, kMean, kMax, kMin };
    VariadicKernel(Kind k, Shape out, std::vector<Shape> strides)
        : k_(k), out_(std::move(out)), st_(std::move(strides)) {}
    Status run(const void* const* in, void* const* out) const override {
        T* y = static_cast<T*>(out[0]);
        for (size_t j = 0; j < st_.size(); ++j) {
            const T* x = static_cast<const T*>(in[j]);
            for_each_broadcast2(out_, st_[j], st_[j], [&](int64_t i, int64_t ix, int64_t) {
                T v = x[ix];
                if (j == 0) { y[i] = v; return; }
                switch (k_) {
                    case kSum: case kMean: y[i] = T(y[i] + v); break;
                    case kMax: y[i] = (v > y[i] || v != v) ? v : y[i]; break;
                    case kMin: y[i] = (v < y[i] || v != v) ? v : y[i]; break;
                }
            });
        }
        if (k_ == kMean) {
            int64_t n = shape_numel(out_);
            for (int64_t i = 0; i < n; ++i) y[i] = T(y[i] / T(st_.size()));
        }
        return {};
    }

private:
    Kind k_;
    Shape out_;
    std::vector<Shape> st_;
};

template <int K>
Status prep_variadic(OpContext& ctx) {
    if (ctx.num_inputs() < 1) return ctx.fail("needs at least one input");
    // Two float32 inputs (Max(x, c), Sum(a, b), ...): the binary fast path.
    if (K != 1 && ctx.num_inputs() == 2 && ctx.has_input(0) && ctx.has_input(1) &&
        ctx.in_dtype(0) == DType::kF32 && ctx.in_dtype(1) == DType::kF32) {
        const kernels::BinOp op = K == 0 ? kernels::BinOp::kAdd : (K == 2 ? kernels::BinOp::kMax : kernels::BinOp::kMin);
        Shape out;
        if (!broadcast_shapes(ctx.in_shape(0), ctx.in_shape(1), &out))
            return ctx.fail("cannot broadcast input 1 of shape ", shape_str(ctx.in_shape(1)));
        JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kF32, out));
        ctx.set_kernel(std::make_unique<BinaryF32Kernel>(op, out, broadcast_strides(ctx.in_shape(0), out),
                                                         broadcast_strides(ctx.in_shape(1), out)));
        return {};
    }
    Shape out = ctx.in_shape(0);
    for (int i = 0; i < ctx.num_inputs(); ++i) {
        if (!ctx.has_input(i)) return ctx.fail("input ", i, " is missing");
        if (ctx.in_dtype(i) != ctx.in_dtype(0)) return ctx.fail("inputs have different dtypes");
        if (!broadcast_shapes(out, ctx.in_shape(i), &out))
            return ctx.fail("cannot broadcast input ", i, " of shape ", shape_str(ctx.in_shape(i)));
    }
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));
    std::vector<Shape> st;
    for (int i = 0; i < ctx.num_inputs(); ++i) st.push_back(broadcast_strides(ctx.in_shape(i), out));
    return visit_numeric(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<VariadicKernel<T>>(typename VariadicKernel<T>::Kind(K), out, st));
        return {};
    });
}

// c ? a : b without a branch for plain 1/2/4/8-byte types (a random condition mispredicts half
// the time, and the compiler keeps the branch for float selects).
template <typename T>
inline T select_bits(bool c, const T& a, const T& b) {
    if constexpr (std::is_trivially_copyable_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8)) {
        using U = std::conditional_t<sizeof(T) == 1, uint8_t, std::conditional_t<sizeof(T) == 2, uint16_t,
                                     std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
        const U m = U(0) - U(c), ua = std::bit_cast<U>(a), ub = std::bit_cast<U>(b);
        return std::bit_cast<T>(U((ua & m) | (ub & U(~m))));
    } else {
        return c ? a : b;
    }
}

// Where(cond, x, y)
template <typename T>
class WhereKernel : public Kernel {
public:
    WhereKernel(Shape out, Shape sc, Shape sx, Shape sy)
        : out_(std::move(out)), sc_(std::move(sc)), sx_(std::move(sx)), sy_(std::move(sy)) {}
    Status run(const void* const* in, void* const* out) const override {
        const uint8_t* c = static_cast<const uint8_t*>(in[0]);  // any nonzero byte is true
        const T* x = static_cast<const T*>(in[1]);
        const T* y = static_cast<const T*>(in[2]);
        T* o = static_cast<T*>(out[0]);
        // Selects, not branches: 1x64x80x80 with a random condition took ~4.7 ms branching.
        if (cond_full_) {  // cond has the output's shape: one pass over x and y
            for_each_broadcast2(out_, sx_, sy_, [&](int64_t i, int64_t ix, int64_t iy) {
                o[i] = select_bits(c[i] != 0, x[ix], y[iy]);
            });
            return {};
        }
        // Two passes of the pairwise iterator: cond with x, then cond with y where false.
        for_each_broadcast2(out_, sc_, sx_, [&](int64_t i, int64_t ic, int64_t ix) {
            o[i] = select_bits(c[ic] != 0, x[ix], T{});
        });
        for_each_broadcast2(out_, sc_, sy_, [&](int64_t i, int64_t ic, int64_t iy) {
            o[i] = select_bits(c[ic] != 0, o[i], y[iy]);
        });
        return {};
    }

private:
    Shape out_, sc_, sx_, sy_;
    bool cond_full_ = [this] {  // every dim of size > 1 runs with cond's own row-major stride
        const Shape st = strides_of(out_);
        for (size_t d = 0; d < out_.size(); ++d)
            if (out_[d] > 1 && sc_[d] != st[d]) return false;
        return true;
    }();
};

Status prep_Where(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kBool}));
    if (!ctx.has_input(1) || !ctx.has_input(2)) return ctx.fail("needs three inputs");
    if (ctx.in_dtype(1) != ctx.in_dtype(2)) return ctx.fail("X and Y have different dtypes");
    Shape out;
    if (!broadcast_shapes(ctx.in_shape(0), ctx.in_shape(1), &out) ||
        !broadcast_shapes(out, ctx.in_shape(2), &out))
        return ctx.fail("cannot broadcast shapes ", shape_str(ctx.in_shape(0)), ", ",
                        shape_str(ctx.in_shape(1)), ", ", shape_str(ctx.in_shape(2)));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(1), out));
    Shape sc = broadcast_strides(ctx.in_shape(0), out), sx = broadcast_strides(ctx.in_shape(1), out),
          sy = broadcast_strides(ctx.in_shape(2), out);
    return visit_all(ctx.in_dtype(1), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<WhereKernel<T>>(out, sc, sx, sy));
        return {};
    });
}

// Clip(x, min?, max?) — opset >= 11 takes min/max as inputs, older as attributes.
template <typename T>
class ClipKernel : public Kernel {
public:
    ClipKernel(int64_t n, bool has_lo, bool has_hi, T lo, T hi, int num_in)
        : n_(n), has_lo_(has_lo), has_hi_(has_hi), lo_(lo), hi_(hi), num_in_(num_in) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out[0]);
        T lo = lo_, hi = hi_;
        bool has_lo = has_lo_, has_hi = has_hi_;
        // in[] has exactly num_in_ entries (an opset < 11 Clip has one).
        if (num_in_ > 1 && in[1]) { lo = *static_cast<const T*>(in[1]); has_lo = true; }
        if (num_in_ > 2 && in[2]) { hi = *static_cast<const T*>(in[2]); has_hi = true; }
        for (int64_t i = 0; i < n_; ++i) {
            T v = x[i];
            if (has_lo && v < lo) v = lo;
            if (has_hi && v > hi) v = hi;
            y[i] = v;
        }
        return {};
    }

private:
    int64_t n_;
    bool has_lo_, has_hi_;
    T lo_, hi_;
    int num_in_;
};

// float32 Clip: the vectorized activation; bounds from the inputs when present (read at run), else
// the attributes, else -inf / +inf (which clamp nothing, as "absent").
class ClipF32Kernel : public Kernel {
public:
    // num_in: the node's input count (in[] has exactly that many entries).
    ClipF32Kernel(int64_t n, float lo, float hi, int num_in)
        : n_(n), lo_(lo), hi_(hi), num_in_(num_in), fn_(kernels::act_apply_for(kernels::active_isa())) {}
    Status run(const void* const* in, void* const* out) const override {
        kernels::Activation a{kernels::ActKind::kClip, lo_, hi_};
        if (num_in_ > 1 && in[1]) a.alpha = *static_cast<const float*>(in[1]);
        if (num_in_ > 2 && in[2]) a.beta = *static_cast<const float*>(in[2]);
        fn_(a, static_cast<const float*>(in[0]), static_cast<float*>(out[0]), n_);
        return {};
    }

private:
    int64_t n_;
    float lo_, hi_;
    int num_in_;
    kernels::ActApplyFn fn_;
};

Status prep_Clip(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input 0 is missing");
    DType t = ctx.in_dtype(0);
    for (int i = 1; i < 3; ++i)
        if (ctx.has_input(i) && (ctx.in_dtype(i) != t || shape_numel(ctx.in_shape(i)) != 1))
            return ctx.fail("min/max must be scalars of the input's dtype");
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, t, ctx.in_shape(0)));
    bool has_lo = ctx.has_attr("min"), has_hi = ctx.has_attr("max");
    double lo = ctx.attr_float("min", 0), hi = ctx.attr_float("max", 0);
    if (t == DType::kF32) {
        ctx.set_kernel(std::make_unique<ClipF32Kernel>(shape_numel(ctx.in_shape(0)), has_lo ? float(lo) : -INFINITY,
                                                       has_hi ? float(hi) : INFINITY, ctx.num_inputs()));
        return {};
    }
    return visit_numeric(t, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<ClipKernel<T>>(shape_numel(ctx.in_shape(0)), has_lo, has_hi,
                                                       T(lo), T(hi), ctx.num_inputs()));
        return {};
    });
}

// ---------------------------------------------------------------- Cast

template <typename S, typename D>
D convert(S v) {
    if constexpr (std::is_same_v<D, bool>) {
        return v != S(0);
    } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S>) {
        if (std::isnan(v)) return D(0);
        if (v >= S(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
        if (v <= S(std::numeric_limits<D>::lowest())) return std::numeric_limits<D>::lowest();
        return D(v);
    } else {
        return D(v);
    }
}

// Casting via float for f16/bf16 storage types.
class CastKernel : public Kernel {
public:
    CastKernel(DType from, DType to, int64_t n) : from_(from), to_(to), n_(n) {}
    Status run(const void* const* in, void* const* out) const override {
        if (from_ == to_) {
            std::memcpy(out[0], in[0], size_t(n_) * dtype_size(from_));
            return {};
        }
        auto load = [&](auto tag_to) {
            using D = typename decltype(tag_to)::type;
            D* y = static_cast<D*>(out[0]);
            if (from_ == DType::kF16 || from_ == DType::kBF16) {
                const uint16_t* x = static_cast<const uint16_t*>(in[0]);
                for (int64_t i = 0; i < n_; ++i)
                    y[i] = convert<float, D>(from_ == DType::kF16 ? f16_to_f32(x[i]) : bf16_to_f32(x[i]));
                return Status{};
            }
            return visit_all(from_, [&](auto tag_from) -> Status {
                using S = typename decltype(tag_from)::type;
                const S* x = static_cast<const S*>(in[0]);
                for (int64_t i = 0; i < n_; ++i) y[i] = convert<S, D>(x[i]);
                return {};
            });
        };
        if (to_ == DType::kF16 || to_ == DType::kBF16) {
            // Convert to float first (through the output as scratch is unsafe); go element-wise.
            uint16_t* y = static_cast<uint16_t*>(out[0]);
            for (int64_t i = 0; i < n_; ++i) {
                float v;
                if (from_ == DType::kF16) v = f16_to_f32(static_cast<const uint16_t*>(in[0])[i]);
                else if (from_ == DType::kBF16) v = bf16_to_f32(static_cast<const uint16_t*>(in[0])[i]);
                else v = float(load_scalar(in[0], i));
                y[i] = to_ == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
            }
            return {};
        }
        return visit_all(to_, load);
    }

private:
    double load_scalar(const void* p, int64_t i) const {
        double v = 0;
        (void)visit_all(from_, [&](auto tag) -> Status {
            using S = typename decltype(tag)::type;
            v = double(static_cast<const S*>(p)[i]);
            return {};
        });
        return v;
    }
    DType from_, to_;
    int64_t n_;
};

bool castable(DType t) { return dtype_size(t) != 0; }

Status cast_to(OpContext& ctx, DType to) {
    if (!ctx.has_input(0)) return ctx.fail("input 0 is missing");
    DType from = ctx.in_dtype(0);
    if (!castable(from) || !castable(to))
        return ctx.fail_unsupported("cast from ", dtype_name(from), " to ", dtype_name(to),
                                    " is not supported");
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, to, ctx.in_shape(0)));
    ctx.set_kernel(std::make_unique<CastKernel>(from, to, shape_numel(ctx.in_shape(0))));
    return {};
}
Status prep_Cast(OpContext& ctx) {
    int64_t to = ctx.attr_int("to", 0);
    if (to <= 0 || to > 16) return ctx.fail("bad 'to' dtype ", to);
    return cast_to(ctx, DType(to));
}
Status prep_CastLike(OpContext& ctx) {
    if (!ctx.has_input(1)) return ctx.fail("input 1 (target_type) is missing");
    return cast_to(ctx, ctx.in_dtype(1));
}

}  // namespace

Status prep_ElementwiseChain(OpContext& ctx);  // elementwise_chain.cpp

void register_elementwise_ops(OpRegistry& r) {
    r.add("ElementwiseChain", prep_ElementwiseChain, "jiffy");
#define REG(NAME) r.add(#NAME, prep_##NAME);
    REG(Exp) REG(Log) REG(Sqrt) REG(Reciprocal) REG(Sigmoid) REG(Tanh) REG(Erf) REG(Floor)
    REG(Ceil) REG(Round) REG(Softplus) REG(Softsign) REG(Sin) REG(Cos) REG(Tan) REG(Asin)
    REG(Acos) REG(Atan) REG(Sinh) REG(Cosh) REG(Asinh) REG(Acosh) REG(Atanh) REG(HardSwish)
    REG(Mish) REG(Relu) REG(Neg) REG(Abs) REG(Sign) REG(LeakyRelu) REG(Elu) REG(Celu) REG(Selu)
    REG(ThresholdedRelu) REG(HardSigmoid) REG(Gelu) REG(Shrink) REG(Not) REG(IsNaN) REG(IsInf)
    REG(Pow) REG(PRelu) REG(Where) REG(Clip) REG(Cast) REG(CastLike) REG(BitShift) REG(BitwiseNot)
#undef REG
    r.add("Add", prep_arith<Arith::kAdd>);
    r.add("Sub", prep_arith<Arith::kSub>);
    r.add("Mul", prep_arith<Arith::kMul>);
    r.add("Div", prep_arith<Arith::kDiv>);
    r.add("Mod", prep_arith<Arith::kMod>);
    r.add("Equal", prep_cmp<Cmp::kEq>);
    r.add("Less", prep_cmp<Cmp::kLt>);
    r.add("Greater", prep_cmp<Cmp::kGt>);
    r.add("LessOrEqual", prep_cmp<Cmp::kLe>);
    r.add("GreaterOrEqual", prep_cmp<Cmp::kGe>);
    r.add("And", prep_logic<Logic::kAnd>);
    r.add("Or", prep_logic<Logic::kOr>);
    r.add("Xor", prep_logic<Logic::kXor>);
    r.add("BitwiseAnd", prep_bits<Bits::kAnd>);
    r.add("BitwiseOr", prep_bits<Bits::kOr>);
    r.add("BitwiseXor", prep_bits<Bits::kXor>);
    r.add("Sum", prep_variadic<0>);
    r.add("Mean", prep_variadic<1>);
    r.add("Max", prep_variadic<2>);
    r.add("Min", prep_variadic<3>);
}

}  // namespace jiffy
