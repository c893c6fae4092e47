#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "kernels/weight_alloc.h"

namespace jiffy {

int64_t shape_numel(const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s) {
        if (d < 0) return -1;
        if (d != 0 && n > (int64_t(1) << 62) / d) return -1;
        n *= d;
    }
    return n;
}

std::string shape_str(const Shape& s) {
    if (s.empty()) return "scalar";
    std::string r;
    for (size_t i = 0; i < s.size(); ++i) {
        if (i) r += 'x';
        r += std::to_string(s[i]);
    }
    return r;
}

// Buffers of 1 MiB and more (arenas, large tensors) on 2 MiB pages (kernels/weight_alloc.h): under
// the hypervisor a TLB miss costs a two-level page walk, and a conv writing ~100 output rows of
// 4 KiB pages misses constantly. Measured (bench/conv_bench.cpp --cold --huge, MobileNetV2 1x1
// layers): 16 -> 96 on 112x112 1196 -> 767 us, 24 -> 144 on 56x56 507 -> 330 us. The pages are
// touched (zeroed) here, so any fault or compaction happens at allocation, never in a run.
std::shared_ptr<uint8_t> aligned_buffer(size_t bytes) {
    static_assert(kAlign == 64, "alloc_zeroed aligns to 64 bytes");
    return kernels::alloc_zeroed(bytes, size_t(1) << 20);
}

Tensor::Tensor(DType t, Shape shape) : dtype_(t), shape_(std::move(shape)) {
    numel_ = shape_numel(shape_);
    if (numel_ < 0) numel_ = 0;
    buf_ = aligned_buffer(size_t(numel_) * dtype_size(t));
}

Tensor Tensor::reshaped(Shape s) const {
    Tensor r = *this;
    r.shape_ = std::move(s);
    return r;
}

double Tensor::get_f64(int64_t i) const {
    const void* p = data();
    switch (dtype_) {
        case DType::kF32: return static_cast<const float*>(p)[i];
        case DType::kF64: return static_cast<const double*>(p)[i];
        case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
        case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
        case DType::kI8: return static_cast<const int8_t*>(p)[i];
        case DType::kU8: return static_cast<const uint8_t*>(p)[i];
        case DType::kBool: return static_cast<const uint8_t*>(p)[i] != 0;
        case DType::kI16: return static_cast<const int16_t*>(p)[i];
        case DType::kU16: return static_cast<const uint16_t*>(p)[i];
        case DType::kI32: return static_cast<const int32_t*>(p)[i];
        case DType::kU32: return static_cast<const uint32_t*>(p)[i];
        case DType::kI64: return double(static_cast<const int64_t*>(p)[i]);
        case DType::kU64: return double(static_cast<const uint64_t*>(p)[i]);
        default: return 0;
    }
}

int64_t Tensor::get_i64(int64_t i) const {
    const void* p = data();
    switch (dtype_) {
        case DType::kI64: return static_cast<const int64_t*>(p)[i];
        case DType::kI32: return static_cast<const int32_t*>(p)[i];
        case DType::kU64: return int64_t(static_cast<const uint64_t*>(p)[i]);
        default: return int64_t(get_f64(i));
    }
}

std::vector<int64_t> Tensor::to_i64_vector() const {
    std::vector<int64_t> v(static_cast<size_t>(numel_));
    for (int64_t i = 0; i < numel_; ++i) v[size_t(i)] = get_i64(i);
    return v;
}

}  // namespace jiffy
