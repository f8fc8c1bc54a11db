#include "kernels/grid_search/certified.h"

#include <cmath>

#include "kernels/grid_search/exact.h"
#include "kernels/grid_search/poly_sums_simd.h"

namespace qobs::kernels::cpu {

using namespace qobs::kernels::detail;

namespace {

/// The kPowPoly intervals [lo_i, hi_i] around each candidate's error (f32 data, INT
/// grid, unweighted). A candidate the bound does not cover (|r| left the table, s
/// outside the normal range scale_pow handles, a sum near f32 overflow) gets NaN
/// bounds, i.e. is evaluated exactly.
void poly_intervals(const Plan& P, const float* x, double xmax, Scratch& s) {
  const int64_t S = P.S, len = P.len;
  PolySumArgs k;
  k.num_candidates = S;
  k.scale = s.scale.data();
  k.zp = s.zp.data();
  k.has_zp = P.vec.proto.has_zp;
  k.grid = P.vec.proto.grid;
  k.q_min = P.vec.proto.q_min;
  k.q_max = P.vec.proto.q_max;
  k.poly = &P.cert.poly;
  double* total = s.errs.data();
  if (len <= kSumBlock) {
    k.x = x;
    k.n = len;
    k.sums = total;
    P.k.poly_sums->run(k);
  } else {
    k.sums = s.sums.data();
    for (int64_t i = 0; i < S; ++i) total[i] = 0.0;
    for (int64_t b = 0; b < len; b += kSumBlock) {
      k.x = x + b;
      k.n = std::min<int64_t>(kSumBlock, len - b);
      P.k.poly_sums->run(k);
      for (int64_t i = 0; i < S; ++i) total[i] += s.sums[static_cast<std::size_t>(i)];
    }
  }
  const PolySumBound& bound = P.cert.poly_bound;
  for (int64_t i = 0; i < S; ++i) {
    const float sc = s.scale[static_cast<std::size_t>(i)];
    const double sp = P.cert.poly.scale_pow(sc);
    const double A = total[i] * sp;
    const double rho = poly_r_error(xmax / sc, std::fabs(s.zp[static_cast<std::size_t>(i)]), P.cert.q_abs_max);
    const double slack = (bound.abs_units + poly_r_slack(P.cert.poly, rho, total[i], len)) * sp + bound.abs;
    const bool known = sc >= 0x1p-125f && sc <= 0x1p125f && std::isfinite(A) && A < 0x1p100;
    s.lo[static_cast<std::size_t>(i)] = known ? A * (1.0 - bound.rel) - slack : NAN;
    s.hi[static_cast<std::size_t>(i)] = known ? A * (1.0 + bound.rel) + slack : NAN;
  }
}

}  // namespace

void certified_improvements(const Plan& P, const float* x, const float* w, double xmax, Scratch& s, uint8_t* improved) {
  const int64_t S = P.S, len = P.len;
  double* errs = s.errs.data();
  s.lo.resize(static_cast<std::size_t>(S));
  s.hi.resize(static_cast<std::size_t>(S));
  if (P.cert.use_poly) {
    poly_intervals(P, x, xmax, s);
  } else {
    vector_sums(P, NormKind::kPowApprox, x, w, s.scale.data(), s.zp.data(), S, true, s, errs);
    // + the f32 lane sums of the specialized kernels (<= 2^-15 per block) + f64 adds
    const double c = P.cert.approx_rel + 0x1p-15 + static_cast<double>(len) * 0x1p-50;
    const double abs_slack = static_cast<double>(len) * kPowApproxAbsErr + 0x1p-149;
    for (int64_t i = 0; i < S; ++i) {
      const double A = errs[i];
      s.lo[static_cast<std::size_t>(i)] = std::isfinite(A) ? A * (1.0 - c) - abs_slack : NAN;
      s.hi[static_cast<std::size_t>(i)] = A * (1.0 + c) + abs_slack;
    }
  }
  double exact_buf;
  auto exact = [&](int64_t i) {
    ++s.exact_evaluations;
    vector_sums(P, P.vec.proto.norm_kind, x, w, s.scale.data() + i, s.zp.data() + i, 1, false, s, &exact_buf);
    return exact_buf;
  };
  double best_lo = P.em.initial_best(), best_hi = best_lo;
  int64_t best_idx = -1;
  bool best_exact = true;
  for (int64_t i = 0; i < S; ++i) {
    double lo = s.lo[static_cast<std::size_t>(i)], hi = s.hi[static_cast<std::size_t>(i)];
    bool is_exact = false, imp;
    // a NaN bound (unknown sum) fails both tests and is evaluated exactly
    if (!(hi < best_lo || lo >= best_hi)) {
      const double e = exact(i);
      if (!best_exact) {
        best_lo = best_hi = exact(best_idx);
        best_exact = true;
      }
      imp = e < best_lo;  // strict; NaN never improves
      lo = hi = e;
      is_exact = true;
    } else {
      imp = hi < best_lo;
    }
    improved[i] = imp;
    if (imp) {
      best_lo = lo;
      best_hi = hi;
      best_idx = i;
      best_exact = is_exact;
    }
  }
}

}  // namespace qobs::kernels::cpu
