// The ordering step of the least-squares observers' exact sweep (docs/LSQ.md#L2,
// lsq_search.cc): the code crossings of a group sorted by descending scale, equal
// scales by element -- a strict total order, so the sweep's running sums do not depend
// on the sort algorithm.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace qobs::kernels::detail {

/// At scale s, element j's code crosses from k to k + 1 (s = |x_j| / (k + 1/2)).
struct Crossing {
  double s;
  uint32_t j, k;
};

inline bool crossing_before(const Crossing& a, const Crossing& b) { return a.s != b.s ? a.s > b.s : a.j < b.j; }

/// Sorts v (every s in [s_lo, s_hi], or near it) by crossing_before, as std::sort would:
/// a counting sort into as many buckets as crossings, by a bucket index that never
/// decreases as s falls, then an insertion sort that only moves crossings within their
/// bucket -- expected linear time for the sweep's spread-out crossings.
inline void sort_crossings(std::vector<Crossing>& v, double s_lo, double s_hi) {
  const std::size_t nb = v.size();
  if (nb < 2) return;
  const double per = static_cast<double>(nb) / (s_hi - s_lo);
  if (!std::isfinite(per) || !(per > 0)) {  // a subnormal or empty range
    std::sort(v.begin(), v.end(), crossing_before);
    return;
  }
  // truncation is floor here (f > 0) and inline, unlike std::floor on baseline x86-64
  auto bucket = [&](double s) {
    const double f = (s_hi - s) * per;
    return f > 0 ? static_cast<std::size_t>(std::min(f, static_cast<double>(nb - 1))) : std::size_t{0};
  };
  thread_local std::vector<uint32_t> start;
  thread_local std::vector<Crossing> sorted;
  start.assign(nb + 1, 0);
  sorted.resize(nb);
  for (const Crossing& c : v) ++start[bucket(c.s) + 1];
  for (std::size_t i = 0; i < nb; ++i) start[i + 1] += start[i];
  for (const Crossing& c : v) sorted[start[bucket(c.s)]++] = c;
  for (std::size_t i = 1; i < nb; ++i) {
    const Crossing c = sorted[i];
    std::size_t k = i;
    for (; k > 0 && crossing_before(c, sorted[k - 1]); --k) sorted[k] = sorted[k - 1];
    sorted[k] = c;
  }
  v.swap(sorted);
}

}  // namespace qobs::kernels::detail
