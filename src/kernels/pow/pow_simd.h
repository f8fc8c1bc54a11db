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

/// |x|^y for n non-negative finite x with the libm replay, vectorized (tests).
void pow_replay_simd(SimdLevel level, const float* x, int64_t n, float y, const PowfTables& t, float* out);
/// The kPowApprox terms of n non-negative x (tests).
void pow_approx_simd(SimdLevel level, const float* x, int64_t n, float y, float* out);

}  // namespace qobs::kernels::detail
