// Private interface of the least-squares observers' scorer (lsq_error_simd.cc, compiled
// once per instruction set by Highway): the (weighted) squared QDQ error of one group
// for a batch of stored (scale, zero point) candidates (docs/LSQ.md#L4).
//
// The sum order is qobs's own and the same at every level: element j adds its term
// (w_j (x_j - QDQ(x_j)))... exactly (w_j d_j) d_j in f64, d_j = x_j - QDQ(x_j) in f64, to
// partial sum j mod kLsqPartials in increasing j, and lsq_combine adds the partials in
// a fixed tree. The scalar reference (lsq_search.cc) sums in this order too, so every
// level returns the same bits.
#pragma once

#include <cstdint>

#include "kernels/simd/narrow.h"
#include "kernels/simd/simd_level.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::detail {

inline constexpr int kLsqPartials = 8;

/// The canonical combination of the kLsqPartials partial sums.
inline double lsq_combine(const double* p) {
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

/// One group (finite values on x's dtype grid, as f32) and its quantizer.
struct LsqGroupArgs {
  const float* x = nullptr;
  const float* w = nullptr;  ///< nullptr: unweighted
  int64_t n = 0;
  bool has_zp = false;              ///< asymmetric: + z before rounding, - z after
  Narrow y_narrow = Narrow::kNone;  ///< dtype of x / s (+ z)
  Narrow s_narrow = Narrow::kNone;  ///< dtype of the dequantization (s_dt)
  qobs::detail::GridKind grid = qobs::detail::GridKind::kInt;
  float q_min = 0, q_max = 0;
};

/// err[c] for candidate c of `count`: scale s[c] as the QDQ applies it (on s_dt's
/// grid), zero point zx[c] cast to x's dtype and zs[c] cast to s_dt (read only with
/// has_zp). Level kAvx2 or kAvx512. Returns false, with err unspecified, when a
/// candidate needs the scalar steps: a NaN quotient or a non-finite error, whose NaN
/// encodings the lanes do not reproduce.
bool lsq_errors_simd(SimdLevel level, const LsqGroupArgs& g, const float* s, const float* zx, const float* zs,
                     int64_t count, double* err);

/// q[j] = the quantized value (R5.1.1 steps 2-4) of x_j for one candidate, the codes
/// of the least-squares refit (docs/LSQ.md#L2). Returns false, with q unspecified, on
/// a NaN quotient.
bool lsq_codes_simd(SimdLevel level, const LsqGroupArgs& g, float s, float zx, float* q);

}  // namespace qobs::kernels::detail
