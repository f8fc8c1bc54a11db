// The statistics that are not min-max, on a CUDA device: the imatrix column sums
// (R6.8.3: one f64 sum per column, sequential over the rows, as stats.cc sums them)
// and the non-finite scan of the observers' input check. Host and device code
// (QOBS_HD): the tests run the bodies on the CPU against the plain references
// (tests/kernels/stats), the device runs the same source (stats_cuda.cu).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/element.h"
#include "kernels/cuda/flat_map.h"
#include "qobs/host_device.h"

namespace qobs::kernels::cuda {

struct ColumnSquaresArgs {
  const void* x = nullptr;  ///< rows x cols, row-major, contiguous (device)
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  double* acc = nullptr;    ///< cols sums, added to (device)
};

/// Column c: acc[c] += x[r, c]^2 for r in order, each square in f32 (the value widened
/// to f32 first) and added in f64 (kernels.h sum_squares_by_column).
QOBS_HD inline void column_squares(const ColumnSquaresArgs& a, int64_t c) {
  double s = a.acc[c];
  for (int64_t r = 0; r < a.rows; ++r) {
    const float v = static_cast<float>(qobs::detail::load_element(a.x, a.dtype, r * a.cols + c));
    s += static_cast<double>(v * v);
  }
  a.acc[c] = s;
}

struct NonFiniteArgs {
  const void* x = nullptr;  ///< n elements, flat index i at storage offset view.offset(i) (device)
  DType dtype = DType::kF32;
  AxisList view;
  int64_t n = 0;
  unsigned long long* first = nullptr;  ///< the least non-finite index, preset to ~0 (device)
};

QOBS_NO_EXEC_CHECK
template <class AtomicMin>
QOBS_HD inline void non_finite_elem(const NonFiniteArgs& a, int64_t i, AtomicMin atomic_min) {
  if (!std::isfinite(qobs::detail::load_element(a.x, a.dtype, a.view.offset(i))))
    atomic_min(a.first, static_cast<unsigned long long>(i));
}

/// Launchers on `stream` (a cudaStream_t). stats_cuda.cu.
void launch_column_squares(const ColumnSquaresArgs& a, void* stream);
void launch_non_finite(const NonFiniteArgs& a, void* stream);

}  // namespace qobs::kernels::cuda
