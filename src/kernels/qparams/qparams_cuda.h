// calculate_qparams (R4.1) on a CUDA device: one element per thread through the
// reference's own element step (compute_qparams_elem, qparam_math.h, QOBS_HD), stored
// with the narrowing of Tensor::from_values (store_element). Host and device code: the
// tests run qparams_elem on the CPU over every index (tests/kernels/qparams), the device
// runs the same source (qparams_cuda.cu).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/element.h"
#include "qobs/host_device.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::cuda {

struct QParamsArgs {
  const void* mins = nullptr;  ///< n statistics of dtype stat_dtype (device)
  const void* maxs = nullptr;
  DType stat_dtype = DType::kF32;
  int64_t n = 0;
  qobs::detail::QParamPlan plan;  ///< QParamPlan::make on the host; its global scale comes from global_scale
  /// One f32 global scale in device memory (R4.1 step 4), or nullptr: the plan's
  /// has_global then says whether plan.global_scale applies.
  const float* global_scale = nullptr;
  void* scale = nullptr;       ///< n results in plan.scale_dt
  void* zero_point = nullptr;  ///< n results in plan.zp_dtype
  /// Set to 1 when a statistic is not finite (the CPU path's InvalidArgument, R4.1);
  /// the outputs are then unspecified.
  int* non_finite = nullptr;
};

QOBS_HD inline void qparams_elem(const QParamsArgs& a, int64_t i) {
  const double mn = qobs::detail::load_element(a.mins, a.stat_dtype, i);
  const double mx = qobs::detail::load_element(a.maxs, a.stat_dtype, i);
  if (!(std::isfinite(mn) && std::isfinite(mx))) {
    *a.non_finite = 1;
    return;
  }
  qobs::detail::QParamPlan p = a.plan;
  // global_scale_value: the value as a host f32 scalar
  if (a.global_scale) p.global_scale = static_cast<double>(*a.global_scale);
  const qobs::detail::ElemQParams e = qobs::detail::compute_qparams_elem(mn, mx, p);
  qobs::detail::store_element(a.scale, p.scale_dt, i, e.scale);
  qobs::detail::store_element(a.zero_point, p.zp_dtype, i, e.zero_point);
}

/// Launches qparams_elem over [0, n) on `stream` (a cudaStream_t). qparams_cuda.cu.
void launch_qparams(const QParamsArgs& a, void* stream);

/// The NVFP4 global scale (R6.1.5, R4.2) of fused members from their statistics'
/// extremes: extremes[4 m .. 4 m + 3] = min and max of member m's min_vals, then of its
/// max_vals (kernels_cuda.h global_scale).
struct GlobalScaleArgs {
  const float* extremes = nullptr;
  int members = 0;
  DType dtype = DType::kF32;  ///< the statistics' promoted dtype
  NumericMode mode = NumericMode::kParity;
  float* out = nullptr;     ///< the global scale (f32)
  int* infinite = nullptr;  ///< set to 1 for an infinite range (generate_gparam's error)
};

QOBS_HD inline void global_scale_body(const GlobalScaleArgs& a) {
  // R6.1.5: A = max over members of max(max_vals) and -min(min_vals), starting from the
  // first member's max(max_vals) (Observer::get_global_scale)
  double A = 0;
  for (int m = 0; m < a.members; ++m) {
    const double mmin = a.extremes[4 * m], mmax = a.extremes[4 * m + 3];
    A = m == 0 ? mmax : qobs::detail::nan_max(A, mmax);
    A = qobs::detail::nan_max(A, -mmin);
  }
  // generate_gparam of the one-element tensors (-A, A) of the statistics' dtype
  const double lo = round_to_float_dtype(a.dtype, -A), hi = round_to_float_dtype(a.dtype, A);
  if (std::isinf(lo) || std::isinf(hi)) {
    *a.infinite = 1;
    return;
  }
  *a.out = static_cast<float>(qobs::detail::global_scale_of_range(lo, hi, a.dtype, a.mode));
}

/// Launches global_scale_body on one thread on `stream`. qparams_cuda.cu.
void launch_global_scale(const GlobalScaleArgs& a, void* stream);

}  // namespace qobs::kernels::cuda
