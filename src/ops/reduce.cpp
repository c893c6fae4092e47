// Reduction ops: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin,
// TopK, CumSum and Det. Reference kernels: plain loops, float sums accumulated in double.
//
// Reduce geometry: at prepare the input shape is compressed (size-1 dims dropped, adjacent dims
// that are both kept or both reduced merged) into a list of kept dims and a list of reduced dims
// with their input strides. At run time each output element walks its reduced dims; the innermost
// reduced dim is a simple strided loop (stride 1 when it is the input's innermost axis).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/util.h"

namespace jiffy {
namespace {

// ---------------------------------------------------------------- helpers

template <typename T>
bool is_nan(T v) {
    if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
    else return false;
}

// Reads a scalar (0-D or 1-element 1-D) integer tensor; false if it is not one.
bool scalar_int(const Tensor& t, int64_t* out) {
    if (t.numel() != 1 || t.rank() > 1) return false;
    if (t.dtype() != DType::kI64 && t.dtype() != DType::kI32) return false;
    *out = t.get_i64(0);
    return true;
}

// outer x n x inner extents of `s` around `axis`.
void split_at(const Shape& s, int64_t axis, int64_t* outer, int64_t* n, int64_t* inner) {
    *outer = 1;
    *inner = 1;
    for (int64_t d = 0; d < axis; ++d) *outer *= s[size_t(d)];
    for (size_t d = size_t(axis) + 1; d < s.size(); ++d) *inner *= s[d];
    *n = s[size_t(axis)];
}

// ---------------------------------------------------------------- Reduce*

enum class RedOp { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

const char* red_name(RedOp op) {
    switch (op) {
        case RedOp::kSum: return "ReduceSum";
        case RedOp::kMean: return "ReduceMean";
        case RedOp::kMax: return "ReduceMax";
        case RedOp::kMin: return "ReduceMin";
        case RedOp::kProd: return "ReduceProd";
        case RedOp::kL1: return "ReduceL1";
        case RedOp::kL2: return "ReduceL2";
        case RedOp::kLogSum: return "ReduceLogSum";
        case RedOp::kLogSumExp: return "ReduceLogSumExp";
        case RedOp::kSumSquare: return "ReduceSumSquare";
    }
    return "?";
}

struct RedGeom {
    int64_t out_n = 1, red_n = 1;
    int nk = 0, nr = 0;
    int64_t kdim[kMaxRank] = {}, kstr[kMaxRank] = {};  // kept dims, outer to inner
    int64_t rdim[kMaxRank] = {}, rstr[kMaxRank] = {};  // reduced dims except the innermost
    int64_t last_n = 1, last_str = 0;                    // innermost reduced dim
};

// `in` has rank <= kMaxRank (checked by the caller).
RedGeom make_geom(const Shape& in, const std::vector<bool>& red) {
    struct D {
        int64_t n, s;
        bool r;
    };
    D ds[kMaxRank];  // innermost first
    int nd = 0;
    RedGeom g;
    int64_t stride = 1;
    for (int d = int(in.size()) - 1; d >= 0; --d) {
        int64_t n = in[size_t(d)];
        bool r = red[size_t(d)];
        if (r) g.red_n *= n;
        else g.out_n *= n;
        if (n == 1) continue;
        if (nd > 0 && ds[nd - 1].r == r) ds[nd - 1].n *= n;  // adjacent: always contiguous
        else ds[nd++] = D{n, stride, r};
        stride *= n;
    }
    bool have_last = false;
    for (int i = nd - 1; i >= 0; --i) {  // outer to inner
        if (!ds[i].r) {
            g.kdim[g.nk] = ds[i].n;
            g.kstr[g.nk++] = ds[i].s;
        }
    }
    for (int i = 0; i < nd; ++i) {  // find innermost reduced
        if (ds[i].r) {
            g.last_n = ds[i].n;
            g.last_str = ds[i].s;
            have_last = true;
            for (int j = nd - 1; j > i; --j)
                if (ds[j].r) {
                    g.rdim[g.nr] = ds[j].n;
                    g.rstr[g.nr++] = ds[j].s;
                }
            break;
        }
    }
    if (!have_last) {
        g.last_n = 1;
        g.last_str = 0;
    }
    return g;
}

// Accumulator types: double for floats; wrapping uint64 for integer sums/products.
template <typename T>
using SumAcc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;

template <typename T>
SumAcc<T> to_acc(T v) {
    if constexpr (std::is_floating_point_v<T>) return double(v);
    else if constexpr (std::is_signed_v<T>) return uint64_t(int64_t(v));
    else return uint64_t(v);
}
// Integer accumulator back to a signed/unsigned value as double (for log/sqrt of int sums).
template <typename T>
double acc_to_double(SumAcc<T> a) {
    if constexpr (std::is_floating_point_v<T>) return a;
    else if constexpr (std::is_signed_v<T>) return double(int64_t(a));
    else return double(a);
}

template <typename T, RedOp OP>
class ReduceKernel : public Kernel {
public:
    explicit ReduceKernel(const RedGeom& g) : g_(g) {}

    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out[0]);
        int64_t kidx[kMaxRank] = {0};
        int64_t base = 0;
        for (int64_t j = 0; j < g_.out_n; ++j) {
            y[j] = reduce_one(x + base);
            for (int d = g_.nk - 1; d >= 0; --d) {
                if (++kidx[d] < g_.kdim[d]) {
                    base += g_.kstr[d];
                    break;
                }
                base -= g_.kstr[d] * (g_.kdim[d] - 1);
                kidx[d] = 0;
            }
        }
        return {};
    }

private:
    // Calls row(p) for each innermost reduced row starting at p (elements p[t * last_str],
    // t < last_n).
    template <typename F>
    void walk(const T* p, F&& row) const {
        if (g_.red_n == 0) return;
        const int64_t rows = g_.red_n / g_.last_n;
        int64_t ridx[kMaxRank] = {0};
        int64_t off = 0;
        for (int64_t r = 0; r < rows; ++r) {
            row(p + off);
            for (int d = g_.nr - 1; d >= 0; --d) {
                if (++ridx[d] < g_.rdim[d]) {
                    off += g_.rstr[d];
                    break;
                }
                off -= g_.rstr[d] * (g_.rdim[d] - 1);
                ridx[d] = 0;
            }
        }
    }

    T reduce_one(const T* p) const {
        const int64_t n = g_.last_n, s = g_.last_str;
        if constexpr (OP == RedOp::kMax || OP == RedOp::kMin) {
            T acc;
            if constexpr (std::is_floating_point_v<T>)
                acc = OP == RedOp::kMax ? -std::numeric_limits<T>::infinity()
                                        : std::numeric_limits<T>::infinity();
            else
                acc = OP == RedOp::kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
            walk(p, [&](const T* q) {
                for (int64_t t = 0; t < n; ++t) {
                    T v = q[t * s];
                    if constexpr (OP == RedOp::kMax) {
                        if (v > acc || is_nan(v)) acc = v;
                    } else {
                        if (v < acc || is_nan(v)) acc = v;
                    }
                }
            });
            return acc;
        } else if constexpr (OP == RedOp::kLogSumExp) {
            double m = -std::numeric_limits<double>::infinity();
            bool nan = false;
            walk(p, [&](const T* q) {
                for (int64_t t = 0; t < n; ++t) {
                    double v = double(q[t * s]);
                    if (std::isnan(v)) nan = true;
                    else if (v > m) m = v;
                }
            });
            if (nan) return T(std::numeric_limits<double>::quiet_NaN());
            if (std::isinf(m)) return T(m);  // empty, all -inf, or some +inf
            double sum = 0;
            walk(p, [&](const T* q) {
                for (int64_t t = 0; t < n; ++t) sum += std::exp(double(q[t * s]) - m);
            });
            return T(m + std::log(sum));
        } else if constexpr (OP == RedOp::kProd) {
            SumAcc<T> acc = 1;
            walk(p, [&](const T* q) {
                for (int64_t t = 0; t < n; ++t) acc = SumAcc<T>(acc * to_acc(q[t * s]));
            });
            return T(acc);
        } else {
            // Additive family: Sum, Mean, L1, L2, LogSum, SumSquare.
            SumAcc<T> acc = 0;
            walk(p, [&](const T* q) {
                for (int64_t t = 0; t < n; ++t) {
                    SumAcc<T> v = to_acc(q[t * s]);
                    if constexpr (OP == RedOp::kL1) {
                        if constexpr (std::is_floating_point_v<T>) v = std::abs(v);
                        else if constexpr (std::is_signed_v<T>) v = q[t * s] < 0 ? SumAcc<T>(0 - v) : v;
                        acc += v;
                    } else if constexpr (OP == RedOp::kL2 || OP == RedOp::kSumSquare) {
                        acc += v * v;
                    } else {
                        acc += v;
                    }
                }
            });
            if constexpr (OP == RedOp::kMean) {
                if constexpr (std::is_floating_point_v<T>) return T(acc / double(g_.red_n));
                else if (g_.red_n == 0) return T(0);
                else if constexpr (std::is_signed_v<T>) return T(int64_t(acc) / g_.red_n);
                else return T(acc / uint64_t(g_.red_n));
            } else if constexpr (OP == RedOp::kL2) {
                return T(std::sqrt(acc_to_double<T>(acc)));
            } else if constexpr (OP == RedOp::kLogSum) {
                return T(std::log(acc_to_double<T>(acc)));
            } else {
                return T(acc);
            }
        }
    }

    RedGeom g_;
};

// float32 Sum / Mean / Max / Min whose reduced axes are one run of adjacent dims (after the size-1
// dims are dropped): y[o][i] = reduce over k of x[o][k][i], i < inner (inner = 1: each output
// reduces one contiguous block, as ReduceMean over H, W does). Vector loops; sums still
// accumulate in double (16 partial sums for a block, a row of double sums over i otherwise), so
// the results keep the reference's accuracy. 1x64x80x80 over (2, 3): ~345 -> ~96 us
// (ORT, float sums: ~64 us).
class FastReduceF32 : public Kernel {
public:
    static bool applies(const RedGeom& g) {
        if (g.nr != 0 || g.red_n <= 0 || g.last_str <= 0) return false;
        if (g.last_str == 1) return true;
        return g.nk >= 1 && g.kstr[g.nk - 1] == 1 && g.kdim[g.nk - 1] == g.last_str;
    }
    FastReduceF32(const RedGeom& g, RedOp op)
        : op_(op), n_(g.last_n), inner_(g.last_str), outer_(g.out_n / g.last_str) {
        if (inner_ > 1 && (op == RedOp::kSum || op == RedOp::kMean)) acc_.resize(size_t(inner_));
    }

    Status run(const void* const* in, void* const* out) const override {
        const float* x = static_cast<const float*>(in[0]);
        float* y = static_cast<float*>(out[0]);
        const bool sum = op_ == RedOp::kSum || op_ == RedOp::kMean;
        const double div = op_ == RedOp::kMean ? double(n_) : 1.0;
        for (int64_t o = 0; o < outer_; ++o) {
            const float* xo = x + o * n_ * inner_;
            float* yo = y + o * inner_;
            if (inner_ == 1) {
                yo[0] = sum ? float(block_sum(xo) / div) : block_minmax(xo);
                continue;
            }
            if (sum) {
                double* __restrict a = acc_.data();
                for (int64_t i = 0; i < inner_; ++i) a[i] = double(xo[i]);
                for (int64_t k = 1; k < n_; ++k) {
                    const float* __restrict r = xo + k * inner_;
                    for (int64_t i = 0; i < inner_; ++i) a[i] += double(r[i]);
                }
                for (int64_t i = 0; i < inner_; ++i) yo[i] = float(a[i] / div);
                continue;
            }
            for (int64_t i = 0; i < inner_; ++i) yo[i] = xo[i];
            for (int64_t k = 1; k < n_; ++k) {
                const float* __restrict r = xo + k * inner_;
                if (op_ == RedOp::kMax)
                    for (int64_t i = 0; i < inner_; ++i) yo[i] = (r[i] > yo[i] || r[i] != r[i]) ? r[i] : yo[i];
                else
                    for (int64_t i = 0; i < inner_; ++i) yo[i] = (r[i] < yo[i] || r[i] != r[i]) ? r[i] : yo[i];
            }
        }
        return {};
    }
    std::string describe() const override { return "reduce_f32 vector"; }

private:
    typedef float V4 __attribute__((vector_size(16)));
    typedef double D2 __attribute__((vector_size(16)));
    static V4 ld4(const float* p) {
        V4 v;
        std::memcpy(&v, p, sizeof v);
        return v;
    }
    // The sum of one contiguous block of n_ floats in double: 4 x 2 partial sums, then the rest.
    double block_sum(const float* p) const {
        const int64_t n = n_;
        int64_t t = 0;
        double r = 0;
        if (n >= 16) {  // 8 independent chains: the adds' latency hides behind each other
            D2 a[8] = {};
            for (; t + 16 <= n; t += 16)
                for (int q = 0; q < 4; ++q) {
                    const V4 u = ld4(p + t + 4 * q);
                    a[2 * q] += __builtin_convertvector(__builtin_shufflevector(u, u, 0, 1), D2);
                    a[2 * q + 1] += __builtin_convertvector(__builtin_shufflevector(u, u, 2, 3), D2);
                }
            const D2 s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
            r = s[0] + s[1];
        }
        for (; t < n; ++t) r += double(p[t]);
        return r;
    }
    // Max / min of one contiguous block (NaN wins): 4 vectors of partial results, then the lanes.
    float block_minmax(const float* p) const {
        const int64_t n = n_;
        const bool mx = op_ == RedOp::kMax;
        auto pick = [mx](float acc, float v) { return (mx ? v > acc : v < acc) || v != v ? v : acc; };
        int64_t t = 1;
        float r = p[0];
        if (n >= 16) {
            V4 a[4] = {ld4(p), ld4(p + 4), ld4(p + 8), ld4(p + 12)};
            for (t = 16; t + 16 <= n; t += 16)
                for (int q = 0; q < 4; ++q) {
                    const V4 v = ld4(p + t + 4 * q);
                    a[q] = ((mx ? v > a[q] : v < a[q]) | (v != v)) ? v : a[q];
                }
            float lanes[16];
            std::memcpy(lanes, a, sizeof lanes);
            r = lanes[0];
            for (int l = 1; l < 16; ++l) r = pick(r, lanes[l]);
        }
        for (; t < n; ++t) r = pick(r, p[t]);
        return r;
    }

    RedOp op_;
    int64_t n_, inner_, outer_;
    mutable std::vector<double> acc_;  // inner > 1 sums: one double per output of a row
};

// Reads axes (attribute or constant input, depending on opset) and noop_with_empty_axes.
// axes_input_opset: the opset from which axes is an input (13 for ReduceSum, 18 for the rest).
Status read_reduce_axes(OpContext& ctx, int64_t axes_input_opset, std::vector<int64_t>* axes,
                        bool* noop) {
    *noop = false;
    if (ctx.opset() >= axes_input_opset) {
        if (ctx.has_attr("axes"))
            return ctx.fail("'axes' is an input, not an attribute, since opset ", axes_input_opset,
                            " (model opset is ", ctx.opset(), ")");
        *noop = ctx.attr_int("noop_with_empty_axes", 0) != 0;
        if (ctx.has_input(1)) {
            const Tensor* a = ctx.in_const(1);
            if (!a) return ctx.need_value(1);
            if (a->dtype() != DType::kI64 && a->dtype() != DType::kI32)
                return ctx.fail("axes must be int64, got ", dtype_name(a->dtype()));
            if (a->rank() > 1) return ctx.fail("axes must be 1-D, got shape ", shape_str(a->shape()));
            *axes = a->to_i64_vector();
        }
    } else {
        if (ctx.has_input(1))
            return ctx.fail("axes as an input needs opset >= ", axes_input_opset, " (model opset is ",
                            ctx.opset(), "); use the 'axes' attribute");
        *axes = ctx.attr_ints("axes");
    }
    return {};
}

template <RedOp OP>
Status prep_reduce(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input 0 (data) is missing");
    const DType t = ctx.in_dtype(0);
    const Shape& in = ctx.in_shape(0);
    const int rank = ctx.in_rank(0);
    if (rank > kMaxRank) return ctx.fail("input rank ", rank, " is over the maximum ", kMaxRank);
    constexpr bool kMinMax = OP == RedOp::kMax || OP == RedOp::kMin;
    if (!(dtype_is_float(t) || dtype_is_int(t) || (kMinMax && t == DType::kBool)) ||
        t == DType::kF16 || t == DType::kBF16)
        return ctx.fail_unsupported(red_name(OP), " of dtype ", dtype_name(t), " is not supported");

    std::vector<int64_t> axes;
    bool noop = false;
    JIFFY_RETURN_IF_ERROR(read_reduce_axes(ctx, OP == RedOp::kSum ? 13 : 18, &axes, &noop));
    const int64_t keepdims = ctx.attr_int("keepdims", 1);
    if (keepdims != 0 && keepdims != 1) return ctx.fail("keepdims must be 0 or 1, got ", keepdims);

    std::vector<bool> red(size_t(rank), false);
    if (axes.empty()) {
        if (!noop) std::fill(red.begin(), red.end(), true);
    } else {
        for (int64_t a : axes) {
            int64_t ax;
            if (!normalize_axis(a, rank, &ax))
                return ctx.fail("axis ", a, " is out of range for input rank ", rank);
            if (red[size_t(ax)]) return ctx.fail("axis ", a, " is repeated in axes");
            red[size_t(ax)] = true;
        }
    }
    Shape out;
    for (int d = 0; d < rank; ++d) {
        if (!red[size_t(d)]) out.push_back(in[size_t(d)]);
        else if (keepdims) out.push_back(1);
    }
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, t, out));
    const RedGeom g = make_geom(in, red);
    if (t == DType::kBool) {
        if constexpr (kMinMax) ctx.set_kernel(std::make_unique<ReduceKernel<bool, OP>>(g));
        return {};
    }
    constexpr bool kFastOp = OP == RedOp::kSum || OP == RedOp::kMean || OP == RedOp::kMax || OP == RedOp::kMin;
    // A mean of contiguous blocks (over trailing axes: a keyword spotter's mean over time, H x W)
    // of up to 64 K values each: the GlobalAveragePool kernel's float sums, 16 blocks at once
    // (128 x 25 over the last axis: 1.6 -> ~0.3 us). Longer blocks keep the double sums below.
    if (OP == RedOp::kMean && t == DType::kF32 && FastReduceF32::applies(g) && g.last_str == 1 && g.last_n <= 65536) {
        ctx.set_kernel(make_global_avg_f32(ctx, g.out_n, g.last_n));
        return {};
    }
    if (kFastOp && t == DType::kF32 && FastReduceF32::applies(g)) {
        ctx.set_kernel(std::make_unique<FastReduceF32>(g, OP));
        return {};
    }
    return visit_numeric(t, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<ReduceKernel<T, OP>>(g));
        return {};
    });
}

// ---------------------------------------------------------------- ArgMax / ArgMin

template <typename T, bool MAX>
class ArgKernel : public Kernel {
public:
    ArgKernel(int64_t outer, int64_t n, int64_t inner, bool last)
        : outer_(outer), n_(n), inner_(inner), last_(last) {
        if (inner_ > 1) {
            bv_.resize(size_t(inner_));
            bi_.resize(size_t(inner_));
        }
    }
    // The rule for replacing the best value bv by v (NaN wins, as in numpy; ties by last_).
    bool take(T bv, T v) const {
        if (is_nan(bv)) return last_ && is_nan(v);
        if (is_nan(v)) return true;
        if constexpr (MAX) return last_ ? v >= bv : v > bv;
        else return last_ ? v <= bv : v < bv;
    }
    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        int64_t* y = static_cast<int64_t*>(out[0]);
        if (inner_ > 1) {
            // Row by row (ArgMax over the channels of NCHW: each step reads one contiguous plane
            // instead of one element per plane).
            // Indices as int32 beside the values (the same lane width: the compare-and-select
            // loop vectorizes), widened per row at the end.
            T* __restrict bv = bv_.data();
            int32_t* __restrict bi = bi_.data();
            const bool last = last_;
            for (int64_t o = 0; o < outer_; ++o) {
                const T* p = x + o * n_ * inner_;
                int64_t* yo = y + o * inner_;
                for (int64_t i = 0; i < inner_; ++i) {
                    bv[i] = p[i];
                    bi[i] = 0;
                }
                for (int64_t t = 1; t < n_; ++t) {
                    const T* __restrict r = p + t * inner_;
                    const int32_t ti = int32_t(t);
                    int64_t i0 = 0;
                    if constexpr (std::is_same_v<T, float>) {  // 4 lanes at a time (SSE2 build)
                        typedef float F4 __attribute__((vector_size(16)));
                        typedef int32_t I4 __attribute__((vector_size(16)));
                        const I4 lastm = I4{} - int32_t(last), tv = I4{} + ti;
                        for (; i0 + 4 <= inner_; i0 += 4) {
                            F4 v, b;
                            I4 bx;
                            std::memcpy(&v, r + i0, 16);
                            std::memcpy(&b, bv + i0, 16);
                            std::memcpy(&bx, bi + i0, 16);
                            const I4 bn = b != b, vn = v != v;
                            const I4 better = MAX ? (last ? v >= b : v > b) : (last ? v <= b : v < b);
                            const I4 tk = (bn & lastm & vn) | (~bn & (vn | better));
                            b = tk ? v : b;
                            bx = tk ? tv : bx;
                            std::memcpy(bv + i0, &b, 16);
                            std::memcpy(bi + i0, &bx, 16);
                        }
                    }
                    for (int64_t i = i0; i < inner_; ++i) {
                        const T v = r[i], b = bv[i];
                        const bool tk = take(b, v);
                        bv[i] = tk ? v : b;
                        bi[i] = tk ? ti : bi[i];
                    }
                }
                for (int64_t i = 0; i < inner_; ++i) yo[i] = bi[i];
            }
            return {};
        }
        for (int64_t o = 0; o < outer_; ++o) {
            for (int64_t i = 0; i < inner_; ++i) {
                const T* p = x + o * n_ * inner_ + i;
                int64_t best = 0;
                T bv = p[0];
                for (int64_t t = 1; t < n_; ++t) {
                    T v = p[t * inner_];
                    if (take(bv, v)) {
                        best = t;
                        bv = v;
                    }
                }
                y[o * inner_ + i] = best;
            }
        }
        return {};
    }

private:
    int64_t outer_, n_, inner_;
    bool last_;
    mutable std::vector<T> bv_;         // inner > 1: the best value so far per position and
    mutable std::vector<int32_t> bi_;   // its index along the axis (not reentrant)
};

template <bool MAX>
Status prep_arg(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input 0 (data) is missing");
    const DType t = ctx.in_dtype(0);
    if (!(dtype_is_float(t) || dtype_is_int(t)) || t == DType::kF16 || t == DType::kBF16)
        return ctx.fail_unsupported("dtype ", dtype_name(t), " is not supported");
    const Shape& in = ctx.in_shape(0);
    const int rank = ctx.in_rank(0);
    if (rank == 0) return ctx.fail("input must have rank >= 1, got a scalar");
    int64_t axis;
    if (!normalize_axis(ctx.attr_int("axis", 0), rank, &axis))
        return ctx.fail("axis ", ctx.attr_int("axis", 0), " is out of range for input rank ", rank);
    const int64_t keepdims = ctx.attr_int("keepdims", 1);
    if (keepdims != 0 && keepdims != 1) return ctx.fail("keepdims must be 0 or 1, got ", keepdims);
    const int64_t sel = ctx.attr_int("select_last_index", 0);
    if (sel != 0 && sel != 1) return ctx.fail("select_last_index must be 0 or 1, got ", sel);
    if (in[size_t(axis)] == 0 && shape_numel(in) == 0) {
        // Output is non-empty only if the other dims are non-zero: then there is no element to pick.
        int64_t others = 1;
        for (int d = 0; d < rank; ++d)
            if (d != axis) others *= in[size_t(d)];
        if (others != 0) return ctx.fail("cannot take the arg-extremum over axis ", axis, " of size 0");
    }
    Shape out = in;
    if (keepdims) out[size_t(axis)] = 1;
    else out.erase(out.begin() + axis);
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kI64, out));
    int64_t outer, n, inner;
    split_at(in, axis, &outer, &n, &inner);
    if (n == 0) outer = 0;  // nothing to do (output is empty, checked above)
    return visit_numeric(t, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<ArgKernel<T, MAX>>(outer, n, inner, sel != 0));
        return {};
    });
}

// ---------------------------------------------------------------- TopK

// Per slice, a heap of the best K indices (root = worst kept) is kept in the Indices output
// itself (strided by inner), then heap-sorted best first. Ties: lower index first; NaN counts as
// larger than any number. O(n log K), no scratch memory.
template <typename T>
class TopKKernel : public Kernel {
public:
    TopKKernel(int64_t outer, int64_t n, int64_t inner, int64_t k, bool largest)
        : outer_(outer), n_(n), inner_(inner), k_(k), largest_(largest) {
        // Contiguous slices and a large K (detection post-processing: 1000 of 4420 scores): select
        // with nth_element, then sort the K kept, O(n + K log K) with an index scratch of n, instead
        // of the heap's O(n log K) with its unpredictable sift branches (1000 of 4420: 92 -> 22 us).
        if (inner_ == 1 && k_ >= 32) sel_.resize(size_t(n_));
    }

    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        T* vals = static_cast<T*>(out[0]);
        int64_t* idx = static_cast<int64_t*>(out[1]);
        if (k_ == 0) return {};
        if (!sel_.empty()) {
            for (int64_t o = 0; o < outer_; ++o) {
                const T* xs = x + o * n_;
                auto better = [&](int64_t a, int64_t b) { return ahead(xs, 1, a, b); };
                int64_t* sel = sel_.data();
                for (int64_t t = 0; t < n_; ++t) sel[t] = t;
                std::nth_element(sel, sel + (k_ - 1), sel + n_, better);
                std::sort(sel, sel + k_, better);
                for (int64_t s = 0; s < k_; ++s) {
                    idx[o * k_ + s] = sel[s];
                    vals[o * k_ + s] = xs[sel[s]];
                }
            }
            return {};
        }
        const int64_t inner = inner_;
        for (int64_t o = 0; o < outer_; ++o) {
            for (int64_t i = 0; i < inner; ++i) {
                const T* xs = x + o * n_ * inner + i;
                int64_t* h = idx + o * k_ * inner + i;
                T* vs = vals + o * k_ * inner + i;
                // a ranks ahead of b (a, b: indices along the axis)
                auto better = [&](int64_t a, int64_t b) { return ahead(xs, inner, a, b); };
                auto at = [&](int64_t slot) -> int64_t& { return h[slot * inner]; };
                auto sift_down = [&](int64_t p, int64_t size) {
                    for (;;) {
                        int64_t c = 2 * p + 1;
                        if (c >= size) break;
                        if (c + 1 < size && better(at(c), at(c + 1))) ++c;  // the worse child
                        if (!better(at(p), at(c))) break;
                        std::swap(at(p), at(c));
                        p = c;
                    }
                };
                int64_t size = 0;
                for (int64_t t = 0; t < n_; ++t) {
                    if (size < k_) {
                        int64_t c = size++;
                        at(c) = t;
                        while (c > 0) {
                            int64_t p = (c - 1) / 2;
                            if (!better(at(p), at(c))) break;
                            std::swap(at(p), at(c));
                            c = p;
                        }
                    } else if (better(t, at(0))) {
                        at(0) = t;
                        sift_down(0, size);
                    }
                }
                for (int64_t end = size - 1; end > 0; --end) {
                    std::swap(at(0), at(end));
                    sift_down(0, end);
                }
                for (int64_t s = 0; s < k_; ++s) vs[s * inner] = xs[at(s) * inner];
            }
        }
        return {};
    }

private:
    // Whether index a along the axis ranks ahead of index b (elements `stride` apart from xs):
    // NaN counts as larger than any number, ties go to the lower index.
    bool ahead(const T* xs, int64_t stride, int64_t a, int64_t b) const {
        const T va = xs[a * stride], vb = xs[b * stride];
        const bool na = is_nan(va), nb = is_nan(vb);
        if (na || nb) {
            if (na && nb) return a < b;
            return largest_ ? na : nb;
        }
        if (va == vb) return a < b;
        return largest_ ? va > vb : va < vb;
    }

    int64_t outer_, n_, inner_, k_;
    bool largest_;
    mutable std::vector<int64_t> sel_;  // the selection's indices (inner == 1, K >= 32; not reentrant)
};

Status prep_TopK(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input 0 (X) is missing");
    const DType t = ctx.in_dtype(0);
    if (!(dtype_is_float(t) || dtype_is_int(t)) || t == DType::kF16 || t == DType::kBF16)
        return ctx.fail_unsupported("dtype ", dtype_name(t), " is not supported");
    if (!ctx.has_output(0) || !ctx.has_output(1))
        return ctx.fail("needs both outputs (Values and Indices)");
    const Shape& in = ctx.in_shape(0);
    const int rank = ctx.in_rank(0);
    if (rank == 0) return ctx.fail("input must have rank >= 1, got a scalar");
    int64_t axis;
    if (!normalize_axis(ctx.attr_int("axis", -1), rank, &axis))
        return ctx.fail("axis ", ctx.attr_int("axis", -1), " is out of range for input rank ", rank);
    int64_t k;
    if (ctx.opset() < 10) {
        if (!ctx.has_attr("k")) return ctx.fail("attribute 'k' is required before opset 10");
        if (ctx.has_input(1)) return ctx.fail("K as an input needs opset >= 10");
        k = ctx.attr_int("k", 0);
    } else {
        if (ctx.has_attr("k")) return ctx.fail("'k' is an input, not an attribute, since opset 10");
        if (!ctx.has_input(1)) return ctx.fail("input 1 (K) is missing");
        const Tensor* kt = ctx.in_const(1);
        if (!kt) return ctx.need_value(1);
        if (!scalar_int(*kt, &k))
            return ctx.fail("K must be a 1-element int64 tensor, got ", dtype_name(kt->dtype()), " of shape ",
                            shape_str(kt->shape()));
    }
    const int64_t n = in[size_t(axis)];
    if (k < 0 || k > n)
        return ctx.fail("K=", k, " is out of range for axis ", axis, " of size ", n);
    const int64_t largest = ctx.attr_int("largest", 1), sorted = ctx.attr_int("sorted", 1);
    if (ctx.opset() >= 11 && (largest < 0 || largest > 1 || sorted < 0 || sorted > 1))
        return ctx.fail("largest and sorted must be 0 or 1");
    // sorted=0 leaves the order unspecified: we always sort.
    Shape out = in;
    out[size_t(axis)] = k;
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, t, out));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(1, DType::kI64, out));
    int64_t outer, nn, inner;
    split_at(in, axis, &outer, &nn, &inner);
    return visit_numeric(t, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<TopKKernel<T>>(outer, n, inner, k, ctx.opset() < 11 || largest != 0));
        return {};
    });
}

// ---------------------------------------------------------------- CumSum

template <typename T>
class CumSumKernel : public Kernel {
public:
    CumSumKernel(int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse)
        : outer_(outer), n_(n), inner_(inner), exclusive_(exclusive), reverse_(reverse) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out[0]);
        for (int64_t o = 0; o < outer_; ++o) {
            for (int64_t i = 0; i < inner_; ++i) {
                const T* xs = x + o * n_ * inner_ + i;
                T* ys = y + o * n_ * inner_ + i;
                SumAcc<T> acc = 0;
                for (int64_t tt = 0; tt < n_; ++tt) {
                    const int64_t t = reverse_ ? n_ - 1 - tt : tt;
                    SumAcc<T> v = to_acc(xs[t * inner_]);
                    if (exclusive_) {
                        ys[t * inner_] = T(acc);
                        acc += v;
                    } else {
                        acc += v;
                        ys[t * inner_] = T(acc);
                    }
                }
            }
        }
        return {};
    }

private:
    int64_t outer_, n_, inner_;
    bool exclusive_, reverse_;
};

Status prep_CumSum(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input 0 (x) is missing");
    if (!ctx.has_input(1)) return ctx.fail("input 1 (axis) is missing");
    const DType t = ctx.in_dtype(0);
    if (!(dtype_is_float(t) || dtype_is_int(t)) || t == DType::kF16 || t == DType::kBF16)
        return ctx.fail_unsupported("dtype ", dtype_name(t), " is not supported");
    const Tensor* at = ctx.in_const(1);
    if (!at) return ctx.need_value(1);
    int64_t a;
    if (!scalar_int(*at, &a))
        return ctx.fail("axis must be an int32/int64 scalar, got ", dtype_name(at->dtype()), " of shape ",
                        shape_str(at->shape()));
    const Shape& in = ctx.in_shape(0);
    const int rank = ctx.in_rank(0);
    if (rank == 0) return ctx.fail("input must have rank >= 1, got a scalar");
    int64_t axis;
    if (!normalize_axis(a, rank, &axis)) return ctx.fail("axis ", a, " is out of range for input rank ", rank);
    const int64_t exclusive = ctx.attr_int("exclusive", 0), reverse = ctx.attr_int("reverse", 0);
    if (exclusive < 0 || exclusive > 1 || reverse < 0 || reverse > 1)
        return ctx.fail("exclusive and reverse must be 0 or 1");
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, t, in));
    int64_t outer, n, inner;
    split_at(in, axis, &outer, &n, &inner);
    return visit_numeric(t, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<CumSumKernel<T>>(outer, n, inner, exclusive != 0, reverse != 0));
        return {};
    });
}

// ---------------------------------------------------------------- Det

constexpr int64_t kMaxDetSize = 64;  // the LU scratch lives on the stack (32 KiB)

template <typename T>
class DetKernel : public Kernel {
public:
    DetKernel(int64_t batch, int64_t m) : batch_(batch), m_(m) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out[0]);
        const int64_t m = m_;
        double a[kMaxDetSize * kMaxDetSize];
        for (int64_t b = 0; b < batch_; ++b) {
            const T* src = x + b * m * m;
            for (int64_t i = 0; i < m * m; ++i) a[i] = double(src[i]);
            double det = 1;
            for (int64_t c = 0; c < m; ++c) {  // LU with partial pivoting
                int64_t piv = c;
                for (int64_t r = c + 1; r < m; ++r)
                    if (std::abs(a[r * m + c]) > std::abs(a[piv * m + c])) piv = r;
                if (a[piv * m + c] == 0) {
                    det = 0;
                    break;
                }
                if (piv != c) {
                    for (int64_t k = 0; k < m; ++k) std::swap(a[c * m + k], a[piv * m + k]);
                    det = -det;
                }
                const double d = a[c * m + c];
                det *= d;
                for (int64_t r = c + 1; r < m; ++r) {
                    const double f = a[r * m + c] / d;
                    if (f == 0) continue;
                    for (int64_t k = c + 1; k < m; ++k) a[r * m + k] -= f * a[c * m + k];
                }
            }
            y[b] = T(det);
        }
        return {};
    }

private:
    int64_t batch_, m_;
};

Status prep_Det(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kF32, DType::kF64}));
    const Shape& in = ctx.in_shape(0);
    const int rank = ctx.in_rank(0);
    if (rank < 2) return ctx.fail("input must have rank >= 2, got shape ", shape_str(in));
    const int64_t m = in[size_t(rank - 1)];
    if (in[size_t(rank - 2)] != m)
        return ctx.fail("input must be square matrices, got shape ", shape_str(in));
    if (m > kMaxDetSize)
        return ctx.fail_unsupported("matrices larger than ", kMaxDetSize, "x", kMaxDetSize,
                                    " are not supported, got ", m, "x", m);
    Shape out(in.begin(), in.end() - 2);
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));
    const int64_t batch = shape_numel(out);
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<DetKernel<T>>(batch, m));
        return {};
    });
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
    r.add("ReduceSum", prep_reduce<RedOp::kSum>);
    r.add("ReduceMean", prep_reduce<RedOp::kMean>);
    r.add("ReduceMax", prep_reduce<RedOp::kMax>);
    r.add("ReduceMin", prep_reduce<RedOp::kMin>);
    r.add("ReduceProd", prep_reduce<RedOp::kProd>);
    r.add("ReduceL1", prep_reduce<RedOp::kL1>);
    r.add("ReduceL2", prep_reduce<RedOp::kL2>);
    r.add("ReduceLogSum", prep_reduce<RedOp::kLogSum>);
    r.add("ReduceLogSumExp", prep_reduce<RedOp::kLogSumExp>);
    r.add("ReduceSumSquare", prep_reduce<RedOp::kSumSquare>);
    r.add("ArgMax", prep_arg<true>);
    r.add("ArgMin", prep_arg<false>);
    r.add("TopK", prep_TopK);
    r.add("CumSum", prep_CumSum);
    r.add("Det", prep_Det);
}

}  // namespace jiffy
