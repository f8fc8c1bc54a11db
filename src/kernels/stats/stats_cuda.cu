// The CUDA launches of the column sums, the importance statistic, the non-finite scan
// and its record (stats_cuda.h).
#include "kernels/cuda/launch.cuh"
#include "kernels/stats/stats_cuda.h"

namespace qobs::kernels::cuda {

namespace {

__global__ void column_squares_kernel(ColumnSquaresArgs a) { QOBS_CUDA_LOOP(c, a.cols) column_squares(a, c); }

__global__ void non_finite_kernel(NonFiniteArgs a) { QOBS_CUDA_LOOP(i, a.n) non_finite_elem(a, i, AtomicMinU64{}); }

__global__ void importance_kernel(ImportanceArgs a) { QOBS_CUDA_LOOP(c, a.sums.cols) importance_column(a, c); }

__global__ void flag_non_finite_kernel(FlagNonFiniteArgs a) {
  QOBS_CUDA_LOOP(i, a.n) flag_non_finite_elem(a, i, AtomicOrU32{});
}

__global__ void record_scan_kernel(RecordNonFiniteArgs a) {
  if (a.record->state != 1) return;  // the usual case: a clean batch, nothing to read
  QOBS_CUDA_LOOP(i, a.scan.n) record_scan_elem(a, i, AtomicMinU64{});
}

__global__ void record_finish_kernel(RecordNonFiniteArgs a) { record_finish(a); }

/// The record's scan is launched for every batch and almost always returns at once: a
/// grid of at most this many blocks keeps that cheap, and strides over a marked batch.
constexpr int64_t kRecordScanBlocks = 1024;

}  // namespace

void launch_column_squares(const ColumnSquaresArgs& a, void* stream) {
  column_squares_kernel<<<blocks_for(a.cols), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("imatrix column sums");
}

void launch_non_finite(const NonFiniteArgs& a, void* stream) {
  non_finite_kernel<<<blocks_for(a.n), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("non-finite scan");
}

void launch_importance(const ImportanceArgs& a, void* stream) {
  importance_kernel<<<blocks_for(a.sums.cols), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("imatrix importance");
}

void launch_flag_non_finite(const FlagNonFiniteArgs& a, void* stream) {
  flag_non_finite_kernel<<<blocks_for(a.n), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("non-finite statistics");
}

void launch_record_non_finite(const RecordNonFiniteArgs& a, void* stream) {
  const int64_t n = a.scan.n < kRecordScanBlocks * kThreads ? a.scan.n : kRecordScanBlocks * kThreads;
  record_scan_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("non-finite record (scan)");
  record_finish_kernel<<<1, 1, 0, as_stream(stream)>>>(a);
  check_launch("non-finite record (finish)");
}

}  // namespace qobs::kernels::cuda
