// qobs's least-squares observers lsq_mse and imatrix_lsq (docs/LSQ.md): opt-in
// observers beside the reference's, never chosen by default.
#pragma once

#include "observers/builtin_observers.h"

namespace qobs::detail {

/// Keeps the observed values (and min-max statistics, so that has_statistics and the
/// fused global scale behave as memoryless_minmax's, docs/LSQ.md#L4) and searches in
/// phase 2, where the fused global scale is known.
class LsqObserver : public Observer {
 public:
  LsqObserver(std::string base, QuantizationArgs args, ObserverOptions opt);
  std::string_view name() const override { return "lsq_mse"; }
  void update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const override;

 protected:
  ScaleZeroPoint qparams_from_statistics(const Tensor* global_scale) override;
};

class ImatrixLsqObserver : public ImatrixMseObserver {
 public:
  ImatrixLsqObserver(std::string base, QuantizationArgs args, ObserverOptions opt)
      : ImatrixMseObserver("imatrix_lsq", std::move(base), std::move(args), std::move(opt)) {}
  void update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const override;
  /// Statistics merged across processes: the importance sums only (the values are the
  /// weight itself, identical on every rank).
  std::vector<std::pair<std::string, ReduceOp>> sync_table() const override {
    return {{"importance_sum", ReduceOp::kSum}, {"importance_count", ReduceOp::kSum}};
  }

 protected:
  ScaleZeroPoint qparams_from_statistics(const Tensor* global_scale) override;
};

/// min_vals / max_vals and the values of one observation (the lsq observers' state).
void keep_values(std::map<std::string, Tensor>& st, const FlatView& flat);
/// The stored values as the flattened view they were observed as.
FlatView kept_values_view(const std::map<std::string, Tensor>& st);
/// lsq_search's stored values as calculate_qparams-shaped tensors (R4.1 result, step 9).
ScaleZeroPoint lsq_qparams(const FlatView& flat, const QuantizationArgs& args, const kernels::LsqSearchConfig& cfg,
                           const FlatView* weights, const Tensor* global_scale);

}  // namespace qobs::detail
