// .npy files (format 1.0/2.0/3.0, little-endian, C order) to and from Tensors.
#pragma once
#include <string>

#include "core/tensor.h"

namespace jiffy {

// Validates magic, header, dtype, order and that the file holds exactly the data the header says.
Status read_npy(const std::string& path, Tensor* out, uint64_t max_bytes = uint64_t(4) << 30);
Status write_npy(const std::string& path, DType t, const Shape& shape, const void* data);

}  // namespace jiffy
