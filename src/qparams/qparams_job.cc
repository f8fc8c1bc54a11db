// calculate_qparams (RULES §4.1) as prepare / run / finish (QParamsJob in
// qparam_math.h): the one definition of the call's validation, plan and result shapes,
// whose element-wise middle step the kernels layer spreads over threads.
#include <cmath>

#include "core/check.h"
#include "qparams/qparam_math.h"

namespace qobs::detail {

QParamsJob QParamsJob::prepare(const Tensor& min_in, const Tensor& max_in, const QuantizationArgs& args_in,
                               const Tensor* global_scale, NumericMode mode) {
  const QuantizationArgs args = args_in.strategy ? args_in : args_in.validated();
  QOBS_CHECK(min_in.shape() == max_in.shape(), InvalidArgument, "calculate_qparams: min shape ",
             shape_str(min_in.shape()), " != max shape ", shape_str(max_in.shape()), " (R4.1)");
  const Tensor mn = stats_as_float(min_in), mx = stats_as_float(max_in);
  QParamsJob job{
      QParamPlan::make(args, promote_float_dtypes(mn.dtype(), mx.dtype()), global_scale_value(global_scale), mode),
      mn.shape(),
      mn.shape(),
      {},
      {}};
  // Step 9: a 0-dimensional scale makes both results shape (1,). A global scale of shape
  // (1,) already broadcast a 0-dimensional scale to (1,) in step 4, and then the zero
  // point stays 0-dimensional, as in the reference.
  if (global_scale && job.scale_shape.empty()) job.scale_shape = {1};
  if (job.scale_shape.empty()) job.scale_shape = job.zp_shape = {1};
  // Typed loops over contiguous copies: one dtype switch per tensor, not per element.
  job.lo = mn.to_doubles();
  job.hi = mx.to_doubles();
  for (std::size_t i = 0; i < job.lo.size(); ++i)
    QOBS_CHECK(std::isfinite(job.lo[i]) && std::isfinite(job.hi[i]), InvalidArgument, "calculate_qparams: min/max[", i,
               "] = (", job.lo[i], ", ", job.hi[i],
               ") is non-finite; the reference would return a NaN/Inf scale (R4.1, docs/DEVIATIONS.md)");
  return job;
}

void QParamsJob::run(int64_t begin, int64_t end) {
  // lo / hi are overwritten in place by the scales / zero points
  for (int64_t i = begin; i < end; ++i) {
    const auto e = compute_qparams_elem(lo[static_cast<std::size_t>(i)], hi[static_cast<std::size_t>(i)], plan);
    lo[static_cast<std::size_t>(i)] = e.scale;
    hi[static_cast<std::size_t>(i)] = e.zero_point;
  }
}

ScaleZeroPoint QParamsJob::finish() && {
  return {Tensor::from_values(plan.scale_dt, std::move(scale_shape), lo),
          Tensor::from_values(plan.zp_dtype, std::move(zp_shape), hi)};
}

}  // namespace qobs::detail
