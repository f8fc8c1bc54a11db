// qobs on CUDA devices (docs/RULES.md A6): weights in device memory calibrated by
// the data-free weight observers, with the same bytes as the CPU path.
//
// Two phases, as Observer's (R6.1.2, R6.1.4): observe_weight makes an observer's
// statistics of a weight on the device, qparams_from_statistics turns them into the
// scale, zero point and (tensor_group) global scale, with fused members (R6.10: q/k/v,
// gate/up) sharing one global scale. Operands and results stay in device memory and
// every call only enqueues work on the given stream, except where a check needs the
// device's answer (the input's non-finite scan, and the rare errors it finds).
//
// Weight observers with a device path: memoryless_minmax, memoryless_mse (the weights'
// mse, R6.9.1), nvfp4_expanded_mse and its alias fouroversix. device_unsupported says
// why another call must stay on the CPU (an observer without a device path, a layout
// that needs a copy, a norm whose power the device cannot reproduce bit for bit).
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
  /// The statistics copied to the host (waits for `stream`).
  std::pair<Tensor, Tensor> to_host(StreamHandle stream = nullptr) const;

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
/// for bit. Non-finite input: InvalidArgument naming the tensor, as on the CPU. The
/// observer itself is not changed. Runs on the weight's device (made current for the
/// calling thread in qobs's own CUDA runtime); `stream` must belong to that device.
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
                const QuantizationArgs& args, const TensorView* global_scale, std::optional<DType> out_dtype,
                void* out, NumericMode mode = NumericMode::kParity, StreamHandle stream = nullptr);

/// pack_int_rows(q, num_bits) of qobs/packing.h (R8.3.1) on the device: q a contiguous
/// int8 device view (*leading, cols); out an int32 device buffer of shape
/// (*leading, ceil(cols * num_bits / 32)).
void pack_int_rows(const TensorView& q, int num_bits, void* out, std::string_view label = {},
                   StreamHandle stream = nullptr);
/// pack_fp4(q) of qobs/packing.h (R8.5.1) on the device: q a contiguous device view of
/// FP4 grid values in a float dtype, (*leading, cols) with cols even; out a uint8 device
/// buffer of shape (*leading, cols / 2).
void pack_fp4(const TensorView& q, void* out, std::string_view label = {}, StreamHandle stream = nullptr);

}  // namespace qobs::cuda
