// The kernel interface. Each concept has a folder under src/kernels/ (minmax, stats,
// qparams, qdq, pack, grid_search, lsq) holding its plain reference (<concept>_ref.cc,
// the functions of namespace ref below), its driver (<concept>.cc, the functions
// declared here), its CPU path (<concept>_cpu.cc) and its Highway units (*_simd.cc).
// Observers call only the functions declared here; a driver picks the implementation
// once per call, never per element, so the inner loops carry no dispatch branches.
//
// Contract of every kernel: results are bit-identical to the scalar reference in both
// numeric modes, whatever the thread count or SIMD level.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "qobs/args.h"
#include "qobs/layout.h"
#include "qobs/numeric.h"
#include "qobs/qparams.h"
#include "qobs/tensor.h"

namespace qobs::kernels {

/// Per-qparam minimum and maximum over (obs, group) of a flattened view (R6.3.1).
/// mins/maxs: num_qparams floats each. NaN propagates; among equal zeros the sign of the
/// last one in (obs, group) order wins, as in the sequential reference loop.
/// num_threads: 0 = QOBS_NUM_THREADS or the hardware concurrency.
void minmax(const FlatView& flat, float* mins, float* maxs, int num_threads = 0);
/// The least of the min statistics and the greatest of the max statistics, both NaN
/// when either tensor holds a NaN (nan_min_max's contract; the sign of a zero result
/// unspecified). A group's min is at most its max, so every statistic is finite exactly
/// when both are.
using StatisticsExtremes = std::pair<double, double>;
/// minmax of an f32 / bf16 / f16 view as statistics tensors of its dtype and qparam
/// shape: the values Tensor::from_floats makes of minmax's floats, written once. With
/// `extremes`, also their StatisticsExtremes, which each thread takes from the kernel's
/// registers as it writes its part of the statistics, or reads back just after writing
/// it (no second pass), where the path can; left nullopt otherwise.
std::pair<Tensor, Tensor> minmax_stats(const FlatView& flat, int num_threads = 0,
                                       std::optional<StatisticsExtremes>* extremes = nullptr);

/// The imatrix hook's statistic (R6.8.3): acc[c] += x[r, c]^2 for every row r of x viewed
/// as [numel / cols, cols], each square taken in f32 (the value converted to f32 first)
/// and added in f64, rows in order. Every column is one sequential f64 sum, so the
/// result does not depend on vector width or thread count (columns are split, rows
/// never). Contiguous f32 / bf16 / f16 views take the vector path; others the reference.
void sum_squares_by_column(const TensorView& x, int64_t cols, double* acc, int num_threads = 0);

/// The report's sums over two tensors of the same shape (a weight and its dequantized
/// copy): signal = Σ x², error = Σ (x − y)², every element widened exactly to f64. The
/// order is qobs's own and fixed: element i (row-major) adds to partial sum i mod
/// kErrorSumPartials, and the partials are added pairwise ((0+1)+(2+3))+((4+5)+(6+7)),
/// so the result does not depend on vector width. Contiguous f32 / bf16 / f16 views take
/// the vector path (8 independent accumulators per sum); others the reference.
struct ErrorSums {
  double signal = 0.0;
  double error = 0.0;
};
inline constexpr int kErrorSumPartials = 8;
/// The fixed tree that adds the kErrorSumPartials partial sums.
inline double combine_partials(const double* p) {
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}
ErrorSums error_sums(const TensorView& x, const TensorView& y);
/// error_sums in pieces, for a caller that has the second tensor a block at a time: adds
/// the elements of x and y to the kErrorSumPartials partials (element i of the piece to
/// partial i mod kErrorSumPartials). Pieces taken in order, each but the last a multiple
/// of kErrorSumPartials long, give the partials of the whole tensors, and
/// error_sums_of(partials) gives error_sums' result bit for bit.
void add_error_sums(const TensorView& x, const TensorView& y, double* signal_partials, double* error_partials);
inline ErrorSums error_sums_of(const double* signal_partials, const double* error_partials) {
  return {combine_partials(signal_partials), combine_partials(error_partials)};
}

/// Flat (row-major) index of the first NaN / +-Inf element of a float tensor, or -1.
/// Threaded scan of the bit patterns for contiguous f32 / bf16 / f16 views (the
/// observers' input check); other views are scanned element by element.
int64_t first_non_finite(const TensorView& value, int num_threads = 0);

/// NaN-propagating min and max of a contiguous f32 / bf16 / f16 tensor's values (n >= 1)
/// in vector lanes -- R6.1.5's global amax over a million NVFP4 statistics. The sign of
/// a zero result is unspecified (the caller takes magnitudes). nullopt for other views,
/// the scalar level: the caller's loop then runs.
std::optional<std::pair<double, double>> nan_min_max(const TensorView& value);

/// calculate_qparams (R4.1), behind the public qobs::calculate_qparams and the
/// observers' phase 2 (1M groups for NVFP4): the element-wise step in vector lanes and
/// spread over threads. Bit-identical for any thread count: elements are independent.
ScaleZeroPoint calculate_qparams(const Tensor& min_vals, const Tensor& max_vals, const QuantizationArgs& args,
                                 const Tensor* global_scale, NumericMode mode, int num_threads = 0);

/// Parameters of the MSE grid search (R6.6, R6.8).
struct GridSearchConfig {
  double maxshrink = 0.2;
  double grid = 100.0;
  double norm = 2.4;
  double expand = 1.0;
  int64_t patience = 5;
  int64_t chunk_size = 5;
  /// R6.8.6 rules: S + 1 candidates, max(1, S) steps, f32 weighted errors, patience 0
  /// never stops (Q7).
  bool imatrix = false;
  /// R6.6.7 chunked variant (Q5).
  bool chunked = false;
  /// Q3 option: errors in f32 instead of the observed dtype (MSE only).
  bool f32_errors = false;
  NumericMode mode = NumericMode::kParity;
  /// Threads for the fast kernels: 0 = QOBS_NUM_THREADS or the hardware concurrency.
  /// Results never depend on it.
  int num_threads = 0;
  /// Let the fast search decide groups of up to 256 elements one group per vector lane
  /// (the batch kernel) where it applies. Results never depend on it; the tests and
  /// benchmarks turn it off to run the one-group path on the same input.
  bool batch_groups = true;
};

/// The shrink factors p_i evaluated, in order (R6.6.5 / R6.8.6).
std::vector<double> grid_candidates(const GridSearchConfig& cfg);

struct GridSearchResult {
  std::vector<float> best_min;  ///< per qparam element, on the observed dtype's grid
  std::vector<float> best_max;
  int64_t candidates_evaluated = 0;  ///< before the patience rule stopped the search
  /// How the fast path got there (diagnostics for tests and benchmarks; the scalar
  /// reference leaves them 0): groups decided by the batch kernel (one group per vector
  /// lane), and candidate errors evaluated exactly because a certified interval could
  /// not decide a comparison.
  int64_t groups_batched = 0;
  int64_t exact_evaluations = 0;
};

/// The MSE grid search of R6.6 (or R6.8 with cfg.imatrix) over a flattened view.
/// search_args: args with scale_dtype dropped for tensor_group (R6.6.2). weights: the
/// imatrix importance weights flattened like `flat` (f32), or nullptr.
GridSearchResult grid_search(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                             const FlatView* weights = nullptr);

/// The least-squares observers' search (lsq_mse, imatrix_lsq; docs/LSQ.md).
struct LsqSearchConfig {
  /// imatrix_lsq: importance-weighted error, the wide scale grid (docs/LSQ.md#L3).
  bool weighted = false;
  /// INT: leave out the observer candidates that a lower bound shows to be worse than
  /// kRefits others (docs/LSQ.md#L4); the same result either way, false only for the
  /// test that shows it.
  bool prune_observer_candidates = true;
  /// Refits look up the errors and sums the group's search holds already instead of
  /// computing them again (docs/LSQ.md#L4); the same result either way, false only for
  /// the test that shows it.
  bool reuse_refit_results = true;
  NumericMode mode = NumericMode::kParity;
  int num_threads = 0;  ///< 0 = QOBS_NUM_THREADS or the hardware concurrency
};

struct LsqSearchResult {
  /// Per qparam element, the stored values: scale in scale_dtype (the dtype
  /// calculate_qparams gives the scale), zero point on the zp dtype's grid.
  std::vector<double> scale, zero_point;
  DType scale_dtype = DType::kF32;
  int64_t candidates_evaluated = 0;  ///< (scale, zero point) pairs scored, all groups
  int threads_used = 1;              ///< workers the groups were spread over
};

/// Per group, the (scale, zero point) of least (weighted) squared QDQ error among the
/// candidates of docs/LSQ.md#L1, scored under the real quantizer (R5.1) with the
/// qparams as stored. args: the real (validated) args; global_scale: the tensor_group
/// global scale the qparams will be applied with, or nullptr. weights: per-element
/// importance flattened like `flat` (imatrix_lsq), or nullptr. Threaded over groups.
LsqSearchResult lsq_search(const FlatView& flat, const QuantizationArgs& args, const LsqSearchConfig& cfg,
                           const FlatView* weights = nullptr, const Tensor* global_scale = nullptr);

/// The (weighted) squared QDQ error of group q of `flat` for stored qparams, scored as
/// lsq_search scores candidates (tests and benchmarks). weights: group_len values or null.
double qdq_group_error(const FlatView& flat, const QuantizationArgs& args, double scale, double zero_point, int64_t q,
                       const Tensor* global_scale, NumericMode mode, const float* weights = nullptr);

/// The three R5.1 element-wise operations over tensors.
enum class QdqOp { kFakeQuantize, kQuantize, kDequantize };

/// R5.1-R5.4 quantize / dequantize / fake_quantize: the arguments and results of the
/// public functions in qobs/qparams.h (fake_quantize passes no out_dtype).
/// num_threads: 0 = QOBS_NUM_THREADS or the hardware concurrency.
Tensor qdq(QdqOp op, const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
           const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode,
           int num_threads = 0);

/// R8.3.1 / R8.5.1 packing (qobs/packing.h), threaded over rows.
Tensor pack_int_rows(const Tensor& q, int num_bits, std::string_view label, int num_threads = 0);
Tensor unpack_int_rows(const Tensor& packed, int num_bits, int64_t cols, std::string_view label, int num_threads = 0);
Tensor pack_fp4(const Tensor& q, std::string_view label, int num_threads = 0);
Tensor unpack_fp4(const Tensor& packed, DType out_dtype, std::string_view label, int num_threads = 0);
/// R8.10.1 FP6 packing (qobs/packing.h), threaded over rows.
Tensor pack_fp6(const Tensor& q, std::string_view label, int num_threads = 0);
Tensor unpack_fp6(const Tensor& packed, DType out_dtype, std::string_view label, int num_threads = 0);

namespace ref {
/// The plain references (<concept>_ref.cc): the executable specification every other
/// implementation is tested against, bit for bit. Single-threaded, element by element.
void minmax(const FlatView& flat, float* mins, float* maxs);
int64_t first_non_finite(const TensorView& value);
ScaleZeroPoint calculate_qparams(const Tensor& min_vals, const Tensor& max_vals, const QuantizationArgs& args,
                                 const Tensor* global_scale, NumericMode mode);
/// lsq_search as docs/LSQ.md#L1-L3 define it: every candidate scored element by element
/// (no bounds, no look-ups, no lanes), on the caller's thread.
LsqSearchResult lsq_search(const FlatView& flat, const QuantizationArgs& args, const LsqSearchConfig& cfg,
                           const FlatView* weights = nullptr, const Tensor* global_scale = nullptr);
void sum_squares_by_column(const TensorView& x, int64_t cols, double* acc);
/// Element by element through TensorView::get.
ErrorSums error_sums(const TensorView& x, const TensorView& y);
/// The same loop with the partials kept (add_error_sums' path for other dtypes).
void add_error_sums(const TensorView& x, const TensorView& y, double* signal_partials, double* error_partials);
GridSearchResult grid_search(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                             const FlatView* weights = nullptr);
/// Element by element through Tensor::get / set and the qparam_math.h element steps.
Tensor qdq(QdqOp op, const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
           const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode);
Tensor pack_int_rows(const Tensor& q, int num_bits, std::string_view label);
Tensor unpack_int_rows(const Tensor& packed, int num_bits, int64_t cols, std::string_view label);
Tensor pack_fp4(const Tensor& q, std::string_view label);
Tensor unpack_fp4(const Tensor& packed, DType out_dtype, std::string_view label);
Tensor pack_fp6(const Tensor& q, std::string_view label);
Tensor unpack_fp6(const Tensor& packed, DType out_dtype, std::string_view label);
}  // namespace ref

}  // namespace qobs::kernels
