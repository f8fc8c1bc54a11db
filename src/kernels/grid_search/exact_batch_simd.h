// The exact batch kernel (exact_batch_simd.cc): small groups one per vector lane, every
// error computed exactly as the reference does (no approximation, no fallback). It
// serves the searches the certified polynomial cannot: bf16 / f16 data, whose error
// terms are rounded per op and summed and compared in the data dtype (Q3), and
// weighted (imatrix) or norm 2 / 3 errors. Scalar twin: scalar_errors and
// improvements_from_errors (kernels/grid_search/exact.cc) on each group; the tests run both
// (cfg.batch_groups) and compare with ref::grid_search.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/grid_search/block_errors_simd.h"
#include "kernels/simd/simd_level.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::detail {

/// One batch of groups (one per lane) against every candidate. Each lane's error of
/// candidate i is the block kernel's term (same ops, exact_term-inl.h) summed in
/// ErrorSum's canonical order (term j into f64 lane sum j % 8, one block: n <= 4096),
/// rounded once to err_dt (A2) and compared strictly with the lane's best so far,
/// which starts at initial_best (R6.6.4).
struct ExactBatchArgs {
  const float* xt = nullptr;  ///< n x lanes: xt[j * lanes + l] = element j of lane l's group
  const float* wt = nullptr;  ///< the weights, transposed the same way, or nullptr (unweighted)
  int64_t n = 0;              ///< elements per group, 1..kPolyBatchMaxLen
  const float* m0 = nullptr;  ///< per lane, the R6.6.3 base range, finite
  const float* M0 = nullptr;
  int64_t num_candidates = 0;
  const float* shrink = nullptr;        ///< the host shrink factors as f32
  qobs::detail::ShrunkQParams qparams;  ///< usable
  /// the term's constants (data_narrow, err_narrow, grid, q_min, q_max, has_zp,
  /// norm_kind: kTwo, kThree, kTable16 or kPowReplay, norm, tables, pow_table)
  BlockKernelArgs term;
  /// q and q - z are exact in the data dtype (exact_abs_error's kQExact; the caller
  /// checks the grid and range)
  bool q_exact = false;
  DType err_dt = DType::kF32;  ///< kF32, kBF16 or kF16: what each sum is rounded to
  float initial_best = 0;      ///< the error dtype's largest finite value
  /// out, ceil(num_candidates / 32) x lanes words: bit i % 32 of improved[(i / 32) *
  /// lanes + l] is set when candidate i improved lane l's group
  uint32_t* improved = nullptr;
};

/// The shortened chains of the exact batch kernel that exact_diff_mismatches checks.
enum class ExactDiffChain {
  kSkipRounding,           ///< exact_abs_error with kExactDiff (r - x not rounded)
  kSkipRoundingUnbounded,  ///< the same, without exact_diff_ok's bound (the negative control)
  kMagnitudes,             ///< exact_diff_of_magnitude on |x| (the clamp's bound of x's side)
  kMagnitudesOneBound,     ///< the same, clamping both signs at q_max (the negative control)
};

/// The exact batch kernel and the exhaustive checks of its shortened chains
/// (simd_dispatch.h).
struct ExactBatchSimd {
  /// Groups per batch (the float lanes; as PolyBatchSimd::lanes).
  int (*lanes)();
  /// False, with `improved` unusable, when some lane's candidate scale is not finite
  /// and positive (only the scalar path defines those): the caller runs the groups one
  /// at a time.
  bool (*run)(const ExactBatchArgs& args);
  /// The float patterns in [lo_bits, hi_bits) (magnitudes; both signs are tried) on
  /// which the split bf16 rounding of the exact terms (narrow_bf16_split,
  /// exact_term-inl.h) differs from the integer RNE: 0 over the range the kernels use
  /// it in (the test).
  int64_t (*split_narrowing_mismatches)(uint32_t lo_bits, uint32_t hi_bits);
  /// The (x, s) pairs on which quotient_bf16_split (exact_term-inl.h) differs from the
  /// f32 division rounded to bf16 (or, with !rounded, its product x (1 / s) from the
  /// f32 division itself) where |x| <= 2^99 s (SplitGuard) and the quotient is normal:
  /// x every bf16 value of either sign with a biased exponent in [x_exp_lo, x_exp_hi],
  /// s every bf16 significand at each of the num_s_exps biased exponents s_exps. 0
  /// (rounded) over the range the kernels use it in (the test).
  int64_t (*split_division_mismatches)(int x_exp_lo, int x_exp_hi, const int* s_exps, int num_s_exps, bool rounded);
  /// How many elements the chain (exact_term-inl.h, where exact_diff_ok holds) gives
  /// another |r - x| than exact_abs_error's integer-rounding chain, on the grid of
  /// grid_args (grid, q_min, q_max; INT or FP4, no zero point): x every bf16 value of
  /// either sign with a biased exponent in [x_exp_lo, x_exp_hi], s every bf16
  /// significand at each biased exponent in s_exps, counting the elements SplitGuard
  /// and (but for kSkipRoundingUnbounded) exact_diff_ok's bound on max |x| admit. 0
  /// for kSkipRounding and kMagnitudes (the tests).
  int64_t (*exact_diff_mismatches)(const BlockKernelArgs& grid_args, int x_exp_lo, int x_exp_hi, const int* s_exps,
                                   int num_s_exps, ExactDiffChain chain);
};
/// The table for a vector level; nullptr for kScalar (the batch kernels are vector-only;
/// groups then run one at a time).
const ExactBatchSimd* exact_batch_simd(SimdLevel level);

}  // namespace qobs::kernels::detail
