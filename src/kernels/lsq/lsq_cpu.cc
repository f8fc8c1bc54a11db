// The CPU path of the least-squares search (docs/LSQ.md, lsq_cpu.h). Groups are
// independent and spread over the thread pool, each worker with its own LsqScratch.
// One group's search (search_group) runs in phases, one GroupSearch method each:
//   take_range                   gather: the range and the min-max qparams
//   collect_observer_candidates  the observer candidates (and the block-scale window), sorted, unique
//   score_block_scales           block scales: seeds next to the min-max scale, the rest pruned by bounds
//   walk_outward                 block scales: the codes / exponents beyond the window, while bounds allow
//   score_int_candidates         integer grids: the kIntSeeds largest as seeds, the rest pruned by bounds
//   ideal_grid_picks, score_new  integer grids: the ideal-quantizer proxies' picks
//   zero_point_neighbours        asymmetric: z - 1 and z + 1 of the least pairs
//   refit_least                  the least-squares refits, with look-ups of what the group holds
// Selection is Best (the first least error offered) and ScoredPairs::least (the refits'
// starts). Candidates are scored in SIMD lanes where the level allows (Group::errors),
// summed in the canonical order of lsq_error_simd.h, so every level gives the scalar
// scorer's bits; every shortcut (bounds, look-ups, the proxies' early stop, code sets)
// is exact, which the comparison with the plain reference (lsq_ref.cc) checks.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "core/arith.h"
#include "kernels/kernels.h"
#include "kernels/parallel/thread_pool.h"
#include "kernels/lsq/lsq_observer_candidates.h"
#include "kernels/lsq/lsq_candidates_simd.h"
#include "kernels/lsq/lsq_cpu.h"
#include "kernels/lsq/lsq_error_simd.h"
#include "kernels/lsq/lsq_plan.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::cpu {

namespace {

namespace lanes = qobs::kernels::detail;  // lsq_*_simd.h, lsq_observer_candidates.h, lsq_plan.h

using lanes::kIdealBest;
using lanes::kRefits;

using qobs::detail::Arith;
using qobs::detail::ElemQParams;

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
    return {x,
            w,
            n,
            !P->symmetric,
            *P->y_narrow,
            *P->s_narrow,
            P->dplan.grid,
            static_cast<float>(P->dplan.q_min),
            static_cast<float>(P->dplan.q_max)};
  }
  /// The scalar scorer (the plain reference's): R5.1 element by element, summed in the
  /// canonical order.
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
  if (std::get<0>(a) < std::get<0>(b)) return true;
  if (std::get<0>(b) < std::get<0>(a)) return false;
  // equal errors, or a NaN among them
  const bool nan_a = std::isnan(std::get<0>(a)), nan_b = std::isnan(std::get<0>(b));
  if (nan_a != nan_b) return nan_b;
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
/// an error the search holds for sz already and says whether it did (refit_least).
template <typename Known>
void refit(Group& g, double s, double z, double e, Best& best, RefitMemo& memo, const Known& known) {
  for (int it = 0; it < lanes::kRefitSteps; ++it) {
    double S[lanes::kLsqRefitSums];
    const std::pair<double, double> at{s, z};
    const bool reuse = g.P->cfg.reuse_refit_results;
    const auto hit =
        !reuse ? memo.sums.end()
               : std::find_if(memo.sums.begin(), memo.sums.end(), [&](const auto& m) { return m.first == at; });
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
      const auto seen =
          !reuse ? memo.errors.end()
                 : std::find_if(memo.errors.begin(), memo.errors.end(), [&](const auto& m) { return m.first == next; });
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
/// the refits refine -- and the scales of the kIdealBest least errors, each with its
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
  // the kIdealBest least (error, scale) pairs, ascending; the scales are distinct (and
  // the errors never NaN), so the same pairs whatever order the ranges are offered in
  std::array<std::pair<float, float>, kIdealBest> top;
  std::array<std::size_t, kIdealBest> at{};
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
    // kIdealBest-th least error so far as its bound: a chunk whose sums all pass it
    // partway holds none of the kIdealBest least (its errors read +inf), so the
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
      g.simd->ideal_errors(ax, lim, g.w, g.n, sv + from, num, err + from,
                           kept == top.size() ? top.back().first : HUGE_VALF);
      select(static_cast<std::size_t>(from), static_cast<std::size_t>(from + num));
    }
  } else {
    lanes::lsq_ideal_errors_scalar(ax, lim, g.w, g.n, sv, cnt, err);
    select(0, count);
  }
  for (std::size_t k = 0; k < kept; ++k)
    lanes::IdealGrid::neighbours(first + static_cast<uint32_t>(at[k]), [&](double v) { out.push_back(v); });
}

/// Asymmetric integer grids (docs/LSQ.md#L2): of the log grid's stored (scale, zero
/// point) candidates, the kIdealBest of least ideal-quantizer error (nearest code,
/// clamped, no dtype roundings), ascending, for the real scorer. Candidates whose scale
/// the proxy cannot take (not a normal float with a finite reciprocal) are kept as they
/// are.
void ideal_best_asym(const Group& g, std::vector<std::pair<double, double>>& cands) {
  if (cands.size() <= kIdealBest) return;
  LsqScratch& sc = *g.scratch;
  std::vector<Pair>&out = sc.unproxied, &proxied = sc.proxied;
  out.clear();
  proxied.clear();
  for (const auto& c : cands) (lanes::asym_proxy_takes(c) ? proxied : out).push_back(c);
  if (proxied.size() <= kIdealBest) return;
  const std::size_t count = proxied.size();
  float *const sv = grow(sc.ideal_s, count), *const zv = grow(sc.ideal_z, count),
               *const err = grow(sc.ideal_err, count);
  std::vector<std::size_t>& order = sc.ideal_order;
  for (std::size_t i = 0; i < count; ++i) {
    sv[i] = static_cast<float>(proxied[i].first);
    zv[i] = static_cast<float>(proxied[i].second);
  }
  const float q_min = static_cast<float>(g.P->qplan.q_min), q_max = static_cast<float>(g.P->qplan.q_max);
  const auto cnt = static_cast<int64_t>(count);
  if (g.simd) g.simd->ideal_errors_asym(g.x, g.w, g.n, sv, zv, cnt, q_min, q_max, err);
  else lanes::lsq_ideal_errors_asym_scalar(g.x, g.w, g.n, sv, zv, cnt, q_min, q_max, err);
  order.resize(count);
  for (std::size_t i = 0; i < count; ++i) order[i] = i;
  // error ascending (a NaN, from a zero weight times an overflowed difference, last),
  // ties by index: a strict total order, so the pick does not depend on how
  // partial_sort lays out the rest
  for (std::size_t i = 0; i < count; ++i)
    if (std::isnan(err[i])) err[i] = INFINITY;
  std::partial_sort(order.begin(), order.begin() + kIdealBest, order.end(), [&](std::size_t a, std::size_t b) {
    if (err[a] != err[b]) return err[a] < err[b];
    return a < b;
  });
  for (std::size_t k = 0; k < kIdealBest; ++k) out.push_back(proxied[order[k]]);
  cands.assign(out.begin(), out.end());
}

/// A group's two largest and two smallest elements with their weights (1 unweighted):
/// for INT asymmetric candidates, a lower bound of the error from the elements each
/// must clip, O(1) per candidate (score_int_candidates' pruning, docs/LSQ.md#L4).
struct GroupExtremes {
  std::array<double, 2> top{-INFINITY, -INFINITY}, top_w{0, 0};      ///< descending
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

/// The extremes of a group without NaN / Inf (take_range keeps those from scoring); with
/// fewer than two elements the missing ones add nothing.
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
/// INT: the largest observer scales scored before the others are pruned (at least the
/// refits' kRefits).
constexpr std::size_t kIntSeeds = 8;

/// The pairs one group has scored (integer grids), in the order they were scored: the
/// observer candidates (sorted, unique and never NaN, the group's range being finite;
/// +inf for those the bounds left out), then the later ones.
class ScoredPairs {
 public:
  ScoredPairs(const std::vector<Pair>& cands, const double* errs, LsqScratch& sc)
      : cands_(cands), errs_(errs), list_(sc.scored), least_(sc.least) {
    list_.clear();
    for (std::size_t i = 0; i < cands_.size(); ++i) list_.emplace_back(errs_[i], cands_[i].first, cands_[i].second);
  }
  /// The error scored for sz, if it was (a pruned candidate's reads +inf): by binary
  /// search among the observer candidates (pair_less-equivalence is == on non-NaN
  /// pairs: both read -0 and +0 as equal), and a scan of the rest.
  std::optional<double> error_of(const Pair& sz) const {
    const auto at = std::lower_bound(cands_.begin(), cands_.end(), sz, pair_less);
    if (at != cands_.end() && *at == sz) return errs_[at - cands_.begin()];
    const auto found =
        std::find_if(list_.begin() + static_cast<std::ptrdiff_t>(cands_.size()), list_.end(),
                     [&](const Scored& t) { return std::get<1>(t) == sz.first && std::get<2>(t) == sz.second; });
    if (found == list_.end()) return std::nullopt;
    return std::get<0>(*found);
  }
  void add(double e, const Pair& sz) { list_.emplace_back(e, sz.first, sz.second); }
  /// The kRefits least pairs by scored_less, ascending: scored_less is a total order
  /// on the unique pairs, so an insertion selection that leaves the list as it lies
  /// gives the values any sort would.
  const std::vector<Scored>& least() {
    const std::size_t k = std::min(kRefits, list_.size());
    least_.clear();
    for (const Scored& t : list_) {
      if (least_.size() == k && !scored_less(t, least_.back())) continue;
      if (least_.size() < k) least_.push_back(t);
      std::size_t at = least_.size() - 1;
      for (; at > 0 && scored_less(t, least_[at - 1]); --at) least_[at] = least_[at - 1];
      least_[at] = t;
    }
    return least_;
  }

 private:
  const std::vector<Pair>& cands_;
  const double* errs_;
  std::vector<Scored>& list_;
  std::vector<Scored>& least_;
};

/// One group's search (docs/LSQ.md#L1), a method per phase; search_group runs them in
/// order. Every pair scored is offered to best_ (Best: the first of least error).
class GroupSearch {
 public:
  GroupSearch(Group& g, const CpuPlan& P) : g_(g), P_(P), sc_(*g.scratch), a_{P.dt, P.cfg.mode} {}

  /// Gather: the group's range and min-max qparams; false for a group that keeps them
  /// unscored (NaN / Inf anywhere, or all zeros).
  bool take_range();
  const ElemQParams& minmax() const { return minmax_; }
  /// Observer candidates: every observer's choice as calculate_qparams stores it, with
  /// the block-scale window (L1 steps 1-2), ascending, of equal pairs the first.
  void collect_observer_candidates();
  /// Seeds and pruning, block scales: the candidates next to the min-max scale scored
  /// first, then those below down to the first whose clipping bound exceeds the seeds'
  /// best, and every one above.
  void score_block_scales();
  /// Block scales: the codes or exponents beyond the window, outwards while their
  /// bound stays below the best error.
  void walk_outward() {
    if (window_.lo > window_.hi) return;
    extend_window(
        g_, ErrorBounds{g_}, window_.lo, window_.hi, window_.min, window_.max,
        [&](int i) { return lanes::window_scale(P_, i); }, best_);
  }
  /// Seeds and pruning, integer grids: the kIntSeeds largest candidates scored first,
  /// then the others whose clipping bound does not exceed the kRefits-th least seed
  /// error (docs/LSQ.md#L4).
  void score_int_candidates();
  /// Ideal grid: the ideal-quantizer proxies' picks (symmetric: the bf16 grid;
  /// asymmetric: the log grid), stored pairs.
  const std::vector<Pair>& ideal_grid_picks();
  /// Asymmetric: the zero points z - 1 and z + 1 of each of the kRefits least pairs.
  const std::vector<Pair>& zero_point_neighbours();
  /// Scores the pairs of `more` not scored yet: first occurrences, in order, one batch.
  void score_new(const std::vector<Pair>& more);
  /// Refits: each of the kRefits least pairs refit while its error falls, with the
  /// errors and sums the group holds looked up.
  void refit_least();
  /// Selection: the first pair of least error offered.
  ElemQParams result() const { return {best_.scale, best_.zp}; }

 private:
  /// One observer list's qparams (f32 steps of compute_qparams_elem, tested value for
  /// value against it) for the shrunk ranges (m0 p, M0 p), into sc_.shrunk_s / shrunk_z.
  void shrunk_qparams(double m0, double M0, const std::vector<float>& pf);
  /// The code set from the probes (lanes::E4m3Probes: a run's two ends stand for the
  /// codes between them); false where a guard fails or a scale is no code.
  bool collect_probed_codes(lanes::E4m3CodeSet& codes);
  /// Every list's candidates, into the code set (codes) or sc_.cands (nullptr); false
  /// where a scale is no code.
  bool collect_lists(lanes::E4m3CodeSet* codes);

  Group& g_;
  const CpuPlan& P_;
  LsqScratch& sc_;
  const Arith a_;
  double lo_ = INFINITY, hi_ = -INFINITY, amax_ = 0;
  ElemQParams minmax_{};
  lanes::ScaleWindow window_;
  double* errs_ = nullptr;             ///< the observer candidates' errors (+inf: left out by a bound)
  std::optional<ScoredPairs> scored_;  ///< integer grids, from score_int_candidates
  Best best_;
};

/// docs/LSQ.md#L1 for one group: the phases in order.
ElemQParams search_group(Group& g, const CpuPlan& P) {
  GroupSearch s(g, P);
  if (!s.take_range()) return s.minmax();
  s.collect_observer_candidates();
  if (P.block_scale_codes()) {
    s.score_block_scales();
    s.walk_outward();
    return s.result();
  }
  s.score_int_candidates();
  s.score_new(s.ideal_grid_picks());
  if (!P.symmetric) s.score_new(s.zero_point_neighbours());
  s.refit_least();
  return s.result();
}

bool GroupSearch::take_range() {
  for (int64_t j = 0; j < g_.n; ++j) {
    lo_ = qobs::detail::nan_min(lo_, g_.x[j]);
    hi_ = qobs::detail::nan_max(hi_, g_.x[j]);
  }
  minmax_ = qobs::detail::compute_qparams_elem(lo_, hi_, P_.qplan);
  amax_ = std::max(std::fabs(lo_), std::fabs(hi_));
  return std::isfinite(lo_) && std::isfinite(hi_) && !(lo_ == 0 && hi_ == 0);
}

void GroupSearch::shrunk_qparams(double m0, double M0, const std::vector<float>& pf) {
  grow(sc_.shrunk_s, pf.size());
  grow(sc_.shrunk_z, pf.size());
  if (g_.candidates) {
    g_.candidates->run(P_.shrunk, static_cast<float>(m0), static_cast<float>(M0), pf.data(),
                       static_cast<int64_t>(pf.size()), sc_.shrunk_s.data(), sc_.shrunk_z.data());
    return;
  }
  P_.shrunk.compute(static_cast<float>(m0), static_cast<float>(M0), pf.data(), static_cast<int64_t>(pf.size()),
                    sc_.shrunk_s.data(), sc_.shrunk_z.data());
}

bool GroupSearch::collect_probed_codes(lanes::E4m3CodeSet& codes) {
  for (const auto& pg : P_.probe_groups) {
    const double m0 = a_.mul(lo_, pg.expand), M0 = a_.mul(hi_, pg.expand);
    if (!(std::max(std::fabs(static_cast<float>(m0)), std::fabs(static_cast<float>(M0))) *
              static_cast<double>(pg.probes.min_factor) >=
          P_.probe_floor))
      return false;
  }
  for (const auto& pg : P_.probe_groups) {
    shrunk_qparams(a_.mul(lo_, pg.expand), a_.mul(hi_, pg.expand), pg.probes.factors);
    if (!lanes::add_probed_codes(pg.probes, sc_.shrunk_s.data(), P_.code_scale.data(), codes)) return false;
  }
  return true;
}

bool GroupSearch::collect_lists(lanes::E4m3CodeSet* codes) {
  std::vector<Pair>& cands = sc_.cands;
  // a list's neighbouring shrink factors mostly give the same stored pair: dropping a
  // repeat of the previous pair here leaves what sort_unique_runs makes, at a fraction
  // of its work
  auto add_cand = [&cands](double s, double z) {
    if (cands.empty() || cands.back() != Pair{s, z}) cands.emplace_back(s, z);
  };
  for (std::size_t l = 0; l < P_.observer_lists.size(); ++l) {
    const auto& [expand, ps] = P_.observer_lists[l];
    const double m0 = a_.mul(lo_, expand), M0 = a_.mul(hi_, expand);
    if (P_.shrunk.usable) {
      const std::vector<float>& pf = P_.observer_lists_f32[l];
      shrunk_qparams(m0, M0, pf);
      const float *const fs = sc_.shrunk_s.data(), *const fz = sc_.shrunk_z.data();
      if (codes) {
        // neighbouring factors mostly give the same scale: a repeat is in the set already
        const double* const cs = P_.code_scale.data();
        lanes::E4m3CodeSet list;  // locals, not the caller's set: kept in registers
        float prev = -1.0f;       // no scale
        for (std::size_t i = 0; i < pf.size(); ++i) {
          const float v = fs[i];
          if (v == prev) continue;
          prev = v;
          const int c = lanes::e4m3_code_of(v, cs);
          if (c < 0) return false;
          list.add(c);
        }
        codes->bits[0] |= list.bits[0];
        codes->bits[1] |= list.bits[1];
      } else {
        for (std::size_t i = 0; i < pf.size(); ++i) add_cand(fs[i], P_.symmetric ? 0.0 : static_cast<double>(fz[i]));
      }
    } else if (!P_.observer_lists_sorted.empty()) {
      lanes::mx_observer_candidates(P_.observer_lists_sorted[l], m0, M0, P_.qplan, a_, add_cand);
    } else {
      for (double p : ps) {
        const ElemQParams sz = qobs::detail::compute_qparams_elem(a_.mul(m0, p), a_.mul(M0, p), P_.qplan);
        add_cand(sz.scale, sz.zero_point);
      }
    }
  }
  return true;
}

void GroupSearch::collect_observer_candidates() {
  std::vector<Pair>& cands = sc_.cands;
  cands.clear();
  // P.code_set: the candidates as a set of E4M3 codes, from the probes' codes where
  // their guards hold; a scale that is no code (never seen) sends the group back to
  // the list, exactly as without codes
  lanes::E4m3CodeSet codes;
  bool use_codes = P_.code_set;
  const bool probed = use_codes && !P_.probe_groups.empty() && collect_probed_codes(codes);
  if (!probed) {
    codes = {};  // what a failed probe added
    if (!collect_lists(use_codes ? &codes : nullptr)) {
      use_codes = false;
      collect_lists(nullptr);
    }
  }
  window_ = lanes::scale_window(P_, minmax_.scale, amax_);
  if (P_.fp_scale_codes && !P_.mx) {
    // FP8 E4M3 block-scale codes around q0 = E4M3(amax / q_max x global)
    for (int c = window_.lo; c <= window_.hi; ++c) {
      if (use_codes) codes.add(c);
      else cands.emplace_back(P_.code_scale[static_cast<std::size_t>(c)], 0.0);
    }
  } else if (P_.mx) {
    // E8M0 exponents floor - 1, floor, floor + 1 of log2(amax) - log2(q_max)
    for (int d = window_.lo; d <= window_.hi; ++d) {
      const double s = lanes::window_scale(P_, d);
      if (std::isfinite(s)) cands.emplace_back(s, 0.0);
    }
  }
  if (use_codes) {
    // the ascending codes are the ascending stored scales (CpuPlan::code_set)
    codes.for_each([&](int c) { cands.emplace_back(P_.code_scale[static_cast<std::size_t>(c)], 0.0); });
  } else {
    lanes::sort_unique_runs(cands, sc_.runs);
  }
  errs_ = grow(sc_.errs, cands.size());
}

void GroupSearch::score_block_scales() {
  // A candidate left out is strictly worse than one scored, so the minimum and its tie
  // order (ascending scale) are unchanged.
  const std::vector<Pair>& cands = sc_.cands;
  const ErrorBounds bounds{g_};
  const std::size_t mid = static_cast<std::size_t>(
      std::lower_bound(cands.begin(), cands.end(), minmax_.scale, [](const auto& c, double v) { return c.first < v; }) -
      cands.begin());
  // the clipping bound assumes codes symmetric about 0: with a zero point (an
  // asymmetric FP8 plan) every candidate is scored
  const std::size_t seed_lo = !P_.symmetric         ? 0
                              : mid > kSeedEachSide ? mid - kSeedEachSide
                                                    : 0,
                    seed_hi = !P_.symmetric ? cands.size() : std::min(cands.size(), mid + kSeedEachSide);
  auto score = [&](std::size_t from, std::size_t to) {
    if (to > from) g_.errors(cands.data() + from, to - from, errs_ + from);
  };
  score(seed_lo, seed_hi);
  double seed_best = INFINITY;
  for (std::size_t i = seed_lo; i < seed_hi; ++i) seed_best = qobs::detail::nan_min(seed_best, errs_[i]);
  // [kept, seed_lo): the codes below whose bound does not exceed the seeds' best
  std::size_t kept = seed_lo;
  while (kept > 0 && !(bounds.clipped(cands[kept - 1].first) * kBoundSafety > seed_best)) --kept;
  std::fill(errs_, errs_ + kept, INFINITY);  // pruned: never chosen
  score(kept, seed_lo);
  // above, the zeroed elements' bound rarely prunes: scored without it
  score(seed_hi, cands.size());
  for (std::size_t i = 0; i < cands.size(); ++i) best_.offer(errs_[i], cands[i].first, cands[i].second);
}

void GroupSearch::score_int_candidates() {
  const std::vector<Pair>& cands = sc_.cands;
  if (P_.cfg.prune_observer_candidates && cands.size() > kIntSeeds) {
    // A candidate whose clipped elements alone cost more than the kRefits-th least seed
    // error is worse than kRefits scored candidates, so it can be neither the minimum
    // nor a refit's start: leaving it out gives the same result as scoring it
    // (LsqObservers.PruningKeepsEveryResult, and the plain reference).
    const std::size_t seed_lo = cands.size() - kIntSeeds;
    g_.errors(cands.data() + seed_lo, kIntSeeds, errs_ + seed_lo);
    std::array<double, kIntSeeds> seed_errs;
    std::copy(errs_ + seed_lo, errs_ + cands.size(), seed_errs.begin());
    for (double& e : seed_errs)
      if (std::isnan(e)) e = INFINITY;
    std::nth_element(seed_errs.begin(), seed_errs.begin() + (kRefits - 1), seed_errs.end());
    const double threshold = seed_errs[kRefits - 1];
    if (P_.symmetric) {
      // The observer scales ascend to the min-max one, and the bound rises as the
      // scale falls, in f64 too (each rounded step is): the first scale from the top
      // that it prunes, found by bisection, leaves out every one beneath it.
      const ErrorBounds bounds{g_};
      std::size_t kept = 0, above = seed_lo;  // [0, kept) pruned so far, [above, seed_lo) kept
      while (kept < above) {
        const std::size_t mid = kept + (above - kept) / 2;
        if (bounds.clipped(cands[mid].first) * kBoundSafety > threshold) kept = mid + 1;
        else above = mid;
      }
      std::fill(errs_, errs_ + kept, INFINITY);  // pruned: never chosen, never refit
      if (seed_lo > kept) g_.errors(cands.data() + kept, seed_lo - kept, errs_ + kept);
    } else {
      // With a zero point the two clipping levels need not move monotonically along
      // the list: each candidate's bound from the group's two largest and two smallest
      // elements (a subset of its clipped ones, O(1) per candidate).
      const GroupExtremes ends = group_extremes(g_);
      std::vector<Pair>& todo = sc_.todo;
      std::vector<std::size_t>& at = sc_.todo_at;
      todo.clear();
      at.clear();
      for (std::size_t i = 0; i < seed_lo; ++i) {
        if (ends.clipped_bound(cands[i].first, cands[i].second, P_) * kBoundSafety > threshold) {
          errs_[i] = INFINITY;  // pruned: never chosen, never refit
        } else {
          todo.push_back(cands[i]);
          at.push_back(i);
        }
      }
      double* const todo_errs = grow(sc_.todo_errs, todo.size());
      if (!todo.empty()) g_.errors(todo.data(), todo.size(), todo_errs);
      for (std::size_t k = 0; k < at.size(); ++k) errs_[at[k]] = todo_errs[k];
    }
  } else {
    g_.errors(cands.data(), cands.size(), errs_);
  }
  for (std::size_t i = 0; i < cands.size(); ++i) best_.offer(errs_[i], cands[i].first, cands[i].second);
  scored_.emplace(cands, errs_, sc_);
}

const std::vector<Pair>& GroupSearch::ideal_grid_picks() {
  std::vector<Pair>& picks = sc_.picks;
  picks.clear();
  if (P_.symmetric) {
    ideal_grid_scales(g_, amax_, sc_.grid_scales);
    for (double s : sc_.grid_scales) picks.emplace_back(P_.stored_scale(s), 0.0);
  } else {
    lanes::log_grid_candidates(P_, lo_, hi_, picks);
    ideal_best_asym(g_, picks);
  }
  return picks;
}

const std::vector<Pair>& GroupSearch::zero_point_neighbours() {
  std::vector<Pair>& picks = sc_.picks;
  picks.clear();
  for (const auto& [e, s, z] : scored_->least())
    for (double dz : {-1.0, 1.0}) picks.emplace_back(s, P_.stored_zero_point(z + dz));
  return picks;
}

void GroupSearch::score_new(const std::vector<Pair>& more) {
  std::vector<Pair>& todo = sc_.todo;
  todo.clear();
  for (const Pair& sz : more)
    if (!scored_->error_of(sz) && std::find(todo.begin(), todo.end(), sz) == todo.end()) todo.push_back(sz);
  double* const errs = grow(sc_.todo_errs, todo.size());
  g_.errors(todo.data(), todo.size(), errs);
  for (std::size_t i = 0; i < todo.size(); ++i) {
    best_.offer(errs[i], todo[i].first, todo[i].second);
    scored_->add(errs[i], todo[i]);
  }
}

void GroupSearch::refit_least() {
  // A pair scored above has its error here (a pruned one's +inf stands for no error:
  // such a pair is scored anew).
  auto known = [&](const Pair& sz, double& e) {
    const std::optional<double> had = scored_->error_of(sz);
    if (!had || *had == INFINITY) return false;
    e = *had;
    return true;
  };
  sc_.memo.clear();
  for (const auto& [e, s, z] : scored_->least()) refit(g_, s, z, e, best_, sc_.memo, known);
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
