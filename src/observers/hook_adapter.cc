// The generation-2 adapter (R7.4.1): llm-compressor's min / max hooks and one-call
// observer over a registered observer's update rule, with two statistic tracks.
#include <map>
#include <span>
#include <string>
#include <utility>

#include "core/check.h"
#include "kernels/kernels.h"
#include "observers/observable.h"
#include "qobs/observer.h"

namespace qobs {

using detail::check_observable;

MinMaxHookAdapter::MinMaxHookAdapter(std::string_view observer_name, std::string_view base_name,
                                     const QuantizationArgs& args, const ObserverKwargs& kwargs,
                                     const ObserverOptions& options)
    : observer_(load_observer(observer_name, base_name, args, kwargs, options)) {}

namespace {
std::pair<Tensor, Tensor> track_result(const std::map<std::string, Tensor>& t) {
  return {t.at("min_vals"), t.at("max_vals")};
}
}  // namespace

std::pair<Tensor, Tensor> MinMaxHookAdapter::get_min_max(const FlatView& flat) {
  observer_->update_state(qparam_track_, flat);
  return track_result(qparam_track_);
}

std::pair<Tensor, Tensor> MinMaxHookAdapter::get_global_min_max(const FlatView& flat) {
  observer_->update_state(global_track_, flat);
  return track_result(global_track_);
}

ScaleZeroPoint MinMaxHookAdapter::forward(const TensorView& value, std::span<const int32_t> g_idx) {
  const QuantizationArgs& a = observer_->args();
  QOBS_CHECK(!(a.get_strategy() == Strategy::kTensorGroup && !global_scale_), InvalidArgument,
             "Cannot compute scale and zero points without first computing global scale (R7.2.3)");
  check_observable(value, observer_->options().label.empty() ? observer_->base_name() : observer_->options().label,
                   observer_->accepts_integer_input());
  const FlatView flat = flatten_for_calibration(value, observer_->base_name(), a, g_idx, observer_->options().label);
  auto [mn, mx] = get_min_max(flat);
  return kernels::calculate_qparams(mn, mx, a, global_scale_ ? &*global_scale_ : nullptr, observer_->options().mode,
                                    observer_->options().num_threads);
}

Tensor MinMaxHookAdapter::get_global_scale(const TensorView& value) {
  check_observable(value, observer_->options().label.empty() ? observer_->base_name() : observer_->options().label,
                   observer_->accepts_integer_input());
  const Tensor contiguous = Tensor::copy_of(value);
  FlatView flat;
  flat.data = contiguous.data();
  flat.dtype = contiguous.dtype();
  flat.layout.qparam_shape = {1};
  flat.layout.qparam_axes = {{1, 0}};
  flat.layout.group_axes = {{contiguous.numel(), 1}};
  auto [mn, mx] = get_global_min_max(flat);
  return generate_gparam(mn, mx, observer_->options().mode);
}

}  // namespace qobs
