// qobs on CUDA devices (docs/RULES.md "CUDA"): weights in device memory calibrated by
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
#include <string>
#include <vector>

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

}  // namespace qobs::cuda
