// Observers (RULES §6): two-phase calibration (observe any number of times, then
// get_qparams), the registry, fusion of sibling weights, mergeable statistics, and the
// generation-2 compatibility adapter (§7).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qobs/args.h"
#include "qobs/layout.h"
#include "qobs/numeric.h"
#include "qobs/qparams.h"
#include "qobs/tensor.h"

namespace qobs {

/// The reduce operation with which a statistic is combined across processes (R6.11.1).
enum class ReduceOp : uint8_t { kMin, kMax, kAvg, kSum };
std::string_view to_string(ReduceOp op);

/// One named statistic.
struct Statistic {
  std::string name;
  Tensor value;
  ReduceOp reduce;
};

/// An observer's exportable statistics. `contributions` counts how many observers'
/// statistics were combined, so that repeated pairwise AVG merges give the mean over all.
struct Statistics {
  std::string observer;  ///< registry name
  std::vector<Statistic> items;
  int64_t contributions = 1;

  const Tensor* find(std::string_view name) const;
  bool empty() const { return items.empty(); }
  /// Self-describing little-endian byte encoding ("QOBSSTAT" magic, version 1).
  std::vector<uint8_t> serialize() const;
  /// Inverse of serialize; IoError on corrupt or truncated input.
  static Statistics deserialize(std::span<const uint8_t> bytes);
};

/// All-reduce emulation: combines the statistics of every rank with each statistic's
/// reduce op (MIN, MAX, SUM; AVG = sum over ranks divided by their number, in the
/// statistic's dtype as a collective does). Statistics absent from some rank are an
/// error (the reference skips absent statistics per rank only when absent everywhere).
Statistics reduce_statistics(std::span<const Statistics> ranks);

/// Result of phase 2.
struct QParams {
  Tensor scale;
  Tensor zero_point;
  std::optional<Tensor> global_scale;
};

/// Options that are not observer_kwargs of the reference.
struct ObserverOptions {
  NumericMode mode = NumericMode::kParity;
  /// Names the observed tensor in error messages ("model.layers.0.mlp.up_proj.weight").
  std::string label;
  /// Q3 option: accumulate and compare MSE errors in f32 instead of the observed dtype.
  bool f32_errors = false;
  /// R6.6.7 chunked grid search (the reference's "compile" path) instead of eager.
  bool chunked_search = false;
  /// Threads for the grid-search kernels: 0 = QOBS_NUM_THREADS or the hardware
  /// concurrency. Results never depend on it.
  int num_threads = 0;
};

/// An observer.
///
/// Thread safety: any member may be called from any thread at any time. Every call that
/// reads or changes statistics, the bound weight, the importance hooks or fusion holds
/// the observer's lock, which all observers ever fused together (fuse_observers) share:
/// calls on one observer, or on the observers of one fused group, run one at a time, in
/// some order, and calls on unrelated observers run in parallel. name(), base_name(),
/// args(), options(), the const rules (sync_table, update_state, ...) and
/// grid_candidates read only what never changes after construction. So concurrent
/// observe() calls on one static_minmax observer give the statistics of all the
/// observations, in any order; that a get_qparams() sees a given observe() is up to the
/// caller's ordering. A subclass's hooks (update_state_with_extremes,
/// qparams_from_statistics, on_statistics_deleted, attach_locked, detach_locked,
/// accumulate_input_locked) run with the lock held; the lock is recursive, so they may
/// call public members. The memory of a bound weight must not change while observed.
/// MinMaxHookAdapter is not thread-safe: one thread per adapter.
class Observer : public std::enable_shared_from_this<Observer> {
 public:
  virtual ~Observer();

  /// Registry name of this observer ("memoryless_mse", ...).
  virtual std::string_view name() const = 0;
  const std::string& base_name() const { return base_name_; }
  const QuantizationArgs& args() const { return args_; }
  const ObserverOptions& options() const { return options_; }
  bool is_weight_observer() const { return base_name_ == "weight"; }

  /// Phase 1 (R6.1.2). Empty tensors are ignored; a weight observer that already has
  /// statistics ignores further observations (Q27). NaN/Inf input -> InvalidArgument
  /// naming the tensor ("non-finite").
  Observer& observe(const TensorView& value);
  /// Phase 1 on a value that is flattened already, shape (num_observations,
  /// *qparam_shape, group_size) as flatten_for_calibration returns it (R3.1):
  /// llm-compressor's update_statistics_from_observed, which its forward calls after
  /// R6.1.2's empty-value and weight-once rules, so neither applies here (a weight
  /// observer's statistics are replaced, as the reference's are), nor the fused
  /// members' update of forward. Non-finite input -> InvalidArgument as in observe;
  /// an empty value, rank below 2, or a last dim that is not the group size (group,
  /// tensor_group) or the block's area (block) -> ShapeError naming the tensor.
  Observer& observe_flattened(const TensorView& flattened);
  /// Phase 1 on an already flattened view (no empty / weight-once rules).
  void observe_flat(const FlatView& flat);

  /// R6.1.3.
  bool has_statistics() const;
  /// R6.1.6: the named statistics (PreconditionError when absent).
  std::vector<std::pair<std::string, Tensor>> get_statistics() const;
  /// R6.1.4 phase 2: computes qparams and consumes the statistics (cooperatively for
  /// fused observers, R6.10.4). PreconditionError "No statistics" when absent.
  QParams get_qparams();
  /// R6.1.5: the (fused) global scale for tensor_group, std::nullopt otherwise.
  std::optional<Tensor> get_global_scale();
  /// R6.10.4 cooperative deletion (cooperative = false deletes own statistics at once).
  void delete_statistics(bool cooperative = true);

  /// Mergeable statistics: export, import (replace) and merge (combine with this
  /// observer's statistics using each statistic's reduce op; see reduce_statistics).
  Statistics export_statistics() const;
  void import_statistics(const Statistics& stats);
  void merge_statistics(const Statistics& other);
  /// The reduce op of each statistic this observer syncs (R6.11.1); empty for
  /// memoryless observers.
  virtual std::vector<std::pair<std::string, ReduceOp>> sync_table() const { return {}; }

  /// Binds the module weight this observer calibrates, used when a fused partner needs
  /// this observer's statistics before it observed (R6.10.3). The memory must outlive
  /// the observer or be re-bound.
  void bind_weight(const TensorView& weight);
  void unbind_weight();

  /// Whether integer tensors may be observed (R6.3.1: min-max statistics of integer
  /// inputs stay integer until blended). MSE observers take float tensors only.
  virtual bool accepts_integer_input() const { return false; }

  /// True when a NaN or +-Inf anywhere in an observation always shows in the updated
  /// statistics (min / max propagate both, and the MSE searches return a non-finite
  /// group range unchanged), so observe() checks the small statistics
  /// afterwards instead of scanning the whole input first -- one pass over the data
  /// instead of two. A non-finite result restores the previous statistics and locates
  /// the offending element for the error.
  virtual bool statistics_reveal_non_finite() const { return false; }

  /// Importance hooks (R6.1.7). Only the importance-weighted observers accumulate;
  /// others ignore them.
  void attach(int64_t in_features);
  void detach();
  /// The pre-forward hook's work (R6.8.3): accumulate x^2 of one input batch.
  void accumulate_input(const TensorView& x);

  /// Partners of a fused group (R6.10), excluding this observer.
  std::vector<std::shared_ptr<Observer>> fused_partners() const;

  /// The generation-2 update rule (R7.4.1): the statistics after one observation of
  /// `flat` starting from `state` (min_vals / max_vals entries; empty = none).
  virtual void update_state(std::map<std::string, Tensor>& state, const FlatView& flat) const = 0;

 protected:
  Observer(std::string base_name, QuantizationArgs args, ObserverOptions options);

  /// This observer's lock (see the class comment), held for the Lock's lifetime.
  class [[nodiscard]] Lock {
   private:
    friend class Observer;
    struct Group;
    std::shared_ptr<Group> group_;  // declared first: outlives the lock on its mutex
    std::unique_lock<std::recursive_mutex> lock_;
  };
  /// Waits for and takes the lock. A subclass takes it to read state that its hooks
  /// change (the public members take it themselves).
  Lock lock() const;

  /// The importance hooks' work, run with the lock held.
  virtual void attach_locked(int64_t in_features) {}
  virtual void detach_locked() {}
  virtual void accumulate_input_locked(const TensorView& x) {}

  /// Statistic names that must all exist for has_statistics() (R6.1.3).
  virtual std::vector<std::string> statistic_names() const { return {"min_vals", "max_vals"}; }
  /// observe_flat for an observer whose kernel can also report, as it writes min_vals
  /// and max_vals, their least min and greatest max (both NaN when either holds a NaN),
  /// sparing phase 1's finiteness check and R6.1.5's global amax a pass over the
  /// statistics each. Returns true when it has updated the state, with `extremes` set
  /// where the kernel read them and left nullopt where it could not; false (the
  /// default) leaves the state to update_state.
  virtual bool update_state_with_extremes(const FlatView& flat, std::optional<std::pair<double, double>>& extremes) {
    return false;
  }
  /// Phase 2's qparams from this observer's statistics with the (fused) global scale
  /// (R6.1.4 step 3): calculate_qparams of min_vals / max_vals. The least-squares
  /// observers search the stored values here instead (docs/LSQ.md).
  virtual ScaleZeroPoint qparams_from_statistics(const Tensor* global_scale);
  /// Called by get_qparams after the qparams are computed, before deletion.
  virtual void on_statistics_deleted() {}

  std::map<std::string, Tensor> state_;
  std::string base_name_;
  QuantizationArgs args_;
  ObserverOptions options_;

 private:
  /// The name errors give the observed tensor: the caller's label, else the base name.
  const std::string& tensor_label() const { return options_.label.empty() ? base_name_ : options_.label; }
  friend void fuse_observers(const std::vector<std::shared_ptr<Observer>>& group);
  /// Holds the lock groups of all `observers` at once (taken in address order, so that
  /// two threads holding several never wait on each other).
  static std::vector<Lock> lock_all(const std::vector<std::shared_ptr<Observer>>& observers);
  /// Moves `fused` and every observer sharing a group `held` holds into one new group;
  /// call while holding them, so that their waiters retry on the new group.
  static void merge_lock_groups(const std::vector<Lock>& held, const std::vector<std::shared_ptr<Observer>>& fused);
  void observe_bound_weight();
  /// Phase 1 around `flatten`, which makes the value's FlatView; `forward`: observe's
  /// R6.1.2 rules (empty values, weight once, fused members) around it.
  Observer& observe_with(const TensorView& value, const std::function<FlatView()>& flatten, bool forward);
  std::vector<std::shared_ptr<Observer>> fused_statistics_members();
  bool statistics_finite() const;
  /// update_state_with_extremes' report on the statistics in state_, valid until the
  /// state changes otherwise (every such change resets it).
  std::optional<std::pair<double, double>> extremes_;

  /// The lock group this observer belongs to; replaced (under group_mu_) when a fusion
  /// merges groups, while the old groups are held.
  std::shared_ptr<Lock::Group> group() const;
  mutable std::mutex group_mu_;
  std::shared_ptr<Lock::Group> group_;

  TensorView bound_weight_;
  bool has_bound_weight_ = false;
  std::vector<std::weak_ptr<Observer>> partners_;
  bool done_ = false;
  int64_t contributions_ = 1;
};

/// Factory signature of the registry: (base_name, validated args with kwargs merged,
/// options) -> observer.
using ObserverFactory = std::function<std::shared_ptr<Observer>(
    const std::string& base_name, const QuantizationArgs& args, const ObserverOptions& options)>;

/// R6.2.1 name normalization: lower-case, '_' and ' ' -> '-'.
std::string normalize_observer_name(std::string_view name);

/// Registers a user observer under `name`. Replacing a built-in name -> InvalidArgument.
void register_observer(std::string_view name, ObserverFactory factory);
/// Names of all registered observers, built-ins first, in registry spelling.
std::vector<std::string> registered_observers();

/// Observer.load_from_registry(name, base_name=, args=, **kwargs): `kwargs` are merged
/// into a copy of args.observer_kwargs (the reference mutates the shared args, Q25; qobs
/// copies). Invalid kwargs -> InvalidArgument; unknown name -> UnknownName.
std::shared_ptr<Observer> load_observer(std::string_view name, std::string_view base_name, const QuantizationArgs& args,
                                        const ObserverKwargs& kwargs = {}, const ObserverOptions& options = {});

/// True for the observers whose weight search is weighted by input importance
/// (imatrix_mse, nvfp4_expanded_imatrix; any spelling R6.2.1 accepts): they need
/// calibration data (R1.6.2, R6.12.3).
bool observer_needs_importance(std::string_view name);

/// R6.9.1: the observer name used for `base_name` during calibration (weights replace
/// static_minmax/minmax by memoryless_minmax and mse by memoryless_mse).
std::string calibration_observer_name(std::string_view base_name, std::string_view name);

/// R6.10.2: links tensor_group weight observers of sibling layers so that they share
/// one global scale. Null entries are skipped. If no member is tensor_group, nothing
/// happens; a mix -> PreconditionError ("non-TENSOR_GROUP").
void fuse_observers(const std::vector<std::shared_ptr<Observer>>& group);

/// R6.10.1 FUSED_LAYER_NAMES, in order.
const std::vector<std::vector<std::string>>& fused_layer_names();

/// The candidate shrink factors p_i the grid search of an MSE observer evaluates
/// (Q1/Q2 debugging aid). Empty for non-MSE observers.
std::vector<double> grid_candidates(const Observer& observer);

/// For the importance-weighted observers (imatrix_mse, nvfp4_expanded_imatrix,
/// imatrix_lsq): how the last search weighted its errors, "importance", or
/// "uniform fallback: <reason>" when the importance could not be used and the search
/// ran unweighted as the reference's does (Q8; <reason> in the reference's words, e.g.
/// "TENSOR strategy not supported"). Empty before a search and for other observers.
std::string imatrix_search_path(const Observer& observer);

/// Generation-2 adapter (R7.4.1): min/max hooks and a one-call observer returning
/// (scale, zero_point). Two independent statistic tracks, one for the qparam path and
/// one for the global-scale path; statistics are never consumed.
class MinMaxHookAdapter {
 public:
  MinMaxHookAdapter(std::string_view observer_name, std::string_view base_name, const QuantizationArgs& args,
                    const ObserverKwargs& kwargs = {}, const ObserverOptions& options = {});

  /// Advances the qparam track with one flattened observation; returns (min, max).
  std::pair<Tensor, Tensor> get_min_max(const FlatView& flat);
  /// Advances the global track; returns (min, max) of shape (1,).
  std::pair<Tensor, Tensor> get_global_min_max(const FlatView& flat);
  /// flatten (with optional g_idx reordering), advance the qparam track, and
  /// calculate_qparams with the bound global scale.
  ScaleZeroPoint forward(const TensorView& value, std::span<const int32_t> g_idx = {});
  /// View as (1, 1, numel), advance the global track, generate_gparam.
  Tensor get_global_scale(const TensorView& value);
  /// Binds the global scale used by forward (the module's <base>_global_scale).
  void set_global_scale(std::optional<Tensor> g) { global_scale_ = std::move(g); }
  const Observer& observer() const { return *observer_; }

 private:
  std::shared_ptr<Observer> observer_;
  std::map<std::string, Tensor> qparam_track_;
  std::map<std::string, Tensor> global_track_;
  std::optional<Tensor> global_scale_;
};

}  // namespace qobs
