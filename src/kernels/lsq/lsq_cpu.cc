// The least-squares observers' search (docs/LSQ.md): per group, a superset of the
// reference observers' candidate qparams (the observer candidates) plus least-squares refits, every candidate scored with
// the qparams exactly as they will be stored and applied by the real quantizer (R5.1),
// the minimum kept. Groups are independent, so the threaded call (kernels::lsq_search)
// and the scalar reference (kernels::ref::lsq_search) run the same per-group function
// and agree bit for bit: the threaded one scores candidates in SIMD lanes
// (simd/lsq_error_simd.cc), the reference element by element, both summing in the
// canonical order of lsq_error_simd.h.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "core/arith.h"
#include "core/check.h"
#include "kernels/kernels.h"
#include "kernels/parallel/thread_pool.h"
#include "kernels/lsq/lsq_observer_candidates.h"
#include "kernels/grid_search/select.h"
#include "kernels/lsq/lsq_candidates_simd.h"
#include "kernels/lsq/lsq_cpu.h"
#include "kernels/lsq/lsq_error_simd.h"
#include "kernels/lsq/lsq_plan.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::cpu {

namespace {

namespace lanes = qobs::kernels::detail;  // the lanes (simd/lsq_*_simd.h) and the observer-candidate steps (lsq_observer_candidates.h)

using qobs::detail::Arith;
using qobs::detail::ElemQParams;
using qobs::detail::QdqPlan;
using qobs::detail::QParamPlan;

/// The plan of the spec (lsq_plan.h) and what the CPU path derives from it once per call.
struct CpuPlan : lanes::LsqPlan {
  /// observer_lists' shrink factors as f32 (what Arith::mul multiplies by) for the
  /// branch-free twin of compute_qparams_elem, where the plan allows it
  std::vector<std::vector<float>> observer_lists_f32;
  /// MX symmetric: observer_lists' shrink factors, ascending without repeats (the search
  /// treats them as a set; mx_observer_candidates)
  std::vector<std::vector<double>> observer_lists_sorted;
  qobs::detail::ShrunkQParams shrunk;
  /// fp_scale_codes, symmetric, shrunk usable and code_scale strictly increasing: the
  /// observer candidates are collected as a set of codes (lanes::E4m3CodeSet), whose
  /// ascending codes are the ascending stored scales, instead of a list to sort
  bool code_set = false;
  /// code_set: per expand factor of the observer lists, the shrink factors whose
  /// scales give the code set of all those lists' factors (runs of close factors by
  /// their ends), usable when amax x expand x the smallest factor is at least
  /// probe_floor (lanes::E4m3Probes); empty: every factor is computed
  struct ProbeGroup {
    double expand;
    lanes::E4m3Probes probes;
  };
  std::vector<ProbeGroup> probe_groups;
  double probe_floor = INFINITY;
  /// The roundings of x / s and of the dequantization in lanes, when lanes can follow
  /// them (not for f64 arithmetic).
  std::optional<lanes::Narrow> y_narrow, s_narrow;
};

/// A scratch vector of at least n elements. Never shrunk: the searches run millions of
/// times with batches of varying size, and a resize that grows again value-initializes
/// the new elements every time.
template <class T>
T* grow(std::vector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

using Pair = lanes::LsqPair;
using Scored = std::tuple<double, double, double>;  ///< (error, scale, zero point)

/// What one group's refits have computed, for the next refits to look up: most refits
/// land on a scale scored already (about 97% of them on bf16 INT4 weights) and a third
/// start from codes whose sums an earlier chain took. Exact keys, so the same values as
/// computing them again.
struct RefitMemo {
  std::vector<std::pair<Pair, double>> errors;
  std::vector<std::pair<Pair, std::array<double, lanes::kLsqRefitSums>>> sums;
  void clear() {
    errors.clear();
    sums.clear();
  }
};

/// One worker's buffers, made once per call (one per worker of parallel_for, which
/// hands each worker index to one thread at a time) and reused group after group: the
/// search runs once per group, millions of times per tensor, and buffers that keep
/// their capacity allocate only while they grow.
struct LsqScratch {
  std::vector<float> x, w;                         ///< the group, gathered
  std::vector<float> batch_s, batch_zx, batch_zs;  ///< a batch of candidates as the lanes take them
  std::vector<float> shrunk_s, shrunk_z;           ///< one observer list's qparams
  std::vector<Pair> cands;                         ///< the observer candidates
  std::vector<double> errs;                        ///< their errors
  std::vector<Pair> todo;                          ///< a batch to score
  std::vector<std::size_t> todo_at;                ///< where its pairs sit among the candidates
  std::vector<double> todo_errs;                   ///< its errors
  std::vector<Pair> picks;                         ///< the ideal grid's picks, then the zero-point neighbours
  std::vector<double> grid_scales;                 ///< the symmetric ideal grid's picked scales
  std::vector<float> ideal_ax, ideal_lim, ideal_s, ideal_z, ideal_err;  ///< the proxies' inputs and errors
  std::vector<std::size_t> ideal_order;
  std::vector<Pair> proxied, unproxied;  ///< the log grid's candidates the proxy takes, and the others
  std::vector<Scored> scored, least;     ///< the pairs scored, and the least of them
  RefitMemo memo;
  lanes::SortRunsScratch runs;
};

/// One group's values and weights, and the scorer of stored (scale, zero point) pairs.
struct Group {
  const float* x;
  const float* w;  // nullptr: unweighted
  int64_t n;
  const CpuPlan* P;
  /// The vector kernels, or null: element by element (the scalar twins).
  const lanes::LsqSimd* simd = nullptr;
  const lanes::LsqCandidatesSimd* candidates = nullptr;
  LsqScratch* scratch = nullptr;  ///< for errors() in lanes
  int64_t evaluations = 0;

  /// A zero point in a dtype's arithmetic. +-0 (every symmetric candidate) casts to
  /// itself, without the rounding call (~3.5% of the symmetric search's instructions).
  static double cast_zero_point(const Arith& a, double z) { return z == 0.0 ? z : a.cast(z); }
  double applied(double s) const { return P->applied(s); }
  /// Whether the lanes can follow this group's arithmetic at this level.
  bool lanes_ok() const { return simd && P->y_narrow && P->s_narrow; }
  lanes::LsqGroupArgs lanes_args() const {
    return {x, w, n, !P->symmetric, *P->y_narrow, *P->s_narrow, P->dplan.grid, static_cast<float>(P->dplan.q_min),
            static_cast<float>(P->dplan.q_max)};
  }
  /// The reference scorer: R5.1 element by element, summed in the canonical order.
  double error_scalar(double s, double z) const { return lanes::lsq_error_scalar(x, w, n, applied(s), z, P->dplan); }
  /// err[i] of candidates sz[i] (stored scale, zero point), in lanes where the level
  /// and the dtypes allow it; the same bits either way.
  void errors(const std::pair<double, double>* sz, std::size_t count, double* err) {
    evaluations += static_cast<int64_t>(count);
    if (lanes_ok()) {
      const lanes::LsqGroupArgs G = lanes_args();
      const Arith ax{P->dplan.x_dt, P->cfg.mode}, as{P->dplan.s_dt, P->cfg.mode};
      float *const sv = grow(scratch->batch_s, count), *const zx = grow(scratch->batch_zx, count),
                  *const zs = grow(scratch->batch_zs, count);
      for (std::size_t i = 0; i < count; ++i) {
        sv[i] = static_cast<float>(applied(sz[i].first));  // on s_dt's grid (f32 or narrower)
        zx[i] = static_cast<float>(cast_zero_point(ax, sz[i].second));
        zs[i] = static_cast<float>(cast_zero_point(as, sz[i].second));
      }
      // false: a NaN quotient or a non-finite error somewhere; the scalar steps redo it
      if (simd->errors(G, sv, zx, zs, static_cast<int64_t>(count), err)) return;
    }
    for (std::size_t i = 0; i < count; ++i) err[i] = error_scalar(sz[i].first, sz[i].second);
  }
  double error(double s, double z) {
    const std::pair<double, double> sz{s, z};
    double e = 0;
    errors(&sz, 1, &e);
    return e;
  }
  /// The least-squares refit's sums over the raw codes of the stored qparams, each in
  /// the canonical order (lsq_error_simd.h: Σ w, Σ w x, Σ w q, Σ (w q) q, Σ (w q) x).
  void refit_sums(double s, double z, double* sums) const {
    const double sa = applied(s);
    if (lanes_ok()) {
      const Arith ax{P->dplan.x_dt, P->cfg.mode};
      // false: a NaN quotient; the scalar steps redo it
      // symmetric: refit() reads the code sums alone
      const float zx = static_cast<float>(cast_zero_point(ax, z));
      if (simd->refit_sums(lanes_args(), static_cast<float>(sa), zx, P->symmetric, sums)) return;
    }
    lanes::lsq_refit_sums_scalar(x, w, n, sa, z, P->dplan, sums);
  }
};

// The candidates' orders for the sorts and selections: lanes::pair_less_of (std::pair's
// operator< spelled out), and std::tuple's the same way, for the same reason.
using lanes::pair_less_of;
constexpr auto pair_less = [](const std::pair<double, double>& a, const std::pair<double, double>& b) {
  return pair_less_of(a, b);
};
/// Error ascending with a NaN error last (a candidate whose stored scale overflows its
/// dtype scores NaN), then scale and zero point: a total order on scored pairs, whose
/// scales and zero points are never NaN.
constexpr auto scored_less = [](const Scored& a, const Scored& b) {
  const bool nan_a = std::isnan(std::get<0>(a)), nan_b = std::isnan(std::get<0>(b));
  if (nan_a != nan_b) return nan_b;
  if (!nan_a && std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) < std::get<0>(b);
  if (std::get<1>(a) != std::get<1>(b)) return std::get<1>(a) < std::get<1>(b);
  return std::get<2>(a) < std::get<2>(b);
};

struct Best {
  double err = INFINITY, scale = 0, zp = 0;
  void offer(double e, double s, double z) {
    // ties keep the earlier candidate; the observer candidates come first
    if (e < err) {
      err = e;
      scale = s;
      zp = z;
    }
  }
};

/// Least-squares refit of (scale, zero point) for the codes of (s, z), re-rounded and
/// re-scored, repeated while the error falls (docs/LSQ.md#L2). `known(sz, e)` sets e to
/// an error the search holds for sz already and says whether it did (search_group).
template <typename Known>
void refit(Group& g, double s, double z, double e, Best& best, RefitMemo& memo, const Known& known) {
  for (int it = 0; it < lanes::kRefitSteps; ++it) {
    double S[lanes::kLsqRefitSums];
    const std::pair<double, double> at{s, z};
    const bool reuse = g.P->cfg.reuse_refit_results;
    const auto hit = !reuse ? memo.sums.end() : std::find_if(memo.sums.begin(), memo.sums.end(), [&](const auto& m) {
      return m.first == at;
    });
    if (hit != memo.sums.end()) {
      std::copy(hit->second.begin(), hit->second.end(), S);
    } else {
      g.refit_sums(s, z, S);
      memo.sums.emplace_back(at, std::array<double, lanes::kLsqRefitSums>{});
      std::copy(S, S + lanes::kLsqRefitSums, memo.sums.back().second.begin());
    }
    const std::optional<lanes::LsqPair> step = lanes::refit_step(*g.P, S, s, z);
    if (!step) return;
    const std::pair<double, double> next = *step;
    const double ns = next.first, nz = next.second;
    double ne;
    if (!reuse || !known(next, ne)) {
      const auto seen = !reuse ? memo.errors.end()
                               : std::find_if(memo.errors.begin(), memo.errors.end(),
                                              [&](const auto& m) { return m.first == next; });
      if (seen != memo.errors.end()) {
        ne = seen->second;
      } else {
        ne = g.error(ns, nz);
        memo.errors.emplace_back(next, ne);
      }
    }
    best.offer(ne, ns, nz);
    if (!(ne < e)) return;
    s = ns;
    z = nz;
    e = ne;
  }
}

/// Lower bounds of a stored scale's error from the elements it must clip or round to 0
/// (docs/LSQ.md#L4). Above max(q_max, -q_min) x applied scale x (1 + 2^-7) (FP grids:
/// q_max; INT, whose negative end is one larger, -q_min) no code's dequantized value
/// lies (the 2^-7 covers the dequantization's rounding in the data dtype, bf16's half
/// ulp being 2^-8), so an element beyond costs at least w (|x| - top)^2; under 0.48 x the smallest
/// positive grid value x the applied scale it rounds to 0 even after x / s is rounded
/// (by at most 2^-8), costing w x^2. The first bound falls as the scale grows, the
/// second rises.
struct ErrorBounds {
  const Group& g;
  double clipped(double s) const {
    const double top = std::max(g.P->qplan.q_max, -g.P->qplan.q_min);
    return bound(lanes::LsqBound::kClipped, top * g.applied(s) * (1.0 + 0x1p-7));
  }
  double zeroed(double s) const { return bound(lanes::LsqBound::kZeroed, 0.48 * g.P->grid_min * g.applied(s)); }
  double bound(lanes::LsqBound kind, double t) const {
    if (g.simd) return g.simd->bound(kind, g.x, g.w, g.n, t);
    return lanes::lsq_bound_scalar(kind, g.x, g.w, g.n, t);
  }
};

/// The factor a lower bound is multiplied by before it is compared with an error. The
/// bounds sum in the scorer's canonical order and each of their terms is at most the
/// error's term, so rounding alone cannot lift a bound above the error; the factor is
/// a margin on top of that.
constexpr double kBoundSafety = 1.0 - 1e-6;

/// Scales outside the tried window can still win under a skewed weighting: walk
/// outwards, index by index, while a lower bound of an index's error stays below the
/// best error. `scale_of(i)` is the stored scale of index i, increasing in i (NVFP4: the
/// E4M3 code; MX: the E8M0 exponent). Below the window the clipped elements' bound
/// counts, above it the zeroed elements' (ErrorBounds; without the clipping margin the
/// dequantized top value could exceed q_max x scale). Both bounds grow monotonically
/// away from the window, so the walk ends at the exhaustive optimum over [i_min, i_max].
template <class ScaleOf>
void extend_window(Group& g, const ErrorBounds& bounds, int lo, int hi, int i_min, int i_max, ScaleOf scale_of,
                   Best& best) {
  // Each side's walk takes the indices whose bound is below the best error found before
  // it and scores them in one batch. Where a walk that updated the best as it went
  // would have stopped earlier, the extra indices' bounds (monotone) are at least that
  // best, so their errors are too and cannot replace it: the same result.
  std::vector<Pair>& walk = g.scratch->todo;
  auto score_walk = [&] {
    double* const errs = grow(g.scratch->todo_errs, walk.size());
    if (!walk.empty()) g.errors(walk.data(), walk.size(), errs);
    for (std::size_t k = 0; k < walk.size(); ++k) best.offer(errs[k], walk[k].first, walk[k].second);
  };
  walk.clear();
  double prev = NAN;
  for (int c = lo - 1; c >= i_min; --c) {
    const double s = scale_of(c);
    if (s == prev) continue;  // the same stored scale (an underflow to eps), scored already
    prev = s;
    if (bounds.clipped(s) * kBoundSafety >= best.err) break;
    walk.emplace_back(s, 0.0);
  }
  score_walk();
  walk.clear();
  prev = NAN;
  for (int c = hi + 1; c <= i_max; ++c) {
    const double s = scale_of(c);
    if (!std::isfinite(s)) break;  // an overflow of the scale dtype (f16): no stored scale beyond
    if (s == prev) continue;
    prev = s;
    if (bounds.zeroed(s) * kBoundSafety >= best.err) break;
    walk.emplace_back(s, 0.0);
  }
  score_walk();
}

/// Symmetric integer grids (docs/LSQ.md#L2): the ideal quantizer's error (nearest code,
/// clamped, no dtype roundings) at every bf16 value in [f_lo x base, f_hi x base] -- for
/// a bf16 weight the stored scales themselves, otherwise a grid 2^-8..2^-7 apart that
/// the refits refine -- and the scales of the lanes::kIdealBest least errors, each with its
/// two grid neighbours, for the real scorer.
void ideal_grid_scales(const Group& g, double amax, std::vector<double>& out) {
  out.clear();
  const lanes::IdealGrid grid = lanes::IdealGrid::of(*g.P, amax);
  if (grid.count == 0) return;
  const double base = amax / g.P->qplan.half_range;
  auto value = [](uint32_t pattern) { return lanes::IdealGrid::value(pattern); };
  auto pattern_of = [](double v) { return lanes::IdealGrid::pattern_of(v); };
  const uint32_t first = grid.first;
  const std::size_t count = grid.count;
  const std::size_t n = static_cast<std::size_t>(g.n);
  LsqScratch& sc = *g.scratch;
  float *const ax = grow(sc.ideal_ax, n), *const lim = grow(sc.ideal_lim, n), *const sv = grow(sc.ideal_s, count),
              *const err = grow(sc.ideal_err, count);
  const float qpos = static_cast<float>(g.P->qplan.q_max), qneg = static_cast<float>(-g.P->qplan.q_min);
  for (std::size_t j = 0; j < n; ++j) {
    ax[j] = std::fabs(g.x[j]);
    lim[j] = g.x[j] >= 0 ? qpos : qneg;
  }
  for (std::size_t i = 0; i < count; ++i) sv[i] = value(first + static_cast<uint32_t>(i));
  const auto cnt = static_cast<int64_t>(count);
  // the lanes::kIdealBest least (error, scale) pairs, ascending; the scales are distinct (and
  // the errors never NaN), so the same pairs whatever order the ranges are offered in
  std::array<std::pair<float, float>, lanes::kIdealBest> top;
  std::array<std::size_t, lanes::kIdealBest> at{};
  std::size_t kept = 0;
  auto select = [&](std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) {
      const std::pair<float, float> m{err[i], sv[i]};
      if (kept == top.size() && !pair_less_of(m, top.back())) continue;
      std::size_t k = std::min(kept, top.size() - 1);
      for (; k > 0 && pair_less_of(m, top[k - 1]); --k) {
        top[k] = top[k - 1];
        at[k] = at[k - 1];
      }
      top[k] = m;
      at[k] = i;
      kept = std::min(kept + 1, top.size());
    }
  };
  if (g.simd) {
    // Chunks of scales from the one nearest 0.9 x base outwards, each with the
    // lanes::kIdealBest-th least error so far as its bound: a chunk whose sums all pass it
    // partway holds none of the lanes::kIdealBest least (its errors read +inf), so the
    // selection is the one over every full sum (the scalar path's).
    constexpr int64_t kChunk = 64;
    const int64_t chunks = (cnt + kChunk - 1) / kChunk;
    // (the grid is every bf16 pattern from `first`: 0.9 x base's pattern gives its index)
    const int64_t centre =
        std::clamp<int64_t>(static_cast<int64_t>(pattern_of(0.9 * base)) - static_cast<int64_t>(first), 0, cnt - 1) /
        kChunk;
    for (int64_t k = 0; k < 2 * chunks; ++k) {
      // centre, centre - 1, centre + 1, centre - 2, ...
      const int64_t c = k % 2 == 0 ? centre + k / 2 : centre - (k + 1) / 2;
      if (c < 0 || c >= chunks) continue;
      const int64_t from = c * kChunk, num = std::min(kChunk, cnt - from);
      g.simd->ideal_errors(ax, lim, g.w, g.n, sv + from, num, err + from, kept == top.size() ? top.back().first : HUGE_VALF);
      select(static_cast<std::size_t>(from), static_cast<std::size_t>(from + num));
    }
  } else
  {
    lanes::lsq_ideal_errors_scalar(ax, lim, g.w, g.n, sv, cnt, err);
    select(0, count);
  }
  for (std::size_t k = 0; k < kept; ++k)
    lanes::IdealGrid::neighbours(first + static_cast<uint32_t>(at[k]), [&](double v) { out.push_back(v); });
}

/// Asymmetric integer grids (docs/LSQ.md#L2): of the log grid's stored (scale, zero
/// point) candidates, the lanes::kIdealBest of least ideal-quantizer error (nearest code,
/// clamped, no dtype roundings), ascending, for the real scorer. Candidates whose scale
/// the proxy cannot take (not a normal float with a finite reciprocal) are kept as they
/// are.
void ideal_best_asym(const Group& g, std::vector<std::pair<double, double>>& cands) {
  if (cands.size() <= lanes::kIdealBest) return;
  LsqScratch& sc = *g.scratch;
  std::vector<Pair>&out = sc.unproxied, &proxied = sc.proxied;
  out.clear();
  proxied.clear();
  for (const auto& c : cands) (lanes::asym_proxy_takes(c) ? proxied : out).push_back(c);
  if (proxied.size() <= lanes::kIdealBest) return;
  const std::size_t count = proxied.size();
  float *const sv = grow(sc.ideal_s, count), *const zv = grow(sc.ideal_z, count), *const err = grow(sc.ideal_err, count);
  std::vector<std::size_t>& order = sc.ideal_order;
  for (std::size_t i = 0; i < count; ++i) {
    sv[i] = static_cast<float>(proxied[i].first);
    zv[i] = static_cast<float>(proxied[i].second);
  }
  const float q_min = static_cast<float>(g.P->qplan.q_min), q_max = static_cast<float>(g.P->qplan.q_max);
  const auto cnt = static_cast<int64_t>(count);
  if (g.simd)
    g.simd->ideal_errors_asym(g.x, g.w, g.n, sv, zv, cnt, q_min, q_max, err);
  else
    lanes::lsq_ideal_errors_asym_scalar(g.x, g.w, g.n, sv, zv, cnt, q_min, q_max, err);
  order.resize(count);
  for (std::size_t i = 0; i < count; ++i) order[i] = i;
  // error ascending (a NaN, from a zero weight times an overflowed difference, last),
  // ties by index: a strict total order, so the pick does not depend on how
  // partial_sort lays out the rest
  for (std::size_t i = 0; i < count; ++i)
    if (std::isnan(err[i])) err[i] = INFINITY;
  std::partial_sort(order.begin(), order.begin() + lanes::kIdealBest, order.end(), [&](std::size_t a, std::size_t b) {
    if (err[a] != err[b]) return err[a] < err[b];
    return a < b;
  });
  for (std::size_t k = 0; k < lanes::kIdealBest; ++k) out.push_back(proxied[order[k]]);
  cands.assign(out.begin(), out.end());
}

/// A group's two largest and two smallest elements with their weights (1 unweighted):
/// for INT asymmetric candidates, a lower bound of the error from the elements each
/// must clip, O(1) per candidate (search_group's pruning, docs/LSQ.md#L4).
struct GroupExtremes {
  std::array<double, 2> top{-INFINITY, -INFINITY}, top_w{0, 0};     ///< descending
  std::array<double, 2> bottom{INFINITY, INFINITY}, bottom_w{0, 0};  ///< ascending
  /// Stored (s, z): codes q in [q_min, q_max] dequantize to (q - z) s, rounded in the
  /// data dtype by at most 2^-8 relative (bf16), so nothing lies above (q_max - z) s
  /// (1 + 2^-7) or below (q_min - z) s (1 + 2^-7); an element beyond costs at least
  /// w times its squared distance to that level.
  double clipped_bound(double s, double z, const CpuPlan& P) const {
    const double hi = (P.qplan.q_max - z) * s * (1.0 + 0x1p-7), lo = (P.qplan.q_min - z) * s * (1.0 + 0x1p-7);
    double b = 0;
    for (int k = 0; k < 2; ++k) {
      if (top[k] > hi) b += (top_w[k] * (top[k] - hi)) * (top[k] - hi);
      if (bottom[k] < lo) b += (bottom_w[k] * (lo - bottom[k])) * (lo - bottom[k]);
    }
    return b;
  }
};

/// The extremes of a group without NaN / Inf (search_group returns before scoring
/// those); with fewer than two elements the missing ones add nothing.
GroupExtremes group_extremes(const Group& g) {
  GroupExtremes e;
  for (int64_t j = 0; j < g.n; ++j) {
    const double x = g.x[j], w = g.w ? g.w[j] : 1.0;
    if (x > e.top[1]) {
      if (x > e.top[0]) {
        e.top = {x, e.top[0]};
        e.top_w = {w, e.top_w[0]};
      } else {
        e.top[1] = x;
        e.top_w[1] = w;
      }
    }
    if (x < e.bottom[1]) {
      if (x < e.bottom[0]) {
        e.bottom = {x, e.bottom[0]};
        e.bottom_w = {w, e.bottom_w[0]};
      } else {
        e.bottom[1] = x;
        e.bottom_w[1] = w;
      }
    }
  }
  return e;
}

/// FP block scales: the candidates on either side of the min-max scale scored before
/// the rest, whose lower bounds are then compared with the best of them.
constexpr std::size_t kSeedEachSide = 3;
/// INT symmetric: the largest observer scales scored before the others are pruned
/// (at least the refits' lanes::kRefits).
constexpr std::size_t kIntSeeds = 8;

/// One qparam element: the search of docs/LSQ.md#L1.
ElemQParams search_group(Group& g, const CpuPlan& P) {
  const Arith a{P.dt, P.cfg.mode};
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t j = 0; j < g.n; ++j) {
    lo = qobs::detail::nan_min(lo, g.x[j]);
    hi = qobs::detail::nan_max(hi, g.x[j]);
  }
  Best best;
  // (1) every choice of the reference observers, as calculate_qparams would store it
  const ElemQParams minmax = qobs::detail::compute_qparams_elem(lo, hi, P.qplan);
  if (!std::isfinite(lo) || !std::isfinite(hi) || (lo == 0 && hi == 0)) return minmax;
  LsqScratch& sc = *g.scratch;
  std::vector<Pair>& cands = sc.cands;
  cands.clear();
  // a list's neighbouring shrink factors mostly give the same stored pair: dropping a
  // repeat of the previous pair here leaves the set that the sort + unique below
  // makes, at a fraction of the sort
  auto add_cand = [&cands](double s, double z) {
    if (cands.empty() || cands.back() != std::pair<double, double>{s, z}) cands.emplace_back(s, z);
  };
  std::vector<float>&fs = sc.shrunk_s, &fz = sc.shrunk_z;
  // P.code_set: the candidates as a set of E4M3 codes; if one is no code (never seen),
  // the group starts over with the list, exactly as without codes
  lanes::E4m3CodeSet codes;
  bool use_codes = P.code_set;
  // the same f32 steps as compute_qparams_elem(a.mul(m0, p), a.mul(M0, p)), tested
  // value for value against it (qparam_math.h)
  auto shrunk_scales = [&](double m0, double M0, const std::vector<float>& pf) {
    grow(fs, pf.size());
    grow(fz, pf.size());
    if (g.candidates) {
      g.candidates->run(P.shrunk, static_cast<float>(m0), static_cast<float>(M0), pf.data(),
                        static_cast<int64_t>(pf.size()), fs.data(), fz.data());
      return;
    }
    P.shrunk.compute(static_cast<float>(m0), static_cast<float>(M0), pf.data(), static_cast<int64_t>(pf.size()),
                     fs.data(), fz.data());
  };
  // the runs' ends stand for the codes between them (lanes::E4m3Probes), when every
  // expand's guard holds
  auto collect_probed = [&] {
    for (const auto& pg : P.probe_groups) {
      const double m0 = a.mul(lo, pg.expand), M0 = a.mul(hi, pg.expand);
      if (!(std::max(std::fabs(static_cast<float>(m0)), std::fabs(static_cast<float>(M0))) *
                static_cast<double>(pg.probes.min_factor) >=
            P.probe_floor))
        return false;
    }
    for (const auto& pg : P.probe_groups) {
      shrunk_scales(a.mul(lo, pg.expand), a.mul(hi, pg.expand), pg.probes.factors);
      if (!lanes::add_probed_codes(pg.probes, fs.data(), P.code_scale.data(), codes)) return false;
    }
    return true;
  };
  auto collect = [&](bool as_codes) {
    for (std::size_t l = 0; l < P.observer_lists.size(); ++l) {
      const auto& [expand, ps] = P.observer_lists[l];
      const double m0 = a.mul(lo, expand), M0 = a.mul(hi, expand);
      if (P.shrunk.usable) {
        const std::vector<float>& pf = P.observer_lists_f32[l];
        shrunk_scales(m0, M0, pf);
        if (as_codes) {
          // neighbouring factors mostly give the same scale: a repeat is in the set already
          const float* const f = fs.data();
          const double* const cs = P.code_scale.data();
          lanes::E4m3CodeSet list;  // locals, not the captured set: kept in registers
          float prev = -1.0f;       // no scale
          for (std::size_t i = 0; i < pf.size(); ++i) {
            const float v = f[i];
            if (v == prev) continue;
            prev = v;
            const int c = lanes::e4m3_code_of(v, cs);
            if (c < 0) return false;
            list.add(c);
          }
          codes.bits[0] |= list.bits[0];
          codes.bits[1] |= list.bits[1];
        } else {
          for (std::size_t i = 0; i < pf.size(); ++i) add_cand(fs[i], P.symmetric ? 0.0 : static_cast<double>(fz[i]));
        }
      } else if (!P.observer_lists_sorted.empty()) {
        lanes::mx_observer_candidates(P.observer_lists_sorted[l], m0, M0, P.qplan, a, add_cand);
      } else {
        for (double p : ps) {
          const ElemQParams sz = qobs::detail::compute_qparams_elem(a.mul(m0, p), a.mul(M0, p), P.qplan);
          add_cand(sz.scale, sz.zero_point);
        }
      }
    }
    return true;
  };
  const bool probed = use_codes && !P.probe_groups.empty() && collect_probed();
  if (!probed) {
    codes = {};  // what a failed probe added
    if (!collect(use_codes)) {
      use_codes = false;
      collect(false);
    }
  }
  const double amax = std::max(std::fabs(lo), std::fabs(hi));

  const lanes::ScaleWindow window = lanes::scale_window(P, minmax.scale, amax);
  const int window_lo = window.lo, window_hi = window.hi;
  if (P.fp_scale_codes && !P.mx) {
    // (2) FP8 E4M3 block-scale codes around q0 = E4M3(amax / q_max x global)
    for (int c = window.lo; c <= window.hi; ++c) {
      if (use_codes)
        codes.add(c);
      else
        cands.emplace_back(P.code_scale[static_cast<std::size_t>(c)], 0.0);
    }
  } else if (P.mx) {
    // (2) E8M0 exponents floor - 1, floor, floor + 1 of log2(amax) - log2(q_max)
    for (int d = window.lo; d <= window.hi; ++d) {
      const double s = lanes::window_scale(P, d);
      if (std::isfinite(s)) cands.emplace_back(s, 0.0);
    }
  }
  if (use_codes) {
    // the ascending codes are the ascending stored scales (LsqPlan::code_set)
    codes.for_each([&](int c) { cands.emplace_back(P.code_scale[static_cast<std::size_t>(c)], 0.0); });
  } else {
    lanes::sort_unique_runs(cands, sc.runs);
  }
  double* const errs = grow(sc.errs, cands.size());
  if (P.fp_scale_codes || P.mx) {
    // FP block scales: the ones nearest the min-max scale first, then downwards while a
    // candidate's lower bound (the clipped elements', rising as the scale falls) does
    // not exceed the best of them, and every one above. A candidate left out is
    // strictly worse than one scored, so the minimum and its tie order (ascending
    // scale) are unchanged.
    const ErrorBounds bounds{g};
    const std::size_t mid = static_cast<std::size_t>(
        std::lower_bound(cands.begin(), cands.end(), minmax.scale, [](const auto& c, double v) { return c.first < v; }) -
        cands.begin());
    // the clipping bound assumes codes symmetric about 0: with a zero point (an
    // asymmetric FP8 plan) every candidate is scored
    const std::size_t seed_lo = !P.symmetric ? 0 : mid > kSeedEachSide ? mid - kSeedEachSide : 0,
                      seed_hi = !P.symmetric ? cands.size() : std::min(cands.size(), mid + kSeedEachSide);
    auto score = [&](std::size_t from, std::size_t to) {
      if (to > from) g.errors(cands.data() + from, to - from, errs + from);
    };
    score(seed_lo, seed_hi);
    double seed_best = INFINITY;
    for (std::size_t i = seed_lo; i < seed_hi; ++i) seed_best = qobs::detail::nan_min(seed_best, errs[i]);
    // [kept, seed_lo): the codes below whose bound does not exceed the seeds' best
    std::size_t kept = seed_lo;
    while (kept > 0 && !(bounds.clipped(cands[kept - 1].first) * kBoundSafety > seed_best)) --kept;
    std::fill(errs, errs + kept, INFINITY);  // pruned: never chosen
    score(kept, seed_lo);
    // above, the zeroed elements' bound rarely prunes: scored without it
    score(seed_hi, cands.size());
    for (std::size_t i = 0; i < cands.size(); ++i) best.offer(errs[i], cands[i].first, cands[i].second);
    if (window_lo <= window_hi)
      extend_window(g, bounds, window.lo, window.hi, window.min, window.max,
                    [&](int i) { return lanes::window_scale(P, i); }, best);
    return {best.scale, best.zp};
  }

  if (P.cfg.prune_observer_candidates && cands.size() > kIntSeeds) {
    // INT: the kIntSeeds largest observer scales are scored first. A candidate whose
    // clipped elements alone cost more than the lanes::kRefits-th least seed error is worse
    // than lanes::kRefits scored candidates, so it can be neither the minimum nor a refit's
    // start (top(), below): leaving it out gives the same result as scoring it
    // (docs/LSQ.md#L4; LsqObservers.PruningKeepsEveryResult).
    const std::size_t seed_lo = cands.size() - kIntSeeds;
    g.errors(cands.data() + seed_lo, kIntSeeds, errs + seed_lo);
    std::array<double, kIntSeeds> seed_errs;
    std::copy(errs + seed_lo, errs + cands.size(), seed_errs.begin());
    for (double& e : seed_errs)
      if (std::isnan(e)) e = INFINITY;
    std::nth_element(seed_errs.begin(), seed_errs.begin() + (lanes::kRefits - 1), seed_errs.end());
    const double threshold = seed_errs[lanes::kRefits - 1];
    if (P.symmetric) {
      // The observer scales ascend to the min-max one, and the bound rises as the
      // scale falls, in f64 too (each rounded step is): the first scale from the top
      // that it prunes, found by bisection, leaves out every one beneath it.
      const ErrorBounds bounds{g};
      std::size_t kept = 0, above = seed_lo;  // [0, kept) pruned so far, [above, seed_lo) kept
      while (kept < above) {
        const std::size_t mid = kept + (above - kept) / 2;
        if (bounds.clipped(cands[mid].first) * kBoundSafety > threshold)
          kept = mid + 1;
        else
          above = mid;
      }
      std::fill(errs, errs + kept, INFINITY);  // pruned: never chosen, never refit
      if (seed_lo > kept) g.errors(cands.data() + kept, seed_lo - kept, errs + kept);
    } else {
      // With a zero point the two clipping levels need not move monotonically along
      // the list: each candidate's bound from the group's two largest and two smallest
      // elements (a subset of its clipped ones, O(1) per candidate).
      const GroupExtremes ends = group_extremes(g);
      std::vector<Pair>& todo = sc.todo;
      std::vector<std::size_t>& at = sc.todo_at;
      todo.clear();
      at.clear();
      for (std::size_t i = 0; i < seed_lo; ++i) {
        if (ends.clipped_bound(cands[i].first, cands[i].second, P) * kBoundSafety > threshold) {
          errs[i] = INFINITY;  // pruned: never chosen, never refit
        } else {
          todo.push_back(cands[i]);
          at.push_back(i);
        }
      }
      double* const todo_errs = grow(sc.todo_errs, todo.size());
      if (!todo.empty()) g.errors(todo.data(), todo.size(), todo_errs);
      for (std::size_t k = 0; k < at.size(); ++k) errs[at[k]] = todo_errs[k];
    }
  } else {
    g.errors(cands.data(), cands.size(), errs);
  }
  for (std::size_t i = 0; i < cands.size(); ++i) best.offer(errs[i], cands[i].first, cands[i].second);

  // (3) integer grids: (weighted) a log grid of scales far below the max; asymmetric
  // zero points z0 - 1 .. z0 + 1 around the best candidates; the best few refit by least
  // squares (a refit of every candidate costs several times more and rarely wins).
  std::vector<Pair>&extra = sc.picks, &todo = sc.todo;
  std::vector<double>&grid_scales = sc.grid_scales, &es = sc.todo_errs;
  std::vector<Scored>&scored = sc.scored, &tops = sc.least;
  extra.clear();
  if (P.symmetric) {
    ideal_grid_scales(g, amax, grid_scales);
    for (double sc : grid_scales) extra.emplace_back(P.stored_scale(sc), 0.0);
  } else {
    const std::vector<lanes::LsqPair> log_grid = lanes::log_grid_candidates(P, lo, hi);
    extra.assign(log_grid.begin(), log_grid.end());
    ideal_best_asym(g, extra);
  }
  // every pair scored so far: the observer candidates (sorted, unique, and never NaN:
  // lo and hi are finite), then the later ones in the order they were scored
  scored.clear();
  for (std::size_t i = 0; i < cands.size(); ++i) scored.emplace_back(errs[i], cands[i].first, cands[i].second);
  // the error scored for sz, if it was: by binary search among the observer candidates
  // (pair_less-equivalence is == on non-NaN pairs: both read -0 and +0 as equal), and a
  // scan of the rest
  auto scored_error = [&](const std::pair<double, double>& sz) -> std::optional<double> {
    auto same = [&](const Scored& t) { return std::get<1>(t) == sz.first && std::get<2>(t) == sz.second; };
    const auto ref = std::lower_bound(cands.begin(), cands.end(), sz, pair_less);
    if (ref != cands.end() && *ref == sz) return errs[ref - cands.begin()];
    const auto found = std::find_if(scored.begin() + static_cast<std::ptrdiff_t>(cands.size()), scored.end(), same);
    if (found == scored.end()) return std::nullopt;
    return std::get<0>(*found);
  };
  auto score = [&](const std::vector<std::pair<double, double>>& more) {
    // the pairs not scored yet, first occurrences in order, scored in one batch
    todo.clear();
    for (const auto& sz : more)
      if (!scored_error(sz) && std::find(todo.begin(), todo.end(), sz) == todo.end()) todo.push_back(sz);
    grow(es, todo.size());
    g.errors(todo.data(), todo.size(), es.data());
    for (std::size_t i = 0; i < todo.size(); ++i) {
      best.offer(es[i], todo[i].first, todo[i].second);
      scored.emplace_back(es[i], todo[i].first, todo[i].second);
    }
  };
  score(extra);
  // The kRefits least pairs by scored_less, a total order on unique pairs: the same
  // values however `scored` lies, so a selection that leaves it as it is.
  auto top = [&]() -> const std::vector<Scored>& {
    const std::size_t k = std::min(lanes::kRefits, scored.size());
    tops.clear();
    // insertion into the k least so far, ascending
    for (const Scored& t : scored) {
      if (tops.size() == k && !scored_less(t, tops.back())) continue;
      if (tops.size() < k) tops.push_back(t);
      std::size_t at = tops.size() - 1;
      for (; at > 0 && scored_less(t, tops[at - 1]); --at) tops[at] = tops[at - 1];
      tops[at] = t;
    }
    return tops;
  };
  if (!P.symmetric) {
    std::vector<Pair>& zs = sc.picks;
    zs.clear();
    for (const auto& [e, s, z] : top())
      for (double dz : {-1.0, 1.0}) zs.emplace_back(s, P.stored_zero_point(z + dz));
    score(zs);
  }
  // A pair scored above has its error here (a pruned one's +inf stands for no error:
  // such a pair is scored anew, as before).
  auto known = [&](const std::pair<double, double>& sz, double& e) {
    const std::optional<double> had = scored_error(sz);
    if (!had || *had == INFINITY) return false;
    e = *had;
    return true;
  };
  RefitMemo& memo = sc.memo;
  memo.clear();
  for (const auto& [e, s, z] : top()) refit(g, s, z, e, best, memo, known);
  return {best.scale, best.zp};
}

CpuPlan make_plan(const FlatView& flat, const QuantizationArgs& args, const LsqSearchConfig& cfg,
                  const Tensor* global_scale) {
  CpuPlan P;
  static_cast<lanes::LsqPlan&>(P) = lanes::LsqPlan::make(flat.dtype, args, cfg, global_scale);
  P.shrunk = qobs::detail::ShrunkQParams::make(P.qplan);
  if (P.fp_scale_codes) {
    P.code_set = P.symmetric && !P.mx && P.shrunk.usable;
    for (int c = 1; c < 126; ++c) P.code_set = P.code_set && P.code_scale[c] < P.code_scale[c + 1];
  }
  for (const auto& l : P.observer_lists) P.observer_lists_f32.emplace_back(l.factors.begin(), l.factors.end());
  if (P.code_set) {
    const double ratio = lanes::e4m3_min_interval_ratio(P.code_scale.data());
    const bool positive = std::all_of(P.observer_lists_f32.begin(), P.observer_lists_f32.end(), [](const auto& pf) {
      return std::all_of(pf.begin(), pf.end(), [](float p) { return p > 0.0f && std::isfinite(p); });
    });
    if (ratio > 1.0 && positive && P.shrunk.global_scale > 0.0f && std::isfinite(P.shrunk.global_scale)) {
      std::map<double, std::vector<float>> by_expand;  // the lists' factors, merged per expand
      for (std::size_t l = 0; l < P.observer_lists.size(); ++l) {
        std::vector<float>& f = by_expand[P.observer_lists[l].expand];
        f.insert(f.end(), P.observer_lists_f32[l].begin(), P.observer_lists_f32[l].end());
      }
      for (auto& [expand, f] : by_expand)
        P.probe_groups.push_back({expand, lanes::e4m3_probes(std::move(f), P.shrunk.stat_round, ratio)});
      P.probe_floor = lanes::e4m3_probe_floor(P.shrunk.stat_round, P.shrunk.half_range,
                                             P.shrunk.has_global ? P.shrunk.global_scale : 1.0);
    }
  }
  if (P.mx && P.symmetric)
    for (auto l : P.observer_lists) {
      std::sort(l.factors.begin(), l.factors.end());
      l.factors.erase(std::unique(l.factors.begin(), l.factors.end()), l.factors.end());
      P.observer_lists_sorted.push_back(std::move(l.factors));
    }
  P.y_narrow = lanes::narrow_of(P.dplan.y_dt, cfg.mode);
  // the zero point is cast to x's dtype (R5.1.1 step 2): the lanes hold it as f32
  if (!lanes::narrow_of(P.dplan.x_dt, cfg.mode)) P.y_narrow.reset();
  P.s_narrow = lanes::narrow_of(P.dplan.s_dt, cfg.mode);
  return P;
}

}  // namespace

LsqSearchResult lsq_search(const FlatView& flat, const QuantizationArgs& args, const LsqSearchConfig& cfg,
                           const FlatView* weights, const Tensor* global_scale, SimdLevel level, int threads) {
  const CpuPlan P = make_plan(flat, args, cfg, global_scale);
  const int64_t nq = flat.layout.num_qparams();
  const int64_t len = flat.layout.num_obs() * flat.layout.group_len();
  lanes::check_lsq_weights(flat, weights);
  LsqSearchResult res;
  res.scale_dtype = P.scale_dt;
  res.scale.resize(static_cast<std::size_t>(nq));
  res.zero_point.resize(static_cast<std::size_t>(nq));
  std::vector<int64_t> evals(static_cast<std::size_t>(nq));
  const int64_t per_task = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, len));
  const int64_t tasks = (nq + per_task - 1) / per_task;
  // 0 means QOBS_NUM_THREADS / the pool / the hardware, as for every kernel: passed on
  // as 0, parallel_for would run on the caller alone
  res.threads_used = static_cast<int>(std::min<int64_t>(resolve_num_threads(threads), tasks));
  std::vector<LsqScratch> scratch(static_cast<std::size_t>(std::max(1, res.threads_used)));
  parallel_for(tasks, res.threads_used, [&](int64_t t, int worker) {
    LsqScratch& sc = scratch[static_cast<std::size_t>(worker)];
    float* const x = grow(sc.x, static_cast<std::size_t>(len));
    float* const w = weights ? grow(sc.w, static_cast<std::size_t>(len)) : nullptr;
    for (int64_t q = t * per_task; q < std::min(nq, (t + 1) * per_task); ++q) {
      flat.gather(q, x);
      if (weights) weights->gather(q, w);
      Group g{x, w, len, &P, lanes::lsq_simd(level), lanes::lsq_candidates_simd(level), &sc};
      const ElemQParams r = search_group(g, P);
      res.scale[static_cast<std::size_t>(q)] = r.scale;
      res.zero_point[static_cast<std::size_t>(q)] = r.zero_point;
      evals[static_cast<std::size_t>(q)] = g.evaluations;
    }
  });
  for (int64_t e : evals) res.candidates_evaluated += e;
  return res;
}

}  // namespace qobs::kernels::cpu
