// Min-max (R6.3.1) on a CUDA device: the per-thread bodies, host and device code
// (QOBS_HD), so that the tests run them on the CPU over every index of the launch grid
// (tests/kernels/minmax/minmax_test.cc) and the device runs the same source
// (minmax_cuda.cu).
//
// The reference's loop (minmax_ref.cc) is sequential: lo = nan_min(lo, v) in index
// order, so NaN wins and, among values equal to the minimum, the later one (which
// decides the sign of a zero). A group is cut into chunks of `chunk` values; each
// chunk runs that loop (minmax_chunk), then the chunks' results are folded in chunk
// order with the same two functions (minmax_fold). min and max of non-NaN values do not
// depend on the order, NaN is the constant NAN whatever its input, and a later equal
// value keeps winning across chunks: the result is the sequential loop's, bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/arith.h"
#include "core/element.h"
#include "kernels/cuda/flat_map.h"
#include "qobs/host_device.h"
#include "qobs/numeric.h"

namespace qobs::kernels::cuda {

struct MinmaxArgs {
  FlatMap x;
  int64_t chunk = 0;          ///< values per chunk (> 0)
  int64_t chunks = 0;         ///< chunks per group: ceil(x.len / chunk)
  double* part_lo = nullptr;  ///< num_qparams * chunks partial results (device scratch)
  double* part_hi = nullptr;
  DType out_dtype = DType::kF32;  ///< the statistics' dtype (Tensor::from_floats of the float results)
  void* mins = nullptr;           ///< num_qparams results (device)
  void* maxs = nullptr;
};

/// Chunk c of group q: the sequential loop over its values.
QOBS_HD inline void minmax_chunk(const MinmaxArgs& a, int64_t q, int64_t c) {
  double lo = INFINITY, hi = -INFINITY;
  const int64_t end = (c + 1) * a.chunk < a.x.len ? (c + 1) * a.chunk : a.x.len;
  for (int64_t j = c * a.chunk; j < end; ++j) {
    const double v = a.x.load(q, j);
    lo = qobs::detail::nan_min(lo, v);
    hi = qobs::detail::nan_max(hi, v);
  }
  a.part_lo[q * a.chunks + c] = lo;
  a.part_hi[q * a.chunks + c] = hi;
}

/// Group q: the chunks folded in order, stored as the float result in out_dtype.
QOBS_HD inline void minmax_fold(const MinmaxArgs& a, int64_t q) {
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t c = 0; c < a.chunks; ++c) {
    lo = qobs::detail::nan_min(lo, a.part_lo[q * a.chunks + c]);
    hi = qobs::detail::nan_max(hi, a.part_hi[q * a.chunks + c]);
  }
  qobs::detail::store_element(a.mins, a.out_dtype, q, static_cast<float>(lo));
  qobs::detail::store_element(a.maxs, a.out_dtype, q, static_cast<float>(hi));
}

/// How an activation observer folds one batch's statistics into its running ones
/// (builtin_observers.cc): memoryless_minmax and the first batch take them (kSet),
/// static_minmax keeps the elementwise extremes (kExtremes, R6.4.2), minmax blends
/// (kBlend, R6.5.2: lerp_reference).
enum class RunningOp : int { kSet, kExtremes, kBlend };

struct RunningMinmaxArgs {
  const void* batch_min = nullptr;  ///< n statistics of one batch (device)
  const void* batch_max = nullptr;
  DType dtype = DType::kF32;  ///< of the batch's and the running statistics (equal: the caller keeps them so)
  int64_t n = 0;
  RunningOp op = RunningOp::kSet;
  double c = 0.0;  ///< kBlend: the averaging constant
  NumericMode mode = NumericMode::kParity;
  void* run_min = nullptr;  ///< n running statistics, updated in place (device)
  void* run_max = nullptr;
  /// Nonzero: a batch so far held a non-finite value (stats_cuda.h NonFiniteRecord's
  /// state); the statistics then stay those before it, as the host observer restores
  /// them when it raises.
  const uint32_t* skip = nullptr;
};

/// Element i of the running statistics after the batch, in the host observers' order of
/// operands: nan_min(new, old) / nan_max(new, old) (the later equal value decides a
/// zero's sign), lerp(old, new, c) as three rounded operations in the dtype.
QOBS_HD inline void running_minmax_elem(const RunningMinmaxArgs& a, int64_t i) {
  if (a.skip != nullptr && *a.skip != 0) return;
  const double bmin = qobs::detail::load_element(a.batch_min, a.dtype, i);
  const double bmax = qobs::detail::load_element(a.batch_max, a.dtype, i);
  double rmin = bmin, rmax = bmax;
  if (a.op != RunningOp::kSet) {
    const double omin = qobs::detail::load_element(a.run_min, a.dtype, i);
    const double omax = qobs::detail::load_element(a.run_max, a.dtype, i);
    if (a.op == RunningOp::kExtremes) {
      rmin = qobs::detail::nan_min(bmin, omin);
      rmax = qobs::detail::nan_max(bmax, omax);
    } else {
      const qobs::detail::Arith ar{a.dtype, a.mode};
      rmin = ar.add(ar.mul(omin, 1.0 - a.c), ar.mul(bmin, a.c));
      rmax = ar.add(ar.mul(omax, 1.0 - a.c), ar.mul(bmax, a.c));
    }
  }
  qobs::detail::store_element(a.run_min, a.dtype, i, rmin);
  qobs::detail::store_element(a.run_max, a.dtype, i, rmax);
}

/// Launches minmax_chunk over every (group, chunk), then minmax_fold over every group,
/// on `stream` (a cudaStream_t). minmax_cuda.cu.
void launch_minmax(const MinmaxArgs& a, void* stream);
/// Launches running_minmax_elem over every element. minmax_cuda.cu.
void launch_running_minmax(const RunningMinmaxArgs& a, void* stream);

}  // namespace qobs::kernels::cuda
