// lsq_mse and imatrix_lsq (docs/LSQ.md).
#include "observers/lsq_observers.h"

#include "core/check.h"

namespace qobs::detail {

void keep_values(std::map<std::string, Tensor>& st, const FlatView& flat) {
  auto [mn, mx] = reduce_minmax(flat);
  st["min_vals"] = std::move(mn);
  st["max_vals"] = std::move(mx);
  st["lsq_values"] = flat.materialize();
}

FlatView kept_values_view(const std::map<std::string, Tensor>& st) {
  const auto it = st.find("lsq_values");
  QOBS_CHECK(it != st.end(), PreconditionError, "lsq observer: no observed values kept (docs/LSQ.md#L4)");
  // materialize() gives (num_obs, *qparam_shape, group_len), row-major
  const auto kept = std::make_shared<const Tensor>(it->second);
  FlatView v = flat_view_of_flattened(kept->view(), "lsq_values");
  v.owned = kept;
  return v;
}

ScaleZeroPoint lsq_qparams(const FlatView& flat, const QuantizationArgs& args, const kernels::LsqSearchConfig& cfg,
                           const FlatView* weights, const Tensor* global_scale) {
  const kernels::LsqSearchResult r = kernels::lsq_search(flat, args, cfg, weights, global_scale);
  Shape qs = flat.layout.qparam_shape;
  if (qs.empty()) qs = {1};  // R4.1 step 9
  return {Tensor::from_values(r.scale_dtype, qs, r.scale), Tensor::from_values(*args.zp_dtype, qs, r.zero_point)};
}

LsqObserver::LsqObserver(std::string base, QuantizationArgs args, ObserverOptions opt)
    : Observer(std::move(base), std::move(args), std::move(opt)) {
  QOBS_CHECK(args_.observer_kwargs.empty(), InvalidArgument, "lsq_mse: takes no observer_kwargs, got '",
             args_.observer_kwargs.begin()->first, "' (docs/LSQ.md#L1)");
}

void LsqObserver::update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const { keep_values(st, flat); }

ScaleZeroPoint LsqObserver::qparams_from_statistics(const Tensor* global_scale) {
  kernels::LsqSearchConfig cfg;
  cfg.mode = options_.mode;
  cfg.num_threads = options_.num_threads;
  return lsq_qparams(kept_values_view(state_), args_, cfg, nullptr, global_scale);
}

void ImatrixLsqObserver::update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const {
  keep_values(st, flat);
}

ScaleZeroPoint ImatrixLsqObserver::qparams_from_statistics(const Tensor* global_scale) {
  const FlatView flat = kept_values_view(state_);
  kernels::LsqSearchConfig cfg;
  cfg.weighted = true;
  cfg.mode = options_.mode;
  cfg.num_threads = options_.num_threads;
  const auto imp = validated_importance(flat);
  if (!imp) return lsq_qparams(flat, args_, cfg, nullptr, global_scale);  // R6.8.7 / Q8: w = 1
  const FlatView w = importance_weights(*imp, flat);
  return lsq_qparams(flat, args_, cfg, &w, global_scale);
}

}  // namespace qobs::detail
