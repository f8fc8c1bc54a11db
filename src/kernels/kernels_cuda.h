// The kernel drivers on device memory: the CUDA counterpart of kernels.h, one function
// per concept, implemented beside the CPU driver in the concept's <concept>.cc. Each
// takes the backend (cuda/backend.h) picked once by its caller, operands in device
// memory (a FlatView / TensorView whose data is a device pointer: the host reads none
// of it) and a stream; results go to device buffers the caller owns. Bit for bit the
// CPU path's results (docs/RULES.md A6).
//
// Errors the CPU path raises from the data (a non-finite statistic, a value off its
// packing range) need the device's answer: those functions wait for their stream and
// throw the CPU path's error. The others only enqueue work.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/backend.h"
#include "kernels/kernels.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::cuda {

/// The backend, or IoError naming why there is none (unavailable_reason()).
const Backend& require_backend();

/// minmax_stats (R6.3.1) of a device view into num_qparams statistics of out_dtype
/// (f32, bf16 or f16): Tensor::from_floats of ref::minmax's floats. minmax/minmax.cc.
void minmax_stats(const Backend& b, const FlatView& flat, DType out_dtype, void* mins, void* maxs, Stream s);

/// NaN-propagating min and max of n values of a contiguous f32 / bf16 / f16 device
/// array, as two f32 values in device memory (out[0] = min, out[1] = max; a zero
/// result's sign is unspecified). minmax/minmax.cc.
void nan_min_max(const Backend& b, const void* x, DType dtype, int64_t n, float* out, Stream s);

/// An activation observer's running statistics after one batch (minmax_cuda.h
/// RunningMinmaxArgs): n statistics of `dtype` in place, from the batch's n; skip: the
/// non-finite record's state (stats_cuda.h), or null. minmax/minmax.cc.
void running_minmax(const Backend& b, const void* batch_min, const void* batch_max, DType dtype, int64_t n,
                    RunningOp op, double c, NumericMode mode, void* run_min, void* run_max, const uint32_t* skip,
                    Stream s);

/// R6.1.5 / R4.2: the NVFP4 global scale of the statistics of one or more fused
/// members, each given by its nan_min_max of min_vals (extremes[2 m]) and of max_vals
/// (extremes[2 m + 1]), both already on the device; dt: the statistics' promoted dtype.
/// Writes one f32 to `global_scale`. Throws (after waiting for the stream) where
/// generate_gparam does: an infinite range. minmax/minmax.cc.
void global_scale(const Backend& b, const float* extremes, int members, DType dt, NumericMode mode,
                  float* global_scale_out, Stream s);

/// The MSE grid search (R6.6 / R6.8) of a device view, its best min / max stored in
/// out_dtype; plan: cuda_search_plan's, whose `unsupported` is empty. Returns nothing
/// of candidates_evaluated (it stays on the device). grid_search/grid_search.cc.
void grid_search(const Backend& b, const CudaSearchPlan& plan, void* best_min, void* best_max, DType out_dtype,
                 Stream s);

/// calculate_qparams (R4.1) of n statistics in device memory, with the plan the CPU
/// path makes (QParamPlan::make of the statistics' dtype; has_global when
/// global_scale is a device f32). Results in plan.scale_dt / plan.zp_dtype. check_finite:
/// wait and throw the CPU path's InvalidArgument when a statistic is not finite (the
/// caller may skip it for statistics of input it checked). qparams/qparams.cc.
void calculate_qparams(const Backend& b, const void* mins, const void* maxs, DType stat_dtype, int64_t n,
                       const qobs::detail::QParamPlan& plan, const float* global_scale, void* scale, void* zero_point,
                       bool check_finite, Stream s);

/// first_non_finite of a device view (flat row-major index, or -1); waits. stats/stats.cc.
int64_t first_non_finite(const Backend& b, const TensorView& x, Stream s);

/// sum_squares_by_column of a contiguous device matrix into cols f64 device sums.
/// stats/stats.cc.
void sum_squares_by_column(const Backend& b, const TensorView& x, int64_t cols, double* acc, Stream s);

/// The imatrix statistic of one batch (stats_cuda.h importance_column): a contiguous
/// device matrix of `cols` columns added to cols f32 device sums. stats/stats.cc.
void add_importance(const Backend& b, const TensorView& x, int64_t cols, float* importance, Stream s);

/// One activation batch x (device view) into a non-finite record (stats_cuda.h
/// NonFiniteRecord): its n min-max statistics (stat_dtype, device) flagged, and the
/// batch recorded as number `batch` when it is the first to hold a non-finite value.
/// No wait. stats/stats.cc.
void record_non_finite(const Backend& b, const void* mins, const void* maxs, DType stat_dtype, int64_t n,
                       const TensorView& x, int64_t batch, NonFiniteRecord* record, Stream s);

/// quantize / dequantize / fake_quantize with arguments from cuda_qdq_args and device
/// pointers set. qdq/qdq.cc.
void qdq(const Backend& b, const QdqArgs& a, Stream s);

/// pack_int_rows / pack_fp4 (R8.3.1, R8.5.1) of device values into device words /
/// bytes; a value off its range or grid: waits, and throws the reference's error for
/// the first such value (the row copied back and replayed). pack/pack.cc.
void pack_int_rows(const Backend& b, const int8_t* q, int64_t rows, int64_t cols, int bits, uint32_t* out,
                   std::string_view label, Stream s);
void pack_fp4(const Backend& b, const void* q, DType dtype, int64_t n, uint8_t* out, std::string_view label, Stream s);

}  // namespace qobs::kernels::cuda
