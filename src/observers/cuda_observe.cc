// qobs/cuda.h: the data-free and importance-weighted weight observers, the min-max
// activation observers, the imatrix hook, and quantize / dequantize / packing on a CUDA
// device, composed from the kernel drivers of kernels_cuda.h in the order the CPU
// functions run them (builtin_observers.cc, observer.cc get_global_scale / get_qparams,
// qdq_call.cc).
#include "qobs/cuda.h"

#include <algorithm>
#include <optional>
#include <typeinfo>
#include <vector>

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

/// What the device runs for an observer: min-max, or a grid search with its config,
/// weighted by an imatrix observer's importance.
struct Recipe {
  const kernels::GridSearchConfig* search = nullptr;    ///< null: min-max
  const detail::ImatrixMseObserver* imatrix = nullptr;  ///< the importance-weighted search (R6.8)
};

/// The recipe, or why there is none.
std::pair<std::optional<Recipe>, std::string> recipe_of(const Observer& o) {
  const std::string none = "observer " + std::string(o.name()) + " has no device path";
  if (!o.is_weight_observer()) return {std::nullopt, "the device path calibrates weights, not " + o.base_name()};
  if (dynamic_cast<const detail::MemorylessMinMaxObserver*>(&o)) return {Recipe{}, ""};
  if (const auto* m = dynamic_cast<const detail::MseObserver*>(&o)) {
    if (m->name() == "mse") return {std::nullopt, "a moving-average mse observer (weights use memoryless_mse, R6.9.1)"};
    return {Recipe{&m->search_config()}, ""};
  }
  if (const auto* m = dynamic_cast<const detail::ImatrixMseObserver*>(&o)) {
    // imatrix_mse and nvfp4_expanded_imatrix only: a subclass (imatrix_lsq) searches
    // otherwise, in phase 2 (docs/LSQ.md)
    if (typeid(o) != typeid(detail::ImatrixMseObserver)) return {std::nullopt, none};
    return {Recipe{&m->search_config(), m}, ""};
  }
  return {std::nullopt, none};
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
  if (recipe->search) {
    // an imatrix search's weights (two axes, rows broadcast) always fit the device view:
    // the plan without them says the same
    const auto plan = kernels::cuda::cuda_search_plan(*flat, search_args_of(observer.args()), *recipe->search, nullptr);
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
  QOBS_CHECK(weight.numel() > 0, ShapeError, label, ": empty weight of shape ", shape_str(weight.shape), " (R6.1.2)");
  const FlatView flat = *flatten_in_place(weight, "weight", observer.args(), observer.options().label);
  const Recipe recipe = *recipe_of(observer).first;
  // R6.8.4 / R6.8.5 on the host, before the finiteness check as on the CPU (which runs
  // it after the search): the importance's errors and the column weights, uploaded for
  // the search to read
  std::optional<std::vector<float>> columns;
  if (recipe.imatrix) columns = recipe.imatrix->column_weights(flat);
  // the CPU observer's input check (check_observable): finite values only
  if (const int64_t i = kernels::cuda::first_non_finite(b, weight, s); i >= 0) {
    Tensor one = Tensor::uninitialized(weight.dtype, {1});
    b.copy(one.data(), static_cast<const unsigned char*>(weight.data) + weight.offset_of(i) * dtype_size(weight.dtype),
           dtype_size(weight.dtype), kernels::cuda::CopyKind::kDeviceToHost, s);
    b.synchronize(s);
    QOBS_THROW(InvalidArgument, label, ": non-finite value ", one.get(0), " at flat index ", i, " of shape ",
               shape_str(weight.shape),
               " (observed tensors must be finite: the reference would produce a NaN/Inf scale; docs/DEVIATIONS.md)");
  }
  auto impl = std::make_unique<DeviceStatistics::Impl>();
  impl->device = device;
  impl->shape = flat.layout.qparam_shape;
  impl->dtype = flat.dtype;
  const std::size_t bytes = static_cast<std::size_t>(flat.layout.num_qparams()) * dtype_size(flat.dtype);
  impl->mins = DeviceBuffer(b, bytes, s);
  impl->maxs = DeviceBuffer(b, bytes, s);
  if (recipe.search) {
    DeviceBuffer column_buffer;  // released on the stream, after the search has read it
    std::optional<FlatView> weights;
    if (columns) {
      const int64_t cols = static_cast<int64_t>(columns->size());
      column_buffer = DeviceBuffer(b, columns->size() * sizeof(float), s);
      b.copy(column_buffer.get(), columns->data(), columns->size() * sizeof(float),
             kernels::cuda::CopyKind::kHostToDevice, s);
      weights = recipe.imatrix->column_weights_view(column_buffer.get(), cols, flat);
    }
    const auto plan = kernels::cuda::cuda_search_plan(flat, search_args_of(observer.args()), *recipe.search,
                                                      weights ? &*weights : nullptr);
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
                                   global ? static_cast<const float*>(global_scale) : nullptr, scale, zero_point, false,
                                   s);
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
  return kernels::resolve_qdq_layout(op, x, s_dt, scale.shape, widens, zero_point != nullptr, args, nullptr, out_dtype,
                                     mode);
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
                const QuantizationArgs& args, const TensorView* global_scale, std::optional<DType> out_dtype, void* out,
                NumericMode mode, StreamHandle stream) {
  run_device_qdq(kernels::QdqOp::kDequantize, x_q, scale, zero_point, args, global_scale, out_dtype, out, mode, stream);
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
  kernels::cuda::pack_int_rows(b, static_cast<const int8_t*>(q.data), rows, cols, num_bits, static_cast<uint32_t*>(out),
                               label, Stream{stream});
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

// ---- activations ------------------------------------------------------------------

namespace {

using kernels::cuda::NonFiniteRecord;
using kernels::cuda::RunningOp;

/// How an activation observer folds a batch into its statistics (builtin_observers.cc).
struct ActivationRecipe {
  RunningOp op = RunningOp::kSet;  ///< after the first batch
  double c = 0.0;                  ///< kBlend: the averaging constant
  bool same_shape = false;         ///< a batch of statistics of another shape is a ShapeError
};

std::pair<std::optional<ActivationRecipe>, std::string> activation_recipe(const Observer& o) {
  if (o.is_weight_observer()) return {std::nullopt, "a weight observer (weights take observe_weight)"};
  if (dynamic_cast<const detail::MemorylessMinMaxObserver*>(&o)) return {ActivationRecipe{}, ""};
  if (dynamic_cast<const detail::StaticMinMaxObserver*>(&o))
    return {ActivationRecipe{RunningOp::kExtremes, 0.0, true}, ""};
  if (const auto* m = dynamic_cast<const detail::MovingAverageMinMaxObserver*>(&o)) {
    // R6.5.2: a constant of 1 takes each batch's statistics as they are
    const double c = m->averaging_constant();
    if (c == 1.0) return {ActivationRecipe{}, ""};
    return {ActivationRecipe{RunningOp::kBlend, c, true}, ""};
  }
  return {std::nullopt, "observer " + std::string(o.name()) + " has no device path for activations"};
}

bool device_float(DType dt) { return dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16; }

std::string label_of(const Observer& o) { return o.options().label.empty() ? o.base_name() : o.options().label; }

/// The observer's statistics `a` and `b`, if it holds both.
std::optional<std::pair<Tensor, Tensor>> host_pair(const Observer& o, std::string_view a, std::string_view b) {
  const Statistics st = o.export_statistics();
  const Tensor* x = st.find(a);
  const Tensor* y = st.find(b);
  if (!x || !y) return std::nullopt;
  return std::pair<Tensor, Tensor>{*x, *y};
}

/// The observer's statistics with `items` in place of those of the same names (the
/// reduce ops are not stored: the observer's sync table gives them on export).
void replace_statistics(Observer& o, std::vector<Statistic> items) {
  Statistics st = o.export_statistics();
  std::erase_if(st.items, [&](const Statistic& s) {
    return std::any_of(items.begin(), items.end(), [&](const Statistic& i) { return i.name == s.name; });
  });
  for (auto& i : items) st.items.push_back(std::move(i));
  o.import_statistics(st);
}

DeviceBuffer upload(const Backend& b, const Tensor& t, Stream s) {
  DeviceBuffer d(b, t.nbytes(), s);
  b.copy(d.get(), t.data(), t.nbytes(), kernels::cuda::CopyKind::kHostToDevice, s);
  return d;
}

Tensor download(const Backend& b, const void* p, DType dt, const Shape& shape, Stream s) {
  Tensor t = Tensor::uninitialized(dt, shape);
  b.copy(t.data(), p, t.nbytes(), kernels::cuda::CopyKind::kDeviceToHost, s);
  return t;
}

}  // namespace

struct ActivationStatistics::Impl {
  int device = -1;
  Shape shape;  ///< of the running statistics
  DType dtype = DType::kF32;
  bool have = false;       ///< running statistics exist on the device (whether a batch updated them or not)
  bool from_host = false;  ///< they began as the observer's own
  DeviceBuffer mins, maxs;
  DeviceBuffer record;  ///< a NonFiniteRecord
  int64_t batches = 0;
};

ActivationStatistics::ActivationStatistics() = default;
ActivationStatistics::~ActivationStatistics() = default;
ActivationStatistics::ActivationStatistics(ActivationStatistics&&) noexcept = default;
ActivationStatistics& ActivationStatistics::operator=(ActivationStatistics&&) noexcept = default;

bool ActivationStatistics::empty() const { return !impl_; }

std::string ActivationStatistics::unsupported(const Observer& observer, const TensorView& x) const {
  // what the observer and the batch's dtype decide first: they need no device to say
  auto [recipe, why] = activation_recipe(observer);
  if (!recipe) return why;
  if (!device_float(x.dtype))
    return "a " + std::string(dtype_name(x.dtype)) + " batch (the device path reads f32, bf16, f16)";
  if (!available()) return unavailable_reason();
  const auto flat = flatten_in_place(x, observer.base_name(), observer.args(), observer.options().label);
  if (!flat) return "a layout whose flattening needs a copy (block padding)";
  if (!kernels::cuda::flat_map_of(*flat)) return "a layout with more axes than the device view holds";
  if (x.dim() > kernels::cuda::kMaxAxes) return "a batch of more dimensions than the device view holds";
  const int device = kernels::cuda::require_backend().device_of(x.data);
  if (device < 0) return "a batch that is not in CUDA device memory";
  // the statistics so far: this object's, else the observer's own, which it continues
  std::optional<std::pair<Shape, DType>> so_far;
  if (impl_ && impl_->have) {
    if (impl_->device != device)
      return "a batch on CUDA device " + std::to_string(device) + " after statistics on device " +
             std::to_string(impl_->device);
    so_far = {impl_->shape, impl_->dtype};
  } else if (!impl_) {
    if (auto host = host_pair(observer, "min_vals", "max_vals")) so_far = {host->first.shape(), host->first.dtype()};
  }
  if (so_far) {
    if (so_far->second != x.dtype)
      return "a " + std::string(dtype_name(x.dtype)) + " batch after statistics of dtype " +
             std::string(dtype_name(so_far->second));
    if (!recipe->same_shape && so_far->first != flat->layout.qparam_shape)
      return "a batch whose statistics' shape " + shape_str(flat->layout.qparam_shape) + " differs from " +
             shape_str(so_far->first) + " so far";
  }
  return "";
}

void ActivationStatistics::observe(const Observer& observer, const TensorView& x, StreamHandle stream) {
  if (x.numel() == 0) return;  // R6.1.2-1
  const std::string label = label_of(observer);
  const std::string why = unsupported(observer, x);
  QOBS_CHECK(why.empty(), InvalidArgument, label, ": ", observer.name(), " on the device: ", why);
  const Backend& b = kernels::cuda::require_backend();
  const Stream s{stream};
  const int device = b.device_of(x.data);
  b.set_device(device);
  const FlatView flat = *flatten_in_place(x, observer.base_name(), observer.args(), observer.options().label);
  const ActivationRecipe recipe = *activation_recipe(observer).first;
  if (!impl_) {
    // the first batch continues the observer's statistics
    auto m = std::make_unique<Impl>();
    m->device = device;
    m->record = DeviceBuffer(b, sizeof(NonFiniteRecord), s);
    b.fill(m->record.get(), 0, sizeof(NonFiniteRecord), s);
    b.fill(&m->record.as<NonFiniteRecord>()->index, 0xFF, sizeof(unsigned long long), s);
    if (auto host = host_pair(observer, "min_vals", "max_vals")) {
      m->shape = host->first.shape();
      m->dtype = host->first.dtype();
      m->mins = upload(b, host->first, s);
      m->maxs = upload(b, host->second, s);
      m->have = m->from_host = true;
    }
    impl_ = std::move(m);
  }
  Impl& m = *impl_;
  const Shape& qs = flat.layout.qparam_shape;
  RunningOp op = recipe.op;
  if (m.have && recipe.same_shape)
    QOBS_CHECK(m.shape == qs, ShapeError, observer.name(), ": observation of qparam shape ", shape_str(qs),
               " does not match the running statistics ", shape_str(m.shape));
  if (!m.have) {
    op = RunningOp::kSet;
    m.shape = qs;
    m.dtype = flat.dtype;
    const std::size_t bytes = static_cast<std::size_t>(shape_numel(qs)) * dtype_size(flat.dtype);
    m.mins = DeviceBuffer(b, bytes, s);
    m.maxs = DeviceBuffer(b, bytes, s);
    m.have = true;
  }
  const int64_t n = flat.layout.num_qparams();
  const std::size_t bytes = static_cast<std::size_t>(n) * dtype_size(flat.dtype);
  DeviceBuffer bmin(b, bytes, s), bmax(b, bytes, s);
  kernels::cuda::minmax_stats(b, flat, flat.dtype, bmin.get(), bmax.get(), s);
  auto* record = m.record.as<NonFiniteRecord>();
  kernels::cuda::record_non_finite(b, bmin.get(), bmax.get(), flat.dtype, n, x, m.batches, record, s);
  kernels::cuda::running_minmax(b, bmin.get(), bmax.get(), flat.dtype, n, op, recipe.c, observer.options().mode,
                                m.mins.get(), m.maxs.get(), &record->state, s);
  ++m.batches;
}

void ActivationStatistics::store_into(Observer& observer, StreamHandle stream) {
  if (!impl_) return;
  const std::unique_ptr<Impl> m = std::move(impl_);  // empty from here, whatever happens
  const Backend& b = kernels::cuda::require_backend();
  const Stream s{stream};
  b.set_device(m->device);
  NonFiniteRecord record;
  b.copy(&record, m->record.get(), sizeof record, kernels::cuda::CopyKind::kDeviceToHost, s);
  std::optional<std::pair<Tensor, Tensor>> stats;
  if (m->have)
    stats = {download(b, m->mins.get(), m->dtype, m->shape, s), download(b, m->maxs.get(), m->dtype, m->shape, s)};
  b.synchronize(s);
  // the statistics are valid when they began as the observer's or a batch updated them
  const int64_t updated = record.state == 2 ? record.batch : m->batches;
  if (stats && (m->from_host || updated > 0))
    replace_statistics(observer, {{"min_vals", std::move(stats->first), ReduceOp::kMin},
                                  {"max_vals", std::move(stats->second), ReduceOp::kMax}});
  if (record.state == 2) {
    const Shape shape(record.shape, record.shape + record.ndim);
    QOBS_THROW(InvalidArgument, label_of(observer), ": non-finite value ", record.value, " at flat index ",
               static_cast<int64_t>(record.index), " of shape ", shape_str(shape), " in batch ", record.batch + 1,
               " of ", m->batches,
               " observed on the CUDA device (observed tensors must be finite: the reference "
               "would produce a NaN/Inf scale; docs/DEVIATIONS.md); the statistics are those before that batch");
  }
}

// ---- the imatrix hook ----------------------------------------------------------------

struct DeviceImportance::Impl {
  int device = -1;
  int64_t in_features = 0;
  DeviceBuffer sum;   ///< f32 (in_features)
  int64_t count = 0;  ///< rows, as importance_count
};

DeviceImportance::DeviceImportance() = default;
DeviceImportance::~DeviceImportance() = default;
DeviceImportance::DeviceImportance(DeviceImportance&&) noexcept = default;
DeviceImportance& DeviceImportance::operator=(DeviceImportance&&) noexcept = default;

bool DeviceImportance::empty() const { return !impl_; }

std::string DeviceImportance::unsupported(const Observer& observer, const TensorView& x) const {
  const auto* im = dynamic_cast<const detail::ImatrixMseObserver*>(&observer);
  if (!im) return "observer " + std::string(observer.name()) + " collects no importance";
  if (!im->attached() || (!impl_ && !host_pair(observer, "importance_sum", "importance_count")))
    return "the observer is not attached (it ignores its input)";
  if (!device_float(x.dtype))
    return "a " + std::string(dtype_name(x.dtype)) + " input (the device path reads f32, bf16, f16)";
  if (x.dim() < 2) return "an input of " + std::to_string(x.dim()) + " dimensions";
  if (!x.is_contiguous()) return "a non-contiguous input";
  if (!available()) return unavailable_reason();
  const int device = kernels::cuda::require_backend().device_of(x.data);
  if (device < 0) return "an input that is not in CUDA device memory";
  if (impl_ && impl_->device != device)
    return "an input on CUDA device " + std::to_string(device) + " after inputs on device " +
           std::to_string(impl_->device);
  return "";
}

void DeviceImportance::accumulate(const Observer& observer, const TensorView& x, StreamHandle stream) {
  const std::string why = unsupported(observer, x);
  QOBS_CHECK(why.empty(), InvalidArgument, label_of(observer), ": ", observer.name(),
             " importance on the device: ", why);
  const Backend& b = kernels::cuda::require_backend();
  const Stream s{stream};
  const int device = b.device_of(x.data);
  b.set_device(device);
  if (!impl_) {
    // the first batch continues the observer's statistic
    auto host = *host_pair(observer, "importance_sum", "importance_count");
    auto m = std::make_unique<Impl>();
    m->device = device;
    m->in_features = host.first.numel();
    m->sum = upload(b, host.first, s);
    m->count = static_cast<int64_t>(host.second.get(0));
    impl_ = std::move(m);
  }
  Impl& m = *impl_;
  const int64_t in = m.in_features;
  QOBS_CHECK(x.shape[x.dim() - 1] == in, InvalidArgument, observer.name(), ": input of shape ", shape_str(x.shape),
             " does not end in in_features ", in, " (R6.8.3)");
  kernels::cuda::add_importance(b, x, in, m.sum.as<float>(), s);
  m.count += x.numel() / in;
}

void DeviceImportance::store_into(Observer& observer, StreamHandle stream) {
  if (!impl_) return;
  const std::unique_ptr<Impl> m = std::move(impl_);
  const Backend& b = kernels::cuda::require_backend();
  const Stream s{stream};
  b.set_device(m->device);
  Tensor sum = download(b, m->sum.get(), DType::kF32, {m->in_features}, s);
  b.synchronize(s);
  Tensor count(DType::kI64, {});
  count.set(0, static_cast<double>(m->count));
  replace_statistics(observer, {{"importance_sum", std::move(sum), ReduceOp::kSum},
                                {"importance_count", std::move(count), ReduceOp::kSum}});
}

}  // namespace qobs::cuda
