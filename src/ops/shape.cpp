// Shape and data-movement ops: Constant, Shape, Size, Identity, Reshape, Flatten, Squeeze,
// Unsqueeze, Transpose, Concat, Split, Slice, Gather, GatherElements, GatherND, Scatter,
// ScatterElements, ScatterND, Pad, Expand, Tile, ConstantOfShape, Range, OneHot, Trilu,
// DepthToSpace, SpaceToDepth, EyeLike, ReverseSequence, Compress, NonZero, Unique.
//
// Most of these only move bytes, so kernels are templated on the element *size* (uint8/16/32/64
// carry any dtype's bits) rather than on the dtype. Permutations, slices, broadcasts, tiles and
// pads all reduce to one "table gather": output index (o_0..o_r) reads input offset
// sum_d table_d[o_d], precomputed per dimension at prepare (a pad sentinel marks constant fill).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "kernels/conv_nhwc.h"
#include "kernels/cpu.h"
#include "ops/util.h"
#include "runtime/plan.h"
#include "runtime/threadpool.h"

namespace jiffy {
namespace {

// ---------------------------------------------------------------- helpers

// Calls f(TypeTag<U>{}) with an unsigned integer type of `bytes` bytes.
template <typename F>
Status visit_size(size_t bytes, F&& f) {
    switch (bytes) {
        case 1: return f(TypeTag<uint8_t>{});
        case 2: return f(TypeTag<uint16_t>{});
        case 4: return f(TypeTag<uint32_t>{});
        case 8: return f(TypeTag<uint64_t>{});
        default: return unsupported("element size ", bytes, " is not supported here");
    }
}

// Input i must exist and hold a dtype Jiffy can store.
Status check_data(OpContext& ctx, int i) {
    if (!ctx.has_input(i)) return ctx.fail("input ", i, " is missing");
    if (dtype_size(ctx.in_dtype(i)) == 0)
        return ctx.fail_unsupported("input ", i, " has dtype ", dtype_name(ctx.in_dtype(i)),
                                    ", which is not supported");
    return {};
}

// Value of constant integer input i (a 1-D or scalar tensor), or need_value.
Status const_ints(OpContext& ctx, int i, const char* what, std::vector<int64_t>* out) {
    const Tensor* t = ctx.in_const(i);
    if (!t) return ctx.need_value(i);
    if (!dtype_is_int(t->dtype()))
        return ctx.fail(what, " (input ", i, ") must be an integer tensor, got ", dtype_name(t->dtype()));
    if (t->rank() > 1)
        return ctx.fail(what, " (input ", i, ") must be 1-D, got shape ", shape_str(t->shape()));
    *out = t->to_i64_vector();
    return {};
}

// Normalizes axes into [0, rank); fails on out-of-range or repeated axes.
Status norm_axes(OpContext& ctx, const std::vector<int64_t>& axes, int64_t rank, const char* what,
                 std::vector<int64_t>* out) {
    out->clear();
    for (int64_t a : axes) {
        int64_t n;
        if (!normalize_axis(a, rank, &n))
            return ctx.fail(what, " ", a, " is out of range for rank ", rank);
        if (std::find(out->begin(), out->end(), n) != out->end())
            return ctx.fail(what, " ", a, " is repeated");
        out->push_back(n);
    }
    return {};
}

Status norm_axis(OpContext& ctx, int64_t axis, int64_t rank, int64_t* out) {
    if (!normalize_axis(axis, rank, out))
        return ctx.fail("axis ", axis, " is out of range for rank ", rank, " (expected [", -rank,
                        ", ", rank, "))");
    return {};
}

// a * b, false on overflow.
bool mul_ok(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

int64_t prod(const Shape& s, size_t begin, size_t end) {
    int64_t p = 1;
    for (size_t i = begin; i < end && i < s.size(); ++i) p *= s[i];
    return p;
}

std::shared_ptr<Tensor> make_i64(Shape shape, const std::vector<int64_t>& v) {
    auto t = std::make_shared<Tensor>(DType::kI64, std::move(shape));
    for (size_t i = 0; i < v.size(); ++i) t->as<int64_t>()[i] = v[i];
    return t;
}

// Fails when a compile-time output of n elements of dtype t exceeds the memory limit.
Status check_const_size(OpContext& ctx, int64_t n, DType t) {
    if (n < 0 || uint64_t(n) * dtype_size(t) > ctx.options().max_bytes)
        return ctx.fail("output of ", n, " elements is over the memory limit");
    return {};
}

// ---------------------------------------------------------------- table gather

// Marks a padded position in a table; the sum of any table entries that includes one is
// negative (valid offsets are far below 2^56 and ranks are at most 2 * kMaxRank).
constexpr int64_t kPad = -(int64_t(1) << 56);
constexpr int kMaxLoop = 2 * kMaxRank;

struct Tables {
    Shape shape;                             // loop shape (the output, possibly split in more dims)
    std::vector<std::vector<int64_t>> t;     // per loop dim: input element offset of each index
};

// Rows of at most this many elements at one input stride take copy_narrow_rows.
constexpr int64_t kNarrowRow = 16;

// Rows [r0, r1) of L (a compile-time constant) elements, row r reading x[r * step ...].
template <typename T, int L>
void copy_rows_fixed(const T* __restrict x, T* __restrict y, int64_t step, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
#pragma GCC unroll 16
        for (int j = 0; j < L; ++j) y[r * L + j] = x[r * step + j];
}

// y[e] for e in [e0, e1) of rows of L elements: row r reads x[r * step ...]. Plain loops (GCC
// would otherwise turn each row's copy into a memcpy call); whole rows of 1-8 elements with the
// row length known at compile time.
template <typename T>
__attribute__((optimize("no-tree-loop-distribute-patterns"))) void copy_narrow_rows(const T* __restrict x,
                                                                                    T* __restrict y,
                                                                                    int64_t L, int64_t step,
                                                                                    int64_t e0, int64_t e1) {
    auto part = [&](int64_t r, int64_t c0, int64_t c1) {
        for (int64_t j = c0; j < c1; ++j) y[r * L + j] = x[r * step + j];
    };
    int64_t r0 = e0 / L;
    const int64_t r1 = e1 / L;
    if (e0 > r0 * L) {  // a cut first row
        part(r0, e0 - r0 * L, std::min(L, e1 - r0 * L));
        ++r0;
    }
    if (r1 > r0) {
        // Whole rows: a compile-time length for 1 to 8 elements (as nhwc_dot_m's output counts).
        const bool fixed = [&]<int... I>(std::integer_sequence<int, I...>) {
            return ((L == I + 1 ? (copy_rows_fixed<T, I + 1>(x, y, step, r0, r1), true) : false) || ...);
        }
        (std::make_integer_sequence<int, 8>{});
        if (!fixed)
            for (int64_t r = r0; r < r1; ++r) part(r, 0, L);
    }
    if (r1 >= r0 && e1 > r1 * L) part(r1, 0, e1 - r1 * L);  // a cut last row
}

template <typename T>
class TableGatherKernel : public Kernel {
public:
    // pad_input: input index holding the pad value at run time (-1: use pad_value).
    TableGatherKernel(const Tables& tb, T pad_value, int pad_input)
        : shape_(tb.shape), pad_(pad_value), pad_input_(pad_input) {
        if (shape_.empty()) shape_ = {1};
        std::vector<std::vector<int64_t>> t = tb.t;
        if (t.empty()) t.assign(shape_.size(), std::vector<int64_t>(1, 0));
        coalesce_rows(shape_, t);
        for (size_t d = 0; d < shape_.size(); ++d) {
            start_.push_back(int64_t(table_.size()));
            table_.insert(table_.end(), t[d].begin(), t[d].end());
        }
        n_ = shape_numel(shape_);
        const size_t last = shape_.size() - 1;
        const int64_t* tl = table_.data() + start_[last];
        // A row of the last dim that is lead_ pad values, then mid_ contiguous elements from
        // tl[lead_], then pad values (Pad's innermost dim: a channels-last channel pad, a spatial
        // pad of W) is copied as one memcpy between the fills; a contiguous row is the case
        // lead_ = 0, mid_ = the row (Slice, Concat parts, ...).
        const int64_t L = shape_[last];
        int64_t a = 0;
        while (a < L && tl[a] < 0) ++a;
        int64_t m = 0;
        while (a + m < L && tl[a + m] >= 0 && tl[a + m] == tl[a] + m) ++m;
        bool rest_pad = true;
        for (int64_t j = a + m; j < L; ++j) rest_pad = rest_pad && tl[j] < 0;
        if (m > 0 && rest_pad) lead_ = a, mid_ = m;
        const bool contig = lead_ == 0 && mid_ == L;
        // A transpose of the last two loop dims (e.g. Transpose perm 0,2,3,1 of attention keys):
        // the last dim strided by sa_, the one before it contiguous, no padding anywhere. Then
        // run() copies tiles of kTile rows: each column step reads kTile neighbouring elements.
        if (!contig && shape_.size() >= 2 && shape_[last] > 1 && shape_[last - 1] > 1) {
            const int64_t* t2 = table_.data() + start_[last - 1];
            sa_ = tl[1] - tl[0];
            tile_ = sa_ > 0;
            for (int64_t j = 0; j < shape_[last] && tile_; ++j) tile_ = tl[j] == tl[0] + j * sa_;
            for (int64_t i = 0; i < shape_[last - 1] && tile_; ++i) tile_ = t2[i] == t2[0] + i;
            for (int64_t v : table_) tile_ = tile_ && v >= 0;
        }
        // Short contiguous rows at one stride (a slice of the last axis of [N, C]: a detector's
        // boxes and scores, rows of 2 or 4 floats): the outer dims, pad-free, step the input by
        // row_step_ per output row; run() then copies them in a plain loop (a memcpy call per row
        // of 8 bytes cost ~5 ns: 4740 rows, 23 us).
        bool strided = contig && L <= kNarrowRow && shape_.size() >= 2;
        int64_t step = 0, span = 1;
        for (int d = int(last) - 1; d >= 0 && strided; --d) {
            const int64_t n = shape_[size_t(d)];
            const int64_t* td = table_.data() + start_[size_t(d)];
            strided = td[0] >= 0;
            if (n == 1 || !strided) continue;
            const int64_t sd = td[1] - td[0];
            if (step == 0) step = sd;
            strided = sd == step * span && sd > 0;
            for (int64_t i = 0; i < n && strided; ++i) strided = td[i] == td[0] + i * sd;
            span *= n;
        }
        if (strided && step > 0) {
            row_step_ = step;
            row0_ = tl[0];
            for (size_t d = 0; d < last; ++d) row0_ += table_[size_t(start_[d])];
        }
    }
    // Splits the output (not the tiled path) across `pool` when chunks > 1: balanced element
    // ranges, 64-byte aligned, rows cut where a range ends. At two threads a shuffle or slice of
    // what two threads just wrote otherwise reads half of it from the other core's cache on the
    // caller alone.
    void set_parallel(ThreadPool* pool, int chunks) {
        if (!pool || chunks < 2 || chunks != pool->threads() || tile_) return;
        pool_ = pool;
        bal_ = std::make_unique<Balance>(chunks);
    }
    Status run(const void* const* in, void* const* out) const override {
        if (n_ <= 0) return {};
        const T* x = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out[0]);
        T pv = pad_;
        if (pad_input_ >= 0 && in[pad_input_]) pv = *static_cast<const T*>(in[pad_input_]);
        if (tile_) return run_tiled(x, y);
        for_balanced_or_caller(pool_, n_, std::max<int64_t>(1, 64 / int64_t(sizeof(T))), bal_.get(),
                               [&](int, int64_t e0, int64_t e1) { run_range(x, y, pv, e0, e1); });
        return {};
    }
    std::string describe() const override {
        std::string s;
        if (mid_ > 1) s.append("rows of ").append(std::to_string(mid_));
        if (row_step_ > 0) s.append(" at stride ").append(std::to_string(row_step_));
        if (pool_)
            s.append(s.empty() ? "x" : " x")
                .append(std::to_string(pool_->threads()))
                .append(" threads by elements");
        return s;
    }

private:
    // Merges the last loop dim into the one before while both read without pads and the merged
    // row stays contiguous in the input (a transpose that keeps H, W in place: rows of H x W, not
    // of W; a slice of whole planes), so run() copies longer rows. Merged rows stay under 64 Ki
    // elements (the table holds one offset per element of the row).
    static void coalesce_rows(Shape& shape, std::vector<std::vector<int64_t>>& t) {
        auto contiguous = [](const std::vector<int64_t>& v, int64_t step) {
            for (size_t i = 0; i < v.size(); ++i)
                if (v[i] < 0 || v[i] != v[0] + int64_t(i) * step) return false;
            return true;
        };
        while (shape.size() >= 2) {
            const size_t l = shape.size() - 1;
            const int64_t L = shape[l], P = shape[l - 1];
            if (L < 1 || P < 1 || L * P > (int64_t(1) << 16)) break;
            if (!contiguous(t[l], 1) || !contiguous(t[l - 1], L)) break;
            std::vector<int64_t> m(size_t(L * P));
            for (int64_t k = 0; k < L * P; ++k) m[size_t(k)] = t[l - 1][0] + t[l][0] + k;
            t.pop_back();
            t.back() = std::move(m);
            shape.pop_back();
            shape.back() = L * P;
        }
    }

    // Output elements [e0, e1): whole rows of the last loop dim, the first and last possibly cut.
    void run_range(const T* x, T* y, T pv, int64_t e0, int64_t e1) const {
        if (e1 <= e0) return;
        if (row_step_ > 0) return copy_narrow_rows(x + row0_, y, shape_.back(), row_step_, e0, e1);
        const int r = int(shape_.size());
        const int last = r - 1;
        const int64_t L = shape_[size_t(last)];
        const int64_t* tl = table_.data() + start_[size_t(last)];
        const int64_t r0 = e0 / L, r1 = (e1 - 1) / L + 1;
        int64_t idx[kMaxLoop] = {0};
        int64_t base = 0;
        for (int64_t q = r0, d = last - 1; d >= 0; --d) {
            idx[d] = q % shape_[size_t(d)];
            q /= shape_[size_t(d)];
        }
        for (int d = 0; d < last; ++d) base += table_[size_t(start_[size_t(d)] + idx[d])];
        y += r0 * L;
        for (int64_t row = r0; row < r1; ++row) {
            const int64_t c0 = row == r0 ? e0 - r0 * L : 0, c1 = row == r1 - 1 ? e1 - row * L : L;
            if (base < 0) {
                for (int64_t j = c0; j < c1; ++j) y[j] = pv;
            } else if (mid_ > 0) {
                const int64_t m0 = std::max(c0, lead_), m1 = std::min(c1, lead_ + mid_);
                for (int64_t j = c0; j < std::min(c1, lead_); ++j) y[j] = pv;
                if (m1 > m0)
                    std::memcpy(y + m0, x + base + tl[lead_] + (m0 - lead_), size_t(m1 - m0) * sizeof(T));
                for (int64_t j = std::max(c0, lead_ + mid_); j < c1; ++j) y[j] = pv;
            } else {
                for (int64_t j = c0; j < c1; ++j) {
                    int64_t off = base + tl[j];
                    y[j] = off < 0 ? pv : x[off];
                }
            }
            y += L;
            for (int d = last - 1; d >= 0; --d) {
                const int64_t* td = table_.data() + start_[size_t(d)];
                base -= td[idx[d]];
                if (++idx[d] < shape_[size_t(d)]) {
                    base += td[idx[d]];
                    break;
                }
                idx[d] = 0;
                base += td[0];
            }
        }
    }

    // y[o][i][j] = x[base(o) + i + j * sa_] over the last two loop dims (R x L) of every outer index o.
    Status run_tiled(const T* x, T* y) const {
        constexpr int64_t kTile = 8;
        const int r = int(shape_.size());
        const int64_t R = shape_[size_t(r - 2)], L = shape_[size_t(r - 1)], sa = sa_;
        const int64_t x0 = table_[size_t(start_[size_t(r - 2)])] + table_[size_t(start_[size_t(r - 1)])];
        int64_t idx[kMaxLoop] = {0};
        int64_t base = 0;
        for (int d = 0; d < r - 2; ++d) base += table_[size_t(start_[size_t(d)])];
        const int64_t outer = n_ / (R * L);
        for (int64_t o = 0; o < outer; ++o) {
            const T* xb = x + base + x0;
            int64_t i = 0;
            for (; i + kTile <= R; i += kTile)
                for (int64_t j = 0; j < L; ++j) {
                    const T* xs = xb + i + j * sa;
                    T* ys = y + i * L + j;
                    for (int64_t ii = 0; ii < kTile; ++ii) ys[ii * L] = xs[ii];
                }
            for (; i < R; ++i)
                for (int64_t j = 0; j < L; ++j) y[i * L + j] = xb[i + j * sa];
            y += R * L;
            for (int d = r - 3; d >= 0; --d) {
                const int64_t* td = table_.data() + start_[size_t(d)];
                base -= td[idx[d]];
                if (++idx[d] < shape_[size_t(d)]) {
                    base += td[idx[d]];
                    break;
                }
                idx[d] = 0;
                base += td[0];
            }
        }
        return {};
    }

    Shape shape_;
    std::vector<int64_t> table_, start_;
    T pad_;
    int pad_input_;
    int64_t n_ = 0;
    bool tile_ = false;
    int64_t sa_ = 0;
    int64_t lead_ = 0, mid_ = 0;  // a row of lead_ pads, mid_ contiguous elements, then pads (0: gather)
    ThreadPool* pool_ = nullptr;
    std::unique_ptr<Balance> bal_;
    int64_t row_step_ = 0, row0_ = 0;  // short rows at one stride (0: not that case)
};

// Declares output 0 as (dtype of input 0, out). When it has no elements, sets a no-op kernel and
// *done = true: the caller then must not build tables (a zero-element shape may have huge dims).
Status start_table(OpContext& ctx, const Shape& out, bool* done) {
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));
    *done = shape_numel(out) == 0;
    if (*done) ctx.set_kernel(std::make_unique<CopyKernel>(0));
    return {};
}

// Sets the table-gather kernel for output 0 (declared by start_table).
// pad_bytes: the pad value's bits (for Pad), pad_input: input holding it at run time.
Status make_table_kernel(OpContext& ctx, const Tables& tb, uint64_t pad_bytes = 0, int pad_input = -1) {
    if (tb.shape.size() > size_t(kMaxLoop)) return ctx.fail("rank too large");
    return visit_size(dtype_size(ctx.in_dtype(0)), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        T pv;
        std::memcpy(&pv, &pad_bytes, sizeof(T));
        auto k = std::make_unique<TableGatherKernel<T>>(tb, pv, pad_input);
        // Split from ~64 KiB of output (8 x bytes against parallel_min_flops; 2 x and 32 x measured:
        // a ShuffleNet's 182 KB slices of whole planes split ran 0.96x the model at two threads).
        k->set_parallel(ctx.options().pool.get(),
                        parallel_chunks(ctx.options(), 8 * shape_numel(tb.shape) * int64_t(sizeof(T))));
        ctx.set_kernel(std::move(k));
        return {};
    });
}

// Output is input 0 permuted: out dim d is input dim perm[d] (input viewed with shape `in`).
Status make_permute(OpContext& ctx, const Shape& in, const std::vector<int64_t>& perm,
                    const Shape& out_shape) {
    bool done;
    JIFFY_RETURN_IF_ERROR(start_table(ctx, out_shape, &done));
    if (done) return {};
    Shape st = strides_of(in);
    Tables tb;
    for (size_t d = 0; d < perm.size(); ++d) {
        int64_t n = in[size_t(perm[d])];
        tb.shape.push_back(n);
        std::vector<int64_t> t(size_t(std::max<int64_t>(n, 0)));
        for (int64_t o = 0; o < n; ++o) t[size_t(o)] = o * st[size_t(perm[d])];
        tb.t.push_back(std::move(t));
    }
    return make_table_kernel(ctx, tb);
}

// ---------------------------------------------------------------- Constant, Shape, Size

Status prep_Constant(OpContext& ctx) {
    if (ctx.num_outputs() < 1) return ctx.fail("has no output");
    if (ctx.has_attr("sparse_value")) return ctx.fail_unsupported("sparse_value is not supported");
    if (ctx.has_attr("value_string") || ctx.has_attr("value_strings"))
        return ctx.fail_unsupported("string constants are not supported");
    int given = 0;
    for (const char* a : {"value", "value_float", "value_floats", "value_int", "value_ints"})
        given += ctx.has_attr(a) ? 1 : 0;
    if (given != 1) return ctx.fail("needs exactly one value attribute, got ", given);
    std::shared_ptr<const Tensor> t;
    if (const Attr* a = ctx.attr("value")) {
        if (!a->t) return ctx.fail("attribute 'value' is not a tensor");
        if (dtype_size(a->t->dtype()) == 0)
            return ctx.fail_unsupported("constant of dtype ", dtype_name(a->t->dtype()), " is not supported");
        t = a->t;
    } else if (ctx.has_attr("value_float")) {
        auto v = std::make_shared<Tensor>(DType::kF32, Shape{});
        v->as<float>()[0] = ctx.attr_float("value_float", 0);
        t = v;
    } else if (ctx.has_attr("value_floats")) {
        std::vector<float> f = ctx.attr_floats("value_floats");
        auto v = std::make_shared<Tensor>(DType::kF32, Shape{int64_t(f.size())});
        for (size_t i = 0; i < f.size(); ++i) v->as<float>()[i] = f[i];
        t = v;
    } else if (ctx.has_attr("value_int")) {
        t = make_i64(Shape{}, {ctx.attr_int("value_int", 0)});
    } else {
        std::vector<int64_t> v = ctx.attr_ints("value_ints");
        t = make_i64(Shape{int64_t(v.size())}, v);
    }
    ctx.set_output_const(0, t);
    return {};
}

Status prep_Shape(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input 0 is missing");
    const Shape& s = ctx.in_shape(0);
    int64_t r = int64_t(s.size());
    int64_t start = ctx.attr_int("start", 0), end = ctx.attr_int("end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = std::clamp<int64_t>(start, 0, r);
    end = std::clamp<int64_t>(end, 0, r);
    std::vector<int64_t> v;
    for (int64_t i = start; i < end; ++i) v.push_back(s[size_t(i)]);
    ctx.set_output_const(0, make_i64(Shape{int64_t(v.size())}, v));
    return {};
}

Status prep_Size(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input 0 is missing");
    ctx.set_output_const(0, make_i64(Shape{}, {shape_numel(ctx.in_shape(0))}));
    return {};
}

// ---------------------------------------------------------------- reshaping copies

Status copy_as(OpContext& ctx, const Shape& out) {
    if (shape_numel(out) != shape_numel(ctx.in_shape(0)))
        return ctx.fail("internal: element count mismatch");
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));
    ctx.set_kernel(std::make_unique<CopyKernel>(size_t(shape_numel(out)) * dtype_size(ctx.in_dtype(0))));
    return {};
}

Status prep_Identity(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    return copy_as(ctx, ctx.in_shape(0));
}

Status prep_Reshape(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    std::vector<int64_t> spec;
    if (ctx.opset() < 5) {  // Reshape-1: shape attribute
        if (!ctx.has_attr("shape")) return ctx.fail("attribute 'shape' is missing");
        spec = ctx.attr_ints("shape");
    } else {
        if (!ctx.has_input(1)) return ctx.fail("input 1 (shape) is missing");
        JIFFY_RETURN_IF_ERROR(const_ints(ctx, 1, "shape", &spec));
    }
    const Shape& in = ctx.in_shape(0);
    bool allowzero = ctx.attr_int("allowzero", 0) != 0;
    Shape out(spec.size());
    int infer = -1;
    bool has_zero = false;
    for (size_t i = 0; i < spec.size(); ++i) {
        int64_t d = spec[i];
        if (d == -1) {
            if (infer >= 0) return ctx.fail("shape ", shape_str(spec), " has more than one -1");
            infer = int(i);
            out[i] = 1;
        } else if (d < -1) {
            return ctx.fail("shape ", shape_str(spec), " has invalid dim ", d);
        } else if (d == 0 && !allowzero) {
            if (i >= in.size())
                return ctx.fail("shape ", shape_str(spec), ": dim ", i, " is 0 (copy) but the input ",
                                shape_str(in), " has rank ", in.size());
            out[i] = in[i];
        } else {
            if (d == 0) has_zero = true;
            out[i] = d;
        }
    }
    if (infer >= 0 && has_zero)
        return ctx.fail("shape ", shape_str(spec), " has both -1 and 0 with allowzero=1");
    int64_t n = shape_numel(in);
    if (infer >= 0) {
        int64_t rest = shape_numel(out);
        if (rest <= 0)
            return ctx.fail("cannot infer the -1 dim of shape ", shape_str(spec), " for input ",
                            shape_str(in), " (other dims have 0 elements)");
        if (n % rest != 0)
            return ctx.fail("cannot reshape input ", shape_str(in), " (", n, " elements) to ",
                            shape_str(spec));
        out[size_t(infer)] = n / rest;
    }
    if (shape_numel(out) != n)
        return ctx.fail("cannot reshape input ", shape_str(in), " (", n, " elements) to ",
                        shape_str(out), " (", shape_numel(out), " elements)");
    return copy_as(ctx, out);
}

Status prep_Flatten(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    const Shape& in = ctx.in_shape(0);
    int64_t r = int64_t(in.size());
    int64_t axis = ctx.attr_int("axis", 1);
    if (axis < -r || axis > r)
        return ctx.fail("axis ", axis, " is out of range for rank ", r, " (expected [", -r, ", ", r, "])");
    if (axis < 0) axis += r;
    return copy_as(ctx, Shape{prod(in, 0, size_t(axis)), prod(in, size_t(axis), in.size())});
}

Status prep_Squeeze(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    const Shape& in = ctx.in_shape(0);
    std::vector<int64_t> axes;
    bool given = false;
    if (ctx.opset() >= 13) {
        if (ctx.has_input(1)) JIFFY_RETURN_IF_ERROR(const_ints(ctx, 1, "axes", &axes));
    } else {
        axes = ctx.attr_ints("axes");
    }
    given = !axes.empty();  // no (or empty) axes: squeeze every axis of size 1
    std::vector<int64_t> ax;
    JIFFY_RETURN_IF_ERROR(norm_axes(ctx, axes, int64_t(in.size()), "axis", &ax));
    Shape out;
    for (size_t d = 0; d < in.size(); ++d) {
        bool sq = given ? std::find(ax.begin(), ax.end(), int64_t(d)) != ax.end() : in[d] == 1;
        if (sq && in[d] != 1)
            return ctx.fail("cannot squeeze axis ", d, " of size ", in[d], " (input ", shape_str(in), ")");
        if (!sq) out.push_back(in[d]);
    }
    return copy_as(ctx, out);
}

Status prep_Unsqueeze(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    const Shape& in = ctx.in_shape(0);
    std::vector<int64_t> axes;
    if (ctx.opset() >= 13) {
        if (!ctx.has_input(1)) return ctx.fail("input 1 (axes) is missing");
        JIFFY_RETURN_IF_ERROR(const_ints(ctx, 1, "axes", &axes));
    } else {
        if (!ctx.has_attr("axes")) return ctx.fail("attribute 'axes' is missing");
        axes = ctx.attr_ints("axes");
    }
    int64_t r = int64_t(in.size() + axes.size());
    std::vector<int64_t> ax;
    JIFFY_RETURN_IF_ERROR(norm_axes(ctx, axes, r, "axis", &ax));
    Shape out;
    size_t k = 0;
    for (int64_t d = 0; d < r; ++d) {
        if (std::find(ax.begin(), ax.end(), d) != ax.end()) out.push_back(1);
        else out.push_back(in[k++]);
    }
    return copy_as(ctx, out);
}

// ---------------------------------------------------------------- Transpose

class Transpose2dKernel : public Kernel {
public:
    // pool (may be null): large transposes split along their longer axis into `chunks` parts, so
    // that each thread reads the pixels it (or its conv) wrote: a serial transpose of what two
    // threads just wrote waits on the other core's cache (face detector, 1.2 MB: ~220 against ~5 us).
    Transpose2dKernel(int64_t batch, int64_t rows, int64_t cols, ThreadPool* pool, int chunks)
        : batch_(batch), rows_(rows), cols_(cols), pool_(chunks > 1 ? pool : nullptr), chunks_(chunks),
          isa_(kernels::active_isa()) {}
    Status run(const void* const* in, void* const* out) const override {
        if (!pool_) {
            kernels::transpose32(isa_, in[0], out[0], batch_, rows_, cols_);
            return {};
        }
        const bool by_rows = rows_ >= cols_;
        for (int64_t b = 0; b < batch_; ++b) {
            const float* x = static_cast<const float*>(in[0]) + b * rows_ * cols_;
            float* y = static_cast<float*>(out[0]) + b * rows_ * cols_;
            pool_->parallel_for(chunks_, [&](int i) {
                int64_t b0, b1;
                chunk_range(by_rows ? rows_ : cols_, chunks_, i, 16, &b0, &b1);
                if (by_rows) kernels::transpose32(isa_, x, y, rows_, cols_, b0, b1, 0, cols_);
                else kernels::transpose32(isa_, x, y, rows_, cols_, 0, rows_, b0, b1);
            });
        }
        return {};
    }
    std::string describe() const override {
        return std::string("transpose_2d ") + kernels::isa_name(isa_) + (pool_ ? " threads" : "");
    }

private:
    int64_t batch_, rows_, cols_;
    ThreadPool* pool_;
    int chunks_;
    kernels::Isa isa_;
};

Status prep_Transpose(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    const Shape& in = ctx.in_shape(0);
    const int64_t r = int64_t(in.size());
    std::vector<int64_t> perm = ctx.attr_ints("perm");
    if (!ctx.has_attr("perm"))
        for (int64_t d = r - 1; d >= 0; --d) perm.push_back(d);
    if (int64_t(perm.size()) != r)
        return ctx.fail("perm has ", perm.size(), " entries but the input ", shape_str(in), " has rank ", r);
    std::vector<int64_t> p;
    JIFFY_RETURN_IF_ERROR(norm_axes(ctx, perm, r, "perm entry", &p));
    Shape out;
    for (int64_t a : p) out.push_back(in[size_t(a)]);
    // A batched 2-D transpose (an identity prefix, then the rest rotated: NCHW <-> NHWC, the
    // layout_nhwc pass's conversions) of 4-byte elements: VL x VL blocks in registers.
    size_t k = 0;
    while (k < p.size() && p[k] == int64_t(k)) ++k;
    if (k + 1 < p.size() && dtype_size(ctx.in_dtype(0)) == 4) {
        const int64_t m = p[k];
        bool rot = m > int64_t(k);
        for (size_t d = k; d < p.size() && rot; ++d) {
            const int64_t want = d < k + (p.size() - size_t(m)) ? m + int64_t(d - k) : int64_t(k) + int64_t(d - k) - (int64_t(p.size()) - m);
            rot = p[d] == want;
        }
        if (rot) {
            const int64_t batch = prod(in, 0, k), rows = prod(in, k, size_t(m)), cols = prod(in, size_t(m), in.size());
            JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));
            const int64_t n = batch * rows * cols;
            ctx.set_kernel(std::make_unique<Transpose2dKernel>(batch, rows, cols, ctx.options().pool.get(),
                                                               parallel_chunks(ctx.options(), 64 * n)));
            return {};
        }
    }
    return make_permute(ctx, in, p, out);
}

// ---------------------------------------------------------------- Concat, Split

// Concat copies each input's block per outer index into its place. With a pool, outputs from
// ~256 KiB split into balanced byte ranges of the output (64-byte aligned), each part copying the
// pieces of its range: at two threads a DenseNet block's Concat (up to 3.2 MB, its inputs written
// by split convs, half in the other core's cache) otherwise ran on the caller alone.
class ConcatKernel : public Kernel {
public:
    ConcatKernel(int64_t outer, std::vector<size_t> block) : outer_(outer), block_(std::move(block)) {
        for (size_t b : block_) row_ += b;
    }
    void set_parallel(ThreadPool* pool, int chunks) {
        if (!pool || chunks < 2 || chunks != pool->threads() || row_ * size_t(outer_) < 4096 * size_t(chunks)) return;
        pool_ = pool;
        bal_ = std::make_unique<Balance>(chunks);
    }
    Status run(const void* const* in, void* const* out) const override {
        uint8_t* y = static_cast<uint8_t*>(out[0]);
        const int64_t total = int64_t(row_) * outer_;
        for_balanced_or_caller(pool_, total, 64, bal_.get(), [&](int, int64_t lo, int64_t hi) { copy(in, y, lo, hi); });
        return {};
    }
    std::string describe() const override {
        return pool_ ? "x" + std::to_string(pool_->threads()) + " threads by bytes" : std::string();
    }

private:
    // Output bytes [lo, hi): the parts of the pieces (input i's block of outer index o) inside.
    void copy(const void* const* in, uint8_t* y, int64_t lo, int64_t hi) const {
        if (hi <= lo || row_ == 0) return;
        int64_t at = lo / int64_t(row_) * int64_t(row_);
        for (int64_t o = at / int64_t(row_); o < outer_ && at < hi; ++o)
            for (size_t i = 0; i < block_.size() && at < hi; ++i) {
                const int64_t b = int64_t(block_[i]), s = std::max(lo, at), e = std::min(hi, at + b);
                if (e > s)
                    std::memcpy(y + s, static_cast<const uint8_t*>(in[i]) + o * b + (s - at), size_t(e - s));
                at += b;
            }
    }

    int64_t outer_;
    std::vector<size_t> block_;  // bytes per outer index of each input
    size_t row_ = 0;             // bytes per outer index of the output
    ThreadPool* pool_ = nullptr;
    std::unique_ptr<Balance> bal_;
};

Status prep_Concat(OpContext& ctx) {
    if (ctx.num_inputs() < 1) return ctx.fail("needs at least one input");
    // Concat-1 defaults axis to 1; from opset 4 it is required.
    if (!ctx.has_attr("axis") && ctx.opset() >= 4) return ctx.fail("attribute 'axis' is missing");
    for (int i = 0; i < ctx.num_inputs(); ++i) JIFFY_RETURN_IF_ERROR(check_data(ctx, i));
    const Shape& s0 = ctx.in_shape(0);
    int64_t axis;
    JIFFY_RETURN_IF_ERROR(norm_axis(ctx, ctx.attr_int("axis", 1), int64_t(s0.size()), &axis));
    Shape out = s0;
    out[size_t(axis)] = 0;
    const size_t es = dtype_size(ctx.in_dtype(0));
    const int64_t inner = prod(s0, size_t(axis) + 1, s0.size());
    std::vector<size_t> block;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
        const Shape& s = ctx.in_shape(i);
        if (ctx.in_dtype(i) != ctx.in_dtype(0))
            return ctx.fail("input ", i, " has dtype ", dtype_name(ctx.in_dtype(i)), " but input 0 has ",
                            dtype_name(ctx.in_dtype(0)));
        bool ok = s.size() == s0.size();
        for (size_t d = 0; ok && d < s.size(); ++d)
            if (int64_t(d) != axis && s[d] != s0[d]) ok = false;
        if (!ok)
            return ctx.fail("input ", i, " has shape ", shape_str(s), ", incompatible with input 0 ",
                            shape_str(s0), " for concatenation on axis ", axis);
        out[size_t(axis)] += s[size_t(axis)];
        block.push_back(size_t(s[size_t(axis)] * inner) * es);
    }
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));
    auto k = std::make_unique<ConcatKernel>(prod(s0, 0, size_t(axis)), block);
    k->set_parallel(ctx.options().pool.get(), parallel_chunks(ctx.options(), 2 * shape_numel(out) * int64_t(es)));
    ctx.set_kernel(std::move(k));
    return {};
}

class SplitKernel : public Kernel {
public:
    SplitKernel(int64_t outer, std::vector<size_t> block) : outer_(outer), block_(std::move(block)) {}
    Status run(const void* const* in, void* const* out) const override {
        const uint8_t* x = static_cast<const uint8_t*>(in[0]);
        for (int64_t o = 0; o < outer_; ++o)
            for (size_t i = 0; i < block_.size(); ++i) {
                if (out[i] && block_[i])
                    std::memcpy(static_cast<uint8_t*>(out[i]) + size_t(o) * block_[i], x, block_[i]);
                x += block_[i];
            }
        return {};
    }

private:
    int64_t outer_;
    std::vector<size_t> block_;
};

Status prep_Split(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    const Shape& in = ctx.in_shape(0);
    int64_t axis;
    JIFFY_RETURN_IF_ERROR(norm_axis(ctx, ctx.attr_int("axis", 0), int64_t(in.size()), &axis));
    const int64_t dim = in[size_t(axis)];
    const int n_out = ctx.num_outputs();
    if (n_out < 1) return ctx.fail("has no outputs");
    std::vector<int64_t> split;
    bool given = false;
    if (ctx.opset() >= 13 || (ctx.opset() < 2 && ctx.has_input(1))) {  // Split-1 also took an input
        if (ctx.has_input(1)) {
            JIFFY_RETURN_IF_ERROR(const_ints(ctx, 1, "split", &split));
            given = true;
        }
    } else if (ctx.has_attr("split")) {
        split = ctx.attr_ints("split");
        given = true;
    }
    if (given) {
        if (ctx.has_attr("num_outputs")) return ctx.fail("both 'split' and 'num_outputs' are given");
        if (int64_t(split.size()) != n_out)
            return ctx.fail("split has ", split.size(), " entries but the node has ", n_out, " outputs");
        int64_t sum = 0;
        for (int64_t s : split) {
            if (s < 0) return ctx.fail("split ", shape_str(split), " has a negative entry");
            sum += s;
        }
        if (sum != dim)
            return ctx.fail("split ", shape_str(split), " sums to ", sum, " but axis ", axis, " of input ",
                            shape_str(in), " has size ", dim);
    } else if (ctx.has_attr("num_outputs")) {
        int64_t k = ctx.attr_int("num_outputs", 0);
        if (k != n_out) return ctx.fail("num_outputs is ", k, " but the node has ", n_out, " outputs");
        // Chunks of ceil(dim / k); the last one is smaller.
        int64_t chunk = (dim + k - 1) / k;
        for (int64_t i = 0; i < k; ++i) split.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
    } else {
        if (dim % n_out != 0)
            return ctx.fail("cannot split axis ", axis, " of size ", dim, " into ", n_out, " equal parts");
        split.assign(size_t(n_out), dim / n_out);
    }
    const size_t es = dtype_size(ctx.in_dtype(0));
    const int64_t inner = prod(in, size_t(axis) + 1, in.size());
    std::vector<size_t> block;
    for (int i = 0; i < n_out; ++i) {
        Shape s = in;
        s[size_t(axis)] = split[size_t(i)];
        if (ctx.has_output(i)) JIFFY_RETURN_IF_ERROR(ctx.set_output(i, ctx.in_dtype(0), s));
        block.push_back(size_t(split[size_t(i)] * inner) * es);
    }
    ctx.set_kernel(std::make_unique<SplitKernel>(prod(in, 0, size_t(axis)), block));
    return {};
}

// ---------------------------------------------------------------- Slice

Status prep_Slice(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    const Shape& in = ctx.in_shape(0);
    const int64_t r = int64_t(in.size());
    std::vector<int64_t> starts, ends, axes, steps;
    bool has_axes = false, has_steps = false;
    if (ctx.opset() < 10) {
        if (!ctx.has_attr("starts") || !ctx.has_attr("ends"))
            return ctx.fail("attributes 'starts' and 'ends' are required");
        starts = ctx.attr_ints("starts");
        ends = ctx.attr_ints("ends");
        has_axes = ctx.has_attr("axes");
        axes = ctx.attr_ints("axes");
    } else {
        if (!ctx.has_input(1) || !ctx.has_input(2)) return ctx.fail("inputs 'starts' and 'ends' are required");
        JIFFY_RETURN_IF_ERROR(const_ints(ctx, 1, "starts", &starts));
        JIFFY_RETURN_IF_ERROR(const_ints(ctx, 2, "ends", &ends));
        if (ctx.has_input(3)) {
            JIFFY_RETURN_IF_ERROR(const_ints(ctx, 3, "axes", &axes));
            has_axes = true;
        }
        if (ctx.has_input(4)) {
            JIFFY_RETURN_IF_ERROR(const_ints(ctx, 4, "steps", &steps));
            has_steps = true;
        }
    }
    if (starts.size() != ends.size())
        return ctx.fail("starts has ", starts.size(), " entries but ends has ", ends.size());
    if (!has_axes)
        for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
    if (!has_steps) steps.assign(starts.size(), 1);
    if (axes.size() != starts.size() || steps.size() != starts.size())
        return ctx.fail("starts, ends, axes and steps have different lengths (", starts.size(), ", ",
                        ends.size(), ", ", axes.size(), ", ", steps.size(), ")");
    std::vector<int64_t> ax;
    JIFFY_RETURN_IF_ERROR(norm_axes(ctx, axes, r, "axis", &ax));
    std::vector<int64_t> first(size_t(r), 0), step(size_t(r), 1);
    Shape out = in;
    for (size_t i = 0; i < ax.size(); ++i) {
        const size_t a = size_t(ax[i]);
        const int64_t dim = in[a], st = steps[i];
        if (st == 0) return ctx.fail("step for axis ", ax[i], " is 0");
        int64_t s = starts[i], e = ends[i];
        if (s < 0) s += dim;  // no overflow: dim >= 0
        if (e < 0) e += dim;
        int64_t len;  // ceil(distance / |step|), written so that no step value can overflow
        if (dim == 0) {
            s = 0;
            len = 0;
        } else if (st > 0) {
            s = std::clamp<int64_t>(s, 0, dim);
            e = std::clamp<int64_t>(e, 0, dim);
            len = e > s ? int64_t(uint64_t(e - s - 1) / uint64_t(st)) + 1 : 0;
        } else {
            s = std::clamp<int64_t>(s, 0, dim - 1);
            e = std::clamp<int64_t>(e, -1, dim - 1);
            len = s > e ? int64_t(uint64_t(s - e - 1) / (uint64_t(0) - uint64_t(st))) + 1 : 0;
        }
        out[a] = len;
        first[a] = s;
        step[a] = st;
    }
    bool done;
    JIFFY_RETURN_IF_ERROR(start_table(ctx, out, &done));
    if (done) return {};
    // A dim taken whole (from 0, step 1) merges into the dim outside it when that one steps by 1:
    // the pair is one run of out[a] * in[b] elements. A slice of whole trailing dims (channels
    // [8, 16) of an NCHW image) is then one contiguous copy instead of a row table (the line
    // detector's two 1x8x160x160 slices: 1280 rows of 640 bytes each).
    Shape lin = in, lout = out;
    Shape stride = strides_of(in);
    for (size_t b = lout.size(); b-- > 1;) {
        const size_t a = b - 1;
        if (first[b] != 0 || step[b] != 1 || lout[b] != lin[b] || step[a] != 1) continue;
        first[a] *= lin[b];
        lout[a] *= lin[b];
        lin[a] *= lin[b];
        stride[a] = stride[b];
        first.erase(first.begin() + std::ptrdiff_t(b));
        step.erase(step.begin() + std::ptrdiff_t(b));
        lout.erase(lout.begin() + std::ptrdiff_t(b));
        lin.erase(lin.begin() + std::ptrdiff_t(b));
        stride.erase(stride.begin() + std::ptrdiff_t(b));
    }
    Tables tb;
    tb.shape = lout;
    for (size_t d = 0; d < lout.size(); ++d) {
        std::vector<int64_t> t(size_t(lout[d]));
        for (int64_t o = 0; o < lout[d]; ++o) t[size_t(o)] = (first[d] + o * step[d]) * stride[d];
        tb.t.push_back(std::move(t));
    }
    return make_table_kernel(ctx, tb);
}

// ---------------------------------------------------------------- Expand, Tile

Status prep_Expand(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    if (!ctx.has_input(1)) return ctx.fail("input 1 (shape) is missing");
    std::vector<int64_t> shape;
    JIFFY_RETURN_IF_ERROR(const_ints(ctx, 1, "shape", &shape));
    const Shape& in = ctx.in_shape(0);
    for (int64_t d : shape)
        if (d < 0) return ctx.fail("shape ", shape_str(shape), " has a negative dim");
    Shape out;
    if (!broadcast_shapes(in, shape, &out))
        return ctx.fail("cannot broadcast input ", shape_str(in), " to shape ", shape_str(shape));
    bool done;
    JIFFY_RETURN_IF_ERROR(start_table(ctx, out, &done));
    if (done) return {};
    Shape bs = broadcast_strides(in, out);
    Tables tb;
    tb.shape = out;
    for (size_t d = 0; d < out.size(); ++d) {
        std::vector<int64_t> t(size_t(out[d]));
        for (int64_t o = 0; o < out[d]; ++o) t[size_t(o)] = o * bs[d];
        tb.t.push_back(std::move(t));
    }
    return make_table_kernel(ctx, tb);
}

Status prep_Tile(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    if (!ctx.has_input(1)) return ctx.fail("input 1 (repeats) is missing");
    std::vector<int64_t> rep;
    JIFFY_RETURN_IF_ERROR(const_ints(ctx, 1, "repeats", &rep));
    const Shape& in = ctx.in_shape(0);
    if (ctx.opset() < 6 && ctx.has_input(2)) {  // Tile-1: (input, tiles, axis) scalars
        std::vector<int64_t> ax;
        JIFFY_RETURN_IF_ERROR(const_ints(ctx, 2, "axis", &ax));
        int64_t a;
        if (rep.size() != 1 || ax.size() != 1) return ctx.fail("tiles and axis must be scalars");
        JIFFY_RETURN_IF_ERROR(norm_axis(ctx, ax[0], int64_t(in.size()), &a));
        std::vector<int64_t> full(in.size(), 1);
        full[size_t(a)] = rep[0];
        rep = full;
    }
    if (rep.size() != in.size())
        return ctx.fail("repeats has ", rep.size(), " entries but the input ", shape_str(in), " has rank ",
                        in.size());
    Shape out(in.size());
    for (size_t d = 0; d < in.size(); ++d) {
        if (rep[d] < 0) return ctx.fail("repeats ", shape_str(rep), " has a negative entry");
        if (!mul_ok(rep[d], in[d], &out[d]))
            return ctx.fail("repeats ", shape_str(rep), " overflow the output shape");
    }
    bool done;
    JIFFY_RETURN_IF_ERROR(start_table(ctx, out, &done));
    if (done) return {};
    Shape st = strides_of(in);
    Tables tb;  // loop over (repeat, dim) pairs: output index along d is r * in[d] + j
    for (size_t d = 0; d < in.size(); ++d) {
        if (rep[d] != 1) {
            tb.shape.push_back(rep[d]);
            tb.t.emplace_back(size_t(rep[d]), 0);
        }
        std::vector<int64_t> t(size_t(in[d]));
        for (int64_t j = 0; j < in[d]; ++j) t[size_t(j)] = j * st[d];
        tb.shape.push_back(in[d]);
        tb.t.push_back(std::move(t));
    }
    return make_table_kernel(ctx, tb);
}

// ---------------------------------------------------------------- Pad

Status prep_Pad(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    const Shape& in = ctx.in_shape(0);
    const int64_t r = int64_t(in.size());
    const DType dt = ctx.in_dtype(0);
    std::string mode = ctx.attr_str("mode", "constant");
    if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
        return ctx.fail("unknown mode '", mode, "' (expected constant, reflect, edge or wrap)");
    std::vector<int64_t> pads, axes;
    double value = 0;
    int pad_input = -1;
    if (ctx.opset() < 11) {
        const char* name = ctx.has_attr("pads") || ctx.opset() >= 2 ? "pads" : "paddings";  // Pad-1
        if (!ctx.has_attr(name)) return ctx.fail("attribute '", name, "' is missing");
        pads = ctx.attr_ints(name);
        value = ctx.attr_float("value", 0);
    } else {
        if (!ctx.has_input(1)) return ctx.fail("input 1 (pads) is missing");
        JIFFY_RETURN_IF_ERROR(const_ints(ctx, 1, "pads", &pads));
        if (ctx.has_input(2)) {
            if (ctx.in_dtype(2) != dt || shape_numel(ctx.in_shape(2)) != 1)
                return ctx.fail("constant_value must be one element of the input's dtype ",
                                dtype_name(dt), ", got ", dtype_name(ctx.in_dtype(2)), " ",
                                shape_str(ctx.in_shape(2)));
            pad_input = 2;
        }
        if (ctx.has_input(3)) JIFFY_RETURN_IF_ERROR(const_ints(ctx, 3, "axes", &axes));
    }
    std::vector<int64_t> ax;
    if (axes.empty() && !ctx.has_input(3))
        for (int64_t d = 0; d < r; ++d) ax.push_back(d);
    else
        JIFFY_RETURN_IF_ERROR(norm_axes(ctx, axes, r, "axis", &ax));
    if (pads.size() != 2 * ax.size())
        return ctx.fail("pads has ", pads.size(), " entries, expected ", 2 * ax.size(), " for input ",
                        shape_str(in));
    std::vector<int64_t> before(size_t(r), 0), after(size_t(r), 0);
    for (size_t i = 0; i < ax.size(); ++i) {
        before[size_t(ax[i])] = pads[i];
        after[size_t(ax[i])] = pads[i + ax.size()];
    }
    Shape out(static_cast<size_t>(r));
    for (size_t d = 0; d < size_t(r); ++d) {
        if (before[d] < -in[d] || after[d] < -in[d])
            return ctx.fail("pads ", shape_str(pads), " remove more than the ", in[d], " elements of axis ", d);
        if (__builtin_add_overflow(in[d], before[d], &out[d]) || __builtin_add_overflow(out[d], after[d], &out[d]))
            return ctx.fail("pads ", shape_str(pads), " overflow axis ", d);
        if (out[d] < 0)
            return ctx.fail("pads ", shape_str(pads), " make axis ", d, " of input ", shape_str(in), " negative");
        if (in[d] == 0 && out[d] > 0 && mode != "constant")
            return ctx.fail("cannot pad an empty axis ", d, " in ", mode, " mode");
    }
    bool done;
    JIFFY_RETURN_IF_ERROR(start_table(ctx, out, &done));
    if (done) return {};
    Shape st = strides_of(in);
    Tables tb;
    for (size_t d = 0; d < size_t(r); ++d) {
        const int64_t n = in[d];
        std::vector<int64_t> t(size_t(out[d]));
        for (int64_t o = 0; o < out[d]; ++o) {
            int64_t i = o - before[d];
            if (i < 0 || i >= n) {
                if (mode == "constant") {
                    t[size_t(o)] = kPad;
                    continue;
                } else if (mode == "edge") {
                    i = std::clamp<int64_t>(i, 0, n - 1);
                } else if (mode == "wrap") {
                    i = ((i % n) + n) % n;
                } else {  // reflect (without repeating the edge)
                    int64_t p = 2 * (n - 1);
                    if (p == 0) {
                        i = 0;
                    } else {
                        i = ((i % p) + p) % p;
                        if (i >= n) i = p - i;
                    }
                }
            }
            t[size_t(o)] = i * st[d];
        }
        tb.shape.push_back(out[d]);
        tb.t.push_back(std::move(t));
    }
    uint64_t bits = 0;
    if (value != 0) {
        JIFFY_RETURN_IF_ERROR(visit_all(dt, [&](auto tag) -> Status {
            using T = typename decltype(tag)::type;
            T v = T(value);
            std::memcpy(&bits, &v, sizeof(T));
            return {};
        }));
    }
    return make_table_kernel(ctx, tb, bits, pad_input);
}

// ---------------------------------------------------------------- DepthToSpace, SpaceToDepth

Status prep_DepthToSpace(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    const Shape& in = ctx.in_shape(0);
    if (in.size() != 4) return ctx.fail("input must be 4-D (N, C, H, W), got ", shape_str(in));
    int64_t b = ctx.attr_int("blocksize", 0);
    if (b <= 0) return ctx.fail("blocksize must be positive, got ", b);
    std::string mode = ctx.attr_str("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") return ctx.fail("unknown mode '", mode, "' (expected DCR or CRD)");
    const int64_t N = in[0], C = in[1], H = in[2], W = in[3];
    int64_t bb, Hb, Wb;
    if (!mul_ok(b, b, &bb) || !mul_ok(H, b, &Hb) || !mul_ok(W, b, &Wb))
        return ctx.fail("blocksize ", b, " is too large");
    if (C % bb != 0) return ctx.fail("channels ", C, " are not divisible by blocksize^2 = ", bb);
    const int64_t c = C / bb;
    Shape out{N, c, Hb, Wb};
    if (mode == "DCR") return make_permute(ctx, Shape{N, b, b, c, H, W}, {0, 3, 4, 1, 5, 2}, out);
    return make_permute(ctx, Shape{N, c, b, b, H, W}, {0, 1, 4, 2, 5, 3}, out);
}

Status prep_SpaceToDepth(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    const Shape& in = ctx.in_shape(0);
    if (in.size() != 4) return ctx.fail("input must be 4-D (N, C, H, W), got ", shape_str(in));
    int64_t b = ctx.attr_int("blocksize", 0);
    if (b <= 0) return ctx.fail("blocksize must be positive, got ", b);
    const int64_t N = in[0], C = in[1], H = in[2], W = in[3];
    if (H % b != 0 || W % b != 0)
        return ctx.fail("spatial dims ", H, "x", W, " are not divisible by blocksize ", b);
    int64_t Cbb;
    if (!mul_ok(b, b, &Cbb) || !mul_ok(C, Cbb, &Cbb)) return ctx.fail("blocksize ", b, " is too large");
    Shape out{N, Cbb, H / b, W / b};
    return make_permute(ctx, Shape{N, C, H / b, b, W / b, b}, {0, 3, 5, 1, 2, 4}, out);
}

// ---------------------------------------------------------------- Gather family

template <typename I>
Status check_index(const char* op, I v, int64_t n, int64_t* out) {
    const int64_t i = int64_t(v);
    if (i < -n || i >= n) return invalid(op, ": index ", i, " out of range [", -n, ", ", n, ")");
    *out = i < 0 ? i + n : i;
    return {};
}

Status index_dtype(OpContext& ctx, int i) {
    if (!ctx.has_input(i)) return ctx.fail("input ", i, " (indices) is missing");
    if (ctx.in_dtype(i) != DType::kI32 && ctx.in_dtype(i) != DType::kI64)
        return ctx.fail("indices (input ", i, ") must be int32 or int64, got ", dtype_name(ctx.in_dtype(i)));
    return {};
}

template <typename F>
Status visit_index(DType t, F&& f) {
    if (t == DType::kI32) return f(TypeTag<int32_t>{});
    return f(TypeTag<int64_t>{});
}

template <typename I>
class GatherKernel : public Kernel {
public:
    GatherKernel(int64_t outer, int64_t axis_dim, int64_t inner, int64_t k, size_t es)
        : outer_(outer), n_(axis_dim), k_(k), row_(size_t(inner) * es) {}
    Status run(const void* const* in, void* const* out) const override {
        const uint8_t* x = static_cast<const uint8_t*>(in[0]);
        const I* ind = static_cast<const I*>(in[1]);
        uint8_t* y = static_cast<uint8_t*>(out[0]);
        for (int64_t j = 0; j < k_; ++j) {
            int64_t i;
            JIFFY_RETURN_IF_ERROR(check_index("Gather", ind[j], n_, &i));
        }
        if (row_ == 0) return {};
        for (int64_t o = 0; o < outer_; ++o)
            for (int64_t j = 0; j < k_; ++j) {
                int64_t i = int64_t(ind[j]);
                if (i < 0) i += n_;
                std::memcpy(y, x + (size_t(o * n_ + i)) * row_, row_);
                y += row_;
            }
        return {};
    }

private:
    int64_t outer_, n_, k_;
    size_t row_;
};

Status prep_Gather(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    JIFFY_RETURN_IF_ERROR(index_dtype(ctx, 1));
    const Shape& in = ctx.in_shape(0);
    const Shape& ind = ctx.in_shape(1);
    if (in.empty()) return ctx.fail("data must have rank >= 1");
    int64_t axis;
    JIFFY_RETURN_IF_ERROR(norm_axis(ctx, ctx.attr_int("axis", 0), int64_t(in.size()), &axis));
    Shape out(in.begin(), in.begin() + axis);
    out.insert(out.end(), ind.begin(), ind.end());
    out.insert(out.end(), in.begin() + axis + 1, in.end());
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));
    const size_t es = dtype_size(ctx.in_dtype(0));
    return visit_index(ctx.in_dtype(1), [&](auto tag) -> Status {
        using I = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<GatherKernel<I>>(prod(in, 0, size_t(axis)), in[size_t(axis)],
                                                         prod(in, size_t(axis) + 1, in.size()),
                                                         shape_numel(ind), es));
        return {};
    });
}

// Compress: Gather along an axis with indices fixed at prepare (from a constant condition).
class SelectKernel : public Kernel {
public:
    SelectKernel(int64_t outer, int64_t axis_dim, size_t row, std::vector<int64_t> idx)
        : outer_(outer), n_(axis_dim), row_(row), idx_(std::move(idx)) {}
    Status run(const void* const* in, void* const* out) const override {
        const uint8_t* x = static_cast<const uint8_t*>(in[0]);
        uint8_t* y = static_cast<uint8_t*>(out[0]);
        if (row_ == 0) return {};
        for (int64_t o = 0; o < outer_; ++o)
            for (int64_t i : idx_) {
                std::memcpy(y, x + size_t(o * n_ + i) * row_, row_);
                y += row_;
            }
        return {};
    }

private:
    int64_t outer_, n_;
    size_t row_;
    std::vector<int64_t> idx_;
};

Status prep_Compress(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    if (!ctx.has_input(1)) return ctx.fail("input 1 (condition) is missing");
    const Tensor* cond = ctx.in_const(1);
    if (!cond) return ctx.need_value(1);
    if (cond->rank() != 1) return ctx.fail("condition must be 1-D, got ", shape_str(cond->shape()));
    if (dtype_size(cond->dtype()) == 0 || (!dtype_is_int(cond->dtype()) && !dtype_is_float(cond->dtype()) &&
                                           cond->dtype() != DType::kBool))
        return ctx.fail("condition must be bool, got ", dtype_name(cond->dtype()));
    const Shape& in = ctx.in_shape(0);
    int64_t outer = 1, n = shape_numel(in), inner = 1, axis = -1;
    if (ctx.has_attr("axis")) {
        JIFFY_RETURN_IF_ERROR(norm_axis(ctx, ctx.attr_int("axis", 0), int64_t(in.size()), &axis));
        outer = prod(in, 0, size_t(axis));
        n = in[size_t(axis)];
        inner = prod(in, size_t(axis) + 1, in.size());
    }
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < cond->numel(); ++i) {
        if (cond->get_f64(i) == 0) continue;
        if (i >= n)
            return ctx.fail("condition selects index ", i, " but the axis has size ", n);
        idx.push_back(i);
    }
    Shape out;
    if (axis < 0) {
        out = {int64_t(idx.size())};
    } else {
        out = in;
        out[size_t(axis)] = int64_t(idx.size());
    }
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));
    ctx.set_kernel(std::make_unique<SelectKernel>(outer, n, size_t(inner) * dtype_size(ctx.in_dtype(0)), idx));
    return {};
}

// Iterates over an index shape, row-major, with an element counter.
struct Counter {
    int64_t idx[kMaxRank] = {0};
    void next(const Shape& s) {
        for (int d = int(s.size()) - 1; d >= 0; --d) {
            if (++idx[d] < s[size_t(d)]) return;
            idx[d] = 0;
        }
    }
};

template <typename T, typename I>
class GatherElementsKernel : public Kernel {
public:
    GatherElementsKernel(Shape ind_shape, Shape data_strides, int axis, int64_t axis_dim)
        : shape_(std::move(ind_shape)), st_(std::move(data_strides)), axis_(axis), n_(axis_dim) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        const I* ind = static_cast<const I*>(in[1]);
        T* y = static_cast<T*>(out[0]);
        const int64_t total = shape_numel(shape_);
        Counter c;
        for (int64_t e = 0; e < total; ++e) {
            int64_t i;
            JIFFY_RETURN_IF_ERROR(check_index("GatherElements", ind[e], n_, &i));
            int64_t off = 0;
            for (size_t d = 0; d < shape_.size(); ++d)
                off += (int(d) == axis_ ? i : c.idx[d]) * st_[d];
            y[e] = x[off];
            c.next(shape_);
        }
        return {};
    }

private:
    Shape shape_, st_;
    int axis_;
    int64_t n_;
};

// Shared checks of GatherElements / ScatterElements: data and indices of equal rank, indices no
// larger than data on the other axes.
Status check_elements(OpContext& ctx, const Shape& data, const Shape& ind, int64_t* axis) {
    if (data.empty()) return ctx.fail("data must have rank >= 1");
    if (ind.size() != data.size())
        return ctx.fail("indices ", shape_str(ind), " and data ", shape_str(data), " have different ranks");
    JIFFY_RETURN_IF_ERROR(norm_axis(ctx, ctx.attr_int("axis", 0), int64_t(data.size()), axis));
    for (size_t d = 0; d < data.size(); ++d)
        if (int64_t(d) != *axis && ind[d] > data[d])
            return ctx.fail("indices ", shape_str(ind), " are larger than data ", shape_str(data),
                            " on axis ", d);
    return {};
}

Status prep_GatherElements(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    JIFFY_RETURN_IF_ERROR(index_dtype(ctx, 1));
    const Shape& in = ctx.in_shape(0);
    const Shape& ind = ctx.in_shape(1);
    int64_t axis;
    JIFFY_RETURN_IF_ERROR(check_elements(ctx, in, ind, &axis));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), ind));
    return visit_size(dtype_size(ctx.in_dtype(0)), [&](auto tt) -> Status {
        using T = typename decltype(tt)::type;
        return visit_index(ctx.in_dtype(1), [&](auto ti) -> Status {
            using I = typename decltype(ti)::type;
            ctx.set_kernel(std::make_unique<GatherElementsKernel<T, I>>(ind, strides_of(in), int(axis),
                                                                        in[size_t(axis)]));
            return {};
        });
    });
}

// GatherND: for each batch and each index tuple, copies one slice of `slice_bytes`.
template <typename I>
class GatherNDKernel : public Kernel {
public:
    GatherNDKernel(int64_t batch, int64_t tuples, Shape dims, Shape strides, int64_t batch_elems,
                   size_t es, int64_t slice)
        : batch_(batch), tuples_(tuples), dims_(std::move(dims)), st_(std::move(strides)),
          batch_elems_(batch_elems), es_(es), slice_(slice) {}
    Status run(const void* const* in, void* const* out) const override {
        const uint8_t* x = static_cast<const uint8_t*>(in[0]);
        const I* ind = static_cast<const I*>(in[1]);
        uint8_t* y = static_cast<uint8_t*>(out[0]);
        const size_t k = dims_.size(), bytes = size_t(slice_) * es_;
        for (int64_t b = 0; b < batch_; ++b)
            for (int64_t t = 0; t < tuples_; ++t) {
                int64_t off = b * batch_elems_;
                for (size_t j = 0; j < k; ++j) {
                    int64_t i;
                    JIFFY_RETURN_IF_ERROR(check_index("GatherND", ind[j], dims_[j], &i));
                    off += i * st_[j];
                }
                ind += k;
                if (bytes) std::memcpy(y, x + size_t(off) * es_, bytes);
                y += bytes;
            }
        return {};
    }

private:
    int64_t batch_, tuples_;
    Shape dims_, st_;  // indexed dims of data (after batch dims) and their strides
    int64_t batch_elems_;
    size_t es_;
    int64_t slice_;
};

Status prep_GatherND(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    JIFFY_RETURN_IF_ERROR(index_dtype(ctx, 1));
    const Shape& in = ctx.in_shape(0);
    const Shape& ind = ctx.in_shape(1);
    const int64_t b = ctx.attr_int("batch_dims", 0);
    const int64_t r = int64_t(in.size()), q = int64_t(ind.size());
    if (r < 1 || q < 1) return ctx.fail("data and indices must have rank >= 1");
    if (b < 0 || b >= std::min(r, q))
        return ctx.fail("batch_dims ", b, " must be in [0, ", std::min(r, q), ")");
    for (int64_t d = 0; d < b; ++d)
        if (in[size_t(d)] != ind[size_t(d)])
            return ctx.fail("batch dim ", d, " differs: data ", shape_str(in), ", indices ", shape_str(ind));
    const int64_t k = ind.back();
    if (k < 1 || k > r - b)
        return ctx.fail("last dim of indices ", shape_str(ind), " must be in [1, ", r - b, "]");
    Shape out(ind.begin(), ind.end() - 1);
    out.insert(out.end(), in.begin() + b + k, in.end());
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), out));
    Shape st = strides_of(in);
    Shape dims(in.begin() + b, in.begin() + b + k), dst(st.begin() + b, st.begin() + b + k);
    const int64_t batch = prod(in, 0, size_t(b));
    const int64_t tuples = prod(ind, size_t(b), ind.size() - 1);
    const int64_t batch_elems = prod(in, size_t(b), in.size());
    const int64_t slice = prod(in, size_t(b + k), in.size());
    return visit_index(ctx.in_dtype(1), [&](auto ti) -> Status {
        using I = typename decltype(ti)::type;
        ctx.set_kernel(std::make_unique<GatherNDKernel<I>>(batch, tuples, dims, dst, batch_elems,
                                                           dtype_size(ctx.in_dtype(0)), slice));
        return {};
    });
}

// ---------------------------------------------------------------- Scatter family

enum class Red { kNone, kAdd, kMul, kMax, kMin };

Status parse_reduction(OpContext& ctx, Red* out) {
    std::string s = ctx.attr_str("reduction", "none");
    if (s == "none") *out = Red::kNone;
    else if (s == "add") *out = Red::kAdd;
    else if (s == "mul") *out = Red::kMul;
    else if (s == "max") *out = Red::kMax;
    else if (s == "min") *out = Red::kMin;
    else return ctx.fail("unknown reduction '", s, "' (expected none, add, mul, max or min)");
    return {};
}

template <typename T>
inline void reduce_into(Red r, T& dst, T v) {
    switch (r) {
        case Red::kNone: dst = v; break;
        case Red::kAdd:
            if constexpr (std::is_same_v<T, bool>) dst = dst || v;
            else dst = T(dst + v);
            break;
        case Red::kMul:
            if constexpr (std::is_same_v<T, bool>) dst = dst && v;
            else dst = T(dst * v);
            break;
        case Red::kMax: dst = v > dst ? v : dst; break;
        case Red::kMin: dst = v < dst ? v : dst; break;
    }
}

template <typename T, typename I>
class ScatterElementsKernel : public Kernel {
public:
    ScatterElementsKernel(int64_t n, Shape ind_shape, Shape data_strides, int axis, int64_t axis_dim, Red red)
        : n_(n), shape_(std::move(ind_shape)), st_(std::move(data_strides)), axis_(axis), dim_(axis_dim),
          red_(red) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        const I* ind = static_cast<const I*>(in[1]);
        const T* u = static_cast<const T*>(in[2]);
        T* y = static_cast<T*>(out[0]);
        const int64_t total = shape_numel(shape_);
        for (int64_t e = 0; e < total; ++e) {
            int64_t i;
            JIFFY_RETURN_IF_ERROR(check_index("ScatterElements", ind[e], dim_, &i));
        }
        if (n_) std::memcpy(y, x, size_t(n_) * sizeof(T));
        Counter c;
        for (int64_t e = 0; e < total; ++e) {
            int64_t i = int64_t(ind[e]);
            if (i < 0) i += dim_;
            int64_t off = 0;
            for (size_t d = 0; d < shape_.size(); ++d) off += (int(d) == axis_ ? i : c.idx[d]) * st_[d];
            reduce_into(red_, y[off], u[e]);
            c.next(shape_);
        }
        return {};
    }

private:
    int64_t n_;
    Shape shape_, st_;
    int axis_;
    int64_t dim_;
    Red red_;
};

Status prep_scatter_elements(OpContext& ctx, bool allow_reduction) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    JIFFY_RETURN_IF_ERROR(index_dtype(ctx, 1));
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 2));
    const Shape& in = ctx.in_shape(0);
    const Shape& ind = ctx.in_shape(1);
    if (ctx.in_shape(2) != ind)
        return ctx.fail("updates ", shape_str(ctx.in_shape(2)), " and indices ", shape_str(ind),
                        " have different shapes");
    if (ctx.in_dtype(2) != ctx.in_dtype(0))
        return ctx.fail("updates dtype ", dtype_name(ctx.in_dtype(2)), " differs from data dtype ",
                        dtype_name(ctx.in_dtype(0)));
    Red red = Red::kNone;
    if (allow_reduction) JIFFY_RETURN_IF_ERROR(parse_reduction(ctx, &red));
    int64_t axis;
    JIFFY_RETURN_IF_ERROR(check_elements(ctx, in, ind, &axis));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), in));
    auto make = [&](auto tt) -> Status {
        using T = typename decltype(tt)::type;
        return visit_index(ctx.in_dtype(1), [&](auto ti) -> Status {
            using I = typename decltype(ti)::type;
            ctx.set_kernel(std::make_unique<ScatterElementsKernel<T, I>>(
                shape_numel(in), ind, strides_of(in), int(axis), in[size_t(axis)], red));
            return {};
        });
    };
    if (red == Red::kNone) return visit_size(dtype_size(ctx.in_dtype(0)), make);
    Status st = visit_all(ctx.in_dtype(0), make);
    if (!st.ok()) return ctx.fail_unsupported("reduction on dtype ", dtype_name(ctx.in_dtype(0)), " is not supported");
    return {};
}
Status prep_ScatterElements(OpContext& ctx) { return prep_scatter_elements(ctx, true); }
Status prep_Scatter(OpContext& ctx) { return prep_scatter_elements(ctx, false); }

template <typename T, typename I>
class ScatterNDKernel : public Kernel {
public:
    ScatterNDKernel(int64_t n, int64_t tuples, Shape dims, Shape strides, int64_t slice, Red red)
        : n_(n), tuples_(tuples), dims_(std::move(dims)), st_(std::move(strides)), slice_(slice), red_(red) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        const I* ind = static_cast<const I*>(in[1]);
        const T* u = static_cast<const T*>(in[2]);
        T* y = static_cast<T*>(out[0]);
        const size_t k = dims_.size();
        for (int64_t t = 0; t < tuples_; ++t)
            for (size_t j = 0; j < k; ++j) {
                int64_t i;
                JIFFY_RETURN_IF_ERROR(check_index("ScatterND", ind[size_t(t) * k + j], dims_[j], &i));
            }
        if (n_) std::memcpy(y, x, size_t(n_) * sizeof(T));
        for (int64_t t = 0; t < tuples_; ++t) {
            int64_t off = 0;
            for (size_t j = 0; j < k; ++j) {
                int64_t i = int64_t(ind[size_t(t) * k + j]);
                if (i < 0) i += dims_[j];
                off += i * st_[j];
            }
            const T* src = u + t * slice_;
            if (red_ == Red::kNone) {
                for (int64_t e = 0; e < slice_; ++e) y[off + e] = src[e];
            } else {
                for (int64_t e = 0; e < slice_; ++e) reduce_into(red_, y[off + e], src[e]);
            }
        }
        return {};
    }

private:
    int64_t n_, tuples_;
    Shape dims_, st_;
    int64_t slice_;
    Red red_;
};

Status prep_ScatterND(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    JIFFY_RETURN_IF_ERROR(index_dtype(ctx, 1));
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 2));
    const Shape& in = ctx.in_shape(0);
    const Shape& ind = ctx.in_shape(1);
    const Shape& upd = ctx.in_shape(2);
    if (ctx.in_dtype(2) != ctx.in_dtype(0))
        return ctx.fail("updates dtype ", dtype_name(ctx.in_dtype(2)), " differs from data dtype ",
                        dtype_name(ctx.in_dtype(0)));
    Red red;
    JIFFY_RETURN_IF_ERROR(parse_reduction(ctx, &red));
    const int64_t r = int64_t(in.size());
    if (r < 1 || ind.empty()) return ctx.fail("data and indices must have rank >= 1");
    const int64_t k = ind.back();
    if (k < 1 || k > r) return ctx.fail("last dim of indices ", shape_str(ind), " must be in [1, ", r, "]");
    Shape want(ind.begin(), ind.end() - 1);
    want.insert(want.end(), in.begin() + k, in.end());
    if (upd != want)
        return ctx.fail("updates have shape ", shape_str(upd), ", expected ", shape_str(want));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), in));
    Shape st = strides_of(in);
    Shape dims(in.begin(), in.begin() + k), dst(st.begin(), st.begin() + k);
    const int64_t tuples = prod(ind, 0, ind.size() - 1), slice = prod(in, size_t(k), in.size());
    auto make = [&](auto tt) -> Status {
        using T = typename decltype(tt)::type;
        return visit_index(ctx.in_dtype(1), [&](auto ti) -> Status {
            using I = typename decltype(ti)::type;
            ctx.set_kernel(std::make_unique<ScatterNDKernel<T, I>>(shape_numel(in), tuples, dims, dst, slice, red));
            return {};
        });
    };
    if (red == Red::kNone) return visit_size(dtype_size(ctx.in_dtype(0)), make);
    Status s = visit_all(ctx.in_dtype(0), make);
    if (!s.ok()) return ctx.fail_unsupported("reduction on dtype ", dtype_name(ctx.in_dtype(0)), " is not supported");
    return {};
}

// ---------------------------------------------------------------- ConstantOfShape, Range, EyeLike

template <typename T>
class FillKernel : public Kernel {
public:
    FillKernel(int64_t n, T v) : n_(n), v_(v) {}
    Status run(const void* const*, void* const* out) const override {
        T* y = static_cast<T*>(out[0]);
        for (int64_t i = 0; i < n_; ++i) y[i] = v_;
        return {};
    }

private:
    int64_t n_;
    T v_;
};

Status prep_ConstantOfShape(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input 0 (shape) is missing");
    std::vector<int64_t> shape;
    JIFFY_RETURN_IF_ERROR(const_ints(ctx, 0, "shape", &shape));
    for (int64_t d : shape)
        if (d < 0) return ctx.fail("shape ", shape_str(shape), " has a negative dim");
    DType dt = DType::kF32;
    uint64_t bits = 0;
    if (const Attr* a = ctx.attr("value")) {
        if (!a->t) return ctx.fail("attribute 'value' is not a tensor");
        if (a->t->numel() != 1) return ctx.fail("attribute 'value' must have one element, got ", a->t->numel());
        dt = a->t->dtype();
        if (dtype_size(dt) == 0) return ctx.fail_unsupported("value of dtype ", dtype_name(dt), " is not supported");
        std::memcpy(&bits, a->t->data(), dtype_size(dt));
    }
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, dt, shape));
    return visit_size(dtype_size(dt), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        T v;
        std::memcpy(&v, &bits, sizeof(T));
        ctx.set_kernel(std::make_unique<FillKernel<T>>(shape_numel(shape), v));
        return {};
    });
}

template <typename T>
class RangeKernel : public Kernel {
public:
    explicit RangeKernel(int64_t n) : n_(n) {}
    Status run(const void* const* in, void* const* out) const override {
        const T start = *static_cast<const T*>(in[0]), delta = *static_cast<const T*>(in[2]);
        T* y = static_cast<T*>(out[0]);
        for (int64_t i = 0; i < n_; ++i) y[i] = T(start + T(i) * delta);
        return {};
    }

private:
    int64_t n_;
};

Status prep_Range(OpContext& ctx) {
    for (int i = 0; i < 3; ++i) {
        if (!ctx.has_input(i)) return ctx.fail("input ", i, " is missing");
        if (ctx.in_dtype(i) != ctx.in_dtype(0))
            return ctx.fail("inputs have different dtypes: ", dtype_name(ctx.in_dtype(0)), " and ",
                            dtype_name(ctx.in_dtype(i)));
        if (shape_numel(ctx.in_shape(i)) != 1)
            return ctx.fail("input ", i, " must be a scalar, got shape ", shape_str(ctx.in_shape(i)));
    }
    for (int i = 0; i < 3; ++i)
        if (!ctx.in_const(i)) return ctx.need_value(i);
    const DType dt = ctx.in_dtype(0);
    if (dt != DType::kF32 && dt != DType::kF64 && dt != DType::kI16 && dt != DType::kI32 && dt != DType::kI64)
        return ctx.fail_unsupported("dtype ", dtype_name(dt), " is not supported (float, double, int16, "
                                    "int32, int64)");
    int64_t n = 0;
    Status st = visit_numeric(dt, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        const T start = ctx.in_const(0)->as<T>()[0], limit = ctx.in_const(1)->as<T>()[0],
                delta = ctx.in_const(2)->as<T>()[0];
        if (delta == T(0)) return ctx.fail("delta is 0");
        if constexpr (std::is_floating_point_v<T>) {
            double c = std::ceil(double(T(limit - start)) / double(delta));
            if (!(c < 4e18)) return ctx.fail("the range is too long or not finite");
            n = c > 0 ? int64_t(c) : 0;
        } else {
            // exact ceil((limit - start) / delta) in 128-bit to avoid overflow
            __int128 diff = __int128(limit) - __int128(start), d = __int128(delta);
            __int128 q = diff / d;
            if (diff % d != 0 && ((diff > 0) == (d > 0))) ++q;
            n = q > 0 ? int64_t(q) : 0;
        }
        JIFFY_RETURN_IF_ERROR(ctx.set_output(0, dt, Shape{n}));
        ctx.set_kernel(std::make_unique<RangeKernel<T>>(n));
        return {};
    });
    return st;
}

template <typename T>
class EyeLikeKernel : public Kernel {
public:
    EyeLikeKernel(int64_t rows, int64_t cols, int64_t k) : rows_(rows), cols_(cols), k_(k) {}
    Status run(const void* const*, void* const* out) const override {
        T* y = static_cast<T*>(out[0]);
        for (int64_t i = 0; i < rows_ * cols_; ++i) y[i] = T(0);
        for (int64_t i = 0; i < rows_; ++i) {
            int64_t j = i + k_;
            if (j >= 0 && j < cols_) y[i * cols_ + j] = T(1);
        }
        return {};
    }

private:
    int64_t rows_, cols_, k_;
};

Status prep_EyeLike(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    const Shape& in = ctx.in_shape(0);
    if (in.size() != 2) return ctx.fail("input must be 2-D, got ", shape_str(in));
    DType dt = ctx.in_dtype(0);
    if (ctx.has_attr("dtype")) {
        int64_t d = ctx.attr_int("dtype", 0);
        if (d <= 0 || d > 16 || dtype_size(DType(d)) == 0) return ctx.fail("bad dtype ", d);
        dt = DType(d);
    }
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, dt, in));
    const int64_t k = ctx.attr_int("k", 0);
    Status st = visit_all(dt, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<EyeLikeKernel<T>>(in[0], in[1], k));
        return {};
    });
    if (!st.ok()) return ctx.fail_unsupported("output dtype ", dtype_name(dt), " is not supported");
    return {};
}

// ---------------------------------------------------------------- OneHot

template <typename I, typename T>
class OneHotKernel : public Kernel {
public:
    OneHotKernel(int64_t outer, int64_t depth, int64_t inner) : outer_(outer), depth_(depth), inner_(inner) {}
    Status run(const void* const* in, void* const* out) const override {
        const I* ind = static_cast<const I*>(in[0]);
        const T* vals = static_cast<const T*>(in[2]);
        const T off = vals[0], on = vals[1];
        T* y = static_cast<T*>(out[0]);
        const int64_t n = outer_ * depth_ * inner_;
        for (int64_t i = 0; i < n; ++i) y[i] = off;
        for (int64_t o = 0; o < outer_; ++o)
            for (int64_t j = 0; j < inner_; ++j) {
                const I raw = ind[o * inner_ + j];
                if constexpr (std::is_floating_point_v<I>)
                    if (!(raw >= I(-depth_) && raw < I(depth_))) continue;
                int64_t v = int64_t(raw);
                if (v < 0) v += depth_;
                if (v < 0 || v >= depth_) continue;  // out of range: all off
                y[(o * depth_ + v) * inner_ + j] = on;
            }
        return {};
    }

private:
    int64_t outer_, depth_, inner_;
};

Status prep_OneHot(OpContext& ctx) {
    if (!ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(2))
        return ctx.fail("needs three inputs (indices, depth, values)");
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 2));
    const DType it = ctx.in_dtype(0);
    if (!dtype_is_int(it) && it != DType::kF32 && it != DType::kF64)
        return ctx.fail_unsupported("indices dtype ", dtype_name(it), " is not supported");
    const Tensor* dep = ctx.in_const(1);
    if (!dep) return ctx.need_value(1);
    if (dep->numel() != 1) return ctx.fail("depth must have one element, got shape ", shape_str(dep->shape()));
    if (!dtype_is_int(dep->dtype()) && dep->dtype() != DType::kF32 && dep->dtype() != DType::kF64)
        return ctx.fail("depth has unsupported dtype ", dtype_name(dep->dtype()));
    const double dd = dep->get_f64(0);
    if (!(dd >= 1 && dd < 4e18)) return ctx.fail("depth must be positive, got ", dd);
    const int64_t depth = dtype_is_int(dep->dtype()) ? dep->get_i64(0) : int64_t(dd);
    if (shape_numel(ctx.in_shape(2)) != 2)
        return ctx.fail("values must have two elements [off, on], got shape ", shape_str(ctx.in_shape(2)));
    const Shape& in = ctx.in_shape(0);
    const int64_t r = int64_t(in.size());
    int64_t axis = ctx.attr_int("axis", -1);
    if (axis < -r - 1 || axis > r) return ctx.fail("axis ", axis, " is out of range for output rank ", r + 1);
    if (axis < 0) axis += r + 1;
    Shape out = in;
    out.insert(out.begin() + axis, depth);
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(2), out));
    const int64_t outer = prod(in, 0, size_t(axis)), inner = prod(in, size_t(axis), in.size());
    return visit_numeric(it, [&](auto ti) -> Status {
        using I = typename decltype(ti)::type;
        return visit_size(dtype_size(ctx.in_dtype(2)), [&](auto tt) -> Status {
            using T = typename decltype(tt)::type;
            ctx.set_kernel(std::make_unique<OneHotKernel<I, T>>(outer, depth, inner));
            return {};
        });
    });
}

// ---------------------------------------------------------------- Trilu

template <typename T>
class TriluKernel : public Kernel {
public:
    TriluKernel(int64_t batch, int64_t rows, int64_t cols, bool upper, int64_t k)
        : batch_(batch), rows_(rows), cols_(cols), upper_(upper), k_(k) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out[0]);
        int64_t k = k_;
        if (in[1]) k = *static_cast<const int64_t*>(in[1]);
        for (int64_t b = 0; b < batch_; ++b)
            for (int64_t i = 0; i < rows_; ++i)
                for (int64_t j = 0; j < cols_; ++j) {
                    // keep j - i >= k (upper) or j - i <= k (lower); compare without overflow
                    bool keep = upper_ ? (j - i >= k) : (j - i <= k);
                    *y++ = keep ? *x : T(0);
                    ++x;
                }
        return {};
    }

private:
    int64_t batch_, rows_, cols_;
    bool upper_;
    int64_t k_;
};

Status prep_Trilu(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    const Shape& in = ctx.in_shape(0);
    if (in.size() < 2) return ctx.fail("input must have rank >= 2, got ", shape_str(in));
    if (ctx.has_input(1)) {
        if (ctx.in_dtype(1) != DType::kI64 || shape_numel(ctx.in_shape(1)) != 1)
            return ctx.fail("k must be an int64 scalar, got ", dtype_name(ctx.in_dtype(1)), " ",
                            shape_str(ctx.in_shape(1)));
    }
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), in));
    bool upper = ctx.attr_int("upper", 1) != 0;
    return visit_size(dtype_size(ctx.in_dtype(0)), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<TriluKernel<T>>(prod(in, 0, in.size() - 2), in[in.size() - 2],
                                                        in.back(), upper, 0));
        return {};
    });
}

// ---------------------------------------------------------------- ReverseSequence

class ReverseSequenceKernel : public Kernel {
public:
    ReverseSequenceKernel(int64_t time, int64_t batch, int64_t tstride, int64_t bstride, size_t row)
        : time_(time), batch_(batch), ts_(tstride), bs_(bstride), row_(row) {}
    Status run(const void* const* in, void* const* out) const override {
        const uint8_t* x = static_cast<const uint8_t*>(in[0]);
        const int64_t* lens = static_cast<const int64_t*>(in[1]);
        uint8_t* y = static_cast<uint8_t*>(out[0]);
        for (int64_t b = 0; b < batch_; ++b)
            if (lens[b] < 0 || lens[b] > time_)
                return invalid("ReverseSequence: sequence_lens[", b, "] = ", lens[b], " out of range [0, ",
                               time_, "]");
        if (row_ == 0) return {};
        for (int64_t b = 0; b < batch_; ++b)
            for (int64_t t = 0; t < time_; ++t) {
                int64_t src = t < lens[b] ? lens[b] - 1 - t : t;
                std::memcpy(y + size_t(b * bs_ + t * ts_) * row_, x + size_t(b * bs_ + src * ts_) * row_, row_);
            }
        return {};
    }

private:
    int64_t time_, batch_, ts_, bs_;
    size_t row_;
};

Status prep_ReverseSequence(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    if (!ctx.has_input(1)) return ctx.fail("input 1 (sequence_lens) is missing");
    if (ctx.in_dtype(1) != DType::kI64) return ctx.fail("sequence_lens must be int64, got ", dtype_name(ctx.in_dtype(1)));
    const Shape& in = ctx.in_shape(0);
    if (in.size() < 2) return ctx.fail("input must have rank >= 2, got ", shape_str(in));
    const int64_t ta = ctx.attr_int("time_axis", 0), ba = ctx.attr_int("batch_axis", 1);
    if (!((ta == 0 && ba == 1) || (ta == 1 && ba == 0)))
        return ctx.fail("time_axis ", ta, " and batch_axis ", ba, " must be 0 and 1 in some order");
    if (ctx.in_shape(1) != Shape{in[size_t(ba)]})
        return ctx.fail("sequence_lens has shape ", shape_str(ctx.in_shape(1)), ", expected [", in[size_t(ba)], "]");
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), in));
    const size_t row = size_t(prod(in, 2, in.size())) * dtype_size(ctx.in_dtype(0));
    // strides in rows: dim 0 has stride in[1], dim 1 stride 1
    const int64_t ts = ta == 0 ? in[1] : 1, bs = ba == 0 ? in[1] : 1;
    ctx.set_kernel(std::make_unique<ReverseSequenceKernel>(in[size_t(ta)], in[size_t(ba)], ts, bs, row));
    return {};
}

// ---------------------------------------------------------------- NonZero, Unique (constant input)

Status prep_NonZero(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    const Tensor* t = ctx.in_const(0);
    if (!t) return ctx.need_value(0);
    Shape s = t->shape();
    if (s.empty()) s = {1};
    const int64_t n = t->numel();
    std::vector<int64_t> hits;
    for (int64_t i = 0; i < n; ++i)
        if (t->get_f64(i) != 0) hits.push_back(i);
    const int64_t r = int64_t(s.size()), nnz = int64_t(hits.size());
    JIFFY_RETURN_IF_ERROR(check_const_size(ctx, r * nnz, DType::kI64));
    auto out = std::make_shared<Tensor>(DType::kI64, Shape{r, nnz});
    int64_t* y = out->as<int64_t>();
    for (int64_t k = 0; k < nnz; ++k) {
        int64_t rem = hits[size_t(k)];
        for (int64_t d = r - 1; d >= 0; --d) {
            y[d * nnz + k] = rem % s[size_t(d)];
            rem /= s[size_t(d)];
        }
    }
    ctx.set_output_const(0, out);
    return {};
}

template <typename T>
bool elem_less(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a)) return false;
        if (std::isnan(b)) return true;
    }
    return a < b;
}

Status prep_Unique(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(check_data(ctx, 0));
    const Tensor* t = ctx.in_const(0);
    if (!t) return ctx.need_value(0);
    const Shape& in = t->shape();
    const bool sorted = ctx.attr_int("sorted", 1) != 0;
    int64_t axis = -1, outer = 1, n = t->numel(), inner = 1;
    if (ctx.has_attr("axis")) {
        JIFFY_RETURN_IF_ERROR(norm_axis(ctx, ctx.attr_int("axis", 0), int64_t(in.size()), &axis));
        outer = prod(in, 0, size_t(axis));
        n = in[size_t(axis)];
        inner = prod(in, size_t(axis) + 1, in.size());
    }
    return visit_all(t->dtype(), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        const T* x = t->as<T>();
        // Slice i: elements x[(o * n + i) * inner + j] for all o, j.
        auto key_of = [&](int64_t i) {
            std::vector<T> k;
            k.reserve(size_t(outer * inner));
            for (int64_t o = 0; o < outer; ++o)
                for (int64_t j = 0; j < inner; ++j) k.push_back(x[(o * n + i) * inner + j]);
            return k;
        };
        auto less = [](const std::vector<T>& a, const std::vector<T>& b) {
            return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), elem_less<T>);
        };
        std::map<std::vector<T>, int64_t, decltype(less)> ids(less);  // key -> unique id (first-seen order)
        std::vector<int64_t> first, count, inverse(static_cast<size_t>(n));
        std::vector<std::vector<T>> keys;
        for (int64_t i = 0; i < n; ++i) {
            auto k = key_of(i);
            auto it = ids.find(k);
            if (it == ids.end()) {
                it = ids.emplace(k, int64_t(first.size())).first;
                first.push_back(i);
                count.push_back(0);
                keys.push_back(std::move(k));
            }
            inverse[size_t(i)] = it->second;
            ++count[size_t(it->second)];
        }
        const int64_t u = int64_t(first.size());
        std::vector<int64_t> order;  // output position -> unique id
        if (sorted) {
            for (auto& [k, id] : ids) order.push_back(id);
        } else {
            for (int64_t i = 0; i < u; ++i) order.push_back(i);
        }
        std::vector<int64_t> pos(static_cast<size_t>(u));
        for (int64_t p = 0; p < u; ++p) pos[size_t(order[size_t(p)])] = p;
        Shape ys = axis < 0 ? Shape{u} : in;
        if (axis >= 0) ys[size_t(axis)] = u;
        auto y = std::make_shared<Tensor>(t->dtype(), ys);
        T* yp = y->as<T>();
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t p = 0; p < u; ++p)
                for (int64_t j = 0; j < inner; ++j)
                    yp[(o * u + p) * inner + j] = keys[size_t(order[size_t(p)])][size_t(o * inner + j)];
        std::vector<int64_t> idx_out, cnt_out, inv_out;
        for (int64_t p = 0; p < u; ++p) {
            idx_out.push_back(first[size_t(order[size_t(p)])]);
            cnt_out.push_back(count[size_t(order[size_t(p)])]);
        }
        for (int64_t i = 0; i < n; ++i) inv_out.push_back(pos[size_t(inverse[size_t(i)])]);
        ctx.set_output_const(0, y);
        if (ctx.has_output(1)) ctx.set_output_const(1, make_i64(Shape{u}, idx_out));
        if (ctx.has_output(2)) ctx.set_output_const(2, make_i64(Shape{n}, inv_out));
        if (ctx.has_output(3)) ctx.set_output_const(3, make_i64(Shape{u}, cnt_out));
        return {};
    });
}

}  // namespace

void register_shape_ops(OpRegistry& r) {
#define REG(NAME) r.add(#NAME, prep_##NAME);
    REG(Constant) REG(Shape) REG(Size) REG(Identity) REG(Reshape) REG(Flatten) REG(Squeeze)
    REG(Unsqueeze) REG(Transpose) REG(Concat) REG(Split) REG(Slice) REG(Gather) REG(GatherElements)
    REG(GatherND) REG(ScatterElements) REG(ScatterND) REG(Scatter) REG(Pad) REG(Expand) REG(Tile)
    REG(ConstantOfShape) REG(Range) REG(OneHot) REG(Trilu) REG(DepthToSpace) REG(SpaceToDepth)
    REG(EyeLike) REG(ReverseSequence) REG(Compress) REG(NonZero) REG(Unique)
#undef REG
}

}  // namespace jiffy
