// The min-max driver (kernels.h): picks the implementation once per call -- the
// threaded CPU path at the active SIMD level (minmax_cpu.cc), whose scalar level is
// the fused loop with the reference's per-element arithmetic. The plain reference is
// minmax_ref.cc.
#include <algorithm>
#include <cmath>
#include <optional>

#include "kernels/kernels.h"
#include "kernels/minmax/minmax_cpu.h"
#include "kernels/minmax/minmax_simd.h"
#include "kernels/parallel/thread_pool.h"
#include "kernels/simd/convert_simd.h"
#include "kernels/simd/simd_level.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels {

namespace {

/// nan_min_max of contiguous bf16 / f16 values from their int16 keys (minmax16_threaded):
/// one threaded pass over the patterns, no widening. A NaN anywhere gives NaN for both,
/// as the float path does. A zero extreme returns nullopt: which zero the float path
/// returns depends on its order of comparisons, so it answers those itself.
std::optional<std::pair<double, double>> nan_min_max16(const TensorView& v, const detail::MinmaxSimd& k) {
  const int64_t n = v.numel();
  const int threads = n >= (int64_t{1} << 18) ? resolve_num_threads(0) : 1;
  const detail::KeyExtremes e = detail::minmax16_threaded(k, static_cast<const uint16_t*>(v.data), n,
                                                          v.dtype == DType::kBF16, threads == 1 ? 1 : threads * 2, threads);
  if (e.nan) return std::pair<double, double>{NAN, NAN};
  if (e.zero) return std::nullopt;
  return std::pair<double, double>{e.lo, e.hi};
}

}  // namespace

std::optional<std::pair<double, double>> nan_min_max(const TensorView& v) {
  const int64_t n = v.numel();
  const bool fast_dtype = v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16;
  const SimdLevel level = active_simd_level();
  const detail::MinmaxSimd* k = detail::minmax_simd(level);
  if (!fast_dtype || n == 0 || !v.is_contiguous() || !k) return std::nullopt;
  float lo, hi;
  if (v.dtype == DType::kF32) {
    k->minmax(static_cast<const float*>(v.data), n, &lo, &hi);
    return std::pair<double, double>{lo, hi};
  }
  if (auto keyed = nan_min_max16(v, *k)) return keyed;
  const detail::ConvertSimd* cv = detail::convert_simd(level);
  constexpr int64_t kChunk = 4096;
  float buf[kChunk];
  double l = INFINITY, h = -INFINITY;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t len = std::min(kChunk, n - c);
    cv->widen(static_cast<const uint16_t*>(v.data) + c, len, v.dtype == DType::kBF16, buf);
    k->minmax(buf, len, &lo, &hi);
    l = qobs::detail::nan_min(l, lo);
    h = qobs::detail::nan_max(h, hi);
  }
  return std::pair<double, double>{l, h};
}

void minmax(const FlatView& flat, float* mins, float* maxs, int num_threads) {
  cpu::minmax(flat, mins, maxs, active_simd_level(), num_threads);
}

std::pair<Tensor, Tensor> minmax_stats(const FlatView& flat, int num_threads,
                                       std::optional<StatisticsExtremes>* extremes) {
  // every statistic is written by the kernel
  Tensor mn = Tensor::uninitialized(flat.dtype, flat.layout.qparam_shape);
  Tensor mx = Tensor::uninitialized(flat.dtype, flat.layout.qparam_shape);
  cpu::minmax_stats(flat, mn.data(), mx.data(), active_simd_level(), num_threads, extremes);
  return {std::move(mn), std::move(mx)};
}

}  // namespace qobs::kernels
