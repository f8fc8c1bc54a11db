// The driver of the statistics that are not min-max (kernels.h): the imatrix column
// sums, the report's error sums and the non-finite scan. Each picks its path once per
// call: contiguous f32 / bf16 / f16 views take the threaded vector path, others the
// reference loops of stats_ref.cc.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/kernels_cuda.h"
#include "kernels/kernels.h"
#include "kernels/parallel/thread_pool.h"
#include "kernels/simd/convert_simd.h"
#include "kernels/simd/simd_level.h"
#include "kernels/stats/error_sums_simd.h"

namespace qobs::kernels {

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

int64_t first_non_finite(const TensorView& v, int num_threads) {
  const int64_t n = v.numel();
  const bool fast_dtype = v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16;
  if (!fast_dtype || !v.is_contiguous()) return ref::first_non_finite(v);
  auto scan = [&](int64_t b, int64_t e) -> int64_t {
    switch (v.dtype) {
      case DType::kF32:
        return first_all_ones_exponent<uint32_t, 0x7F800000u>(static_cast<const uint32_t*>(v.data), b, e);
      case DType::kBF16:
        return first_all_ones_exponent<uint16_t, 0x7F80u>(static_cast<const uint16_t*>(v.data), b, e);
      default:
        return first_all_ones_exponent<uint16_t, 0x7C00u>(static_cast<const uint16_t*>(v.data), b, e);
    }
  };
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
  return scan(0, n);
}

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
  const detail::ConvertSimd* cv = detail::convert_simd(active_simd_level());
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
      detail::widen16(cv, row, c1 - c0, bf16, buf.data());
      add_squares(buf.data(), 1, c1 - c0, 0, c1 - c0, acc + c0);
    }
  });
}

namespace {

/// Elements [0, n) of contiguous f32 / bf16 / f16 data as f32, exactly: f32 in place,
/// 16-bit types widened into buf.
const float* as_f32(const TensorView& v, int64_t begin, int64_t n, const detail::ConvertSimd* cv, float* buf) {
  if (v.dtype == DType::kF32) return static_cast<const float*>(v.data) + begin;
  const uint16_t* src = static_cast<const uint16_t*>(v.data) + begin;
  detail::widen16(cv, src, n, v.dtype == DType::kBF16, buf);
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
  const detail::ErrorSumsSimd* simd = detail::error_sums_simd(level);
  const detail::ConvertSimd* cv = detail::convert_simd(level);
  // whole rows of P elements in lanes (bf16 / f16 widened in registers), element i on
  // partial i mod P; the last partial row here, from the same partials
  const int64_t full = simd ? simd->add(x.data, x.dtype, y.data, y.dtype, n, sig, err) : 0;
  if (full < n) {
    constexpr int64_t kBlock = 4096;
    static_assert(kBlock % P == 0);
    std::vector<float> xb(kBlock), yb(kBlock);
    for (int64_t b = full; b < n; b += kBlock) {  // full is a multiple of P, so is b
      const int64_t len = std::min(kBlock, n - b);
      const float* xs = as_f32(x, b, len, cv, xb.data());
      const float* ys = as_f32(y, b, len, cv, yb.data());
      for (int64_t j = 0; j < len; ++j) {
        const double a = xs[j], d = a - static_cast<double>(ys[j]);
        sig[j % P] += a * a;
        err[j % P] += d * d;
      }
    }
  }
}

ErrorSums error_sums(const TensorView& x, const TensorView& y) {
  double sig[kErrorSumPartials] = {}, err[kErrorSumPartials] = {};
  add_error_sums(x, y, sig, err);
  return error_sums_of(sig, err);
}

namespace cuda {

namespace {

/// The row-major index map of a device view of at most kMaxAxes dimensions.
AxisList axes_of(const TensorView& x, const char* what) {
  QOBS_CHECK(x.shape.size() <= static_cast<std::size_t>(kMaxAxes), InvalidArgument, what, " on the device: more than ",
             kMaxAxes, " dimensions");
  const Shape strides = x.strides.empty() ? contiguous_strides(x.shape) : x.strides;
  AxisList a;
  a.count = static_cast<int>(x.shape.size());
  for (std::size_t d = 0; d < x.shape.size(); ++d) {
    a.size[d] = x.shape[d];
    a.stride[d] = strides[d];
  }
  return a;
}

void check_columns(const TensorView& x, int64_t cols, const char* what) {
  QOBS_CHECK(x.is_contiguous() && cols > 0 && x.numel() % cols == 0, InvalidArgument, what,
             " on the device: need a contiguous tensor whose size ", x.numel(), " is a multiple of ", cols, " columns");
}

}  // namespace

int64_t first_non_finite(const Backend& b, const TensorView& x, Stream s) {
  NonFiniteArgs a;
  a.x = x.data;
  a.dtype = x.dtype;
  a.n = x.numel();
  a.view = axes_of(x, "non-finite scan");
  DeviceBuffer first(b, sizeof(unsigned long long), s);
  b.fill(first.get(), 0xFF, sizeof(unsigned long long), s);
  a.first = first.as<unsigned long long>();
  if (a.n > 0) b.non_finite(a, s);
  const auto f = read_back<unsigned long long>(b, first.get(), s);
  return f == ~0ull ? -1 : static_cast<int64_t>(f);
}

void sum_squares_by_column(const Backend& b, const TensorView& x, int64_t cols, double* acc, Stream s) {
  check_columns(x, cols, "column sums");
  b.column_squares(ColumnSquaresArgs{x.data, x.dtype, x.numel() / cols, cols, acc}, s);
}

void add_importance(const Backend& b, const TensorView& x, int64_t cols, float* importance, Stream s) {
  check_columns(x, cols, "imatrix importance");
  DeviceBuffer acc(b, static_cast<std::size_t>(cols) * sizeof(double), s);
  b.importance(ImportanceArgs{ColumnSquaresArgs{x.data, x.dtype, x.numel() / cols, cols, acc.as<double>()}, importance},
               s);
}

void record_non_finite(const Backend& b, const void* mins, const void* maxs, DType stat_dtype, int64_t n,
                       const TensorView& x, int64_t batch, NonFiniteRecord* record, Stream s) {
  if (n > 0) b.flag_non_finite(FlagNonFiniteArgs{mins, maxs, stat_dtype, n, record}, s);
  RecordNonFiniteArgs a;
  a.scan.x = x.data;
  a.scan.dtype = x.dtype;
  a.scan.n = x.numel();
  a.scan.view = axes_of(x, "non-finite record");
  a.scan.first = &record->index;
  a.record = record;
  a.batch = batch;
  b.record_non_finite(a, s);
}

}  // namespace cuda

}  // namespace qobs::kernels
