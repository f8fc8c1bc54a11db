// The min-max driver (kernels.h): picks the implementation once per call -- the
// threaded CPU path at the active SIMD level (minmax_cpu.cc), whose scalar level is
// the fused loop with the reference's per-element arithmetic. The plain reference is
// minmax_ref.cc.
#include <algorithm>
#include <cmath>
#include <optional>

#include "kernels/kernels_cuda.h"
#include "core/check.h"
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
  const detail::KeyExtremes e = detail::minmax16_threaded(
      k, static_cast<const uint16_t*>(v.data), n, v.dtype == DType::kBF16, threads == 1 ? 1 : threads * 2, threads);
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

namespace cuda {

namespace {

/// Values per chunk of the device min-max: long groups (a whole tensor, a channel of
/// an activation batch) are split so that enough threads share them; the chunks are
/// folded in order (minmax_cuda.h), so the result does not depend on the size.
constexpr int64_t kMinmaxChunk = 4096;

void run_minmax(const Backend& b, const FlatMap& x, DType out_dtype, void* mins, void* maxs, Stream s) {
  MinmaxArgs a;
  a.x = x;
  a.chunk = kMinmaxChunk;
  a.chunks = std::max<int64_t>(1, (x.len + kMinmaxChunk - 1) / kMinmaxChunk);
  const auto parts = static_cast<std::size_t>(x.num_qparams * a.chunks) * sizeof(double);
  DeviceBuffer lo(b, parts, s), hi(b, parts, s);
  a.part_lo = lo.as<double>();
  a.part_hi = hi.as<double>();
  a.out_dtype = out_dtype;
  a.mins = mins;
  a.maxs = maxs;
  b.minmax(a, s);
}

}  // namespace

void minmax_stats(const Backend& b, const FlatView& flat, DType out_dtype, void* mins, void* maxs, Stream s) {
  const auto x = flat_map_of(flat);
  QOBS_CHECK(x.has_value(), InvalidArgument, "minmax on the device: the view has more than ", kMaxAxes,
             " axes in one part");
  run_minmax(b, *x, out_dtype, mins, maxs, s);
}

void running_minmax(const Backend& b, const void* batch_min, const void* batch_max, DType dtype, int64_t n,
                    RunningOp op, double c, NumericMode mode, void* run_min, void* run_max, const uint32_t* skip,
                    Stream s) {
  if (n > 0)
    b.running_minmax(RunningMinmaxArgs{batch_min, batch_max, dtype, n, op, c, mode, run_min, run_max, skip}, s);
}

void nan_min_max(const Backend& b, const void* x, DType dtype, int64_t n, float* out, Stream s) {
  FlatMap m;
  m.data = x;
  m.dtype = dtype;
  m.num_qparams = 1;
  m.len = n;
  m.end_to_end = true;
  run_minmax(b, m, DType::kF32, out, out + 1, s);
}

void global_scale(const Backend& b, const float* extremes, int members, DType dt, NumericMode mode,
                  float* global_scale_out, Stream s) {
  DeviceBuffer infinite(b, sizeof(int), s);
  b.fill(infinite.get(), 0, sizeof(int), s);
  GlobalScaleArgs a;
  a.extremes = extremes;
  a.members = members;
  a.dtype = dt;
  a.mode = mode;
  a.out = global_scale_out;
  a.infinite = infinite.as<int>();
  b.global_scale(a, s);
  QOBS_CHECK(read_back<int>(b, infinite.get(), s) == 0, InvalidArgument,
             "generate_gparam: the statistics' range is infinite; the reference would "
             "return a global scale of 0 (R4.2, docs/DEVIATIONS.md)");
}

}  // namespace cuda

}  // namespace qobs::kernels
