// Element types (R0.3) and their names as the reference spells them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "qobs/host_device.h"

namespace qobs {

/// Storage element types. FP4 (E2M1) is not a storage type (R0.3): FP4 values live in
/// float tensors or as packed nibbles in uint8 tensors.
enum class DType : uint8_t {
  kF64,
  kF32,
  kBF16,
  kF16,
  kF8E4M3,  ///< OCP E4M3 "fn" (torch.float8_e4m3fn), R2.2
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kBool,
};

/// Bytes per element.
QOBS_HD constexpr std::size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
    case DType::kI16:
      return 2;
    case DType::kF8E4M3:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
  }
  return 0;
}
/// True for f64, f32, bf16, f16 and fp8.
QOBS_HD constexpr bool is_floating(DType dt) {
  return dt == DType::kF64 || dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16 || dt == DType::kF8E4M3;
}
/// torch name without prefix: "float32", "bfloat16", "float8_e4m3fn", "uint8", ...
std::string_view dtype_name(DType dt);
/// Parses a torch dtype name, with or without a "torch." prefix, and the common aliases
/// ("float", "half", "fp8"...). Unknown name -> InvalidArgument (R1.2.2).
DType parse_dtype(std::string_view name);
/// safetensors dtype string (R8.8.1): "F32", "BF16", "F8_E4M3", ...
std::string_view safetensors_dtype_name(DType dt);
/// Parses a safetensors dtype string; std::nullopt when unknown.
std::optional<DType> parse_safetensors_dtype(std::string_view name);

}  // namespace qobs
