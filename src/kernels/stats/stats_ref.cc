// The plain references of the imatrix column sums (R6.8.3) and the report's error
// sums: element by element through TensorView::get, in the canonical orders kernels.h
// states. The vector paths (stats.cc, error_sums_simd.cc) must reproduce them bit for bit.
#include <cmath>

#include "kernels/kernels.h"

namespace qobs::kernels::ref {

void sum_squares_by_column(const TensorView& x, int64_t cols, double* acc) {
  const int64_t rows = x.numel() / cols;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = static_cast<float>(x.get(r * cols + c));
      acc[c] += static_cast<double>(v * v);
    }
}

void add_error_sums(const TensorView& x, const TensorView& y, double* sig, double* err) {
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double a = x.get(i), d = a - y.get(i);
    sig[i % kErrorSumPartials] += a * a;
    err[i % kErrorSumPartials] += d * d;
  }
}

ErrorSums error_sums(const TensorView& x, const TensorView& y) {
  static_assert(kErrorSumPartials == 8, "combine_partials adds eight partials");
  double sig[kErrorSumPartials] = {}, err[kErrorSumPartials] = {};
  add_error_sums(x, y, sig, err);
  return error_sums_of(sig, err);
}

int64_t first_non_finite(const TensorView& v) {
  for (int64_t i = 0; i < v.numel(); ++i)
    if (!std::isfinite(v.get(i))) return i;
  return -1;
}

}  // namespace qobs::kernels::ref
