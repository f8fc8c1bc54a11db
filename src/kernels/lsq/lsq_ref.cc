// The plain reference of the least-squares search (kernels::ref::lsq_search): docs/LSQ.md
// L1-L3 as written. Every candidate of L1 is scored by the scalar scorer (R5.1 element
// by element, lsq_error_scalar): the observer candidates factor by factor, every
// block-scale code or exponent, the ideal-quantizer proxies over their whole grids, the
// zero-point neighbours and the refits. No bounds, no memo, no lanes, no early stops:
// the CPU path (lsq_cpu.cc) equals it bit for bit only if its shortcuts are exact.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <tuple>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/lsq/lsq_error_simd.h"
#include "kernels/lsq/lsq_plan.h"
#include "kernels/lsq/lsq_ref.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels {

namespace {

using detail::LsqPair;
using detail::LsqPlan;
using Omit = detail::LsqRefOmit;
using Scored = std::tuple<double, double, double>;  ///< (error, scale, zero point)

/// One group: the pairs scored so far in the order of L1, and the first of least error.
struct Search {
  const LsqPlan& P;
  const float* x;
  const float* w;  // nullptr: unweighted
  int64_t n;
  Omit omit = Omit::kNothing;
  std::vector<Scored> scored{};
  Scored best{INFINITY, 0.0, 0.0};
  int64_t evaluations = 0;

  double error(const LsqPair& c) {
    ++evaluations;
    return detail::lsq_error_scalar(x, w, n, P.applied(c.first), c.second, P.dplan);
  }
  /// A later tie never replaces the best; a NaN error never wins.
  void offer(double e, const LsqPair& c) {
    if (e < std::get<0>(best)) best = {e, c.first, c.second};
  }
  /// Scores a pair unless it was scored (== on both members: zero points -0 and +0 are one pair).
  void score(const LsqPair& c) {
    for (const auto& [e, s, z] : scored)
      if (s == c.first && z == c.second) return;
    const double e = error(c);
    scored.emplace_back(e, c.first, c.second);
    offer(e, c);
  }
  /// The kRefits least scored pairs: error ascending, a NaN error last, then scale, then
  /// zero point (the pairs are unique, so this order is total).
  std::vector<Scored> least() const {
    auto key = [](const Scored& t) {
      const auto [e, s, z] = t;
      return std::tuple(std::isnan(e), std::isnan(e) ? 0.0 : e, s, z);
    };
    std::vector<Scored> v = scored;
    std::sort(v.begin(), v.end(), [&](const Scored& a, const Scored& b) { return key(a) < key(b); });
    v.resize(std::min(detail::kRefits, v.size()));
    return v;
  }
  qobs::detail::ElemQParams result() const { return {std::get<1>(best), std::get<2>(best)}; }
};

/// L2, symmetric INT: the ideal quantizer's error at every scale of the grid; the
/// kIdealBest least (error, scale), each with its grid neighbours, stored.
std::vector<LsqPair> ideal_grid_picks(const Search& g, double amax) {
  const detail::IdealGrid grid = detail::IdealGrid::of(g.P, amax);
  std::vector<float> ax, lim, s, err(grid.count);
  for (int64_t j = 0; j < g.n; ++j) {
    ax.push_back(std::fabs(g.x[j]));
    lim.push_back(static_cast<float>(g.x[j] >= 0 ? g.P.qplan.q_max : -g.P.qplan.q_min));
  }
  for (std::size_t i = 0; i < grid.count; ++i)
    s.push_back(detail::IdealGrid::value(grid.first + static_cast<uint32_t>(i)));
  detail::lsq_ideal_errors_scalar(ax.data(), lim.data(), g.w, g.n, s.data(), static_cast<int64_t>(grid.count),
                                  err.data());
  std::vector<std::size_t> order(grid.count);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::pair(err[a], s[a]) < std::pair(err[b], s[b]);  // never NaN; the scales are distinct
  });
  std::vector<LsqPair> out;
  for (std::size_t k = 0; k < std::min(detail::kIdealBest, grid.count); ++k)
    detail::IdealGrid::neighbours(grid.first + static_cast<uint32_t>(order[k]),
                                  [&](double v) { out.emplace_back(g.P.stored_scale(v), 0.0); });
  return out;
}

/// L2, asymmetric INT: the log grid's candidates the proxy cannot take, then of the
/// others the kIdealBest of least ideal error (a NaN error last, ties in grid order).
std::vector<LsqPair> log_grid_picks(const Search& g, double lo, double hi) {
  std::vector<LsqPair> cands, taken, out;
  detail::log_grid_candidates(g.P, lo, hi, cands);
  for (const LsqPair& c : cands) (detail::asym_proxy_takes(c) ? taken : out).push_back(c);
  if (taken.size() <= detail::kIdealBest) return cands;
  std::vector<float> s, z, err(taken.size());
  for (const auto& [sc, zp] : taken) {
    s.push_back(static_cast<float>(sc));
    z.push_back(static_cast<float>(zp));
  }
  detail::lsq_ideal_errors_asym_scalar(g.x, g.w, g.n, s.data(), z.data(), static_cast<int64_t>(taken.size()),
                                       static_cast<float>(g.P.qplan.q_min), static_cast<float>(g.P.qplan.q_max),
                                       err.data());
  for (float& e : err) e = std::isnan(e) ? INFINITY : e;
  std::vector<std::size_t> order(taken.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return err[a] < err[b]; });
  for (std::size_t k = 0; k < detail::kIdealBest; ++k) out.push_back(taken[order[k]]);
  return out;
}

/// docs/LSQ.md#L1 for one group.
qobs::detail::ElemQParams search_group(Search& g) {
  const LsqPlan& P = g.P;
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t j = 0; j < g.n; ++j) {
    lo = qobs::detail::nan_min(lo, g.x[j]);
    hi = qobs::detail::nan_max(hi, g.x[j]);
  }
  const qobs::detail::ElemQParams minmax = qobs::detail::compute_qparams_elem(lo, hi, P.qplan);
  if (!std::isfinite(lo) || !std::isfinite(hi) || (lo == 0 && hi == 0)) return minmax;
  const double amax = std::max(std::fabs(lo), std::fabs(hi));
  // step 1: every observer's choice as calculate_qparams stores it, and step 2's
  // block-scale window; scored in ascending order, of equal pairs the first produced
  const qobs::detail::Arith a{P.dt, P.cfg.mode};
  std::vector<LsqPair> cands;
  for (const detail::ObserverList& l : P.observer_lists)
    for (double p : l.factors) {
      const double m0 = a.mul(lo, l.expand), M0 = a.mul(hi, l.expand);
      const auto q = qobs::detail::compute_qparams_elem(a.mul(m0, p), a.mul(M0, p), P.qplan);
      cands.emplace_back(q.scale, q.zero_point);
    }
  const detail::ScaleWindow win = detail::scale_window(P, minmax.scale, amax);
  for (int i = win.lo; i <= win.hi; ++i)
    if (std::isfinite(detail::window_scale(P, i))) cands.emplace_back(detail::window_scale(P, i), 0.0);
  std::stable_sort(cands.begin(), cands.end());
  cands.erase(std::unique(cands.begin(), cands.end()), cands.end());
  if (g.omit == Omit::kLargestObserverCandidate) cands.pop_back();
  for (const LsqPair& c : cands) g.score(c);
  if (P.block_scale_codes()) {
    // step 2: every other code or exponent, outwards from the window
    if (g.omit == Omit::kOutwardWalk) return g.result();
    for (int i = win.lo - 1; i >= win.min; --i) g.score({detail::window_scale(P, i), 0.0});
    for (int i = win.hi + 1; i <= win.max; ++i) g.score({detail::window_scale(P, i), 0.0});
    return g.result();
  }
  // step 2, integer grids: the proxies' picks, then (asymmetric) the zero points next
  // to the least scored pairs
  if (g.omit != Omit::kIdealGridPicks)
    for (const LsqPair& c : P.symmetric ? ideal_grid_picks(g, amax) : log_grid_picks(g, lo, hi)) g.score(c);
  if (!P.symmetric && g.omit != Omit::kZeroPointNeighbours)
    for (const auto& [e, s, z] : g.least())
      for (double dz : {-1.0, 1.0}) g.score({s, P.stored_zero_point(z + dz)});
  // step 3: the refits of the least scored pairs, each step scored, while the error falls
  if (g.omit == Omit::kRefits) return g.result();
  for (auto [e, s, z] : g.least())
    for (int step = 0; step < detail::kRefitSteps; ++step) {
      double sums[detail::kLsqRefitSums];
      detail::lsq_refit_sums_scalar(g.x, g.w, g.n, P.applied(s), z, P.dplan, sums);
      const std::optional<LsqPair> next = detail::refit_step(P, sums, s, z);
      if (!next) break;
      const double next_e = g.error(*next);
      g.offer(next_e, *next);
      if (!(next_e < e)) break;
      std::tie(s, z) = *next;
      e = next_e;
    }
  return g.result();
}

}  // namespace

LsqSearchResult detail::lsq_search_ref_omitting(const FlatView& flat, const QuantizationArgs& args,
                                                const LsqSearchConfig& cfg, const FlatView* weights,
                                                const Tensor* global_scale, LsqRefOmit omit) {
  const LsqPlan P = LsqPlan::make(flat.dtype, args, cfg, global_scale);
  check_lsq_weights(flat, weights);
  const int64_t nq = flat.layout.num_qparams(), len = flat.layout.num_obs() * flat.layout.group_len();
  LsqSearchResult res;
  res.scale_dtype = P.scale_dt;
  std::vector<float> x(static_cast<std::size_t>(len)), w(weights ? static_cast<std::size_t>(len) : 0);
  for (int64_t q = 0; q < nq; ++q) {
    flat.gather(q, x.data());
    if (weights) weights->gather(q, w.data());
    Search g{P, x.data(), weights ? w.data() : nullptr, len, omit};
    const qobs::detail::ElemQParams r = search_group(g);
    res.scale.push_back(r.scale);
    res.zero_point.push_back(r.zero_point);
    res.candidates_evaluated += g.evaluations;
  }
  return res;
}

LsqSearchResult ref::lsq_search(const FlatView& flat, const QuantizationArgs& args, const LsqSearchConfig& cfg,
                                const FlatView* weights, const Tensor* global_scale) {
  return detail::lsq_search_ref_omitting(flat, args, cfg, weights, global_scale, detail::LsqRefOmit::kNothing);
}

}  // namespace qobs::kernels
