#include "kernels/grid_search/pow_poly.h"

#include <algorithm>
#include <cmath>

namespace qobs::kernels::detail {

namespace {

/// Chebyshev interpolant of m^p on [1, 2], monomial coefficients in m (long double),
/// degree d. (Monomials in m are well conditioned here: sum |c_i| 2^i ~ 7 for p = 2.4,
/// and evaluating in m saves the vector subtraction u = m - 1.5.)
void interpolate(long double p, int d, long double* c) {
  const int n = d + 1;
  long double u[PowPoly::kMaxDegree + 1], f[PowPoly::kMaxDegree + 1];
  for (int k = 0; k < n; ++k) {
    u[k] = 1.5L + 0.5L * std::cos((2.0L * k + 1.0L) * 3.14159265358979323846264338327950288L / (2.0L * n));
    f[k] = std::pow(u[k], p);
  }
  // Newton divided differences, then expand the Newton form into monomials.
  for (int j = 1; j < n; ++j)
    for (int k = n - 1; k >= j; --k) f[k] = (f[k] - f[k - 1]) / (u[k] - u[k - j]);
  for (int i = 0; i < n; ++i) c[i] = 0;
  for (int j = n - 1; j >= 0; --j) {
    // c := c * (u - u[j]) + f[j]
    for (int i = n - 1; i >= 1; --i) c[i] = c[i - 1] - u[j] * c[i];
    c[0] = f[j] - u[j] * c[0];
  }
}

/// Interpolation error bound on [1, 2] with d + 1 Chebyshev nodes, relative to
/// min m^p = 1: max |f^(d+1)| / (d+1)! * (1/2)^(d+1) / 2^d.
double interpolation_bound(double p, int d) {
  double deriv = 1.0, fact = 1.0;
  for (int j = 0; j <= d; ++j) {
    deriv *= std::fabs(p - j);
    fact *= j + 1;
  }
  deriv *= std::max(1.0, std::pow(2.0, p - d - 1));
  return deriv / fact * std::ldexp(1.0, -(d + 1)) * std::ldexp(1.0, -d);
}

}  // namespace

namespace {

/// The bound of both summation shapes; lane_rel bounds the f32 lane sums' rounding.
PolySumBound sum_bound(const PowPoly& P, int64_t n, double lane_rel) {
  const double nd = static_cast<double>(n);
  PolySumBound b;
  b.rel = P.rel_err + P.scale_pow_rel_err + lane_rel + 0x1p-23 + 0x1p-24 + nd * 0x1p-52 + 0x1p-40;
  b.abs_units = nd * P.floor_term;
  b.abs = nd * 0x1p-149;
  return b;
}

}  // namespace

PolySumBound poly_sum_bound(const PowPoly& P, int64_t n, int64_t block) {
  // the kernel keeps 2 x 8 f32 lane sums per block: at most block / 16 + 1 additions
  // each, every one within 2^-24 of the partial sum (terms are non-negative)
  return sum_bound(P, n, (static_cast<double>(std::min(n, block)) / 16.0 + 2.0) * 0x1p-24);
}

PolySumBound poly_sum_bound_sequential(const PowPoly& P, int64_t n) {
  // (1 + u)^(n-1) - 1 <= (n - 1) u (1 + 2^-20) for n <= 2^16; n u covers it
  return sum_bound(P, n, static_cast<double>(std::max<int64_t>(n, 1)) * 0x1p-24);
}

bool make_pow_poly(double p, int k_lo, PowPoly* out) {
  if (!(p >= 1.0 && p <= 8.0)) return false;
  constexpr double u24 = 0x1p-24;
  for (int d = 2; d <= PowPoly::kMaxDegree; ++d) {
    long double c[PowPoly::kMaxDegree + 1];
    interpolate(p, d, c);
    const double interp = interpolation_bound(p, d);
    // f32 coefficients: |c - fl(c)| <= u |c|; the kernel's evaluation (Estrin or
    // Horner, FMAs) rounds each partial result at most d + 2 times, every partial
    // bounded by sum |c_i| m^i <= sum |c_i| 2^i; divided by min m^p = 1.
    double mag = 0;
    PowPoly P;
    P.degree = d;
    for (int i = 0; i <= d; ++i) {
      P.coef[i] = static_cast<float>(c[i]);
      P.coef_d[i] = static_cast<double>(c[i]);
      mag += std::fabs(static_cast<double>(P.coef[i])) * std::ldexp(1.0, i);
    }
    const double poly_rel = interp + (2 * d + 4) * u24 * mag * (1 + 0x1p-20);
    if (poly_rel > 0x1p-14) continue;
    P.p = p;
    P.k_lo = k_lo;
    P.floor = std::ldexp(1.0f, k_lo);
    P.limit = std::ldexp(1.0f, k_lo + 16);
    for (int k = k_lo; k < k_lo + 16; ++k) P.table[(k + 127) & 15] = static_cast<float>(std::exp2(p * k));
    for (int j = 0; j < 16; ++j) P.rel_table[j] = static_cast<float>(std::exp2(p * (j - 8)));
    // term = fl(T * fl(P(m))), T = 2^(p k) (1 + u24); and a margin of two roundings of
    // r, (1 + u24)^(2p), on top of poly_r_error (which already counts q - y's)
    const double r_rel = std::pow(1.0 + u24, 2.0 * p) - 1.0;
    P.rel_err = (1 + poly_rel) * (1 + u24) * (1 + u24) * (1 + r_rel) - 1.0;
    P.floor_term = std::exp2(p * k_lo) * (1 + P.rel_err);
    for (int ef = 0; ef < 256; ++ef) P.exp_table[ef] = std::exp2(p * (ef - 127));
    // scale_pow: the interpolant in double (coefficients rounded once, Horner ~2^-52 a step)
    P.scale_pow_rel_err = interp + (2 * d + 4) * 0x1p-53 * mag * (1 + 0x1p-20) + 0x1p-50;
    // Young's inequality with weight lambda: a^(p-1) <= (p-1)/p lambda a^p +
    // lambda^(1-p) / p for every lambda > 0; lambda = 2 (p+1)^(1/p) is optimal when
    // the |r| are uniform on [0, 1/2] (unclamped elements), i.e. for typical groups
    const double lambda = 2.0 * std::pow(p + 1.0, 1.0 / p);
    P.young_factor = std::max(1.0, std::exp2(p - 2.0)) * (1.0 + 0x1p-20);
    P.young_sum = p * P.young_factor * (p - 1.0) / p * lambda * (1.0 + P.rel_err);
    P.young_count = p * P.young_factor * std::pow(lambda, 1.0 - p) / p;
    P.rho_exponent = static_cast<int>(p - 1.0);
    *out = P;
    return true;
  }
  return false;
}

}  // namespace qobs::kernels::detail
