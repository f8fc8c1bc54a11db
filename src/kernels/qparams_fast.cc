// Vectorized R4.1 (issue 3, item 4): the element-wise qparams of the common plans in
// SIMD lanes (shrunk_qparams_simd: ShrunkQParams's f32 operations, which equal
// compute_qparams_elem's for f32 statistics), straight from the f32 statistics into the
// output tensors -- no per-element double copies -- in threaded chunks.
#include "kernels/qparams_fast.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/parallel/thread_pool.h"
#include "kernels/simd/search_simd.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::fast {

namespace {

/// The zero points' integer values (as floats, exact) into the zero-point dtype.
template <typename T>
void store_zero_points(const float* z, int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(z[i]);
}

bool integer_zp_dtype(DType dt) {
  return dt == DType::kI8 || dt == DType::kU8 || dt == DType::kI16 || dt == DType::kI32 || dt == DType::kI64;
}

}  // namespace

std::optional<ScaleZeroPoint> calculate_qparams_f32(const Tensor& min_vals, const Tensor& max_vals,
                                                    const QuantizationArgs& args_in, const Tensor* global_scale,
                                                    NumericMode mode, SimdLevel level, int num_threads) {
  if (level == SimdLevel::kScalar) return std::nullopt;
  if (min_vals.dtype() != DType::kF32 || max_vals.dtype() != DType::kF32) return std::nullopt;
  // shapes: a mismatch is the scalar path's error; 0-dimensional statistics take its
  // step-9 reshape
  if (min_vals.shape() != max_vals.shape() || min_vals.shape().empty()) return std::nullopt;
  const QuantizationArgs args = args_in.strategy ? args_in : args_in.validated();
  const qobs::detail::QParamPlan plan =
      qobs::detail::QParamPlan::make(args, DType::kF32, qobs::detail::global_scale_value(global_scale), mode);
  const qobs::detail::ShrunkQParams q = qobs::detail::ShrunkQParams::make(plan);
  if (!q.usable) return std::nullopt;
  // a symmetric plan's zero points are +0: all-zero bytes in every float dtype
  const bool zero_zp = plan.symmetric && is_floating(plan.zp_dtype);
  if (!integer_zp_dtype(plan.zp_dtype) && !zero_zp) return std::nullopt;
  const int64_t n = min_vals.numel();
  // a non-finite statistic: the scalar path names it (R4.1)
  if (first_non_finite(min_vals.view(), num_threads) >= 0 || first_non_finite(max_vals.view(), num_threads) >= 0)
    return std::nullopt;
  ScaleZeroPoint out{Tensor(DType::kF32, min_vals.shape()), Tensor(plan.zp_dtype, min_vals.shape())};
  const float* lo = min_vals.data_as<float>();
  const float* hi = max_vals.data_as<float>();
  float* scale = out.scale.data_as<float>();
  constexpr int64_t kChunk = 8192;  // below that a thread costs more than it saves
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int threads = static_cast<int>(std::min<int64_t>(resolve_num_threads(num_threads), chunks));
  std::vector<std::vector<float>> zbufs(static_cast<std::size_t>(std::max(threads, 1)));
  parallel_for(chunks, threads, [&](int64_t c, int worker) {
    const int64_t b = c * kChunk, len = std::min(n, b + kChunk) - b;
    std::vector<float>& z = zbufs[static_cast<std::size_t>(worker)];
    z.resize(static_cast<std::size_t>(kChunk));
    detail::shrunk_qparams_simd(level, q, lo + b, hi + b, len, scale + b, z.data());
    if (zero_zp) {
      const std::size_t es = dtype_size(plan.zp_dtype);
      std::memset(static_cast<unsigned char*>(out.zero_point.data()) + static_cast<std::size_t>(b) * es, 0,
                  static_cast<std::size_t>(len) * es);
      return;
    }
    switch (plan.zp_dtype) {
      case DType::kI8: return store_zero_points(z.data(), len, out.zero_point.data_as<int8_t>() + b);
      case DType::kU8: return store_zero_points(z.data(), len, out.zero_point.data_as<uint8_t>() + b);
      case DType::kI16: return store_zero_points(z.data(), len, out.zero_point.data_as<int16_t>() + b);
      case DType::kI32: return store_zero_points(z.data(), len, out.zero_point.data_as<int32_t>() + b);
      default: return store_zero_points(z.data(), len, out.zero_point.data_as<int64_t>() + b);  // kI64
    }
  });
  return out;
}

}  // namespace qobs::kernels::fast
