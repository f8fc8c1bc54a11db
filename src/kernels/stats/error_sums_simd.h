// The report's error sums (kernels::error_sums) in vector lanes: Σx² and Σ(x − y)² over
// two f32 / bf16 / f16 arrays, element i on partial i mod 8 (kErrorSumPartials), each
// partial summed in increasing i with a rounded multiply then a rounded add -- the
// order and the operations of the scalar loop (ref::error_sums), so the partials are
// bit for bit the same.
#pragma once

#include <cstdint>

#include "kernels/simd/simd_level.h"
#include "qobs/dtype.h"

namespace qobs::kernels::detail {

/// The report's error sums in vector lanes (simd_dispatch.h).
struct ErrorSumsSimd {
  /// Adds elements [0, n / 8 * 8) of x and y (contiguous, dtype xdt / ydt: f32, bf16
  /// or f16) to the eight partials sig[i % 8] += x_i * x_i and err[i % 8] += d * d, d =
  /// x_i - y_i in double; returns how many elements it took (the caller adds the rest).
  int64_t (*add)(const void* x, DType xdt, const void* y, DType ydt, int64_t n, double* sig, double* err);
};
/// The table for a vector level; nullptr for kScalar (the scalar twin:
/// ref::add_error_sums).
const ErrorSumsSimd* error_sums_simd(SimdLevel level);

}  // namespace qobs::kernels::detail
