// qobs/cuda.h: the data-free weight observers on a CUDA device, composed from the
// kernel drivers of kernels_cuda.h in the order the CPU observers run them
// (builtin_observers.cc, observer.cc get_global_scale / get_qparams).
#include "qobs/cuda.h"

#include "core/check.h"
#include "kernels/kernels_cuda.h"
#include "kernels/qdq/qdq_call.h"
#include "observers/builtin_observers.h"
#include "qparams/packing_rows.h"
#include "qparams/qparam_math.h"

namespace qobs::cuda {

using kernels::cuda::Backend;
using kernels::cuda::DeviceBuffer;
using kernels::cuda::Stream;

bool available() { return kernels::cuda::backend() != nullptr; }
std::string unavailable_reason() { return kernels::cuda::unavailable_reason(); }
int device_count() {
  const Backend* b = kernels::cuda::backend();
  return b ? b->device_count() : 0;
}
std::string describe_device(int device) { return kernels::cuda::require_backend().describe(device); }

struct DeviceStatistics::Impl {
  int device = 0;  ///< where the buffers live
  Shape shape;
  DType dtype = DType::kF32;
  DeviceBuffer mins, maxs;
  /// nan_min_max of min_vals, then of max_vals: four f32 (qparams_cuda.h GlobalScaleArgs)
  DeviceBuffer extremes;
};

DeviceStatistics::DeviceStatistics() = default;
DeviceStatistics::~DeviceStatistics() = default;
DeviceStatistics::DeviceStatistics(DeviceStatistics&&) noexcept = default;
DeviceStatistics& DeviceStatistics::operator=(DeviceStatistics&&) noexcept = default;
DeviceStatistics::DeviceStatistics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
const Shape& DeviceStatistics::shape() const { return impl_->shape; }
DType DeviceStatistics::dtype() const { return impl_->dtype; }
const void* DeviceStatistics::min_vals() const { return impl_->mins.get(); }
const void* DeviceStatistics::max_vals() const { return impl_->maxs.get(); }

std::pair<Tensor, Tensor> DeviceStatistics::to_host(StreamHandle stream) const {
  const Backend& b = kernels::cuda::require_backend();
  b.set_device(impl_->device);
  Tensor mn = Tensor::uninitialized(impl_->dtype, impl_->shape), mx = Tensor::uninitialized(impl_->dtype, impl_->shape);
  b.copy(mn.data(), impl_->mins.get(), mn.nbytes(), kernels::cuda::CopyKind::kDeviceToHost, Stream{stream});
  b.copy(mx.data(), impl_->maxs.get(), mx.nbytes(), kernels::cuda::CopyKind::kDeviceToHost, Stream{stream});
  b.synchronize(Stream{stream});
  return {std::move(mn), std::move(mx)};
}

namespace {

/// What the device runs for an observer: min-max, or a grid search with its config.
struct Recipe {
  const detail::MseObserver* mse = nullptr;  ///< null: min-max
};

/// The recipe, or why there is none.
std::pair<std::optional<Recipe>, std::string> recipe_of(const Observer& o) {
  if (!o.is_weight_observer()) return {std::nullopt, "the device path calibrates weights, not " + o.base_name()};
  if (dynamic_cast<const detail::MemorylessMinMaxObserver*>(&o)) return {Recipe{}, ""};
  if (const auto* m = dynamic_cast<const detail::MseObserver*>(&o)) {
    if (m->name() == "mse") return {std::nullopt, "a moving-average mse observer (weights use memoryless_mse, R6.9.1)"};
    return {Recipe{m}, ""};
  }
  return {std::nullopt, "observer " + std::string(o.name()) + " has no device path; it runs on the CPU"};
}

QuantizationArgs search_args_of(const QuantizationArgs& args) {
  QuantizationArgs s = args;
  if (s.get_strategy() == Strategy::kTensorGroup) s.scale_dtype.reset();  // R6.6.2
  return s;
}

}  // namespace

std::string device_unsupported(const Observer& observer, const TensorView& weight) {
  if (!available()) return unavailable_reason();
  return path_unsupported(observer, weight);
}

std::string path_unsupported(const Observer& observer, const TensorView& weight) {
  auto [recipe, why] = recipe_of(observer);
  if (!recipe) return why;
  if (weight.dtype != DType::kF32 && weight.dtype != DType::kBF16 && weight.dtype != DType::kF16)
    return "a " + std::string(dtype_name(weight.dtype)) + " weight (the device path reads f32, bf16, f16)";
  const auto flat = flatten_in_place(weight, "weight", observer.args(), observer.options().label);
  if (!flat) return "a layout whose flattening needs a copy (block padding)";
  if (!kernels::cuda::flat_map_of(*flat)) return "a layout with more axes than the device view holds";
  if (recipe->mse) {
    const auto plan = kernels::cuda::cuda_search_plan(*flat, search_args_of(observer.args()),
                                                      recipe->mse->search_config(), nullptr);
    if (!plan.unsupported.empty()) return plan.unsupported;
  }
  return "";
}

DeviceStatistics observe_weight(const Observer& observer, const TensorView& weight, StreamHandle stream) {
  const Backend& b = kernels::cuda::require_backend();
  const Stream s{stream};
  const std::string why = device_unsupported(observer, weight);
  QOBS_CHECK(why.empty(), InvalidArgument, observer.options().label, ": ", observer.name(), " on the device: ", why);
  // The weight's device becomes this thread's current device in qobs's CUDA runtime
  // (the caller's framework may link its own runtime, whose current device this one
  // does not see); the buffers below are allocated there.
  const int device = b.device_of(weight.data);
  QOBS_CHECK(device >= 0, InvalidArgument, observer.options().label, ": the weight is not in CUDA device memory");
  b.set_device(device);
  const std::string label = observer.options().label.empty() ? std::string("weight") : observer.options().label;
  // the CPU observer's input check (check_observable): finite values only
  QOBS_CHECK(weight.numel() > 0, ShapeError, label, ": empty weight of shape ", shape_str(weight.shape), " (R6.1.2)");
  if (const int64_t i = kernels::cuda::first_non_finite(b, weight, s); i >= 0) {
    Tensor one = Tensor::uninitialized(weight.dtype, {1});
    b.copy(one.data(), static_cast<const unsigned char*>(weight.data) + weight.offset_of(i) * dtype_size(weight.dtype),
           dtype_size(weight.dtype), kernels::cuda::CopyKind::kDeviceToHost, s);
    b.synchronize(s);
    QOBS_THROW(InvalidArgument, label, ": non-finite value ", one.get(0), " at flat index ", i, " of shape ",
               shape_str(weight.shape),
               " (observed tensors must be finite: the reference would produce a NaN/Inf scale; docs/DEVIATIONS.md)");
  }
  const FlatView flat = *flatten_in_place(weight, "weight", observer.args(), observer.options().label);
  auto impl = std::make_unique<DeviceStatistics::Impl>();
  impl->device = device;
  impl->shape = flat.layout.qparam_shape;
  impl->dtype = flat.dtype;
  const std::size_t bytes = static_cast<std::size_t>(flat.layout.num_qparams()) * dtype_size(flat.dtype);
  impl->mins = DeviceBuffer(b, bytes, s);
  impl->maxs = DeviceBuffer(b, bytes, s);
  const Recipe recipe = *recipe_of(observer).first;
  if (recipe.mse) {
    const auto plan = kernels::cuda::cuda_search_plan(flat, search_args_of(observer.args()),
                                                      recipe.mse->search_config(), nullptr);
    kernels::cuda::grid_search(b, plan, impl->mins.get(), impl->maxs.get(), flat.dtype, s);
  } else {
    kernels::cuda::minmax_stats(b, flat, flat.dtype, impl->mins.get(), impl->maxs.get(), s);
  }
  if (observer.args().get_strategy() == Strategy::kTensorGroup) {
    const int64_t n = flat.layout.num_qparams();
    impl->extremes = DeviceBuffer(b, 4 * sizeof(float), s);
    kernels::cuda::nan_min_max(b, impl->mins.get(), flat.dtype, n, impl->extremes.as<float>(), s);
    kernels::cuda::nan_min_max(b, impl->maxs.get(), flat.dtype, n, impl->extremes.as<float>() + 2, s);
  }
  return DeviceStatistics(std::move(impl));
}

namespace {

qobs::detail::QParamPlan plan_of(const Observer& observer, DType stat_dtype, bool global) {
  const QuantizationArgs& args = observer.args();
  const QuantizationArgs v = args.strategy ? args : args.validated();
  return qobs::detail::QParamPlan::make(v, stat_dtype, global ? std::optional<double>(1.0) : std::nullopt,
                                         observer.options().mode);
}

}  // namespace

QParamsLayout qparams_layout(const Observer& observer, const DeviceStatistics& stats) {
  const bool global = observer.args().get_strategy() == Strategy::kTensorGroup;
  const auto plan = plan_of(observer, stats.dtype(), global);
  QParamsLayout l;
  l.scale_shape = l.zero_point_shape = stats.shape();
  // calculate_qparams' step 9 (qparams_job.cc): a 0-dimensional scale becomes (1,)
  if (global && l.scale_shape.empty()) l.scale_shape = {1};
  if (l.scale_shape.empty()) l.scale_shape = l.zero_point_shape = {1};
  l.scale_dtype = plan.scale_dt;
  l.zero_point_dtype = plan.zp_dtype;
  l.has_global_scale = global;
  return l;
}

void qparams_from_statistics(const Observer& observer, const DeviceStatistics& stats,
                             const std::vector<const DeviceStatistics*>& fused, void* scale, void* zero_point,
                             void* global_scale, StreamHandle stream) {
  const Backend& b = kernels::cuda::require_backend();
  const Stream s{stream};
  b.set_device(stats.impl().device);
  const bool global = observer.args().get_strategy() == Strategy::kTensorGroup;
  if (global) {
    QOBS_CHECK(global_scale != nullptr, InvalidArgument, observer.options().label,
               ": tensor_group qparams need a global-scale buffer (R6.1.5)");
    std::vector<const DeviceStatistics*> members = fused.empty() ? std::vector<const DeviceStatistics*>{&stats} : fused;
    // the extremes of every member, side by side; the statistics' promoted dtype
    DeviceBuffer all(b, members.size() * 4 * sizeof(float), s);
    DType dt = members[0]->dtype();
    for (std::size_t m = 0; m < members.size(); ++m) {
      QOBS_CHECK(members[m]->impl().extremes.get() != nullptr, PreconditionError,
                 "fused member without tensor_group statistics (R6.10)");
      QOBS_CHECK(members[m]->impl().device == stats.impl().device, InvalidArgument,
                 "fused members on different CUDA devices (", members[m]->impl().device, " and ", stats.impl().device,
                 ")");
      dt = qobs::detail::promote_float_dtypes(dt, members[m]->dtype());
      b.copy(all.as<float>() + 4 * m, members[m]->impl().extremes.get(), 4 * sizeof(float),
             kernels::cuda::CopyKind::kDeviceToDevice, s);
    }
    kernels::cuda::global_scale(b, all.as<float>(), static_cast<int>(members.size()), dt, observer.options().mode,
                                static_cast<float*>(global_scale), s);
  }
  const auto plan = plan_of(observer, stats.dtype(), global);
  const int64_t n = shape_numel(stats.shape());
  // statistics of checked, finite input are finite: no wait for the flag
  kernels::cuda::calculate_qparams(b, stats.min_vals(), stats.max_vals(), stats.dtype(), n, plan,
                                   global ? static_cast<const float*>(global_scale) : nullptr, scale, zero_point,
                                   false, s);
}

// ---- quantize, dequantize and pack on the device -----------------------------------

namespace {

/// The checks of quantize / dequantize that need no values, in resolve_qdq's order
/// (qdq_call.cc), and the resolved call: the layout, plan and result of the CPU function.
kernels::QdqCall resolve_device_qdq(kernels::QdqOp op, const TensorView& x, const TensorView& scale,
                                    const TensorView* zero_point, const QuantizationArgs& args_in,
                                    const TensorView* global_scale, std::optional<DType> out_dtype, NumericMode mode) {
  const QuantizationArgs args = args_in.strategy ? args_in : args_in.validated();
  QOBS_CHECK(is_floating(x.dtype) || op == kernels::QdqOp::kDequantize, TypeError, "x must be a float tensor, got ",
             dtype_name(x.dtype), " (R5.1)");
  QOBS_CHECK(is_floating(scale.dtype) && scale.dtype != DType::kF8E4M3, TypeError, "scale must be a float tensor, got ",
             dtype_name(scale.dtype), " (R5.1.1)");
  QOBS_CHECK(scale.is_contiguous(), InvalidArgument, "the scale of a quantization on the device must be contiguous");
  if (global_scale)
    QOBS_CHECK(global_scale->numel() == 1 && global_scale->dtype == DType::kF32, InvalidArgument,
               "global_scale on the device must be one f32 value, got ", dtype_name(global_scale->dtype), " ",
               shape_str(global_scale->shape), " (R4.1 step 4)");
  if (zero_point) {
    QOBS_CHECK(zero_point->shape == scale.shape, ShapeError, "zero_point shape ", shape_str(zero_point->shape),
               " differs from scale shape ", shape_str(scale.shape), " (R5.1)");
    QOBS_CHECK(zero_point->is_contiguous(), InvalidArgument,
               "the zero point of a quantization on the device must be contiguous");
  }
  // R5.1.1 step 1 (prepare_scale): dividing by the global scale promotes the scale to
  // f32 at least; it, or a scale of rank >= 1, widens the division's dtype
  const DType s_dt = global_scale ? qobs::detail::promote_float_dtypes(scale.dtype, DType::kF32) : scale.dtype;
  const bool widens = global_scale != nullptr || scale.dim() > 0;
  return kernels::resolve_qdq_layout(op, x, s_dt, scale.shape, widens, zero_point != nullptr, args, nullptr,
                                     out_dtype, mode);
}

/// The device of `p` (device memory, else InvalidArgument naming `what`).
int device_of_operand(const Backend& b, const void* p, const char* what) {
  const int d = b.device_of(p);
  QOBS_CHECK(d >= 0, InvalidArgument, what, " is not in CUDA device memory");
  return d;
}

/// The device every operand is on (InvalidArgument when they are on several).
int common_device(const Backend& b, std::initializer_list<std::pair<const void*, const char*>> operands) {
  int device = -1;
  for (const auto& [p, what] : operands) {
    if (!p) continue;
    const int d = device_of_operand(b, p, what);
    QOBS_CHECK(device < 0 || d == device, InvalidArgument, what, " is on CUDA device ", d, ", the other operands on ",
               device);
    device = d;
  }
  return device;
}

void run_device_qdq(kernels::QdqOp op, const TensorView& x, const TensorView& scale, const TensorView* zero_point,
                    const QuantizationArgs& args, const TensorView* global_scale, std::optional<DType> out_dtype,
                    void* out, NumericMode mode, StreamHandle stream) {
  const Backend& b = kernels::cuda::require_backend();
  const Stream s{stream};
  const kernels::QdqCall call = resolve_device_qdq(op, x, scale, zero_point, args, global_scale, out_dtype, mode);
  std::optional<kernels::cuda::QdqArgs> a = kernels::cuda::cuda_qdq_args(call, x, scale.dtype, mode);
  QOBS_CHECK(a.has_value(), InvalidArgument, "a tensor of shape ", shape_str(x.shape),
             " has no device path for quantization (more than ", kernels::cuda::kMaxAxes, " dimensions)");
  if (a->n == 0) return;
  b.set_device(common_device(b, {{x.data, "x"},
                                 {scale.data, "scale"},
                                 {zero_point ? zero_point->data : nullptr, "zero_point"},
                                 {global_scale ? global_scale->data : nullptr, "global_scale"},
                                 {out, "the output buffer"}}));
  // prepare_scale's check: a NaN/Inf scale would give garbage (values are read here only)
  if (const int64_t bad = kernels::cuda::first_non_finite(b, scale, s); bad >= 0) {
    Tensor one = Tensor::uninitialized(scale.dtype, {1});
    b.copy(one.data(), static_cast<const unsigned char*>(scale.data) + bad * dtype_size(scale.dtype),
           dtype_size(scale.dtype), kernels::cuda::CopyKind::kDeviceToHost, s);
    b.synchronize(s);
    QOBS_THROW(InvalidArgument, "scale[", bad, "] = ", one.get(0),
               " is non-finite (R5.1.1: a NaN/Inf scale would produce garbage)");
  }
  a->x = x.data;
  a->scale = scale.data;
  a->global_scale = global_scale ? static_cast<const float*>(global_scale->data) : nullptr;
  a->zero_point = zero_point ? zero_point->data : nullptr;
  if (zero_point) a->zp_dtype = zero_point->dtype;
  a->out = out;
  kernels::cuda::qdq(b, *a, s);
}

}  // namespace

QdqLayout quantize_layout(const TensorView& x, const TensorView& scale, const TensorView* zero_point,
                          const QuantizationArgs& args, const TensorView* global_scale, std::optional<DType> out_dtype,
                          NumericMode mode) {
  const kernels::QdqCall c =
      resolve_device_qdq(kernels::QdqOp::kQuantize, x, scale, zero_point, args, global_scale, out_dtype, mode);
  return {c.out_dtype, c.out_shape};
}

QdqLayout dequantize_layout(const TensorView& x_q, const TensorView& scale, const TensorView* zero_point,
                            const QuantizationArgs& args, const TensorView* global_scale,
                            std::optional<DType> out_dtype, NumericMode mode) {
  const kernels::QdqCall c =
      resolve_device_qdq(kernels::QdqOp::kDequantize, x_q, scale, zero_point, args, global_scale, out_dtype, mode);
  return {c.out_dtype, c.out_shape};
}

void quantize(const TensorView& x, const TensorView& scale, const TensorView* zero_point, const QuantizationArgs& args,
              const TensorView* global_scale, std::optional<DType> out_dtype, void* out, NumericMode mode,
              StreamHandle stream) {
  run_device_qdq(kernels::QdqOp::kQuantize, x, scale, zero_point, args, global_scale, out_dtype, out, mode, stream);
}

void dequantize(const TensorView& x_q, const TensorView& scale, const TensorView* zero_point,
                const QuantizationArgs& args, const TensorView* global_scale, std::optional<DType> out_dtype,
                void* out, NumericMode mode, StreamHandle stream) {
  run_device_qdq(kernels::QdqOp::kDequantize, x_q, scale, zero_point, args, global_scale, out_dtype, out, mode,
                 stream);
}

void pack_int_rows(const TensorView& q, int num_bits, void* out, std::string_view label, StreamHandle stream) {
  const Backend& b = kernels::cuda::require_backend();
  // check_pack_int_rows (packing_rows.h) on a view
  qobs::detail::check_pack_bits(num_bits, label);
  QOBS_CHECK(q.dtype == DType::kI8, InvalidArgument, qobs::detail::name_or(label), ": packing needs int8 values, got ",
             dtype_name(q.dtype), " (R8.3.6)");
  QOBS_CHECK(q.dim() >= 1, ShapeError, qobs::detail::name_or(label), ": cannot pack a 0-dimensional tensor (R8.3.1)");
  QOBS_CHECK(q.is_contiguous(), InvalidArgument, qobs::detail::name_or(label),
             ": packing on the device needs contiguous values");
  const int64_t cols = q.shape.back(), rows = cols == 0 ? 0 : q.numel() / cols;
  if (rows == 0 || cols == 0) return;
  b.set_device(common_device(b, {{q.data, "the values to pack"}, {out, "the output buffer"}}));
  kernels::cuda::pack_int_rows(b, static_cast<const int8_t*>(q.data), rows, cols, num_bits,
                               static_cast<uint32_t*>(out), label, Stream{stream});
}

void pack_fp4(const TensorView& q, void* out, std::string_view label, StreamHandle stream) {
  const Backend& b = kernels::cuda::require_backend();
  // check_pack_fp4 (packing_rows.h) on a view
  QOBS_CHECK(is_floating(q.dtype) && q.dtype != DType::kF8E4M3, InvalidArgument, qobs::detail::name_or(label),
             ": FP4 packing needs values in a float tensor, got ", dtype_name(q.dtype), " (R8.5.1)");
  QOBS_CHECK(q.dim() >= 1, ShapeError, qobs::detail::name_or(label), ": cannot pack a 0-dimensional tensor (R8.5.1)");
  QOBS_CHECK(q.shape.back() % 2 == 0, InvalidArgument, qobs::detail::name_or(label),
             ": FP4 packing needs an even number of columns, got ", q.shape.back(), " (R8.5.1)");
  QOBS_CHECK(q.is_contiguous(), InvalidArgument, qobs::detail::name_or(label),
             ": packing on the device needs contiguous values");
  if (q.numel() == 0) return;
  b.set_device(common_device(b, {{q.data, "the values to pack"}, {out, "the output buffer"}}));
  kernels::cuda::pack_fp4(b, q.data, q.dtype, q.numel(), static_cast<uint8_t*>(out), label, Stream{stream});
}

}  // namespace qobs::cuda
