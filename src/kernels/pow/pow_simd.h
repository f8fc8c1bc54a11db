// |e|^norm in vector lanes (pow_simd.cc, pow-inl.h): the exact libm powf replay, whose
// scalar twin is powf_replay (libm_powf.cc), and the approximate pow of the certified
// path, whose bound the tests check against std::pow.
#pragma once

#include <cstdint>

#include "kernels/pow/libm_powf.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels::detail {

/// Relative error bound of the kPowApprox terms (pow_approx in pow-inl.h): the
/// observed error is ~1e-5; the tests check it stays four times below this bound.
inline constexpr double kPowApproxRelErr = 0x1p-13;
/// Absolute slack per term: results (or inputs, with norm >= 1) below 2^-125 count as 0.
inline constexpr double kPowApproxAbsErr = 0x1p-124;

/// The array forms of pow-inl.h's functions, for the tests (simd_dispatch.h).
struct PowSimd {
  /// |x|^y for n non-negative finite x with the libm replay.
  void (*replay)(const float* x, int64_t n, float y, const PowfTables& t, float* out);
  /// The kPowApprox terms of n non-negative x.
  void (*approx)(const float* x, int64_t n, float y, float* out);
};
/// The table for a vector level; nullptr for kScalar (the scalar twin: powf_replay).
const PowSimd* pow_simd(SimdLevel level);

}  // namespace qobs::kernels::detail
