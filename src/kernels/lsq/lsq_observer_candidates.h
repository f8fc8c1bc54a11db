// Steps of the least-squares observers' search (the CPU path, lsq_cpu.cc) that the kernel tests
// check on their own: the MX observer candidates by bisection, the NVFP4 observer
// candidates as a set of E4M3 codes, and the INT symmetric observer lists merged as
// runs (docs/LSQ.md#L4).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/arith.h"
#include "qobs/formats.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::detail {

/// The order of (scale, zero point) candidates, std::pair's operator< spelled out: the
/// library's synthesized three-way comparison was a call, not inlined (~5% of the INT
/// asymmetric search). The same results, NaN included (an unordered first member
/// compares false both ways and ends the comparison, as <=> does).
template <typename T>
constexpr bool pair_less_of(const std::pair<T, T>& a, const std::pair<T, T>& b) {
  return a.first < b.first || (a.first == b.first && a.second < b.second);
}

/// std::stable_sort + std::unique of (scale, zero point) candidates by pair_less_of:
/// ascending, and of pairs that compare equal (zero points -0 and +0) the first one
/// kept, so which one the search scores does not depend on a sort's tie order. Fast
/// when the pairs arrive as runs of decreasing pairs (each observer list's shrink
/// factors descend; the caller drops a repeat of the previous pair): the strictly
/// decreasing runs are reversed, then merged pairwise (std::merge takes the earlier
/// run's pair first among equals, and two equal neighbours lie in different runs), at
/// a fraction of the sort's comparisons.
/// Any input order is accepted (a run may be one pair long). With a NaN (the search
/// has none: its ranges are finite) the stable sort itself.
/// sort_unique_runs' buffers, kept by the caller so that repeated calls do not allocate.
struct SortRunsScratch {
  std::vector<std::size_t> ends, merged_ends;
  std::vector<std::pair<double, double>> tmp;
};
inline void sort_unique_runs(std::vector<std::pair<double, double>>& v, SortRunsScratch& scratch) {
  auto less = [](const std::pair<double, double>& a, const std::pair<double, double>& b) { return pair_less_of(a, b); };
  const bool nan =
      std::any_of(v.begin(), v.end(), [](const auto& p) { return std::isnan(p.first) || std::isnan(p.second); });
  if (!nan) {
    std::vector<std::size_t>&ends = scratch.ends, &merged_ends = scratch.merged_ends;
    std::vector<std::pair<double, double>>& tmp = scratch.tmp;
    ends.clear();
    std::size_t from = 0;
    for (std::size_t i = 1; i <= v.size(); ++i) {
      if (i < v.size() && less(v[i], v[i - 1])) continue;  // a run: strictly decreasing
      std::reverse(v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(i));
      ends.push_back(i);
      from = i;
    }
    tmp.resize(v.size());
    while (ends.size() > 1) {
      merged_ends.clear();
      std::size_t start = 0;
      for (std::size_t r = 0; r < ends.size(); r += 2) {
        const std::size_t mid = ends[r], stop = r + 1 < ends.size() ? ends[r + 1] : mid;
        std::merge(v.begin() + static_cast<std::ptrdiff_t>(start), v.begin() + static_cast<std::ptrdiff_t>(mid),
                   v.begin() + static_cast<std::ptrdiff_t>(mid), v.begin() + static_cast<std::ptrdiff_t>(stop),
                   tmp.begin() + static_cast<std::ptrdiff_t>(start), less);
        merged_ends.push_back(stop);
        start = stop;
      }
      std::swap(v, tmp);
      std::swap(ends, merged_ends);
    }
  } else {
    std::stable_sort(v.begin(), v.end(), less);
  }
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

/// MX symmetric: the (scale, zero point) pairs compute_qparams_elem stores for the
/// shrunk ranges (a.mul(m0, p), a.mul(M0, p)) of the ascending factors ps, as a set
/// (emit may see them in any order), with a few calls instead of one per factor. The
/// stored pair depends on the range only through the key round_to_power_2(amax, m)
/// (R2.4.2, m the element mantissa of R2.4.5; the zero point is 0), and the key never
/// decreases as p grows (every step
/// is monotone: the rounded products, nan_min / nan_max with 0, |.|, the power-of-two
/// rounding of a non-negative float's bits). So where two factors share a key, every
/// factor between them does too: bisecting between factors of different keys finds
/// every distinct key, and each gets one compute_qparams_elem call.
template <class Emit>
void mx_observer_candidates(const std::vector<double>& ps, double m0, double M0, const qobs::detail::QParamPlan& qp,
                            const qobs::detail::Arith& a, Emit emit) {
  if (ps.empty()) return;
  const DType rdt = qp.stat_dt == DType::kF64 ? DType::kF64 : qp.stat_dt;
  // compute_qparams_elem's steps up to the power-of-two rounding, exactly
  auto key = [&](std::size_t i) {
    const double mn = qobs::detail::nan_min(a.mul(m0, ps[i]), 0.0), mx = qobs::detail::nan_max(a.mul(M0, ps[i]), 0.0);
    return round_to_power_2(rdt, qobs::detail::nan_max(std::fabs(mn), std::fabs(mx)), qp.mx_elem_mantissa);
  };
  auto stored = [&](std::size_t i) {
    const qobs::detail::ElemQParams q = qobs::detail::compute_qparams_elem(a.mul(m0, ps[i]), a.mul(M0, ps[i]), qp);
    emit(q.scale, q.zero_point);
  };
  // emits the keys of (i, j] other than ki, given the keys ki at i and kj at j
  auto between = [&](auto& self, std::size_t i, std::size_t j, double ki, double kj) -> void {
    if (ki == kj) return;
    if (j == i + 1) return stored(j);
    const std::size_t m = i + (j - i) / 2;
    const double km = key(m);
    self(self, i, m, ki, km);
    self(self, m, j, km, kj);
  };
  stored(0);
  between(between, 0, ps.size() - 1, key(0), key(ps.size() - 1));
}

/// NVFP4 (FP8 E4M3 block scales): the positive E4M3 code 1..126 whose stored scale
/// code_scale[code] is exactly v, or -1 (not such a value: 0, eps, NaN, or a scale the
/// plan stores otherwise). The search keeps its observer candidates' stored scales as
/// a bitmap of these codes instead of sorting a list (docs/LSQ.md#L4).
inline int e4m3_code_of(float v, const double* code_scale) {
  if (!(v > 0.0f && v <= 448.0f)) return -1;
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  const int e = static_cast<int>(b >> 23) - 127;
  // E4M3: normal codes (e + 7) << 3 | 3 mantissa bits for e >= -6, subnormals m x 2^-9
  const int c = e >= -6 ? ((e + 7) << 3) | static_cast<int>((b >> 20) & 7) : static_cast<int>(v * 512.0f);
  return c >= 1 && c <= 126 && code_scale[c] == static_cast<double>(v) ? c : -1;
}

/// A set of E4M3 codes 0..127.
struct E4m3CodeSet {
  uint64_t bits[2] = {0, 0};
  void add(int c) { bits[c >> 6] |= uint64_t{1} << (c & 63); }
  /// every code lo..hi (0 <= lo, hi <= 127; none if lo > hi), a word at a time: a
  /// run of the nvfp4 lists spans ~10 codes per group, and this is per group
  void add_range(int lo, int hi) {
    for (int h = 0; h < 2; ++h) {
      const int a = std::max(lo, h * 64), b = std::min(hi, h * 64 + 63);
      if (a > b) continue;
      const int n = b - a + 1;  // 1..64
      const uint64_t run = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
      bits[h] |= run << (a - h * 64);
    }
  }
  /// f(code) for every code of the set, ascending.
  template <class F>
  void for_each(F f) const {
    for (int h = 0; h < 2; ++h)
      for (uint64_t m = bits[h]; m; m &= m - 1) f(h * 64 + std::countr_zero(m));
  }
};

/// NVFP4 symmetric: the shrink factors of one observer list whose stored scales
/// determine the list's whole E4M3 code set (docs/LSQ.md#L4). The stored scale of a
/// factor p is the E4M3 rounding of r(p) = global x rnd(rnd(amax' p) / half_range)
/// (ShrunkQParams::compute, symmetric, amax' = max(|m0|, |M0|)): every step is monotone,
/// so the codes never decrease with p, and each rounding is within a relative u of its
/// argument, so r(p') / r(p) <= (p' / p) x margin. Where consecutive factors lie closer
/// than the narrowest rounding interval of a code (hi / lo of 1..125's intervals, 1.069
/// at mantissa 7), the r of a run of such factors cannot step over any code's interval:
/// every code between the run's first and last code is some factor's code. So a run
/// needs two computed scales, its ends, instead of one per factor.
struct E4m3Probes {
  std::vector<float> factors;  ///< the runs' (first, last) pairs, then the lone factors
  int64_t num_runs = 0;
  float min_factor = 0;  ///< the list's smallest factor: the guard's argument
};

/// The narrowest rounding interval hi / lo of the E4M3 codes 1..125 whose stored scale
/// code_scale[c] is its E4M3 value (126 saturates: its interval is unbounded), or 0 if
/// some code's stored scale is not its value (then no run is formed).
inline double e4m3_min_interval_ratio(const double* code_scale) {
  double min_ratio = INFINITY;
  for (int c = 1; c <= 125; ++c) {
    const double v = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    if (code_scale[c] != v || code_scale[c + 1] != fp8_e4m3_to_float(static_cast<uint8_t>(c + 1))) return 0.0;
    const double below = fp8_e4m3_to_float(static_cast<uint8_t>(c - 1)), above = code_scale[c + 1];
    min_ratio = std::min(min_ratio, (v + above) / (below + v));
  }
  return min_ratio;
}

/// The probes of a list of positive shrink factors (any order, repeats allowed) whose
/// statistics round to stat_round (f32, bf16 or f16) before the E4M3 code rounding.
inline E4m3Probes e4m3_probes(std::vector<float> factors, DType stat_round, double min_interval_ratio) {
  E4m3Probes pr;
  std::sort(factors.begin(), factors.end());
  factors.erase(std::unique(factors.begin(), factors.end()), factors.end());
  if (factors.empty()) return pr;
  pr.min_factor = factors.front();
  // the chain's roundings: three in f32 (the product, the quotient, the global scale)
  // and two in the statistics' dtype, each relative error at most its unit roundoff u
  const double u32 = 0x1p-24;
  const double us = stat_round == DType::kBF16 ? 0x1p-9 : stat_round == DType::kF16 ? 0x1p-11 : u32;
  const double margin = std::pow((1 + u32) / (1 - u32), 3) * std::pow((1 + us) / (1 - us), 2) * (1 + 0x1p-20);
  std::vector<float> lone;
  for (std::size_t i = 0; i < factors.size();) {
    std::size_t j = i;
    while (j + 1 < factors.size() && static_cast<double>(factors[j + 1]) / factors[j] * margin < min_interval_ratio)
      ++j;
    if (j > i) {
      pr.factors.push_back(factors[i]);
      pr.factors.push_back(factors[j]);
      ++pr.num_runs;
    } else {
      lone.push_back(factors[i]);
    }
    i = j + 1;
  }
  pr.factors.insert(pr.factors.end(), lone.begin(), lone.end());
  return pr;
}

/// The smallest amax' x min_factor for which the probes hold: the chain's values must be
/// normal in the statistics' dtype (a subnormal's rounding error is not relative), and
/// r(p) must not round to the E4M3 code 0, whose stored scale is replaced by eps (R4.1
/// step 7: eps may be a code's value, so the codes would not be monotone in p).
inline double e4m3_probe_floor(DType stat_round, double half_range, double global_scale) {
  const double normal_min = stat_round == DType::kF16 ? 0x1p-14 : 0x1p-126;
  const double hr = std::max(1.0, half_range);
  // r(p) >= 2^-10 (half the smallest code) with room for the roundings' errors
  return std::max(4.0 * normal_min * hr, 0x1p-10 * 1.05 * half_range / global_scale);
}

/// Adds the codes that the probes' stored scales (scales[i] of pr.factors[i]) stand
/// for; false if one is no code (the caller starts over with every factor).
inline bool add_probed_codes(const E4m3Probes& pr, const float* scales, const double* code_scale, E4m3CodeSet& set) {
  for (int64_t r = 0; r < pr.num_runs; ++r) {
    const int lo = e4m3_code_of(scales[2 * r], code_scale), hi = e4m3_code_of(scales[2 * r + 1], code_scale);
    if (lo < 0 || hi < 0 || lo > hi) return false;
    set.add_range(lo, hi);
  }
  for (std::size_t i = static_cast<std::size_t>(2 * pr.num_runs); i < pr.factors.size(); ++i) {
    const int c = e4m3_code_of(scales[i], code_scale);
    if (c < 0) return false;
    set.add(c);
  }
  return true;
}

}  // namespace qobs::kernels::detail
