// Helpers shared by op implementations: dtype dispatch, broadcasting, axes, strides.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/amx.h"
#include "ops/op.h"

namespace jiffy {

template <typename T>
struct TypeTag {
    using type = T;
};

// Calls f(TypeTag<T>{}) for the C++ type of dtype t. Returns unsupported for other dtypes.
// Families: float (f32, f64), int (all integers), numeric (float + int), all (numeric + bool).
#define JIFFY_CASE(DT, T) \
    case DType::DT: return f(TypeTag<T>{});

template <typename F>
Status visit_float(DType t, F&& f) {
    switch (t) {
        JIFFY_CASE(kF32, float)
        JIFFY_CASE(kF64, double)
        default: return unsupported("dtype ", dtype_name(t), " is not supported here");
    }
}
template <typename F>
Status visit_int(DType t, F&& f) {
    switch (t) {
        JIFFY_CASE(kI8, int8_t)
        JIFFY_CASE(kU8, uint8_t)
        JIFFY_CASE(kI16, int16_t)
        JIFFY_CASE(kU16, uint16_t)
        JIFFY_CASE(kI32, int32_t)
        JIFFY_CASE(kU32, uint32_t)
        JIFFY_CASE(kI64, int64_t)
        JIFFY_CASE(kU64, uint64_t)
        default: return unsupported("dtype ", dtype_name(t), " is not supported here");
    }
}
template <typename F>
Status visit_numeric(DType t, F&& f) {
    if (t == DType::kF32 || t == DType::kF64) return visit_float(t, f);
    return visit_int(t, f);
}
template <typename F>
Status visit_all(DType t, F&& f) {
    if (t == DType::kBool) return f(TypeTag<bool>{});
    return visit_numeric(t, f);
}
#undef JIFFY_CASE

// Numpy-style broadcast of two shapes; false if incompatible.
bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out);
// Normalizes axis in [-rank, rank) to [0, rank); false if out of range.
bool normalize_axis(int64_t axis, int64_t rank, int64_t* out);
// Row-major strides (in elements).
Shape strides_of(const Shape& s);
// Strides of `in` broadcast to `out` shape (0 on broadcast dims), aligned to the right.
Shape broadcast_strides(const Shape& in, const Shape& out);

constexpr int kMaxRank = 16;

// Iterates over all indices of `out` (row-major), calling f(linear_out, off_a, off_b) where off_a
// and off_b are element offsets computed from the broadcast strides sa, sb (see
// broadcast_strides); rank <= kMaxRank.
template <typename F>
void for_each_broadcast2(const Shape& out, const Shape& sa, const Shape& sb, F&& f) {
    const int64_t n = shape_numel(out);
    if (n <= 0) return;
    // Collapse the dims: drop size-1 dims and merge a dim into the one outside it wherever both
    // inputs run on contiguously (or both stay broadcast), so the inner loop is as long as it
    // can be (x with a scalar over 1x64x80x80: one run of 409600). The inner loop then calls f
    // with unit or zero steps the compiler can see (Where over 1x64x80x80: ~4.7 ms -> well
    // under 1 ms). f is called for i = 0 .. n-1 in order, with the same offsets as before.
    int64_t dims[kMaxRank], ta[kMaxRank], tb[kMaxRank];
    int r = 0;
    for (size_t d = 0; d < out.size(); ++d) {
        if (out[d] == 1) continue;
        if (r > 0 && ta[r - 1] == sa[d] * out[d] && tb[r - 1] == sb[d] * out[d]) {
            dims[r - 1] *= out[d];
            ta[r - 1] = sa[d];
            tb[r - 1] = sb[d];
            continue;
        }
        dims[r] = out[d];
        ta[r] = sa[d];
        tb[r] = sb[d];
        ++r;
    }
    if (r == 0) {
        f(int64_t(0), int64_t(0), int64_t(0));
        return;
    }
    const int64_t inner = dims[r - 1], ia = ta[r - 1], ib = tb[r - 1];
    int64_t idx[kMaxRank] = {0};
    int64_t oa = 0, ob = 0;
    for (int64_t i = 0; i < n; i += inner) {
        if (ia == 1 && ib == 1)
            for (int64_t j = 0; j < inner; ++j) f(i + j, oa + j, ob + j);
        else if (ia == 1 && ib == 0)
            for (int64_t j = 0; j < inner; ++j) f(i + j, oa + j, ob);
        else if (ia == 0 && ib == 1)
            for (int64_t j = 0; j < inner; ++j) f(i + j, oa, ob + j);
        else
            for (int64_t j = 0; j < inner; ++j) f(i + j, oa + j * ia, ob + j * ib);
        for (int d = r - 2; d >= 0; --d) {
            if (++idx[d] < dims[d]) {
                oa += ta[d];
                ob += tb[d];
                break;
            }
            oa -= ta[d] * (dims[d] - 1);
            ob -= tb[d] * (dims[d] - 1);
            idx[d] = 0;
        }
    }
}

// A kernel that copies input 0 to output 0 (Identity, Reshape, Squeeze, ...).
class CopyKernel : public Kernel {
public:
    explicit CopyKernel(size_t bytes) : bytes_(bytes) {}
    Status run(const void* const* in, void* const* out) const override {
        if (bytes_) std::memmove(out[0], in[0], bytes_);
        return {};
    }

private:
    size_t bytes_;
};

// The float32 GlobalAveragePool kernel (ops/conv.cpp): y[q] = the mean of the q-th of `planes`
// contiguous blocks of `size` floats, summed in float by the ISA's kernel; split by planes on the
// plan's pool from ~16 K values. ReduceMean over trailing axes uses it too (ops/reduce.cpp).
std::unique_ptr<Kernel> make_global_avg_f32(OpContext& ctx, int64_t planes, int64_t size);

// Kernel::set_fast_weights of a kernel whose constant weights an AMX object holds (AmxGemm: B,
// AmxConv: W), `packed` once packed: the weights to 17 bits (their lo parts left out) where that
// object runs BF16x3, reported as the kernel's `group`; kNone elsewhere and under JIFFY_AMX=x3.
inline void set_weights_lo(kernels::AmxGemm& a, bool on) { a.set_b_lo(on); }
inline void set_weights_lo(kernels::AmxConv& a, bool on) { a.set_w_lo(on); }
template <typename Amx>
Kernel::FastWeights amx_fast_weights(Amx& amx, bool packed, bool fast, Kernel::FastWeights group) {
    if (!packed || amx.parts() != 3) return Kernel::FastWeights::kNone;
    if (kernels::amx_exact_weights()) {  // JIFFY_AMX=x3: exact, not probed
        set_weights_lo(amx, true);
        return Kernel::FastWeights::kNone;
    }
    set_weights_lo(amx, !fast);
    return group;
}

}  // namespace jiffy
