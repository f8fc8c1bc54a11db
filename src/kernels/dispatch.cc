// Chooses the implementation of each kernel once per call (not per element): the fused,
// threaded fast paths at the active SIMD level (QOBS_SIMD / ScopedSimdLevel; "scalar"
// is the fused loop with the reference's per-element arithmetic). The unfused scalar
// references in kernels/ref are only called by tests and benchmarks.
#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>
#include <vector>

#include "kernels/kernels.h"
#include "core/check.h"
#include "qparams/qparam_math.h"
#if QOBS_HAVE_FAST_KERNELS
#include "kernels/grid_search/grid_search_cpu.h"
#include "kernels/parallel/thread_pool.h"
#include "kernels/qdq/qdq_cpu.h"
#include "kernels/qparams/qparams_cpu.h"
#include "kernels/stats/error_sums_simd.h"
#include "kernels/minmax/minmax_simd.h"  // widen_simd
#include "kernels/simd/simd_level.h"
#include "qobs/formats.h"
#endif

namespace qobs::kernels {

std::vector<double> grid_candidates(const GridSearchConfig& cfg) {
  std::vector<double> out;
  // R6.6.5: S = trunc(maxshrink * grid) in double; candidates p_i = 1 - i/grid.
  const double prod = std::trunc(cfg.maxshrink * cfg.grid);
  if (cfg.imatrix) {
    // R6.8.6: max(1, S) steps and S + 1 candidates, i = 0..S inclusive (Q7)
    const int64_t S = std::max<int64_t>(1, static_cast<int64_t>(prod));
    for (int64_t i = 0; i <= S; ++i) out.push_back(1.0 - static_cast<double>(i) / cfg.grid);
    return out;
  }
  const int64_t S = prod > 0 ? static_cast<int64_t>(prod) : 0;
  for (int64_t i = 0; i < S; ++i) out.push_back(1.0 - static_cast<double>(i) / cfg.grid);
  return out;
}

namespace {
/// Index of the first element in [begin, end) whose exponent field is all ones, or -1.
template <typename Bits, Bits kExpMask>
int64_t first_all_ones_exponent(const Bits* p, int64_t begin, int64_t end) {
  // branch-free blocks of 256 (vectorized by the compiler), then locate the element
  for (int64_t b = begin; b < end; b += 256) {
    const int64_t e = std::min(end, b + 256);
    // (p & mask) + (lowest exponent bit) carries into the sign bit iff the exponent
    // is all ones: and, add, or per element, which the compiler vectorizes even for
    // the baseline instruction set
    constexpr Bits kLow = static_cast<Bits>(kExpMask & (~kExpMask + 1u));
    constexpr Bits kSign = static_cast<Bits>(Bits(1) << (8 * sizeof(Bits) - 1));
    Bits acc = 0;
    for (int64_t i = b; i < e; ++i) acc |= static_cast<Bits>((p[i] & kExpMask) + kLow);
    if (acc & kSign)
      for (int64_t i = b; i < e; ++i)
        if ((p[i] & kExpMask) == kExpMask) return i;
  }
  return -1;
}
}  // namespace

ScaleZeroPoint calculate_qparams(const Tensor& min_vals, const Tensor& max_vals, const QuantizationArgs& args,
                                 const Tensor* global_scale, NumericMode mode, int num_threads) {
#if QOBS_HAVE_FAST_KERNELS
  if (auto fast = fast::calculate_qparams_simd(min_vals, max_vals, args, global_scale, mode, active_simd_level(),
                                               num_threads))
    return std::move(*fast);
#endif
  auto job = qobs::detail::QParamsJob::prepare(min_vals, max_vals, args, global_scale, mode);
  const int64_t n = job.size();
#if QOBS_HAVE_FAST_KERNELS
  // tasks of 8192 elements: below that a thread costs more than it saves
  constexpr int64_t kChunk = 8192;
  const int threads = resolve_num_threads(num_threads);
  if (threads > 1 && n > kChunk) {
    parallel_for((n + kChunk - 1) / kChunk, threads,
                 [&](int64_t t, int) { job.run(t * kChunk, std::min(n, (t + 1) * kChunk)); });
    return std::move(job).finish();
  }
#else
  (void)num_threads;
#endif
  job.run(0, n);
  return std::move(job).finish();
}

Tensor qdq(QdqOp op, const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
           const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode,
           int num_threads) {
#if QOBS_HAVE_FAST_KERNELS
  return fast::qdq(op, x, scale, zero_point, args, g_idx, global_scale, out_dtype, mode, active_simd_level(),
                   num_threads);
#else
  (void)num_threads;
  return ref::qdq(op, x, scale, zero_point, args, g_idx, global_scale, out_dtype, mode);
#endif
}

#if QOBS_HAVE_FAST_KERNELS
namespace {

/// nan_min_max of contiguous bf16 / f16 values from their int16 keys (minmax16_threaded):
/// one threaded pass over the patterns, no widening. A NaN anywhere gives NaN for both,
/// as the float path does. A zero extreme returns nullopt: which zero the float path
/// returns depends on its order of comparisons, so it answers those itself.
std::optional<std::pair<double, double>> nan_min_max16(const TensorView& v, SimdLevel level) {
  const int64_t n = v.numel();
  const int threads = n >= (int64_t{1} << 18) ? resolve_num_threads(0) : 1;
  const detail::KeyExtremes k = detail::minmax16_threaded(level, static_cast<const uint16_t*>(v.data), n,
                                                          v.dtype == DType::kBF16, threads == 1 ? 1 : threads * 2, threads);
  if (k.nan) return std::pair<double, double>{NAN, NAN};
  if (k.zero) return std::nullopt;
  return std::pair<double, double>{k.lo, k.hi};
}

}  // namespace
#endif

std::optional<std::pair<double, double>> nan_min_max(const TensorView& v) {
#if QOBS_HAVE_FAST_KERNELS
  const int64_t n = v.numel();
  const bool fast_dtype = v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16;
  const SimdLevel level = active_simd_level();
  if (fast_dtype && n > 0 && v.is_contiguous() && level != SimdLevel::kScalar) {
    float lo, hi;
    if (v.dtype == DType::kF32) {
      detail::minmax_simd(level, static_cast<const float*>(v.data), n, &lo, &hi);
      return std::pair<double, double>{lo, hi};
    }
    if (auto keyed = nan_min_max16(v, level)) return keyed;
    constexpr int64_t kChunk = 4096;
    float buf[kChunk];
    double l = INFINITY, h = -INFINITY;
    for (int64_t c = 0; c < n; c += kChunk) {
      const int64_t len = std::min(kChunk, n - c);
      detail::widen_simd(level, static_cast<const uint16_t*>(v.data) + c, len, v.dtype == DType::kBF16, buf);
      detail::minmax_simd(level, buf, len, &lo, &hi);
      l = qobs::detail::nan_min(l, lo);
      h = qobs::detail::nan_max(h, hi);
    }
    return std::pair<double, double>{l, h};
  }
#else
  (void)v;
#endif
  return std::nullopt;
}

int64_t first_non_finite(const TensorView& v, int num_threads) {
  const int64_t n = v.numel();
  const bool fast_dtype = v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16;
  if (!fast_dtype || !v.is_contiguous()) {
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(v.get(i))) return i;
    return -1;
  }
  auto scan = [&](int64_t b, int64_t e) -> int64_t {
    switch (v.dtype) {
      case DType::kF32: return first_all_ones_exponent<uint32_t, 0x7F800000u>(static_cast<const uint32_t*>(v.data), b, e);
      case DType::kBF16: return first_all_ones_exponent<uint16_t, 0x7F80u>(static_cast<const uint16_t*>(v.data), b, e);
      default: return first_all_ones_exponent<uint16_t, 0x7C00u>(static_cast<const uint16_t*>(v.data), b, e);
    }
  };
#if QOBS_HAVE_FAST_KERNELS
  const int threads = resolve_num_threads(num_threads);
  if (threads > 1 && n >= (int64_t{1} << 18)) {
    const int64_t parts = threads * 4, step = (n + parts - 1) / parts;
    std::vector<int64_t> first(static_cast<std::size_t>(parts), -1);
    parallel_for(parts, threads, [&](int64_t t, int) {
      first[static_cast<std::size_t>(t)] = scan(t * step, std::min(n, (t + 1) * step));
    });
    for (int64_t f : first)
      if (f >= 0) return f;  // parts in order: the lowest index
    return -1;
  }
#endif
  return scan(0, n);
}

#if QOBS_HAVE_FAST_KERNELS
namespace {

/// Rows [0, rows) of columns [c0, c1) of a contiguous f32 matrix into acc: the column
/// loop is independent per lane, so the compiler vectorises it without reordering any
/// column's sum.
void add_squares(const float* x, int64_t rows, int64_t cols, int64_t c0, int64_t c1, double* acc) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    for (int64_t c = c0; c < c1; ++c) {
      const float v = row[c];
      acc[c] += static_cast<double>(v * v);
    }
  }
}

}  // namespace

void sum_squares_by_column(const TensorView& x, int64_t cols, double* acc, int num_threads) {
  const bool vec_dtype = x.dtype == DType::kF32 || x.dtype == DType::kBF16 || x.dtype == DType::kF16;
  if (!vec_dtype || !x.is_contiguous() || cols <= 0) return ref::sum_squares_by_column(x, cols, acc);
  const int64_t rows = x.numel() / cols;
  const int threads = resolve_num_threads(num_threads);
  // Column blocks of at least 256 (a task streams whole cache lines of every row and
  // keeps its accumulators in L1); small inputs stay on the caller.
  const int64_t want = rows * cols >= (int64_t{1} << 16) ? int64_t{threads} * 2 : 1;
  const int64_t num_tasks = std::max<int64_t>(1, std::min(want, cols / 256));
  const int64_t block = ((cols + num_tasks - 1) / num_tasks + 7) / 8 * 8;
  const SimdLevel level = active_simd_level();
  parallel_for((cols + block - 1) / block, num_tasks == 1 ? 1 : threads, [&](int64_t t, int) {
    const int64_t c0 = t * block, c1 = std::min(cols, c0 + block);
    if (x.dtype == DType::kF32) {
      add_squares(static_cast<const float*>(x.data), rows, cols, c0, c1, acc);
      return;
    }
    // bf16 / f16: widen one row's block at a time (exact), then the f32 loop
    const auto* src = static_cast<const uint16_t*>(x.data);
    const bool bf16 = x.dtype == DType::kBF16;
    std::vector<float> buf(static_cast<std::size_t>(c1 - c0));
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* row = src + r * cols + c0;
      detail::widen_simd(level, row, c1 - c0, bf16, buf.data());
      add_squares(buf.data(), 1, c1 - c0, 0, c1 - c0, acc + c0);
    }
  });
}

namespace {

/// Elements [0, n) of contiguous f32 / bf16 / f16 data as f32, exactly: f32 in place,
/// 16-bit types widened into buf.
const float* as_f32(const TensorView& v, int64_t begin, int64_t n, SimdLevel level, float* buf) {
  if (v.dtype == DType::kF32) return static_cast<const float*>(v.data) + begin;
  const uint16_t* src = static_cast<const uint16_t*>(v.data) + begin;
  detail::widen_simd(level, src, n, v.dtype == DType::kBF16, buf);
  return buf;
}

}  // namespace

void add_error_sums(const TensorView& x, const TensorView& y, double* sig, double* err) {
  constexpr int P = kErrorSumPartials;
  static_assert(P == 8, "error_sums_simd keeps eight partials");
  QOBS_CHECK(x.numel() == y.numel(), ShapeError, "error sums of ", x.numel(), " and ", y.numel(), " elements");
  const auto vec_dtype = [](const TensorView& v) {
    return (v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16) && v.is_contiguous();
  };
  const int64_t n = x.numel();
  if (!vec_dtype(x) || !vec_dtype(y)) return ref::add_error_sums(x, y, sig, err);
  const SimdLevel level = active_simd_level();
  // whole rows of P elements in lanes (bf16 / f16 widened in registers), element i on
  // partial i mod P; the last partial row here, from the same partials
  const int64_t full = detail::error_sums_simd(level, x.data, x.dtype, y.data, y.dtype, n, sig, err);
  if (full < n) {
    constexpr int64_t kBlock = 4096;
    static_assert(kBlock % P == 0);
    std::vector<float> xb(kBlock), yb(kBlock);
    for (int64_t b = full; b < n; b += kBlock) {  // full is a multiple of P, so is b
      const int64_t len = std::min(kBlock, n - b);
      const float* xs = as_f32(x, b, len, level, xb.data());
      const float* ys = as_f32(y, b, len, level, yb.data());
      for (int64_t j = 0; j < len; ++j) {
        const double a = xs[j], d = a - static_cast<double>(ys[j]);
        sig[j % P] += a * a;
        err[j % P] += d * d;
      }
    }
  }
}

void minmax(const FlatView& flat, float* mins, float* maxs, int num_threads) {
  fast::minmax(flat, mins, maxs, active_simd_level(), num_threads);
}

std::pair<Tensor, Tensor> minmax_stats(const FlatView& flat, int num_threads,
                                       std::optional<StatisticsExtremes>* extremes) {
  // every statistic is written by the kernel
  Tensor mn = Tensor::uninitialized(flat.dtype, flat.layout.qparam_shape);
  Tensor mx = Tensor::uninitialized(flat.dtype, flat.layout.qparam_shape);
  fast::minmax_stats(flat, mn.data(), mx.data(), active_simd_level(), num_threads, extremes);
  return {std::move(mn), std::move(mx)};
}

GridSearchResult grid_search(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                             const FlatView* weights) {
  return fast::grid_search(flat, search_args, cfg, weights, active_simd_level(), cfg.num_threads);
}
#else
// Built with QOBS_FAST_KERNELS=OFF: the scalar references (single-threaded).
void sum_squares_by_column(const TensorView& x, int64_t cols, double* acc, int) {
  ref::sum_squares_by_column(x, cols, acc);
}
void minmax(const FlatView& flat, float* mins, float* maxs, int) { ref::minmax(flat, mins, maxs); }
std::pair<Tensor, Tensor> minmax_stats(const FlatView& flat, int, std::optional<StatisticsExtremes>* extremes) {
  if (extremes) extremes->reset();
  const std::size_t nq = static_cast<std::size_t>(flat.layout.num_qparams());
  std::vector<float> mins(nq), maxs(nq);
  ref::minmax(flat, mins.data(), maxs.data());
  return {Tensor::from_floats(flat.dtype, flat.layout.qparam_shape, mins),
          Tensor::from_floats(flat.dtype, flat.layout.qparam_shape, maxs)};
}
void add_error_sums(const TensorView& x, const TensorView& y, double* sig, double* err) {
  QOBS_CHECK(x.numel() == y.numel(), ShapeError, "error sums of ", x.numel(), " and ", y.numel(), " elements");
  ref::add_error_sums(x, y, sig, err);
}

GridSearchResult grid_search(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                             const FlatView* weights) {
  return ref::grid_search(flat, search_args, cfg, weights);
}
#endif

ErrorSums error_sums(const TensorView& x, const TensorView& y) {
  double sig[kErrorSumPartials] = {}, err[kErrorSumPartials] = {};
  add_error_sums(x, y, sig, err);
  return error_sums_of(sig, err);
}

}  // namespace qobs::kernels
