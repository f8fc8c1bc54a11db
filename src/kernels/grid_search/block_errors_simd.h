// The exact block kernel of the grid search (block_errors_simd.cc): one canonical block
// of one group against every candidate, each error term and sum exactly as the
// reference computes it. Scalar twin: scalar_errors in kernels/grid_search/exact.cc (the
// reference's per-element arithmetic), compared bit for bit at every level by the tests.
#pragma once

#include <cstdint>

#include "kernels/simd/narrow.h"
#include "kernels/pow/pow_simd.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::detail {

/// Elements per canonical summation block (see ErrorSum in select.h).
inline constexpr int64_t kSumBlock = 4096;

/// How |e|^norm is evaluated: exponent 2 and 3 by repeated multiplication (as
/// Arith::pow_abs), others by the libm replay (libm_powf.h) or std::pow per lane.
/// kPowApprox is not exact: exp(norm * log(e)) in f32 (relative error below
/// kPowApproxRelErr, see pow_approx_bound), used only to decide comparisons that the
/// error bound makes certain; the caller evaluates exactly whenever it does not.
/// kTable16: bf16 / f16 error terms take at most 2^15 non-negative values, so the
/// caller tabulates Arith::pow_abs for every one of them (exact by construction) and
/// the kernel looks the term up.
enum class NormKind : uint8_t { kTwo, kThree, kPowReplay, kPowScalar, kPowApprox, kTable16 };

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
  const PowfTables* tables = nullptr;   ///< kPowReplay only
  const float* pow_table = nullptr;     ///< kTable16: 32768 terms indexed by the 16-bit pattern of |e|
  const double* pow_table64 = nullptr;  ///< bf16 errors: the same terms widened to f64, for both signs
  double* sums = nullptr;               ///< out: num_candidates canonical block sums
};

/// Whether every code q, and q - z, that exact_abs_error meets is a value the data dtype
/// holds exactly, so that their narrowing (the identity) may be skipped (kQExact). INT
/// codes are integers of magnitude <= q_max - q_min, exact in bf16 up to 256 and in f16
/// up to 2048, provided the zero points are integers in [q_min, q_max]
/// (`integral_zero_points`: the ShrunkQParams candidates of R6.6.6 steps 1-2 are). FP4 and
/// FP8 values (2 and 4 significant bits, 2^-9 to 448) are exact in both; with a zero
/// point q - z need not be.
inline bool codes_exact_in_data_dtype(const BlockKernelArgs& k, bool integral_zero_points) {
  if (k.data_narrow == Narrow::kNone) return true;
  if (k.grid != qobs::detail::GridKind::kInt) return !k.has_zp;
  if (k.has_zp && !integral_zero_points) return false;
  return k.q_max - k.q_min <= (k.data_narrow == Narrow::kF16 ? 2048.0f : 256.0f);
}

/// The vector block kernel (simd_dispatch.h).
struct BlockErrorsSimd {
  void (*run)(const BlockKernelArgs& args);
};
/// The table for a vector level; nullptr for kScalar (the scalar twin: scalar_errors).
const BlockErrorsSimd* block_errors_simd(SimdLevel level);

}  // namespace qobs::kernels::detail
