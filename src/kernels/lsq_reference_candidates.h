// Steps of the least-squares observers' search (lsq_search.cc) that the kernel tests
// check on their own: the MX reference candidates by bisection, and the NVFP4 reference
// candidates as a set of E4M3 codes (docs/LSQ.md#L4).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/arith.h"
#include "qobs/formats.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::detail {

/// MX symmetric: the (scale, zero point) pairs compute_qparams_elem stores for the
/// shrunk ranges (a.mul(m0, p), a.mul(M0, p)) of the ascending factors ps, as a set
/// (emit may see them in any order), with a few calls instead of one per factor. The
/// stored pair depends on the range only through the key round_to_power_2(amax)
/// (R2.4.2; the zero point is 0), and the key never decreases as p grows (every step
/// is monotone: the rounded products, nan_min / nan_max with 0, |.|, the power-of-two
/// rounding of a non-negative float's bits). So where two factors share a key, every
/// factor between them does too: bisecting between factors of different keys finds
/// every distinct key, and each gets one compute_qparams_elem call.
template <class Emit>
void mx_reference_candidates(const std::vector<double>& ps, double m0, double M0,
                             const qobs::detail::QParamPlan& qp, const qobs::detail::Arith& a, Emit emit) {
  if (ps.empty()) return;
  const DType rdt = qp.stat_dt == DType::kF64 ? DType::kF64 : qp.stat_dt;
  // compute_qparams_elem's steps up to the power-of-two rounding, exactly
  auto key = [&](std::size_t i) {
    const double mn = qobs::detail::nan_min(a.mul(m0, ps[i]), 0.0), mx = qobs::detail::nan_max(a.mul(M0, ps[i]), 0.0);
    return round_to_power_2(rdt, qobs::detail::nan_max(std::fabs(mn), std::fabs(mx)));
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
/// plan stores otherwise). The search keeps its reference candidates' stored scales as
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
  /// f(code) for every code of the set, ascending.
  template <class F>
  void for_each(F f) const {
    for (int h = 0; h < 2; ++h)
      for (uint64_t m = bits[h]; m; m &= m - 1) f(h * 64 + std::countr_zero(m));
  }
};

}  // namespace qobs::kernels::detail
