#include "qobs/formats.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"

namespace qobs {

double dtype_max(DType dt) {
  switch (dt) {
    case DType::kF64:
      return std::numeric_limits<double>::max();
    case DType::kF32:
      return std::numeric_limits<float>::max();
    case DType::kBF16:
      return bf16_to_float(0x7F7Fu);
    case DType::kF16:
      return 65504.0;
    case DType::kF8E4M3:
      return kFp8E4M3Spec.max_finite;
    case DType::kI8:
      return 127.0;
    case DType::kI16:
      return 32767.0;
    case DType::kI32:
      return 2147483647.0;
    case DType::kI64:
      return 9223372036854775807.0;
    case DType::kU8:
      return 255.0;
    case DType::kBool:
      return 1.0;
  }
  return 0.0;
}

double dtype_min(DType dt) {
  switch (dt) {
    case DType::kI8:
      return -128.0;
    case DType::kI16:
      return -32768.0;
    case DType::kI32:
      return -2147483648.0;
    case DType::kI64:
      return -9223372036854775808.0;
    case DType::kU8:
    case DType::kBool:
      return 0.0;
    default:
      return -dtype_max(dt);
  }
}

}  // namespace qobs
