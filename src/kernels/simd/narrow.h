// The rounding the vector kernels apply after each element-wise operation (R0.4b):
// shared by the search kernels and the QDQ runs (grid_round-inl.h narrow_to).
#pragma once

#include <cstdint>

namespace qobs::kernels::detail {

/// Rounding applied after each element-wise operation (R0.4b), in an f32 container.
enum class Narrow : uint8_t { kNone, kBF16, kF16 };

}  // namespace qobs::kernels::detail
