// Reading one element of raw little-endian storage, widened exactly to double. The one
// place that knows how every DType is laid out in memory; Tensor, TensorView, flatten,
// packing and the pipeline's error metrics all read through it.
#pragma once

#include <cstdint>
#include <cstring>

#include "qobs/dtype.h"
#include "qobs/formats.h"

namespace qobs::detail {

/// Element `index` (in elements, not bytes) of contiguous storage of dtype dt. Exact for
/// every float dtype and for integers below 2^53.
inline double load_element(const void* base, DType dt, int64_t index) {
  const auto* p = static_cast<const unsigned char*>(base) + index * static_cast<int64_t>(dtype_size(dt));
  switch (dt) {
    case DType::kF64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::kF32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::kBF16: { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_float(v); }
    case DType::kF16: { uint16_t v; std::memcpy(&v, p, 2); return f16_to_float(v); }
    case DType::kF8E4M3: return fp8_e4m3_to_float(*p);
    case DType::kI8: return static_cast<int8_t>(*p);
    case DType::kI16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::kI32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::kI64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::kU8: return *p;
    case DType::kBool: return *p ? 1.0 : 0.0;
  }
  return 0.0;
}

}  // namespace qobs::detail
