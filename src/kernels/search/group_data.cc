#include "kernels/search/group_data.h"

#include <cmath>

#include "kernels/simd/minmax_simd.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::fast {

using namespace qobs::kernels::detail;

const float* load_group(const FlatView& f, bool contiguous, int64_t q, int64_t len, SimdLevel level,
                        std::vector<float>& buf) {
  if (contiguous) {
    const int64_t off = f.group_offset(q);
    if (f.dtype == DType::kF32) return static_cast<const float*>(f.data) + off;
    if ((f.dtype == DType::kBF16 || f.dtype == DType::kF16) && level != SimdLevel::kScalar) {
      buf.resize(static_cast<std::size_t>(len));
      widen_simd(level, static_cast<const uint16_t*>(f.data) + off, len, f.dtype == DType::kBF16, buf.data());
      return buf.data();
    }
  }
  buf.resize(static_cast<std::size_t>(len));
  f.gather(q, buf.data());
  return buf.data();
}

void settle_zero_signs(const float* x, int64_t n, float* lo, float* hi) {
  if (*lo != 0.0f && *hi != 0.0f) return;
  int64_t j = n - 1;
  while (j >= 0 && x[j] != 0.0f) --j;
  if (j < 0) return;
  if (*lo == 0.0f) *lo = x[j];
  if (*hi == 0.0f) *hi = x[j];
}

void group_minmax(const float* x, int64_t n, SimdLevel level, double* lo, double* hi) {
  if (level == SimdLevel::kScalar || n < 8) {
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
  minmax_simd(level, x, n, &l, &h);
  settle_zero_signs(x, n, &l, &h);
  *lo = l;
  *hi = h;
}

}  // namespace qobs::kernels::fast
