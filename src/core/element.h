// Reading one element of raw little-endian storage, widened exactly to double, and
// writing one with the reference's narrowing rule. The one place that knows how every
// DType is laid out in memory; Tensor, TensorView, flatten, packing, the pipeline's
// error metrics and the CUDA kernels (QOBS_HD) all go through it.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#include "qobs/dtype.h"
#include "qobs/formats.h"
#include "qobs/host_device.h"

namespace qobs::detail {

/// Element `index` (in elements, not bytes) of contiguous storage of dtype dt. Exact for
/// every float dtype and for integers below 2^53.
QOBS_HD inline double load_element(const void* base, DType dt, int64_t index) {
  const auto* p = static_cast<const unsigned char*>(base) + index * static_cast<int64_t>(dtype_size(dt));
  switch (dt) {
    case DType::kF64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DType::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kBF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return bf16_to_float(v);
    }
    case DType::kF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return f16_to_float(v);
    }
    case DType::kF8E4M3:
      return fp8_e4m3_to_float(*p);
    case DType::kI8:
      return static_cast<int8_t>(*p);
    case DType::kI16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kI64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::kU8:
      return *p;
    case DType::kBool:
      return *p ? 1.0 : 0.0;
  }
  return 0.0;
}

/// R0.4a for integers: round half to even, saturate to I's range, NaN gives 0.
template <typename I>
QOBS_HD inline I to_int(double v) {
  if (std::isnan(v)) return 0;
  double r = std::nearbyint(v);
  const double lo = static_cast<double>(std::numeric_limits<I>::min());
  const double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (r < lo) r = lo;
  if (r > hi) return std::numeric_limits<I>::max();
  return static_cast<I>(r);
}

/// Element `index` of contiguous storage of dtype dt set from a double with the
/// narrowing rule of Tensor::from_values: RNE for floats (R0.4a), to_int for integers.
QOBS_HD inline void store_element(void* base, DType dt, int64_t index, double v) {
  auto* p = static_cast<unsigned char*>(base) + index * static_cast<int64_t>(dtype_size(dt));
  switch (dt) {
    case DType::kF64:
      std::memcpy(p, &v, 8);
      break;
    case DType::kF32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DType::kBF16: {
      const uint16_t b = double_to_bf16(v);
      std::memcpy(p, &b, 2);
      break;
    }
    case DType::kF16: {
      const uint16_t b = double_to_f16(v);
      std::memcpy(p, &b, 2);
      break;
    }
    case DType::kF8E4M3:
      *p = fp8_e4m3_from_double(v);
      break;
    case DType::kI8: {
      const int8_t x = to_int<int8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case DType::kI16: {
      const int16_t x = to_int<int16_t>(v);
      std::memcpy(p, &x, 2);
      break;
    }
    case DType::kI32: {
      const int32_t x = to_int<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::kI64: {
      const int64_t x = to_int<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case DType::kU8:
      *p = to_int<uint8_t>(v);
      break;
    case DType::kBool:
      *p = v != 0.0;
      break;
  }
}

}  // namespace qobs::detail
