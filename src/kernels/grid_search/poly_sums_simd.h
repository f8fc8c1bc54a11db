// The certified polynomial sums of the one-group search path (poly_sums_simd.cc): not
// the reference's errors but sums with a rigorous interval around them (pow_poly.h).
// Its scalar counterpart is the reference's error itself: the tests check that it
// always lies inside the interval (pow_poly_test.cc); certified.cc builds the
// intervals and settles every open comparison exactly.
#pragma once

#include <cstdint>

#include "kernels/grid_search/pow_poly.h"
#include "kernels/simd/simd_level.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::detail {

/// One canonical block of an INT- or FP4-grid search on f32 data with f32 unweighted errors,
/// with the certified cheap terms of pow_poly.h: sums[i] = the sum over the block of
/// the terms of |r| = |q - y| ~ |e / s_i| (units of s_i^p; multiply by s_i^p for the
/// error), or +inf when some |r| reached poly->limit. q is the reference's (x / s (+ z),
/// clamp, round); r and the power are approximations with the bounds of pow_poly.h.
struct PolySumArgs {
  const float* x = nullptr;
  int64_t n = 0;
  int64_t num_candidates = 0;
  const float* scale = nullptr;  ///< per candidate, normal, > 0
  const float* zp = nullptr;     ///< has_zp only
  bool has_zp = false;
  qobs::detail::GridKind grid = qobs::detail::GridKind::kInt;  ///< kInt or kFp4 (symmetric)
  float q_min = 0, q_max = 0;
  const PowPoly* poly = nullptr;
  double* sums = nullptr;
};

/// The certified polynomial sums (simd_dispatch.h).
struct PolySumsSimd {
  void (*run)(const PolySumArgs& args);
};
/// The table for a vector level; nullptr for kScalar (the certified path is vector-only).
const PolySumsSimd* poly_sums_simd(SimdLevel level);

}  // namespace qobs::kernels::detail
