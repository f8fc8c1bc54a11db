// qobs on CUDA devices (docs/RULES.md A6): weights in device memory calibrated by
// the data-free and importance-weighted weight observers, with the same bytes as the CPU
// path.
//
// Two phases, as Observer's (R6.1.2, R6.1.4): observe_weight makes an observer's
// statistics of a weight on the device, qparams_from_statistics turns them into the
// scale, zero point and (tensor_group) global scale, with fused members (R6.10: q/k/v,
// gate/up) sharing one global scale. Operands and results stay in device memory and
// every call only enqueues work on the given stream, except where a check needs the
// device's answer (the input's non-finite scan, and the rare errors it finds).
//
// Weight observers with a device path: memoryless_minmax, memoryless_mse (the weights'
// mse, R6.9.1), nvfp4_expanded_mse and its alias fouroversix, and the importance-weighted
// imatrix_mse and nvfp4_expanded_imatrix (R6.8, R6.12: the importance is the observer's
// own statistic, validated and turned into column weights on the host as the CPU
// observer does, then uploaded; imatrix_lsq, which searches in phase 2, has none).
// device_unsupported says why another call must stay on the CPU (an observer without a
// device path, a layout that needs a copy, a norm whose power the device cannot
// reproduce bit for bit).
//
// Activations: ActivationStatistics runs memoryless_minmax, static_minmax and minmax
// over batches in device memory, and DeviceImportance the imatrix observers'
// forward-pre hook (R6.8.3), with no wait per batch; both continue the host observer's
// statistics and store the result back into it when asked.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qobs/args.h"
#include "qobs/numeric.h"
#include "qobs/observer.h"
#include "qobs/tensor.h"

namespace qobs::cuda {

/// True when qobs was built with the CUDA backend (QOBS_CUDA) and the CUDA runtime sees
/// a device.
bool available();
/// Why available() is false; "" when it is true.
std::string unavailable_reason();
/// Devices the runtime sees (0 without CUDA).
int device_count();
/// "NVIDIA H200 (sm_90, 132 SMs, 141 GiB)"-style description of a device.
std::string describe_device(int device);

/// A CUDA stream (cudaStream_t as an opaque handle); nullptr: the calling thread's
/// default stream.
using StreamHandle = void*;

/// The statistics of one observed weight (min_vals, max_vals: the observer's qparam
/// shape, in the weight's dtype), in device memory owned by this object, and their
/// extremes for the global scale.
class DeviceStatistics {
 public:
  DeviceStatistics();
  ~DeviceStatistics();
  DeviceStatistics(DeviceStatistics&&) noexcept;
  DeviceStatistics& operator=(DeviceStatistics&&) noexcept;

  const Shape& shape() const;
  DType dtype() const;
  const void* min_vals() const;
  const void* max_vals() const;
  /// The device the statistics live on.
  int device() const;
  /// The statistics copied to the host (waits for `stream`).
  std::pair<Tensor, Tensor> to_host(StreamHandle stream = nullptr) const;
  /// The statistics copied into the caller's device buffers of shape() and dtype() on
  /// the same device (enqueued on `stream`, no wait).
  void copy_to(void* min_vals, void* max_vals, StreamHandle stream = nullptr) const;

  struct Impl;
  explicit DeviceStatistics(std::unique_ptr<Impl> impl);
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// Why observer.observe(weight) cannot run on the device ("" when it can): weight is a
/// view of device memory (only its shape, dtype and strides are read).
std::string device_unsupported(const Observer& observer, const TensorView& weight);

/// device_unsupported without the device: why qobs has no device path for
/// observer.observe(weight) ("" when it has one), whether or not a device is present, so
/// that a caller can plan which calls would run there (only the view's shape, dtype and
/// strides are read; its data may be null).
std::string path_unsupported(const Observer& observer, const TensorView& weight);

/// Phase 1 on the device: the statistics observer.observe(weight) makes on the CPU, bit
/// for bit. Non-finite input: InvalidArgument naming the tensor, as on the CPU; an
/// imatrix observer's importance raises as on the CPU (none reached the attached
/// module, or strict=true and no usable importance), else without usable importance it
/// searches uniformly (Q8). The observer's statistics are not changed (an imatrix
/// observer records its search path, imatrix_search_path, as observe does). Runs on the
/// weight's device (made current for the calling thread in qobs's own CUDA runtime);
/// `stream` must belong to that device.
DeviceStatistics observe_weight(const Observer& observer, const TensorView& weight, StreamHandle stream = nullptr);

/// Shapes and dtypes of phase 2's results for these statistics.
struct QParamsLayout {
  Shape scale_shape;
  DType scale_dtype = DType::kF32;
  Shape zero_point_shape;
  DType zero_point_dtype = DType::kI8;
  bool has_global_scale = false;  ///< tensor_group: one f32 global scale
};
QParamsLayout qparams_layout(const Observer& observer, const DeviceStatistics& stats);

/// R6.1.5 on the device: get_global_scale's f32 global scale of a tensor_group observer
/// written to the caller's device buffer of one f32; fused as for
/// qparams_from_statistics. InvalidArgument for an observer of another strategy (it has
/// no global scale).
void global_scale_from_statistics(const Observer& observer, const DeviceStatistics& stats,
                                  const std::vector<const DeviceStatistics*>& fused, void* global_scale,
                                  StreamHandle stream = nullptr);

/// Phase 2 on the device: get_qparams' scale, zero point and global scale (R6.1.4,
/// R6.1.5) written to the caller's device buffers (qparams_layout's shapes and dtypes;
/// global_scale only for tensor_group). fused: the statistics of every member of the
/// observer's fused group, this one included, in the order get_global_scale takes them
/// (this observer first); empty for an observer without partners.
void qparams_from_statistics(const Observer& observer, const DeviceStatistics& stats,
                             const std::vector<const DeviceStatistics*>& fused, void* scale, void* zero_point,
                             void* global_scale, StreamHandle stream = nullptr);

// ---- quantize, dequantize and pack on the device -----------------------------------
//
// quantize / dequantize of qobs/qparams.h and the row packing of qobs/packing.h on views
// of device memory, with the CPU functions' bytes: the call is resolved as on the CPU
// (resolve_qdq_layout, the packing checks) and every element runs the reference's QOBS_HD
// step. The operands of a call are on one device, which becomes the calling thread's
// current device; a call only enqueues work on `stream`, except the scale's non-finite
// check (R5.1.1) and a value off its packing grid, which wait for the device's answer and
// throw the CPU function's error. g_idx (R5.3.1 step 4) has no device path.

/// The dtype and shape of the result of quantize (or dequantize) for operands of these
/// dtypes and shapes (data unread): the CPU function's checks that need no values
/// (R5.1-R5.4), with its errors. zero_point and global_scale may be null.
struct QdqLayout {
  DType dtype = DType::kF32;
  Shape shape;
};
QdqLayout quantize_layout(const TensorView& x, const TensorView& scale, const TensorView* zero_point,
                          const QuantizationArgs& args, const TensorView* global_scale = nullptr,
                          std::optional<DType> out_dtype = std::nullopt, NumericMode mode = NumericMode::kParity);
QdqLayout dequantize_layout(const TensorView& x_q, const TensorView& scale, const TensorView* zero_point,
                            const QuantizationArgs& args, const TensorView* global_scale = nullptr,
                            std::optional<DType> out_dtype = std::nullopt, NumericMode mode = NumericMode::kParity);

/// quantize(x, scale, zero_point, args, nullptr, global_scale, out_dtype, mode) of
/// qobs/qparams.h on the device, written to `out`: a contiguous device buffer of
/// quantize_layout's dtype and shape. x may be strided; scale and zero_point are
/// contiguous; global_scale is one f32. All views are of device memory.
void quantize(const TensorView& x, const TensorView& scale, const TensorView* zero_point, const QuantizationArgs& args,
              const TensorView* global_scale, std::optional<DType> out_dtype, void* out,
              NumericMode mode = NumericMode::kParity, StreamHandle stream = nullptr);
/// dequantize(x_q, ...) of qobs/qparams.h on the device, as quantize above.
void dequantize(const TensorView& x_q, const TensorView& scale, const TensorView* zero_point,
                const QuantizationArgs& args, const TensorView* global_scale, std::optional<DType> out_dtype, void* out,
                NumericMode mode = NumericMode::kParity, StreamHandle stream = nullptr);

/// pack_int_rows(q, num_bits) of qobs/packing.h (R8.3.1) on the device: q a contiguous
/// int8 device view (*leading, cols); out an int32 device buffer of shape
/// (*leading, ceil(cols * num_bits / 32)).
void pack_int_rows(const TensorView& q, int num_bits, void* out, std::string_view label = {},
                   StreamHandle stream = nullptr);
/// pack_fp4(q) of qobs/packing.h (R8.5.1) on the device: q a contiguous device view of
/// FP4 grid values in a float dtype, (*leading, cols) with cols even; out a uint8 device
/// buffer of shape (*leading, cols / 2).
void pack_fp4(const TensorView& q, void* out, std::string_view label = {}, StreamHandle stream = nullptr);

/// An activation observer's statistics (min_vals, max_vals) over batches in device
/// memory: the updates observer.observe(batch) makes on the CPU for memoryless_minmax,
/// static_minmax and minmax (R6.4.1, R6.4.2, R6.5), bit for bit, each batch enqueued on
/// a stream with no wait and nothing copied to the host. The first batch continues the
/// statistics the observer holds (copied to the device); store_into hands the result
/// back. In between, the observer's own statistics must not change.
///
/// A batch holding NaN or +-Inf cannot raise when it is observed (that would wait for
/// the device): it is recorded, the statistics stay those before it (as the host
/// observer keeps them when it raises), later batches leave them so, and store_into
/// stores those and raises the host observer's error for that batch.
///
/// Calls on one object must be ordered: on one stream, or the caller orders the streams.
class ActivationStatistics {
 public:
  ActivationStatistics();
  ~ActivationStatistics();
  ActivationStatistics(ActivationStatistics&&) noexcept;
  ActivationStatistics& operator=(ActivationStatistics&&) noexcept;

  /// Why observer.observe(x) cannot continue these statistics on the device ("" when it
  /// can): no device, another observer, a weight observer, a dtype other than f32 /
  /// bf16 / f16, a layout whose flattening needs a copy, or a batch whose dtype, device
  /// or (memoryless_minmax) statistics shape differs from the statistics so far.
  std::string unsupported(const Observer& observer, const TensorView& x) const;
  /// One batch (R6.1.2; an empty one changes nothing). InvalidArgument naming why when
  /// unsupported; ShapeError for statistics of another shape than the running ones,
  /// as on the CPU.
  void observe(const Observer& observer, const TensorView& x, StreamHandle stream = nullptr);
  /// No batch observed since construction or store_into.
  bool empty() const;
  /// Waits for `stream`, replaces the observer's min_vals / max_vals by these, and
  /// empties this object; InvalidArgument (after storing) for a recorded non-finite
  /// batch, naming its value, flat index, shape and number.
  void store_into(Observer& observer, StreamHandle stream = nullptr);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// The importance statistic of an imatrix observer's forward-pre hook (R6.8.3:
/// importance_sum, f32 per input feature, and importance_count) over input batches in
/// device memory, each enqueued on a stream with no wait; the first batch continues the
/// observer's statistic, store_into hands the result back. In between, the observer's
/// importance must not change. Calls on one object must be ordered as
/// ActivationStatistics's.
class DeviceImportance {
 public:
  DeviceImportance();
  ~DeviceImportance();
  DeviceImportance(DeviceImportance&&) noexcept;
  DeviceImportance& operator=(DeviceImportance&&) noexcept;

  /// Why observer.accumulate_input(x) cannot run here ("" when it can): no device, an
  /// observer without importance (not an imatrix observer, or not attached), a dtype
  /// other than f32 / bf16 / f16, an input of fewer than two dimensions or not
  /// contiguous, or on another device than the batches so far.
  std::string unsupported(const Observer& observer, const TensorView& x) const;
  /// One input batch; InvalidArgument naming why when unsupported, or for an input
  /// whose last dimension is not in_features (as on the CPU).
  void accumulate(const Observer& observer, const TensorView& x, StreamHandle stream = nullptr);
  bool empty() const;
  /// Waits for `stream`, replaces the observer's importance_sum / importance_count by
  /// these, and empties this object.
  void store_into(Observer& observer, StreamHandle stream = nullptr);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace qobs::cuda
