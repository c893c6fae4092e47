// Tensor: a dtype, a static shape and a 64-byte aligned, reference-counted buffer. Used for
// constants (initializers, folded values) and for I/O outside the plan; the plan itself works on
// raw pointers into one arena.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace jiffy {

using Shape = std::vector<int64_t>;

constexpr size_t kAlign = 64;

// numel of a shape; -1 on a negative dim or overflow past 2^62.
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "1x3x224x224", "scalar" for rank 0

class Tensor {
public:
    Tensor() = default;
    // Zero-filled tensor. Caller has validated shape (non-negative, bounded size).
    Tensor(DType t, Shape shape);

    DType dtype() const { return dtype_; }
    const Shape& shape() const { return shape_; }
    int rank() const { return int(shape_.size()); }
    int64_t numel() const { return numel_; }
    size_t nbytes() const { return size_t(numel_) * dtype_size(dtype_); }
    bool empty() const { return !buf_; }

    void* data() { return buf_.get(); }
    const void* data() const { return buf_.get(); }
    template <typename T> T* as() { return static_cast<T*>(data()); }
    template <typename T> const T* as() const { return static_cast<const T*>(data()); }

    // Same storage, new shape (numel must match).
    Tensor reshaped(Shape s) const;
    // Element i converted to double / int64 (any numeric dtype). For compile-time use only.
    double get_f64(int64_t i) const;
    int64_t get_i64(int64_t i) const;
    // All elements as int64 (for shape/axes/indices tensors at compile time).
    std::vector<int64_t> to_i64_vector() const;

private:
    DType dtype_ = DType::kUndefined;
    Shape shape_;
    int64_t numel_ = 0;
    std::shared_ptr<uint8_t> buf_;
};

// 64-byte aligned, zero-filled allocation (at least 64 bytes so a 0-element tensor has a pointer).
std::shared_ptr<uint8_t> aligned_buffer(size_t bytes);

}  // namespace jiffy
