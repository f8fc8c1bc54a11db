// Private interface of the least-squares observers' scorer (lsq_error_simd.cc, compiled
// once per instruction set by Highway): the (weighted) squared QDQ error of one group
// for a batch of stored (scale, zero point) candidates (docs/LSQ.md#L4).
//
// The sum order is qobs's own and the same at every level: element j adds its term
// (w_j (x_j - QDQ(x_j)))... exactly (w_j d_j) d_j in f64, d_j = x_j - QDQ(x_j) in f64, to
// partial sum j mod kLsqPartials in increasing j, and combine_partials (kernels.h) adds the partials in
// a fixed tree. The scalar twins below (the reference's) sum in this order too, so every
// level returns the same bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/simd/narrow.h"
#include "kernels/simd/simd_level.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::detail {

/// The report's error sums and the lsq scorer share one canonical order (kernels.h).
inline constexpr int kLsqPartials = kErrorSumPartials;

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

/// The least-squares refit's sums (docs/LSQ.md#L2) over the quantized values q_j
/// (R5.1.1 steps 2-4, the raw codes) of one candidate, each summed in the canonical
/// order of the error: Σ w, Σ w x, Σ w q, Σ (w q) q, Σ (w q) x, in f64 (w = 1
/// unweighted).
enum LsqRefitSum { kSumW, kSumWX, kSumWQ, kSumWQQ, kSumWQX, kLsqRefitSums };

/// Symmetric integer grids: the error of the ideal quantizer (nearest code, clamped;
/// none of the dtype roundings) at each scale of a grid, the proxy that picks which
/// scales the real scorer sees (docs/LSQ.md#L2):
///   err[c] = sum_j w_j (ax_j - s_c min(round(ax_j / s_c), lim_j))^2
/// with ax_j = |x_j| and lim_j the largest code on x_j's side. In f32, in a fixed order
/// that is the same at every level: per candidate, q = min(nearbyint(ax_j * (1 / s_c)),
/// lim_j), d = fma(-q, s_c, ax_j), then acc = fma(d, d, acc) (weighted: fma(w_j d, d,
/// acc)) for j = 0, 1, ..., n - 1. The lanes hold candidates, so each lane runs exactly
/// this sequence. s_c: positive normal floats whose reciprocal is finite.
/// prune_above < +inf lets a block of candidates stop once each of its partial sums
/// exceeds it, its err then +inf: every err is either the sum above or +inf for a
/// candidate whose sum exceeds prune_above (the sums never fall; a caller that keeps the
/// least few, with prune_above the largest of those so far, keeps the same ones).
inline void lsq_ideal_errors_scalar(const float* ax, const float* lim, const float* w, int64_t n, const float* s,
                                    int64_t count, float* err) {
  for (int64_t c = 0; c < count; ++c) {
    const float inv = 1.0f / s[c];
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float q = std::min(std::nearbyint(ax[j] * inv), lim[j]);
      const float d = std::fma(-q, s[c], ax[j]);
      acc = w ? std::fma(w[j] * d, d, acc) : std::fma(d, d, acc);
    }
    err[c] = acc;
  }
}

/// Asymmetric integer grids: the ideal quantizer's error for (scale, zero point)
/// candidates, the proxy that picks which of the log grid's candidates the real scorer
/// sees (docs/LSQ.md#L2):
///   err[c] = sum_j w_j (x_j - s_c (clamp(round(x_j / s_c + z_c), q_min, q_max) - z_c))^2
/// In f32, the same fixed order at every level: per candidate, q = clamp(nearbyint(fma(x_j,
/// 1 / s_c, z_c))), d = fma(-(q - z_c), s_c, x_j), acc = fma(d, d, acc) (weighted:
/// fma(w_j d, d, acc)) for j = 0, 1, ..., n - 1; lanes hold candidates. s_c: positive
/// normal floats with a finite reciprocal; z_c: integers.
inline void lsq_ideal_errors_asym_scalar(const float* x, const float* w, int64_t n, const float* s, const float* z,
                                         int64_t count, float q_min, float q_max, float* err) {
  for (int64_t c = 0; c < count; ++c) {
    const float inv = 1.0f / s[c];
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float q = std::min(std::max(std::nearbyint(std::fma(x[j], inv, z[c])), q_min), q_max);
      const float d = std::fma(-(q - z[c]), s[c], x[j]);
      acc = w ? std::fma(w[j] * d, d, acc) : std::fma(d, d, acc);
    }
    err[c] = acc;
  }
}

/// Lower bounds of a stored scale's error for one group (docs/LSQ.md#L4), in f64
/// and in the canonical order of the error (w = 1 unweighted):
///   kClipped: sum over |x_j| > t of (w_j o_j) o_j, o_j = |x_j| - t (t: the level above
///             which an element is clipped to the top code);
///   kZeroed:  sum over |x_j| < t of (w_j |x_j|) |x_j| (t: the level under which an
///             element rounds to 0).
/// Elements outside the condition add nothing. The same bits at every level.
enum class LsqBound { kClipped, kZeroed };
inline double lsq_bound_scalar(LsqBound kind, const float* x, const float* w, int64_t n, double t) {
  double part[kLsqPartials] = {};
  for (int64_t j = 0; j < n; ++j) {
    const double a = std::fabs(static_cast<double>(x[j]));
    const double b = kind == LsqBound::kClipped ? a - t : a;
    if (kind == LsqBound::kClipped ? b > 0 : a < t)
      part[j % kLsqPartials] += w ? (static_cast<double>(w[j]) * b) * b : b * b;
  }
  return combine_partials(part);
}

/// The scalar twins, the reference's own (kernels::ref::lsq_search, qdq_group_error):
/// the R5.1 element steps (qdq_elem / quantize_elem with the plan's zero point; s as the
/// QDQ applies it), summed in the same canonical order.
inline double lsq_error_scalar(const float* x, const float* w, int64_t n, double s, double z,
                               const qobs::detail::QdqPlan& plan) {
  double part[kLsqPartials] = {};
  for (int64_t j = 0; j < n; ++j) {
    const double d = x[j] - qobs::detail::qdq_elem(x[j], s, z, plan);
    part[j % kLsqPartials] += (w ? static_cast<double>(w[j]) : 1.0) * d * d;
  }
  return combine_partials(part);
}
inline void lsq_refit_sums_scalar(const float* x, const float* w, int64_t n, double s, double z,
                                  const qobs::detail::QdqPlan& plan, double* sums) {
  double part[kLsqRefitSums][kLsqPartials] = {};
  for (int64_t j = 0; j < n; ++j) {
    const double wj = w ? static_cast<double>(w[j]) : 1.0, xj = x[j];
    const double qj = qobs::detail::quantize_elem(xj, s, z, plan);
    const double wq = wj * qj;
    const int64_t l = j % kLsqPartials;
    part[kSumW][l] += wj;
    part[kSumWX][l] += wj * xj;
    part[kSumWQ][l] += wq;
    part[kSumWQQ][l] += wq * qj;
    part[kSumWQX][l] += wq * xj;
  }
  for (int i = 0; i < kLsqRefitSums; ++i) sums[i] = combine_partials(part[i]);
}

/// The least-squares scorer's vector kernels (simd_dispatch.h); the scalar twins are
/// the lsq_*_scalar functions above.
struct LsqSimd {
  /// err[c] for candidate c of `count`: scale s[c] as the QDQ applies it (on s_dt's
  /// grid), zero point zx[c] cast to x's dtype and zs[c] cast to s_dt (read only with
  /// has_zp). Returns false, with err unspecified, when a
  /// candidate needs the scalar steps: a NaN quotient or a non-finite error, whose NaN
  /// encodings the lanes do not reproduce.
  bool (*errors)(const LsqGroupArgs& g, const float* s, const float* zx, const float* zs, int64_t count, double* err);
  /// sums[kSumW .. kSumWQX] for one candidate (scale s on s_dt's grid, zero point zx cast
  /// to x's dtype). Returns false, with sums unspecified, on a NaN quotient.
  /// code_sums_only: just kSumWQQ and kSumWQX (the same bits), the rest NaN -- all that a
  /// symmetric refit reads, for about half the work.
  bool (*refit_sums)(const LsqGroupArgs& g, float s, float zx, bool code_sums_only, double* sums);
  double (*bound)(LsqBound kind, const float* x, const float* w, int64_t n, double t);
  void (*ideal_errors)(const float* ax, const float* lim, const float* w, int64_t n, const float* s, int64_t count,
                       float* err, float prune_above);
  void (*ideal_errors_asym)(const float* x, const float* w, int64_t n, const float* s, const float* z, int64_t count,
                            float q_min, float q_max, float* err);
};
/// The table for a vector level; nullptr for kScalar.
const LsqSimd* lsq_simd(SimdLevel level);

}  // namespace qobs::kernels::detail
