// The calculate_qparams driver (kernels.h): picks the implementation once per call --
// R4.1 in vector lanes for the common plans (qparams_cpu.cc), else the scalar element
// step of QParamsJob (qparams/qparams_job.cc) spread over threads. Elements are
// independent, so any split gives the same bits. The plain reference, on the caller's
// thread, is qparams_ref.cc.
#include <algorithm>

#include "kernels/kernels_cuda.h"
#include "core/check.h"
#include "kernels/kernels.h"
#include "kernels/parallel/thread_pool.h"
#include "kernels/qparams/qparams_cpu.h"
#include "kernels/simd/simd_level.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels {

ScaleZeroPoint calculate_qparams(const Tensor& min_vals, const Tensor& max_vals, const QuantizationArgs& args,
                                 const Tensor* global_scale, NumericMode mode, int num_threads) {
  if (auto lanes =
          cpu::calculate_qparams_simd(min_vals, max_vals, args, global_scale, mode, active_simd_level(), num_threads))
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

namespace cuda {

void calculate_qparams(const Backend& b, const void* mins, const void* maxs, DType stat_dtype, int64_t n,
                       const qobs::detail::QParamPlan& plan, const float* global_scale, void* scale, void* zero_point,
                       bool check_finite, Stream s) {
  DeviceBuffer flag(b, sizeof(int), s);
  b.fill(flag.get(), 0, sizeof(int), s);
  QParamsArgs a;
  a.mins = mins;
  a.maxs = maxs;
  a.stat_dtype = stat_dtype;
  a.n = n;
  a.plan = plan;
  a.global_scale = global_scale;
  a.scale = scale;
  a.zero_point = zero_point;
  a.non_finite = flag.as<int>();
  b.qparams(a, s);
  if (!check_finite) return;
  if (read_back<int>(b, flag.get(), s) == 0) return;
  // the CPU path's error, which names the first non-finite statistic: from a host copy
  const std::size_t bytes = static_cast<std::size_t>(n) * dtype_size(stat_dtype);
  Tensor mn = Tensor::uninitialized(stat_dtype, {n}), mx = Tensor::uninitialized(stat_dtype, {n});
  b.copy(mn.data(), mins, bytes, CopyKind::kDeviceToHost, s);
  b.copy(mx.data(), maxs, bytes, CopyKind::kDeviceToHost, s);
  b.synchronize(s);
  for (int64_t i = 0; i < n; ++i)
    QOBS_CHECK(std::isfinite(mn.get(i)) && std::isfinite(mx.get(i)), InvalidArgument, "calculate_qparams: min/max[", i,
               "] = (", mn.get(i), ", ", mx.get(i),
               ") is non-finite; the reference would return a NaN/Inf scale (R4.1, docs/DEVIATIONS.md)");
}

}  // namespace cuda

}  // namespace qobs::kernels
