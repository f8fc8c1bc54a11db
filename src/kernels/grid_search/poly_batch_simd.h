// The batch kernel (poly_batch_simd.cc): small f32 groups one per vector lane, the whole
// certified-polynomial decision lane-wise. Scalar twin: the one-group path of
// kernels/grid_certified.cc (certified_improvements), whose decisions -- the reference's --
// the tests compare with the batch's (tests/kernels/grid_search/grid_search_test.cc).
#pragma once

#include <cstdint>

#include "kernels/grid_search/pow_poly.h"
#include "kernels/simd/simd_level.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::detail {

/// Groups longer than this take the one-group-at-a-time path (the batch's transposed
/// copy must stay in L1 next to everything else).
inline constexpr int64_t kPolyBatchMaxLen = 256;

/// The whole kPowPoly decision of a batch of small groups, one group per lane (the
/// batch kernel): for every candidate i, the lane's (scale, zp) as ShrunkQParams
/// computes them, the certified interval of its error (the bounds of pow_poly.h, with
/// the sum of a lane's n terms kept in one f32), and the reference's improvement rule
/// against the lane's best so far. A comparison the intervals cannot decide calls
/// `exact` for the lane (the reference's error, rounded to f32) -- the decisions are
/// the same as the one-group path (certified.cc) makes, which are the reference's.
/// Every lane must hold a group: the caller pads a short batch with copies.
struct PolyBatchArgs {
  const float* xt = nullptr;  ///< n x lanes: xt[j * lanes + l] = element j of lane l's group (|x| for FP4)
  int64_t n = 0;              ///< elements per group, 1..kPolyBatchMaxLen
  const float* m0 = nullptr;  ///< per lane, R6.6.3 base range, finite, |m0|, |M0| < 2^100
  const float* M0 = nullptr;
  const float* xmax = nullptr;  ///< per lane, max |x| of the group
  int64_t num_candidates = 0;
  const float* shrink = nullptr;                               ///< the host shrink factors as f32
  qobs::detail::ShrunkQParams qparams;                         ///< usable
  qobs::detail::GridKind grid = qobs::detail::GridKind::kInt;  ///< kInt, or kFp4 (symmetric, xt = |x|)
  float q_min = 0, q_max = 0;
  const PowPoly* poly = nullptr;
  PolySumBound bound{};     ///< poly_sum_bound_sequential(*poly, n)
  double q_abs_max = 0;     ///< max(|q_min|, |q_max|)
  double initial_best = 0;  ///< the largest finite f32 (R6.6.4)
  double (*exact)(void* ctx, int lane, float scale, float zp) = nullptr;
  void* ctx = nullptr;
  /// out, ceil(num_candidates / 32) x lanes words: bit i % 32 of improved[(i / 32) *
  /// lanes + l] is set when candidate i improved lane l's group
  uint32_t* improved = nullptr;
};

/// The polynomial batch kernel and its input transpose (simd_dispatch.h).
struct PolyBatchSimd {
  /// Groups per batch (the float lanes).
  int (*lanes)();
  void (*run)(const PolyBatchArgs& args);
  /// The batch kernel's input: groups[l] (l < lanes) holds n values; writes xt[j *
  /// lanes + l] (|value| when abs_values) and each group's min and max (for a zero
  /// result its sign is unspecified: the caller settles it). False when some value is
  /// NaN.
  bool (*transpose)(const float* const* groups, int64_t n, bool abs_values, float* xt, float* lo, float* hi);
  /// The batch kernel's FP4 rounding of n non-negative values <= 6 (tests: it must
  /// equal the interval table's).
  void (*fp4_round_nonneg)(const float* x, int64_t n, float* out);
};
/// The table for a vector level; nullptr for kScalar (the batch kernels are vector-only).
const PolyBatchSimd* poly_batch_simd(SimdLevel level);

}  // namespace qobs::kernels::detail
