// The least-squares search driver (kernels.h, docs/LSQ.md): the CPU path at the active
// SIMD level, picked once per call (lsq_cpu.cc), and the scorer the tests and
// benchmarks use. The plain reference is lsq_ref.cc.
#include <vector>

#include "kernels/kernels.h"
#include "kernels/lsq/lsq_cpu.h"
#include "kernels/lsq/lsq_error_simd.h"
#include "kernels/lsq/lsq_plan.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels {

LsqSearchResult lsq_search(const FlatView& flat, const QuantizationArgs& args, const LsqSearchConfig& cfg,
                           const FlatView* weights, const Tensor* global_scale) {
  return cpu::lsq_search(flat, args, cfg, weights, global_scale, active_simd_level(), cfg.num_threads);
}

double qdq_group_error(const FlatView& flat, const QuantizationArgs& args, double scale, double zero_point, int64_t q,
                       const Tensor* global_scale, NumericMode mode, const float* weights) {
  LsqSearchConfig cfg;
  cfg.mode = mode;
  const detail::LsqPlan P = detail::LsqPlan::make(flat.dtype, args, cfg, global_scale);
  const int64_t len = flat.layout.num_obs() * flat.layout.group_len();
  std::vector<float> x(static_cast<std::size_t>(len));
  flat.gather(q, x.data());
  return detail::lsq_error_scalar(x.data(), weights, len, P.applied(scale), zero_point, P.dplan);
}

}  // namespace qobs::kernels
