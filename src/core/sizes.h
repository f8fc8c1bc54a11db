// Checked size arithmetic for sizes computed from user-given numbers (shapes, strides,
// group_size, block_structure). A wrapped size allocates a small buffer that later
// loops index far past, so every such product or sum goes through these helpers.
#pragma once

#include <cstdint>
#include <limits>
#include <ostream>

#include "core/check.h"
#include "qobs/tensor.h"

namespace qobs::detail {

/// A shape as a message part, rendered only when a message is built (the checks sit
/// on hot paths such as shape_numel).
struct ShowShape {
  const Shape& shape;
};
inline std::ostream& operator<<(std::ostream& os, ShowShape s) { return os << shape_str(s.shape); }

inline constexpr int64_t kMaxSize = std::numeric_limits<int64_t>::max();

/// a * b; throws InvalidArgument naming `what` (the tensor or option), the operands and
/// the limit when the product does not fit in int64.
template <typename... What>
int64_t mul_size(int64_t a, int64_t b, const What&... what) {
  int64_t r = 0;
  QOBS_CHECK(!__builtin_mul_overflow(a, b, &r), InvalidArgument, what..., ": size ", a, " * ", b, " exceeds the limit ",
             kMaxSize, " (int64)");
  return r;
}

/// a + b with the same check.
template <typename... What>
int64_t add_size(int64_t a, int64_t b, const What&... what) {
  int64_t r = 0;
  QOBS_CHECK(!__builtin_add_overflow(a, b, &r), InvalidArgument, what..., ": size ", a, " + ", b, " exceeds the limit ",
             kMaxSize, " (int64)");
  return r;
}

/// n rounded up to a multiple of m (m > 0, n >= 0), checked.
template <typename... What>
int64_t round_up_size(int64_t n, int64_t m, const What&... what) {
  return add_size(n, (m - n % m) % m, what...);
}

}  // namespace qobs::detail
