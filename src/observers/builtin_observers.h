// The built-in observers of the reference registry (R6.2.2). Private: users reach them
// through load_observer().
#pragma once

#include <optional>

#include "kernels/kernels.h"
#include "qobs/observer.h"

namespace qobs::detail {

/// Per-qparam min/max of a flattened view as tensors of the view's dtype (R6.3.1).
/// R6.3.1's statistics of one observation; with `extremes`, also their least min and
/// greatest max where the kernel reads them as it writes (kernels::minmax_stats).
std::pair<Tensor, Tensor> reduce_minmax(const FlatView& flat,
                                        std::optional<kernels::StatisticsExtremes>* extremes = nullptr);
/// lerp(a, b, w) = a*(1-w) + b*w as three rounded ops in the tensor dtype (R6.5.2, Q30).
Tensor lerp_reference(const Tensor& a, const Tensor& b, double w, NumericMode mode);

class MemorylessMinMaxObserver : public Observer {
 public:
  MemorylessMinMaxObserver(std::string base, QuantizationArgs args, ObserverOptions opt)
      : Observer(std::move(base), std::move(args), std::move(opt)) {}
  std::string_view name() const override { return "memoryless_minmax"; }
  bool accepts_integer_input() const override { return true; }
  bool statistics_reveal_non_finite() const override { return true; }
  void update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const override;

 protected:
  bool update_state_with_extremes(const FlatView& flat, std::optional<std::pair<double, double>>& extremes) override;
};

class StaticMinMaxObserver : public Observer {
 public:
  StaticMinMaxObserver(std::string base, QuantizationArgs args, ObserverOptions opt)
      : Observer(std::move(base), std::move(args), std::move(opt)) {}
  std::string_view name() const override { return "static_minmax"; }
  bool accepts_integer_input() const override { return true; }
  bool statistics_reveal_non_finite() const override { return true; }
  void update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const override;
  std::vector<std::pair<std::string, ReduceOp>> sync_table() const override {
    return {{"min_vals", ReduceOp::kMin}, {"max_vals", ReduceOp::kMax}};
  }
};

class MovingAverageMinMaxObserver : public Observer {
 public:
  MovingAverageMinMaxObserver(std::string base, QuantizationArgs args, ObserverOptions opt);
  std::string_view name() const override { return "minmax"; }
  bool accepts_integer_input() const override { return true; }
  bool statistics_reveal_non_finite() const override { return true; }
  void update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const override;
  std::vector<std::pair<std::string, ReduceOp>> sync_table() const override {
    return {{"min_vals", ReduceOp::kAvg}, {"max_vals", ReduceOp::kAvg}};
  }
  double averaging_constant() const { return averaging_constant_; }

 private:
  double averaging_constant_;
};

/// memoryless_mse, mse and nvfp4_expanded_mse: one grid search, three defaults.
class MseObserver : public Observer {
 public:
  enum class Kind { kMemoryless, kMovingAverage, kNvfp4Expanded };
  MseObserver(Kind kind, std::string base, QuantizationArgs args, ObserverOptions opt);
  std::string_view name() const override;
  void update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const override;
  std::vector<std::pair<std::string, ReduceOp>> sync_table() const override;
  // a group holding NaN / Inf has a non-finite min or max, which no candidate improves
  // on, so the search returns it unchanged (GridSearchKernels.NonFiniteGroups...)
  bool statistics_reveal_non_finite() const override { return true; }
  const kernels::GridSearchConfig& search_config() const { return cfg_; }

 private:
  Kind kind_;
  kernels::GridSearchConfig cfg_;
  double averaging_constant_ = 0.01;
};

/// imatrix_mse and nvfp4_expanded_imatrix: one importance-weighted search, two sets of
/// defaults (R6.8, R6.12).
class ImatrixMseObserver : public Observer {
 public:
  enum class Kind { kImatrix, kNvfp4Expanded };
  ImatrixMseObserver(Kind kind, std::string base, QuantizationArgs args, ObserverOptions opt);
  std::string_view name() const override { return obs_name_; }
  bool statistics_reveal_non_finite() const override { return true; }  // as MseObserver
  void update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const override;
  std::vector<std::pair<std::string, ReduceOp>> sync_table() const override {
    return {{"importance_sum", ReduceOp::kSum}, {"importance_count", ReduceOp::kSum}};
  }
  const kernels::GridSearchConfig& search_config() const { return cfg_; }
  /// Whether attach() made the observer collect importance (until detach()).
  bool attached() const {
    const Lock held = lock();
    return attached_;
  }
  /// Which path the last search took ("importance" or "uniform fallback: <why>"), Q8.
  std::string last_path() const {
    const Lock held = lock();
    return last_path_;
  }
  /// R6.8.4 / R6.8.5 for the search of `flat` (the weight flattened for this observer):
  /// each column's weight imp / (mean(imp) + 2^-126) in f32, or nullopt for the uniform
  /// search of the Q8 fallback. Raises where update_state raises and records last_path()
  /// as it does; the device path (qobs/cuda.h) computes its weights here.
  std::optional<std::vector<float>> column_weights(const FlatView& flat) const;
  /// Column weights at `data` (one f32 per column, host or device memory: nothing is
  /// read) as the search of `flat` reads them: broadcast over the rows with row stride
  /// 0, so that no rows x cols tensor is materialized (64 MB at 4096^2), and flattened
  /// like the weight.
  FlatView column_weights_view(const void* data, int64_t cols, const FlatView& flat) const;

 protected:
  void attach_locked(int64_t in_features) override;
  void detach_locked() override { attached_ = false; }
  void accumulate_input_locked(const TensorView& x) override;
  /// imatrix_lsq shares the importance statistics and their checks under its own name;
  /// it accepts the `strict` kwarg only.
  ImatrixMseObserver(std::string_view obs_name, std::string base, QuantizationArgs args, ObserverOptions opt);
  /// R6.8.4: the validated per-column importance, or nullopt for the uniform fallback.
  std::optional<std::vector<float>> validated_importance(const FlatView& flat) const;
  /// R6.8.5: w = imp / (mean(imp) + 2^-126) broadcast over rows, flattened like `flat`
  /// (column_weights_view of host memory it owns).
  FlatView importance_weights(const std::vector<float>& imp, const FlatView& flat) const;

 private:
  Kind kind_;
  std::string obs_name_;
  kernels::GridSearchConfig cfg_;
  bool strict_ = false;
  bool attached_ = false;
  mutable std::string last_path_;
};

}  // namespace qobs::detail
