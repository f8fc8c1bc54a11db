// The observers of the reference registry (RULES §6.4-6.8, §6.12).
#include "observers/builtin_observers.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/arith.h"
#include "core/check.h"

namespace qobs::detail {

std::pair<Tensor, Tensor> reduce_minmax(const FlatView& flat, std::optional<kernels::StatisticsExtremes>* extremes) {
  if (extremes) extremes->reset();
  // Integer observations (min-max observers only) take the scalar path: exact for
  // |values| < 2^24, where every integer is a float.
  const bool fast = flat.dtype == DType::kF32 || flat.dtype == DType::kBF16 || flat.dtype == DType::kF16;
  if (fast) return kernels::minmax_stats(flat, 0, extremes);  // straight into the statistics tensors
  const int64_t nq = flat.layout.num_qparams();
  std::vector<float> mins(static_cast<std::size_t>(nq)), maxs(static_cast<std::size_t>(nq));
  kernels::ref::minmax(flat, mins.data(), maxs.data());
  const Shape& qs = flat.layout.qparam_shape;
  return {Tensor::from_floats(flat.dtype, qs, mins), Tensor::from_floats(flat.dtype, qs, maxs)};
}

Tensor lerp_reference(const Tensor& a, const Tensor& b, double w, NumericMode mode) {
  // Integer statistics become f32 at the first blend (R6.5.2).
  DType dt = promote_float_dtypes(a.dtype(), b.dtype());
  if (!is_floating(dt) || dt == DType::kF8E4M3) dt = DType::kF32;
  const Arith ar{dt, mode};
  Tensor out(dt, a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) out.set(i, ar.add(ar.mul(a.get(i), 1.0 - w), ar.mul(b.get(i), w)));
  return out;
}

namespace {

/// Validated observer kwargs (R6.7.1/R6.7.2/R6.8.1, plus the checks of docs/DEVIATIONS.md).
struct KwargReader {
  const ObserverKwargs& kw;
  std::string_view observer;
  std::set<std::string> allowed;

  double num(const std::string& k, double dflt) {
    allowed.insert(k);
    auto it = kw.find(k);
    if (it == kw.end()) return dflt;
    return kwarg_as_double(k, it->second);
  }
  bool flag(const std::string& k, bool dflt) {
    allowed.insert(k);
    auto it = kw.find(k);
    if (it == kw.end()) return dflt;
    if (const auto* b = std::get_if<bool>(&it->second)) return *b;
    if (const auto* i = std::get_if<int64_t>(&it->second)) return *i != 0;
    QOBS_THROW(InvalidArgument, observer, ": observer_kwargs['", k, "'] must be a boolean");
  }
  void reject_unknown() {
    for (const auto& [k, v] : kw) {
      if (allowed.count(k)) continue;
      std::string names;
      for (const auto& a : allowed) names += (names.empty() ? "" : ", ") + a;
      QOBS_THROW(InvalidArgument, observer, ": unknown observer_kwargs key '", k, "' (accepted: ", names,
                 "; R6.7.1/R6.8.1, docs/DEVIATIONS.md D9)");
    }
  }
};

int64_t as_count(std::string_view obs, const char* name, double v) {
  QOBS_CHECK(std::isfinite(v) && v == std::floor(v), InvalidArgument, obs, ": ", name, " must be an integer, got ", v);
  return static_cast<int64_t>(v);
}

void check_unit_interval(std::string_view obs, const char* name, double v, const char* rule) {
  QOBS_CHECK(std::isfinite(v) && v >= 0.0 && v <= 1.0, InvalidArgument, obs, ": ", name, " must be in [0, 1], got ", v,
             " (", rule, ")");
}

/// R6.6.2: search args drop scale_dtype for tensor_group (Q4).
QuantizationArgs search_args_for(const QuantizationArgs& args) {
  QuantizationArgs s = args;
  if (s.get_strategy() == Strategy::kTensorGroup) s.scale_dtype.reset();
  return s;
}

}  // namespace

void MemorylessMinMaxObserver::update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const {
  auto [mn, mx] = reduce_minmax(flat);
  st["min_vals"] = std::move(mn);
  st["max_vals"] = std::move(mx);
}

bool MemorylessMinMaxObserver::update_state_with_extremes(const FlatView& flat,
                                                          std::optional<std::pair<double, double>>& extremes) {
  auto [mn, mx] = reduce_minmax(flat, &extremes);
  state_["min_vals"] = std::move(mn);
  state_["max_vals"] = std::move(mx);
  return true;  // extremes_ stays nullopt where the kernel could not read them
}

void StaticMinMaxObserver::update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const {
  auto [mn, mx] = reduce_minmax(flat);
  auto old_mn = st.find("min_vals");
  auto old_mx = st.find("max_vals");
  if (old_mn != st.end() && old_mx != st.end()) {
    QOBS_CHECK(old_mn->second.shape() == mn.shape(), ShapeError, name(), ": observation of qparam shape ",
               shape_str(mn.shape()), " does not match the running statistics ", shape_str(old_mn->second.shape()));
    for (int64_t i = 0; i < mn.numel(); ++i) {
      mn.set(i, nan_min(mn.get(i), old_mn->second.get(i)));
      mx.set(i, nan_max(mx.get(i), old_mx->second.get(i)));
    }
  }
  st["min_vals"] = std::move(mn);
  st["max_vals"] = std::move(mx);
}

MovingAverageMinMaxObserver::MovingAverageMinMaxObserver(std::string base, QuantizationArgs args, ObserverOptions opt)
    : Observer(std::move(base), std::move(args), std::move(opt)) {
  KwargReader r{args_.observer_kwargs, "minmax", {}};
  averaging_constant_ = r.num("averaging_constant", 0.01);
  check_unit_interval("minmax", "averaging_constant", averaging_constant_, "R6.5.1");
  r.reject_unknown();
}

namespace {
/// R6.5.2 blend of a new (min, max) into running statistics.
void blend_into(std::map<std::string, Tensor>& st, Tensor mn, Tensor mx, double c, NumericMode mode,
                std::string_view observer) {
  auto old_mn = st.find("min_vals");
  auto old_mx = st.find("max_vals");
  if (old_mn != st.end() && old_mx != st.end() && c != 1.0) {
    QOBS_CHECK(old_mn->second.shape() == mn.shape(), ShapeError, observer, ": observation of qparam shape ",
               shape_str(mn.shape()), " does not match the running statistics ", shape_str(old_mn->second.shape()));
    mn = lerp_reference(old_mn->second, mn, c, mode);
    mx = lerp_reference(old_mx->second, mx, c, mode);
  }
  st["min_vals"] = std::move(mn);
  st["max_vals"] = std::move(mx);
}
}  // namespace

void MovingAverageMinMaxObserver::update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const {
  auto [mn, mx] = reduce_minmax(flat);
  blend_into(st, std::move(mn), std::move(mx), averaging_constant_, options_.mode, name());
}

MseObserver::MseObserver(Kind kind, std::string base, QuantizationArgs args, ObserverOptions opt)
    : Observer(std::move(base), std::move(args), std::move(opt)), kind_(kind) {
  const std::string obs(name());
  const bool nv = kind_ == Kind::kNvfp4Expanded;
  KwargReader r{args_.observer_kwargs, obs, {}};
  cfg_.maxshrink = r.num("maxshrink", nv ? 1.0 - 0.8 / 1.8 : 0.20);
  cfg_.patience = as_count(obs, "patience", r.num("patience", nv ? 1000 : 5));
  cfg_.grid = r.num("grid", nv ? 200.0 : 100.0);
  cfg_.norm = r.num("norm", 2.4);
  cfg_.expand = r.num("expand", nv ? 1.8 : 1.0);
  cfg_.chunk_size = as_count(obs, "chunk_size", r.num("chunk_size", 5));
  r.num("triton_error_buffer", 1.0);  // GPU-only early-stopping buffer: accepted, ignored on CPU (R6.6.8, A5)
  if (kind_ == Kind::kMovingAverage) {
    averaging_constant_ = r.num("averaging_constant", 0.01);
    check_unit_interval(obs, "averaging_constant", averaging_constant_, "R6.5.1");
  }
  r.reject_unknown();
  QOBS_CHECK(cfg_.chunk_size > 0, InvalidArgument, obs, ": chunk_size must be positive, got ", cfg_.chunk_size,
             " (R6.7.2)");
  // Q24: the reference `mse` does not check expand; qobs checks it for all three.
  QOBS_CHECK(cfg_.expand >= 1.0, InvalidArgument, obs, ": expand value must be at least 1.0, got ", cfg_.expand,
             " (R6.7.2)");
  check_unit_interval(obs, "maxshrink", cfg_.maxshrink, "R6.7.2, docs/DEVIATIONS.md");
  QOBS_CHECK(std::isfinite(cfg_.grid) && cfg_.grid > 0, InvalidArgument, obs, ": grid must be positive, got ",
             cfg_.grid, " (R6.7.2, docs/DEVIATIONS.md)");
  QOBS_CHECK(std::isfinite(cfg_.norm) && cfg_.norm > 0, InvalidArgument, obs,
             ": norm must be a finite positive number, got ", cfg_.norm, " (R6.7.2, docs/DEVIATIONS.md)");
  QOBS_CHECK(cfg_.patience >= 0, InvalidArgument, obs, ": patience must be >= 0, got ", cfg_.patience,
             " (R6.7.2, docs/DEVIATIONS.md)");
  cfg_.mode = options_.mode;
  cfg_.f32_errors = options_.f32_errors;
  cfg_.chunked = options_.chunked_search;
  cfg_.num_threads = options_.num_threads;
}

std::string_view MseObserver::name() const {
  switch (kind_) {
    case Kind::kMemoryless:
      return "memoryless_mse";
    case Kind::kMovingAverage:
      return "mse";
    case Kind::kNvfp4Expanded:
      return "nvfp4_expanded_mse";
  }
  return "";
}

std::vector<std::pair<std::string, ReduceOp>> MseObserver::sync_table() const {
  if (kind_ == Kind::kMovingAverage) return {{"min_vals", ReduceOp::kAvg}, {"max_vals", ReduceOp::kAvg}};
  return {};
}

void MseObserver::update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const {
  const kernels::GridSearchResult r = kernels::grid_search(flat, search_args_for(args_), cfg_);
  const Shape& qs = flat.layout.qparam_shape;
  Tensor mn = Tensor::from_floats(flat.dtype, qs, r.best_min), mx = Tensor::from_floats(flat.dtype, qs, r.best_max);
  if (kind_ == Kind::kMovingAverage) {
    blend_into(st, std::move(mn), std::move(mx), averaging_constant_, options_.mode, name());
  } else {
    st["min_vals"] = std::move(mn);
    st["max_vals"] = std::move(mx);
  }
}

ImatrixMseObserver::ImatrixMseObserver(std::string_view obs_name, std::string base, QuantizationArgs args,
                                       ObserverOptions opt)
    : Observer(std::move(base), std::move(args), std::move(opt)), kind_(Kind::kImatrix), obs_name_(obs_name) {
  KwargReader r{args_.observer_kwargs, obs_name_, {}};
  strict_ = r.flag("strict", false);
  r.reject_unknown();
}

ImatrixMseObserver::ImatrixMseObserver(Kind kind, std::string base, QuantizationArgs args, ObserverOptions opt)
    : Observer(std::move(base), std::move(args), std::move(opt)),
      kind_(kind),
      obs_name_(kind == Kind::kImatrix ? "imatrix_mse" : "nvfp4_expanded_imatrix") {
  const std::string obs(name());
  // R6.8.1 / R6.12.1: nvfp4_expanded_imatrix only changes the defaults
  const bool nv = kind_ == Kind::kNvfp4Expanded;
  KwargReader r{args_.observer_kwargs, obs, {}};
  cfg_.imatrix = true;
  cfg_.maxshrink = r.num("maxshrink", nv ? 1.0 - 0.8 / 1.8 : 0.95);
  const double patience = r.num("patience", nv ? 1000 : 5);
  cfg_.grid = r.num("grid", nv ? 200 : 20);
  cfg_.norm = r.num("norm", nv ? 2.4 : 3.0);
  cfg_.expand = r.num("expand", nv ? 1.8 : 1.0);
  strict_ = r.flag("strict", false);
  r.reject_unknown();
  // R6.8.1 validation
  QOBS_CHECK(std::isfinite(cfg_.grid) && cfg_.grid > 0, InvalidArgument, obs, ": grid must be positive, got ",
             cfg_.grid, " (R6.8.1)");
  QOBS_CHECK(std::isfinite(patience) && patience >= 0, InvalidArgument, obs, ": patience must be >= 0, got ", patience,
             " (R6.8.1)");
  cfg_.patience = as_count(obs, "patience", patience);
  check_unit_interval(obs, "maxshrink", cfg_.maxshrink, "R6.8.1");
  QOBS_CHECK(std::isfinite(cfg_.norm) && cfg_.norm > 0, InvalidArgument, obs,
             ": norm must be a finite positive number, got ", cfg_.norm, " (R6.8.1)");
  QOBS_CHECK(cfg_.expand >= 1.0, InvalidArgument, obs, ": expand value must be at least 1.0, got ", cfg_.expand,
             " (R6.8.1, docs/DEVIATIONS.md D7)");
  cfg_.mode = options_.mode;
  cfg_.num_threads = options_.num_threads;
}

void ImatrixMseObserver::attach_locked(int64_t in_features) {
  QOBS_CHECK(in_features > 0, InvalidArgument, name(), ".attach: in_features must be positive, got ", in_features,
             " (R6.8.3)");
  state_["importance_sum"] = Tensor(DType::kF32, {in_features});
  state_["importance_count"] = Tensor(DType::kI64, {});
  attached_ = true;
}

void ImatrixMseObserver::accumulate_input_locked(const TensorView& x) {
  if (!attached_) return;
  Tensor& sum = state_.at("importance_sum");
  Tensor& count = state_.at("importance_count");
  const int64_t in = sum.numel();
  if (x.dim() == 1) {
    // The reference reduces a 1-D input over all its elements and adds that total to
    // every channel, counting one token.
    double total = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float v = static_cast<float>(x.get(i));
      total += static_cast<double>(v * v);
    }
    for (int64_t c = 0; c < in; ++c) sum.set(c, static_cast<float>(sum.get(c) + static_cast<float>(total)));
    count.set(0, count.get(0) + 1.0);
    return;
  }
  QOBS_CHECK(x.dim() >= 1 && x.shape[x.dim() - 1] == in, InvalidArgument, name(), ": input of shape ",
             shape_str(x.shape), " does not end in in_features ", in, " (R6.8.3)");
  const int64_t rows = x.numel() / in;
  // sum += sum over all but the last dim of x^2, each square in f32 (x converted to
  // f32 first), summed per feature in f64 and rounded once (A2)
  std::vector<double> acc(static_cast<std::size_t>(in), 0.0);
  kernels::sum_squares_by_column(x, in, acc.data(), options_.num_threads);
  for (int64_t c = 0; c < in; ++c)
    sum.set(c,
            static_cast<float>(sum.get(c) + static_cast<double>(static_cast<float>(acc[static_cast<std::size_t>(c)]))));
  count.set(0, count.get(0) + static_cast<double>(rows));
}

std::optional<std::vector<float>> ImatrixMseObserver::validated_importance(const FlatView& flat) const {
  const std::string obs(name());
  auto fail = [&](auto error, const std::string& why) -> std::optional<std::vector<float>> {
    if (strict_) throw error;
    last_path_ = "uniform fallback: " + why;
    return std::nullopt;
  };
  if (base_name_ != "weight")
    return fail(NotImplementedError(obs + " is only supported for weight observers (R6.8.4-1)"),
                "only supported for weight observers");
  const Strategy st = args_.get_strategy();
  if (st == Strategy::kTensor)
    return fail(NotImplementedError(obs + " does not support the TENSOR strategy (R6.8.4-2)"),
                "TENSOR strategy not supported");
  auto sit = state_.find("importance_sum");
  auto cit = state_.find("importance_count");
  if (sit == state_.end() || cit == state_.end())
    return fail(InvalidArgument(obs + ": no importance data available (R6.8.4-3)"), "no importance data available");
  // R6.12.3 (D15): attached to a module that no input reached -- a data-free run. The
  // reference falls back to the uniform search with a log line; a weight calibrated
  // without the importance its recipe asked for is an error here, strict or not.
  QOBS_CHECK(cit->second.get(0) != 0, InvalidArgument, obs, ": no importance data available for ",
             options_.label.empty() ? std::string("its weight") : "'" + options_.label + "'",
             ": the observer was attached to a module with in_features ", sit->second.numel(),
             " but no input reached it (importance_count 0), so the weight would be calibrated without importance. "
             "Run calibration with data: in llm-compressor pass a dataset to oneshot and "
             "QuantizationModifier(requires_calibration_data=True), which it infers only for its own imatrix observer "
             "names; with qobs directly, feed the module's inputs to accumulate_input before observing the weight "
             "(R6.12.3, docs/DEVIATIONS.md D15)");
  const Tensor& sum = sit->second;
  const double count = cit->second.get(0);
  std::vector<float> imp(static_cast<std::size_t>(sum.numel()));
  bool all_zero = true;
  for (int64_t i = 0; i < sum.numel(); ++i) {
    const float v = static_cast<float>(sum.get(i)) / static_cast<float>(count);
    if (!std::isfinite(v))
      return fail(InvalidArgument(
                      detail::concat(obs, ": importance has a non-finite value ", v, " at index ", i, " (R6.8.4-4)")),
                  "contains non-finite values");
    if (v < 0)
      return fail(
          InvalidArgument(detail::concat(obs, ": importance has a negative value ", v, " at index ", i, " (R6.8.4-4)")),
          "contains negative values");
    all_zero = all_zero && v == 0;
    imp[static_cast<std::size_t>(i)] = v;
  }
  if (all_zero) return fail(InvalidArgument(obs + ": importance is all zeros (R6.8.4-4)"), "all zeros");
  int64_t expected = 0;
  const Shape fs = flat.layout.flat_shape();
  if (st == Strategy::kChannel) expected = fs.back();
  else if (st == Strategy::kGroup || st == Strategy::kTensorGroup) expected = fs[2] * fs[3];
  else
    return fail(NotImplementedError(detail::concat(obs, ": unsupported strategy ", to_string(st), " (R6.8.4-5)")),
                detail::concat("unsupported strategy ", to_string(st)));
  if (static_cast<int64_t>(imp.size()) != expected)
    return fail(InvalidArgument(detail::concat(obs, ": importance size mismatch: ", imp.size(), " values for ",
                                               expected, " columns (R6.8.4-6)")),
                detail::concat("size mismatch: expected ", expected, ", got ", imp.size()));
  last_path_ = "importance";
  return imp;
}

namespace {

/// R6.8.5: imp / (mean(imp) + 2^-126), the mean summed in f64 and rounded to f32 once.
std::vector<float> weights_of_importance(const std::vector<float>& imp) {
  double mean_acc = 0;
  for (float v : imp) mean_acc += v;
  const float mean = static_cast<float>(mean_acc) / static_cast<float>(imp.size());
  const float denom = mean + std::ldexp(1.0f, -126);
  std::vector<float> w(imp.size());
  for (std::size_t c = 0; c < imp.size(); ++c) w[c] = imp[c] / denom;
  return w;
}

}  // namespace

std::optional<std::vector<float>> ImatrixMseObserver::column_weights(const FlatView& flat) const {
  const Lock held = lock();
  const auto imp = validated_importance(flat);
  if (!imp) return std::nullopt;
  return weights_of_importance(*imp);
}

FlatView ImatrixMseObserver::column_weights_view(const void* data, int64_t cols, const FlatView& flat) const {
  const int64_t rows = flat.layout.num_qparams() * flat.layout.group_len() / cols;
  const TensorView broadcast(data, DType::kF32, Shape{rows, cols}, Shape{0, 1});
  // the strategies R6.8.4 searches with importance (channel, group, tensor_group)
  // flatten a weight without a copy
  auto w = flatten_in_place(broadcast, "weight", args_);
  QOBS_CHECK(w.has_value(), PreconditionError, name(), ": the importance weights of strategy ",
             to_string(args_.get_strategy()), " need a copy to flatten (R6.8.5)");
  return *w;
}

FlatView ImatrixMseObserver::importance_weights(const std::vector<float>& imp, const FlatView& flat) const {
  const std::vector<float> w = weights_of_importance(imp);
  const int64_t cols = static_cast<int64_t>(w.size());
  auto wt = std::make_shared<Tensor>(DType::kF32, Shape{cols});
  std::copy(w.begin(), w.end(), wt->data_as<float>());
  FlatView view = column_weights_view(wt->data(), cols, flat);
  view.owned = wt;
  return view;
}

void ImatrixMseObserver::update_state(std::map<std::string, Tensor>& st, const FlatView& flat) const {
  const auto imp = validated_importance(flat);
  const QuantizationArgs sargs = search_args_for(args_);
  kernels::GridSearchResult r;
  if (!imp) {
    // R6.8.7 / Q8: the same imatrix search with w = 1
    r = kernels::grid_search(flat, sargs, cfg_, nullptr);
  } else {
    const FlatView w = importance_weights(*imp, flat);
    r = kernels::grid_search(flat, sargs, cfg_, &w);
  }
  const Shape& qs = flat.layout.qparam_shape;
  st["min_vals"] = Tensor::from_floats(flat.dtype, qs, r.best_min);
  st["max_vals"] = Tensor::from_floats(flat.dtype, qs, r.best_max);
}

}  // namespace qobs::detail
