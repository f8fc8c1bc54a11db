// The least-squares search's plan and shared spec steps (lsq_plan.h).
#include "kernels/lsq/lsq_plan.h"

#include <algorithm>

#include "core/arith.h"
#include "core/check.h"
#include "kernels/grid_search/select.h"
#include "kernels/lsq/lsq_error_simd.h"
#include "qobs/formats.h"

namespace qobs::kernels::detail {

namespace {

/// The observer candidate lists: every (min, max) pair memoryless_mse and imatrix_mse
/// (and, with a global scale, nvfp4_expanded_mse) can choose, eager and chunked
/// (R6.6.5, R6.7.2, R6.8.6). A superset of each reference observer's choices, so the
/// minimum over them is never worse than any of those choices.
std::vector<ObserverList> observer_candidate_lists(DType dt, bool fp4_global) {
  std::vector<ObserverList> out;
  GridSearchConfig mse;  // memoryless_mse defaults
  GridSearchConfig im;
  im.imatrix = true;
  im.maxshrink = 0.95;
  im.grid = 20;
  GridSearchConfig nv;
  nv.maxshrink = 1.0 - 0.8 / 1.8;
  nv.grid = 200;
  nv.expand = 1.8;
  std::vector<GridSearchConfig> cfgs{mse, im};
  if (fp4_global) cfgs.push_back(nv);  // nvfp4_expanded_mse is the NVFP4 observer
  for (GridSearchConfig c : cfgs) {
    for (bool chunked : {false, true}) {
      c.chunked = chunked;
      std::vector<double> p = qobs::detail::search_shrink_factors(c, dt);
      p.push_back(1.0);  // the min-max choice (memoryless_minmax), and a fallback when S = 0
      out.push_back({c.expand, std::move(p)});
    }
  }
  return out;
}

}  // namespace

LsqPlan LsqPlan::make(DType observed, const QuantizationArgs& args, const LsqSearchConfig& cfg,
                      const Tensor* global_scale) {
  LsqPlan P;
  P.dt = observed;
  QOBS_CHECK(is_floating(P.dt) && P.dt != DType::kF8E4M3, TypeError,
             "lsq search: observed tensor must be f32/bf16/f16/f64, got ", dtype_name(P.dt), " (docs/LSQ.md#L1)");
  P.cfg = cfg;
  P.global = qobs::detail::global_scale_value(global_scale);
  P.qplan = qobs::detail::QParamPlan::make(args, P.dt, P.global, cfg.mode);
  P.scale_dt = P.qplan.scale_dt;
  P.mx = P.qplan.mx;
  P.symmetric = args.symmetric;
  P.fp_scale_codes = args.type == QuantType::kFloat && P.qplan.scale_dtype == DType::kF8E4M3;
  // R5.1.1: with a global scale, stored / global is an f32 tensor; x / s widens to it
  const DType s_dt = P.global ? qobs::detail::promote_float_dtypes(P.scale_dt, DType::kF32) : P.scale_dt;
  P.dplan = qobs::detail::QdqPlan::make(args, P.dt, s_dt, true, true, cfg.mode);
  P.observer_lists = observer_candidate_lists(P.dt, P.global.has_value());
  const double f_lo = cfg.weighted ? 0.04 : 0.5;
  const int steps = cfg.weighted ? 48 : 16;
  for (int i = 0; i < steps; ++i)
    P.log_grid.push_back(f_lo * std::pow(1.25 / f_lo, static_cast<double>(i) / (steps - 1)));
  P.grid_min = args.is_fp6() ? 0.125 : P.qplan.num_bits == 4 ? 0.5 : 0x1p-9;
  if (P.fp_scale_codes)
    for (int c = 0; c <= 126; ++c) P.code_scale.push_back(P.stored_scale(fp8_e4m3_to_float(static_cast<uint8_t>(c))));
  if (P.mx)
    for (int e = kE8M0MinExp; e <= kE8M0MaxExp; ++e) P.mx_scale.push_back(P.stored_scale(std::ldexp(1.0f, e)));
  return P;
}

void check_lsq_weights(const FlatView& flat, const FlatView* weights) {
  if (weights)
    QOBS_CHECK(weights->layout.num_qparams() == flat.layout.num_qparams() &&
                   weights->layout.group_len() == flat.layout.group_len(),
               ShapeError, "lsq search: importance view does not match the observed tensor (docs/LSQ.md#L3)");
}

double LsqPlan::stored_scale(double s) const {
  const qobs::detail::Arith as{scale_dt, cfg.mode};
  double v = as.cast(s);
  // MX: scale_dtype (uint8) holds the exponent, not the scale (R4.1 steps 5-6)
  if (qplan.scale_dtype && !mx) v = as.cast(qobs::detail::round_to_dtype_value(v, qplan.scale_target));
  if (v == 0.0) v = qplan.eps;
  return v;
}

double LsqPlan::stored_zero_point(double z) const {
  if (symmetric) return 0.0;
  z = qobs::detail::clamp_nan(z, qplan.q_min, qplan.q_max);
  return std::isnan(z) ? 0.0 : qobs::detail::round_to_dtype_value(z, qplan.zp_target);
}

ScaleWindow scale_window(const LsqPlan& P, double minmax_scale, double amax) {
  ScaleWindow w;
  if (P.mx) {
    // E8M0 exponents floor - 1, floor, floor + 1 of log2(amax) - log2(q_max)
    const double off = P.qplan.mx_offset;
    const int e = static_cast<int>(std::floor(std::log2(amax)) - off);
    w.lo = std::clamp(e - 1, kE8M0MinExp, kE8M0MaxExp);
    w.hi = std::clamp(e + 1, kE8M0MinExp, kE8M0MaxExp);
    w.min = kE8M0MinExp;
    w.max = kE8M0MaxExp;
  } else if (P.fp_scale_codes) {
    // E4M3 codes q0 - 3 (weighted: q0 - 8) .. q0 + 7 around q0 = E4M3(amax / q_max x global)
    const int q0 = fp8_e4m3_from_double(minmax_scale);
    w.lo = std::max(1, q0 - (P.cfg.weighted ? 8 : 3));
    w.hi = std::min(126, q0 + 7);
    w.min = 1;
    w.max = 126;
  }
  return w;
}

IdealGrid IdealGrid::of(const LsqPlan& P, double amax) {
  IdealGrid g;
  const double base = amax / P.qplan.half_range;
  // positive normal floats with a finite reciprocal
  const double lo = std::max(base * (P.cfg.weighted ? 0.04 : 0.5), 0x1p-126), hi = std::min(base * 2.0, 0x1p126);
  if (!(lo <= hi)) return g;
  uint32_t first = pattern_of(lo), last = pattern_of(hi);
  if (value(first) < lo) ++first;  // the least bf16 value >= lo
  if (value(last) > hi) --last;    // the greatest <= hi
  if (first > last) return g;
  g.first = first;
  g.count = last - first + 1;
  return g;
}

void log_grid_candidates(const LsqPlan& P, double lo, double hi, std::vector<LsqPair>& out) {
  out.clear();
  const double base = (std::max(hi, 0.0) - std::min(lo, 0.0)) / P.qplan.range;
  for (double f : P.log_grid) {
    const double s = P.stored_scale(base * f);
    out.emplace_back(s, P.stored_zero_point(P.qplan.q_min - std::min(lo, 0.0) * f / s));
  }
}

std::optional<LsqPair> refit_step(const LsqPlan& P, const double* sums, double s, double z) {
  const double sww = sums[kSumW], swx = sums[kSumWX], sq = sums[kSumWQ], sqq = sums[kSumWQQ], sqx = sums[kSumWQX];
  double ns, nz = z;
  if (P.symmetric) {
    // the codes are the raw codes (z = 0)
    if (!(sqq > 0)) return std::nullopt;
    ns = sqx / sqq;  // argmin_s sum w (x - s c)^2 for fixed codes c
  } else {
    // x ~ s * q + b over the raw codes q, then z = -b / s (2x2 normal equations)
    const double det = sww * sqq - sq * sq;
    if (!(det > 0)) return std::nullopt;
    ns = (sww * sqx - sq * swx) / det;
    const double b = (swx - ns * sq) / sww;
    if (!(ns > 0)) return std::nullopt;
    nz = P.stored_zero_point(-b / P.stored_scale(ns));
  }
  if (!(ns > 0) || !std::isfinite(ns)) return std::nullopt;
  ns = P.stored_scale(ns);
  if (ns == s && nz == z) return std::nullopt;
  return LsqPair{ns, nz};
}

}  // namespace qobs::kernels::detail
