// Vectorized R4.1: the element-wise qparams of the common plans in
// SIMD lanes (qparams_simd.h: ShrunkQParams's operations, which equal
// compute_qparams_elem's), straight from the statistics into the output tensors -- no
// per-element double copies -- in threaded chunks.
#include "kernels/qparams/qparams_cpu.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/parallel/thread_pool.h"
#include "kernels/simd/convert_simd.h"
#include "kernels/qparams/qparams_simd.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::cpu {

namespace {

/// The zero points' integer values (as floats, exact) into the zero-point dtype.
template <typename T>
void store_zero_points(const float* z, int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(z[i]);
}

bool integer_zp_dtype(DType dt) {
  return dt == DType::kI8 || dt == DType::kU8 || dt == DType::kI16 || dt == DType::kI32 || dt == DType::kI64;
}

bool float_stat_dtype(DType dt) { return dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16; }

}  // namespace

std::optional<ScaleZeroPoint> calculate_qparams_simd(const Tensor& min_vals, const Tensor& max_vals,
                                                     const QuantizationArgs& args_in, const Tensor* global_scale,
                                                     NumericMode mode, SimdLevel level, int num_threads) {
  const detail::QParamsSimd* k = detail::qparams_simd(level);
  if (!k) return std::nullopt;
  const DType stat_dt = min_vals.dtype();
  if (!float_stat_dtype(stat_dt) || max_vals.dtype() != stat_dt) return std::nullopt;
  // shapes: a mismatch is the scalar path's error; 0-dimensional statistics take its
  // step-9 reshape
  if (min_vals.shape() != max_vals.shape() || min_vals.shape().empty()) return std::nullopt;
  const QuantizationArgs args = args_in.strategy ? args_in : args_in.validated();
  const qobs::detail::QParamPlan plan =
      qobs::detail::QParamPlan::make(args, stat_dt, qobs::detail::global_scale_value(global_scale), mode);
  const qobs::detail::ShrunkQParams q = qobs::detail::ShrunkQParams::make(plan);
  if (!q.usable || !float_stat_dtype(plan.scale_dt)) return std::nullopt;
  // a symmetric plan's zero points are +0: all-zero bytes in every float dtype
  const bool zero_zp = plan.symmetric && is_floating(plan.zp_dtype);
  if (!integer_zp_dtype(plan.zp_dtype) && !zero_zp) return std::nullopt;
  const int64_t n = min_vals.numel();
  // every scale is written below; the zero points too, except a symmetric plan's, which
  // are the zero fill
  ScaleZeroPoint out{
      Tensor::uninitialized(plan.scale_dt, min_vals.shape()),
      zero_zp ? Tensor(plan.zp_dtype, min_vals.shape()) : Tensor::uninitialized(plan.zp_dtype, min_vals.shape())};
  const detail::ConvertSimd* convert = detail::convert_simd(level);
  constexpr int64_t kChunk = 8192;  // below that a thread costs more than it saves
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int threads = static_cast<int>(std::min<int64_t>(resolve_num_threads(num_threads), chunks));
  // A non-finite statistic, seen by the kernel as it reads them: the scalar path names
  // it (R4.1). No separate scan of the statistics beforehand.
  std::atomic<bool> non_finite{false};
  parallel_for(chunks, threads, [&](int64_t c, int) {
    // blocks small enough for the stack: no per-call buffers to allocate
    constexpr int64_t kBlock = 1024;
    float wscale[kBlock], wzp[kBlock];
    const int64_t chunk_end = std::min(n, (c + 1) * kChunk);
    for (int64_t b = c * kChunk; b < chunk_end; b += kBlock) {
      const int64_t len = std::min(chunk_end, b + kBlock) - b;
      if (stat_dt != DType::kF32) {
        // bf16 / f16 statistics widened, and 16-bit scales narrowed, in the lanes
        auto* scale =
            static_cast<unsigned char*>(out.scale.data()) + b * static_cast<int64_t>(dtype_size(plan.scale_dt));
        if (!k->f16(q, min_vals.data_as<uint16_t>() + b, max_vals.data_as<uint16_t>() + b, stat_dt == DType::kBF16, len,
                    plan.scale_dt, scale, wzp)) {
          non_finite.store(true, std::memory_order_relaxed);
          return;
        }
      } else {
        float* scale = plan.scale_dt == DType::kF32 ? out.scale.data_as<float>() + b : wscale;
        if (!k->f32(q, min_vals.data_as<float>() + b, max_vals.data_as<float>() + b, len, scale, wzp)) {
          non_finite.store(true, std::memory_order_relaxed);
          return;
        }
        // scales in a 16-bit dtype: float_to_bf16 / float_to_f16 (finite statistics give
        // finite or +inf scales, never the NaN that ConvertSimd::narrow16 treats differently)
        if (plan.scale_dt != DType::kF32)
          convert->narrow16(scale, len, plan.scale_dt == DType::kBF16, out.scale.data_as<uint16_t>() + b);
      }
      if (zero_zp) continue;  // Tensor's zero fill: a symmetric plan's zero points, +0 in every float dtype
      switch (plan.zp_dtype) {
        case DType::kI8:
          store_zero_points(wzp, len, out.zero_point.data_as<int8_t>() + b);
          break;
        case DType::kU8:
          store_zero_points(wzp, len, out.zero_point.data_as<uint8_t>() + b);
          break;
        case DType::kI16:
          store_zero_points(wzp, len, out.zero_point.data_as<int16_t>() + b);
          break;
        case DType::kI32:
          store_zero_points(wzp, len, out.zero_point.data_as<int32_t>() + b);
          break;
        default:
          store_zero_points(wzp, len, out.zero_point.data_as<int64_t>() + b);  // kI64
      }
    }
  });
  if (non_finite.load()) return std::nullopt;
  return out;
}

}  // namespace qobs::kernels::cpu
