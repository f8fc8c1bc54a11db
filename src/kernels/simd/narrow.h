// The rounding the vector kernels apply after each element-wise operation (R0.4b):
// shared by the search kernels and the QDQ runs (grid_round-inl.h narrow_to).
#pragma once

#include <cstdint>
#include <optional>

#include "qobs/dtype.h"
#include "qobs/numeric.h"

namespace qobs::kernels::detail {

/// Rounding applied after each element-wise operation (R0.4b), in an f32 container.
enum class Narrow : uint8_t { kNone, kBF16, kF16 };

/// The rounding of Arith{dt, mode}'s results, or nullopt where the lanes cannot
/// follow it (f64 / fp8 arithmetic: the callers' scalar loops).
inline std::optional<Narrow> narrow_of(DType dt, NumericMode mode) {
  switch (dt) {
    case DType::kF32:
      return Narrow::kNone;
    case DType::kBF16:
      return mode == NumericMode::kWide ? Narrow::kNone : Narrow::kBF16;
    case DType::kF16:
      return mode == NumericMode::kWide ? Narrow::kNone : Narrow::kF16;
    default:
      return std::nullopt;
  }
}

}  // namespace qobs::kernels::detail
