// Certified cheap |r|^p for the INT grid search (poly_sums_simd.cc, poly_batch_simd.cc).
//
// With f32 data, the reference's error term is powf(|e|, p) with e = d s - x. Writing
// e = s r (r = e / s, |r| <= 1/2 for every element the grid does not clamp), the sum
// over a group is s^p * sum |r|^p, and |r|^p splits on r's float exponent:
// r = 2^k m with m in [1, 2) gives |r|^p = 2^(p k) * m^p -- a 16-entry table indexed by
// the low bits of the exponent field, and a low-degree polynomial in m.
// That is ~12 vector ops per 8 terms instead of a general log / exp pow. The result is
// not powf's; it comes with a rigorous relative bound (below), and the grid search
// uses it only to decide comparisons whose intervals do not overlap (kernels/grid_search/certified.cc).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace qobs::kernels::detail {

struct PowPoly {
  static constexpr int kMaxDegree = 6;
  int degree = 0;
  float coef[kMaxDegree + 1] = {};  ///< m^p ~ sum coef[i] m^i on [1, 2)
  /// table[(k + 127) & 15] = 2^(p k) (rounded to f32) for k in [k_lo, k_lo + 15].
  alignas(64) float table[16] = {};
  int k_lo = 0;
  /// rel_table[j] = 2^(p (j - 8)) (rounded to f32): s^p relative to a reference scale,
  /// for scales from 8 binades below it to 7 above (the batch kernel's bookkeeping).
  alignas(64) float rel_table[16] = {};
  float floor = 0;  ///< 2^k_lo: smaller |r| are raised to it (bounded by floor_term)
  float limit = 0;  ///< 2^(k_lo + 16): a |r| at or above leaves the table (sum -> +inf)
  double p = 0;
  /// poly_r_slack's constants: c = max(1, 2^(p-2)) (1 + 2^-20), young_sum =
  /// p c (p-1)/p lambda (1 + rel_err), young_count = p c lambda^(1-p) / p
  double young_factor = 1, young_sum = 0, young_count = 0;
  int rho_exponent = 0;  ///< floor(p - 1)
  /// |computed term - |r|^p| <= rel_err * |r|^p for floor <= |r| < limit, counting the
  /// interpolation error, the f32 coefficients, the Horner FMAs, the table entry, the
  /// final product and the two roundings of r = e * fl(1 / s).
  double rel_err = 0;
  /// Below the floor the computed term is 2^(p k_lo) P(1) while the exact one lies in
  /// [0, 2^(p k_lo)): at most this much off (units of s^p).
  double floor_term = 0;
  /// 2^(p k) in double for every f32 exponent field, and the relative bound of s^p
  /// computed by scale_pow (polynomial interpolation error; double evaluation).
  double exp_table[256] = {};
  double coef_d[kMaxDegree + 1] = {};  ///< the interpolant's coefficients, for scale_pow
  double scale_pow_rel_err = 0;

  /// s^p for a normal positive float s, within scale_pow_rel_err: 2^(p k) from the
  /// table, m^p from the interpolant in double. Inline: the search calls it once per
  /// candidate and group, where a libm pow would cost more than the rest of the step.
  double scale_pow(float s) const {
    uint32_t bits;
    std::memcpy(&bits, &s, 4);
    const uint32_t mbits = (bits & 0x007FFFFFu) | 0x3F800000u;
    float m;
    std::memcpy(&m, &mbits, 4);
    double v = coef_d[degree];
    for (int i = degree - 1; i >= 0; --i) v = v * m + coef_d[i];
    return exp_table[bits >> 23] * v;
  }
};

/// How far the reference's error sum over n elements can be from A = s^p * (the
/// kernel's block sums of terms, added in double), for blocks of at most `block`
/// elements: |err - A| <= rel * A + abs_units * s^p + abs.
struct PolySumBound {
  double rel;        ///< per-term bound, f32 lane sums, s^p, powf's 1 ulp, f64 sum, f32 result
  double abs_units;  ///< terms below the table floor (units of s^p)
  double abs;        ///< the reference's f32 terms that underflow
};
PolySumBound poly_sum_bound(const PowPoly& P, int64_t n, int64_t block);
/// The same bound when each group's n terms are added one after another into a single
/// f32 sum (the batch kernel, one group per lane): n - 1 additions of non-negative
/// terms, each within 2^-24 of its partial sum.
PolySumBound poly_sum_bound_sequential(const PowPoly& P, int64_t n);

/// The kernel takes r = q - y (y = x / s (+ z) as rounded for the quantization) where
/// the reference's term is |e / s|^p with e = fl(fl(d s) - x): one subtraction instead
/// of a multiply, a subtraction and a multiply. Per element |r - e / s| <= rho, with
/// rho = 2^-24 (4 X / s + 4 |z| + 3 Q) (1 + 2^-20) for |x| <= X and |q| <= Q (the
/// roundings of x / s, + z, q - y, d s and - x).
inline double poly_r_error(double x_over_s, double abs_z, double q_abs_max) {
  return 0x1p-24 * (4.0 * x_over_s + 4.0 * abs_z + 3.0 * q_abs_max) * (1.0 + 0x1p-20);
}

/// What rho does to a sum of n terms whose kernel value is sum_units (units of s^p):
/// per term p (a + rho)^(p-1) rho by the mean value theorem, with
/// (a + rho)^(p-1) <= max(1, 2^(p-2)) (a^(p-1) + rho^(p-1)) and the weighted Young
/// inequality a^(p-1) <= (p-1)/p lambda a^p + lambda^(1-p) / p (make_pow_poly picks
/// lambda). sum a^p <= sum_units (1 + rel_err): the kernel's terms overestimate the
/// floored ones. Inline and pow-free: it runs once per candidate and group.
inline double poly_r_slack(const PowPoly& P, double rho, double sum_units, int64_t n) {
  const double nd = static_cast<double>(n);
  double rho_pm1 = 1.0;  // rho^(p-1) <= rho^floor(p-1) for rho <= 1
  for (int k = 0; k < P.rho_exponent; ++k) rho_pm1 *= rho;
  if (rho > 1.0) rho_pm1 = HUGE_VAL;  // never for finite data in range; sends to the exact path
  return rho * (P.young_sum * sum_units + nd * (P.young_count + P.young_factor * P.p * rho_pm1));
}

/// Builds the plan for exponent p (1 <= p <= 8) and table window k_lo: the lowest
/// degree whose bound is at most 2^-14. False when no degree up to kMaxDegree is.
bool make_pow_poly(double p, int k_lo, PowPoly* out);

}  // namespace qobs::kernels::detail
