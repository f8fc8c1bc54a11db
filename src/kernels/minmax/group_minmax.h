// Reading one group of the flattened view and its R6.3.1 range, as the reference's
// sequential loop computes it (vector min-max: minmax_simd.h; scalar twin: the nan_min
// / nan_max loop of ref::minmax).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/minmax/minmax_simd.h"
#include "kernels/simd/convert_simd.h"
#include "kernels/simd/simd_level.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::cpu {

/// The vector kernels that read groups, picked once per call for a SimdLevel: both null
/// at kScalar, where the scalar twins run.
struct GroupKernels {
  const detail::MinmaxSimd* minmax = nullptr;
  const detail::ConvertSimd* convert = nullptr;
  static GroupKernels at(SimdLevel level) { return {detail::minmax_simd(level), detail::convert_simd(level)}; }
};

// Inline: called twice per group (131k groups for a 4096x4096 INT4 g128 weight), where
// an out-of-line call cost ~10% of the bf16 min-max kernel.

/// The len values of qparam element q as floats: in place for contiguous f32, else
/// widened / gathered into buf (len floats).
inline const float* load_group_to(const FlatView& f, bool contiguous, int64_t q, int64_t len, const GroupKernels& k,
                                  float* buf) {
  if (contiguous) {
    const int64_t off = f.group_offset(q);
    if (f.dtype == DType::kF32) return static_cast<const float*>(f.data) + off;
    if ((f.dtype == DType::kBF16 || f.dtype == DType::kF16) && k.convert) {
      k.convert->widen(static_cast<const uint16_t*>(f.data) + off, len, f.dtype == DType::kBF16, buf);
      return buf;
    }
  }
  f.gather(q, buf);
  return buf;
}

/// load_group_to with a buffer that grows as needed.
inline const float* load_group(const FlatView& f, bool contiguous, int64_t q, int64_t len, const GroupKernels& k,
                               std::vector<float>& buf) {
  buf.resize(static_cast<std::size_t>(len));
  return load_group_to(f, contiguous, q, len, k, buf.data());
}

/// A vector min / max of zero does not say which zero: the reference's sequential loop
/// keeps the later of two equal values, so a zero result takes the last zero's sign.
inline void settle_zero_signs(const float* x, int64_t n, float* lo, float* hi) {
  if (*lo != 0.0f && *hi != 0.0f) return;
  int64_t j = n - 1;
  while (j >= 0 && x[j] != 0.0f) --j;
  if (j < 0) return;
  if (*lo == 0.0f) *lo = x[j];
  if (*hi == 0.0f) *hi = x[j];
}

/// R6.3.1 min / max of one group, equal to the reference's sequential nan_min /
/// nan_max loop: NaN wins, and for a zero result the sign of the last zero in index
/// order (the loop keeps the later of two equal values).
inline void group_minmax(const float* x, int64_t n, const GroupKernels& k, double* lo, double* hi) {
  if (!k.minmax || n < 8) {
    double l = INFINITY, h = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      l = qobs::detail::nan_min(l, x[j]);
      h = qobs::detail::nan_max(h, x[j]);
    }
    *lo = l;
    *hi = h;
    return;
  }
  float l, h;
  k.minmax->minmax(x, n, &l, &h);
  settle_zero_signs(x, n, &l, &h);
  *lo = l;
  *hi = h;
}

}  // namespace qobs::kernels::cpu
