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
  void* scale = nullptr;  ///< n results in plan.scale_dt
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

}  // namespace qobs::kernels::cuda
