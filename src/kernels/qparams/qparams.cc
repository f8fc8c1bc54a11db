// The calculate_qparams driver (kernels.h): picks the implementation once per call --
// R4.1 in vector lanes for the common plans (qparams_cpu.cc), else the scalar element
// step of QParamsJob (qparams/qparams_job.cc) spread over threads. Elements are
// independent, so any split gives the same bits. The plain reference, on the caller's
// thread, is qparams_ref.cc.
#include <algorithm>

#include "kernels/kernels.h"
#include "kernels/parallel/thread_pool.h"
#include "kernels/qparams/qparams_cpu.h"
#include "kernels/simd/simd_level.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels {

ScaleZeroPoint calculate_qparams(const Tensor& min_vals, const Tensor& max_vals, const QuantizationArgs& args,
                                 const Tensor* global_scale, NumericMode mode, int num_threads) {
  if (auto lanes = cpu::calculate_qparams_simd(min_vals, max_vals, args, global_scale, mode, active_simd_level(),
                                               num_threads))
    return std::move(*lanes);
  auto job = qobs::detail::QParamsJob::prepare(min_vals, max_vals, args, global_scale, mode);
  const int64_t n = job.size();
  // tasks of 8192 elements: below that a thread costs more than it saves
  constexpr int64_t kChunk = 8192;
  const int threads = resolve_num_threads(num_threads);
  if (threads > 1 && n > kChunk) {
    parallel_for((n + kChunk - 1) / kChunk, threads,
                 [&](int64_t t, int) { job.run(t * kChunk, std::min(n, (t + 1) * kChunk)); });
    return std::move(job).finish();
  }
  job.run(0, n);
  return std::move(job).finish();
}

}  // namespace qobs::kernels
