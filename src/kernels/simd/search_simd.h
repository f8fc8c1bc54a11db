// Private interface of the vectorized kernels (search_simd.cc, compiled once per
// instruction set by Highway). Callers pick the level once per call (simd_level.h).
#pragma once

#include <cstdint>

#include "kernels/simd/libm_powf.h"
#include "kernels/simd/pow_poly.h"
#include "kernels/simd/simd_level.h"
#include "qobs/dtype.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::detail {

/// Elements per canonical summation block (see ErrorSum in search/select.h).
inline constexpr int64_t kSumBlock = 4096;

/// Rounding applied after each element-wise operation (R0.4b), in an f32 container.
enum class Narrow : uint8_t { kNone, kBF16, kF16 };

/// How |e|^norm is evaluated: exponent 2 and 3 by repeated multiplication (as
/// Arith::pow_abs), others by the libm replay (libm_powf.h) or std::pow per lane.
/// kPowApprox is not exact: exp(norm * log(e)) in f32 (relative error below
/// kPowApproxRelErr, see pow_approx_bound), used only to decide comparisons that the
/// error bound makes certain; the caller evaluates exactly whenever it does not.
/// kTable16: bf16 / f16 error terms take at most 2^15 non-negative values, so the
/// caller tabulates Arith::pow_abs for every one of them (exact by construction) and
/// the kernel looks the term up.
enum class NormKind : uint8_t { kTwo, kThree, kPowReplay, kPowScalar, kPowApprox, kTable16 };

/// Relative error bound of the kPowApprox terms (pow_approx in search_simd.cc): the
/// observed error is ~1e-5; the tests check it stays four times below this bound.
inline constexpr double kPowApproxRelErr = 0x1p-13;
/// Absolute slack per term: results (or inputs, with norm >= 1) below 2^-125 count as 0.
inline constexpr double kPowApproxAbsErr = 0x1p-124;

/// One canonical block (n <= kSumBlock values of one group) against S candidates.
struct BlockKernelArgs {
  const float* x = nullptr;  ///< n values, already on the data dtype's grid
  const float* w = nullptr;  ///< n importance weights (imatrix) or nullptr
  int64_t n = 0;
  int64_t num_candidates = 0;
  const float* scale = nullptr;  ///< per candidate, on the data dtype's grid, > 0
  const float* zp = nullptr;     ///< per candidate zero point cast to the data dtype (has_zp only)
  bool has_zp = false;
  Narrow data_narrow = Narrow::kNone;  ///< the QDQ ops' dtype (x / s, + z, q, - z, * s)
  Narrow err_narrow = Narrow::kNone;   ///< the error terms' dtype
  qobs::detail::GridKind grid = qobs::detail::GridKind::kInt;
  float q_min = 0, q_max = 0;
  NormKind norm_kind = NormKind::kTwo;
  float norm = 2.0f;
  const PowfTables* tables = nullptr;  ///< kPowReplay only
  const float* pow_table = nullptr;    ///< kTable16: 32768 terms indexed by the 16-bit pattern of |e|
  double* sums = nullptr;              ///< out: num_candidates canonical block sums
};

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

/// Groups longer than this take the one-group-at-a-time path (the batch's transposed
/// copy must stay in L1 next to everything else).
inline constexpr int64_t kPolyBatchMaxLen = 256;

/// The whole kPowPoly decision of a batch of small groups, one group per lane (the
/// batch kernel): for every candidate i, the lane's (scale, zp) as ShrunkQParams
/// computes them, the certified interval of its error (the bounds of pow_poly.h, with
/// the sum of a lane's n terms kept in one f32), and the reference's improvement rule
/// against the lane's best so far. A comparison the intervals cannot decide calls
/// `exact` for the lane (the reference's error, rounded to f32) -- the decisions are
/// the same as fused_search.cc's one-group path makes, which are the reference's.
/// Every lane must hold a group: the caller pads a short batch with copies.
struct PolyBatchArgs {
  const float* xt = nullptr;  ///< n x lanes: xt[j * lanes + l] = element j of lane l's group (|x| for FP4)
  int64_t n = 0;              ///< elements per group, 1..kPolyBatchMaxLen
  const float* m0 = nullptr;  ///< per lane, R6.6.3 base range, finite, |m0|, |M0| < 2^100
  const float* M0 = nullptr;
  const float* xmax = nullptr;  ///< per lane, max |x| of the group
  int64_t num_candidates = 0;
  const float* shrink = nullptr;  ///< the host shrink factors as f32
  qobs::detail::ShrunkQParams qparams;  ///< usable
  qobs::detail::GridKind grid = qobs::detail::GridKind::kInt;  ///< kInt, or kFp4 (symmetric, xt = |x|)
  float q_min = 0, q_max = 0;
  const PowPoly* poly = nullptr;
  PolySumBound bound{};  ///< poly_sum_bound_sequential(*poly, n)
  double q_abs_max = 0;  ///< max(|q_min|, |q_max|)
  double initial_best = 0;  ///< the largest finite f32 (R6.6.4)
  double (*exact)(void* ctx, int lane, float scale, float zp) = nullptr;
  void* ctx = nullptr;
  /// out, ceil(num_candidates / 32) x lanes words: bit i % 32 of improved[(i / 32) *
  /// lanes + l] is set when candidate i improved lane l's group
  uint32_t* improved = nullptr;
};

/// R4.1 for n f32 (min, max) pairs under a ShrunkQParams-usable plan (q.usable): the
/// scales and the zero points (integer values, as floats; 0 when symmetric), bit for
/// bit compute_qparams_elem's.
void shrunk_qparams_simd(SimdLevel level, const qobs::detail::ShrunkQParams& q, const float* lo, const float* hi,
                         int64_t n, float* scale, float* zp);

/// Groups per batch of poly_batch_simd at `level` (the float lanes).
int poly_batch_lanes(SimdLevel level);
void poly_batch_simd(SimdLevel level, const PolyBatchArgs& args);
/// The batch kernel's input: groups[l] (l < lanes) holds n values; writes xt[j * lanes +
/// l] (|value| when abs_values) and each group's min and max (for a zero result its sign
/// is unspecified: the caller settles it). False when some value is NaN.
bool batch_transpose_simd(SimdLevel level, const float* const* groups, int64_t n, bool abs_values, float* xt,
                          float* lo, float* hi);
/// The batch kernel's FP4 rounding of n non-negative values <= 6 (tests: it must equal
/// the interval table's).
void fp4_round_nonneg_simd(SimdLevel level, const float* x, int64_t n, float* out);

/// Vectorized block kernel at `level` (kAvx2 or kAvx512).
void block_errors_simd(SimdLevel level, const BlockKernelArgs& args);
void poly_sums_simd(SimdLevel level, const PolySumArgs& args);
/// NaN-propagating min and max of n floats (n >= 1).
void minmax_simd(SimdLevel level, const float* x, int64_t n, float* lo, float* hi);
/// Min and max of each of num_groups (a multiple of 8) consecutive groups of len (a
/// multiple of 8) f32 / bf16 / f16 values (dt), eight groups per pass. The sign of a
/// zero result is unspecified (the caller settles it); false when some value is NaN.
bool minmax_groups_simd(SimdLevel level, const void* x, DType dt, int64_t num_groups, int64_t len, float* mins,
                        float* maxs);
/// Exact widening of n bf16 (is_bf16) or f16 bit patterns to float.
void widen_simd(SimdLevel level, const uint16_t* src, int64_t n, bool is_bf16, float* dst);
/// |x|^y for n non-negative finite x with the libm replay, vectorized (tests).
void pow_replay_simd(SimdLevel level, const float* x, int64_t n, float y, const PowfTables& t, float* out);
/// The kPowApprox terms of n non-negative x (tests).
void pow_approx_simd(SimdLevel level, const float* x, int64_t n, float y, float* out);

}  // namespace qobs::kernels::detail
