// The statistics that are not min-max, on a CUDA device: the imatrix column sums
// (R6.8.3: one f64 sum per column, sequential over the rows, as stats.cc sums them)
// and their f32 importance statistic, the non-finite scan of the observers' input
// check, and its record for activation batches the host does not wait for. Host and device code
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
  double* acc = nullptr;  ///< cols sums, added to (device)
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

/// The imatrix statistic of one input batch (R6.8.3, ImatrixMseObserver::
/// accumulate_input_locked): each column's f64 sum of the batch from zero, then added to
/// the f32 importance_sum once: f32(f64(sum) + f64(f32(batch sum))).
struct ImportanceArgs {
  ColumnSquaresArgs sums;       ///< the batch; acc: cols f64 scratch (device)
  float* importance = nullptr;  ///< cols f32 sums, updated (device)
};

QOBS_HD inline void importance_column(const ImportanceArgs& a, int64_t c) {
  a.sums.acc[c] = 0.0;
  column_squares(a.sums, c);
  a.importance[c] =
      static_cast<float>(static_cast<double>(a.importance[c]) + static_cast<double>(static_cast<float>(a.sums.acc[c])));
}

/// An activation batch's non-finite value, found on the device without the host
/// waiting for it (qobs/cuda.h ActivationStatistics): a batch's min-max statistics show
/// whether it held one (min and max propagate NaN and +-Inf); the first such batch is
/// scanned for its least flat index and recorded, and the running statistics stop
/// changing (minmax_cuda.h RunningMinmaxArgs::skip). Device memory, set to
/// NonFiniteRecord{} before the first batch.
struct NonFiniteRecord {
  uint32_t state = 0;                ///< 0: none so far; 1: the current batch holds one; 2: recorded
  uint32_t ndim = 0;                 ///< of the recorded batch
  unsigned long long index = ~0ull;  ///< its least non-finite flat index (row-major)
  int64_t batch = -1;                ///< its number (0-based)
  double value = 0.0;                ///< the value at that index
  int64_t shape[kMaxAxes] = {};
};

struct FlagNonFiniteArgs {
  const void* mins = nullptr;  ///< n statistics of the batch (device)
  const void* maxs = nullptr;
  DType dtype = DType::kF32;
  int64_t n = 0;
  NonFiniteRecord* record = nullptr;
};

/// Statistic i of a batch: marks the batch (state 0 -> 1) when it is not finite; a
/// batch after a recorded one is not looked at.
QOBS_NO_EXEC_CHECK
template <class AtomicOr>
QOBS_HD inline void flag_non_finite_elem(const FlagNonFiniteArgs& a, int64_t i, AtomicOr atomic_or) {
  if (a.record->state != 0) return;
  if (!std::isfinite(qobs::detail::load_element(a.mins, a.dtype, i)) ||
      !std::isfinite(qobs::detail::load_element(a.maxs, a.dtype, i)))
    atomic_or(&a.record->state, 1u);
}

struct RecordNonFiniteArgs {
  NonFiniteArgs scan;  ///< the batch; scan.first: &record->index
  NonFiniteRecord* record = nullptr;
  int64_t batch = 0;
};

/// Element i of a marked batch (state 1): non_finite_elem into the record's index.
QOBS_NO_EXEC_CHECK
template <class AtomicMin>
QOBS_HD inline void record_scan_elem(const RecordNonFiniteArgs& a, int64_t i, AtomicMin atomic_min) {
  if (a.record->state == 1) non_finite_elem(a.scan, i, atomic_min);
}

/// One thread after the scan: a marked batch's number, value and shape recorded (state
/// 1 -> 2).
QOBS_HD inline void record_finish(const RecordNonFiniteArgs& a) {
  NonFiniteRecord& r = *a.record;
  if (r.state != 1) return;
  r.state = 2;
  r.batch = a.batch;
  // the scan finds the value the statistics revealed; NaN should it not
  r.value = r.index == ~0ull
                ? NAN
                : qobs::detail::load_element(a.scan.x, a.scan.dtype, a.scan.view.offset(static_cast<int64_t>(r.index)));
  r.ndim = static_cast<uint32_t>(a.scan.view.count);
  for (int d = 0; d < a.scan.view.count; ++d) r.shape[d] = a.scan.view.size[d];
}

/// Launchers on `stream` (a cudaStream_t). stats_cuda.cu.
void launch_column_squares(const ColumnSquaresArgs& a, void* stream);
void launch_non_finite(const NonFiniteArgs& a, void* stream);
void launch_importance(const ImportanceArgs& a, void* stream);
/// flag_non_finite_elem over the statistics, record_scan_elem over the batch,
/// record_finish.
void launch_flag_non_finite(const FlagNonFiniteArgs& a, void* stream);
void launch_record_non_finite(const RecordNonFiniteArgs& a, void* stream);

}  // namespace qobs::kernels::cuda
