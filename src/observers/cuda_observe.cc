// qobs/cuda.h: the data-free weight observers on a CUDA device, composed from the
// kernel drivers of kernels_cuda.h in the order the CPU observers run them
// (builtin_observers.cc, observer.cc get_global_scale / get_qparams).
#include "qobs/cuda.h"

#include "core/check.h"
#include "kernels/kernels_cuda.h"
#include "observers/builtin_observers.h"
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

int DeviceStatistics::device() const { return impl_->device; }

void DeviceStatistics::copy_to(void* min_vals, void* max_vals, StreamHandle stream) const {
  const Backend& b = kernels::cuda::require_backend();
  b.set_device(impl_->device);
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(impl_->shape)) * dtype_size(impl_->dtype);
  b.copy(min_vals, impl_->mins.get(), bytes, kernels::cuda::CopyKind::kDeviceToDevice, Stream{stream});
  b.copy(max_vals, impl_->maxs.get(), bytes, kernels::cuda::CopyKind::kDeviceToDevice, Stream{stream});
}

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

void global_scale_from_statistics(const Observer& observer, const DeviceStatistics& stats,
                                  const std::vector<const DeviceStatistics*>& fused, void* global_scale,
                                  StreamHandle stream) {
  const Backend& b = kernels::cuda::require_backend();
  const Stream s{stream};
  QOBS_CHECK(observer.args().get_strategy() == Strategy::kTensorGroup, InvalidArgument, observer.options().label,
             ": only tensor_group observers have a global scale (R6.1.5)");
  QOBS_CHECK(global_scale != nullptr, InvalidArgument, observer.options().label,
             ": tensor_group qparams need a global-scale buffer (R6.1.5)");
  b.set_device(stats.impl().device);
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

void qparams_from_statistics(const Observer& observer, const DeviceStatistics& stats,
                             const std::vector<const DeviceStatistics*>& fused, void* scale, void* zero_point,
                             void* global_scale, StreamHandle stream) {
  const Backend& b = kernels::cuda::require_backend();
  const Stream s{stream};
  const bool global = observer.args().get_strategy() == Strategy::kTensorGroup;
  if (global) global_scale_from_statistics(observer, stats, fused, global_scale, stream);
  b.set_device(stats.impl().device);
  const auto plan = plan_of(observer, stats.dtype(), global);
  const int64_t n = shape_numel(stats.shape());
  // statistics of checked, finite input are finite: no wait for the flag
  kernels::cuda::calculate_qparams(b, stats.min_vals(), stats.max_vals(), stats.dtype(), n, plan,
                                   global ? static_cast<const float*>(global_scale) : nullptr, scale, zero_point,
                                   false, s);
}

}  // namespace qobs::cuda
