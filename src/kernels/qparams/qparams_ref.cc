// The plain reference of calculate_qparams (R4.1): QParamsJob's element step
// (qparams/qparam_math.h compute_qparams_elem) over every element, on the caller's
// thread. The executable spec the vector lanes of qparams_simd.cc are tested against.
#include "kernels/kernels.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::ref {

ScaleZeroPoint calculate_qparams(const Tensor& min_vals, const Tensor& max_vals, const QuantizationArgs& args,
                                 const Tensor* global_scale, NumericMode mode) {
  auto job = qobs::detail::QParamsJob::prepare(min_vals, max_vals, args, global_scale, mode);
  job.run(0, job.size());
  return std::move(job).finish();
}

}  // namespace qobs::kernels::ref
