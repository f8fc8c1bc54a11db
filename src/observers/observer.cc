// The Observer base: its lock, the two-phase contract (R6.1: observe, then get_qparams
// with the fused global scale), cooperative deletion and fusion (R6.10). Statistics
// export / merge / serialization are statistics.cc, the registry registry.cc, the
// generation-2 adapter hook_adapter.cc.
#include "qobs/observer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <mutex>

#include "core/arith.h"
#include "core/check.h"
#include "kernels/kernels.h"
#include "observers/observable.h"

namespace qobs {

using detail::check_observable;
using detail::check_observable_dtype;

// ---- the lock (see the thread-safety contract in qobs/observer.h) -------------------------

struct Observer::Lock::Group {
  std::recursive_mutex mu;
  /// Every observer sharing this group, recorded when a fusion merges groups; a group
  /// never merged belongs to the one observer that made it and lists nobody.
  std::vector<std::weak_ptr<Observer>> members;
};

Observer::Observer(std::string base_name, QuantizationArgs args, ObserverOptions options)
    : base_name_(std::move(base_name)),
      args_(std::move(args)),
      options_(std::move(options)),
      group_(std::make_shared<Lock::Group>()) {
  QOBS_CHECK(base_name_ == "weight" || is_activation_base_name(base_name_), InvalidArgument, "unknown base_name '",
             base_name_, "': expected weight, input, output, q, k or v (R3.1)");
  if (!args_.strategy) args_ = args_.validated();
}

Observer::~Observer() = default;

std::shared_ptr<Observer::Lock::Group> Observer::group() const {
  std::lock_guard<std::mutex> g(group_mu_);
  return group_;
}

Observer::Lock Observer::lock() const {
  for (;;) {
    Lock l;
    l.group_ = group();
    l.lock_ = std::unique_lock<std::recursive_mutex>(l.group_->mu);
    if (group() == l.group_) return l;  // else a fusion moved this observer on while it waited: retry
  }
}

std::vector<Observer::Lock> Observer::lock_all(const std::vector<std::shared_ptr<Observer>>& observers) {
  for (;;) {
    std::vector<std::shared_ptr<Lock::Group>> groups;
    for (const auto& o : observers) groups.push_back(o->group());
    // one order for every thread that holds several groups: no two can wait on each other
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    std::vector<Lock> held(groups.size());
    for (std::size_t i = 0; i < groups.size(); ++i) {
      held[i].group_ = groups[i];
      held[i].lock_ = std::unique_lock<std::recursive_mutex>(groups[i]->mu);
    }
    if (std::all_of(observers.begin(), observers.end(),
                    [&](const auto& o) { return std::binary_search(groups.begin(), groups.end(), o->group()); }))
      return held;
  }
}

void Observer::merge_lock_groups(const std::vector<Lock>& held, const std::vector<std::shared_ptr<Observer>>& fused) {
  auto merged = std::make_shared<Lock::Group>();
  std::vector<std::shared_ptr<Observer>> everyone = fused;
  for (const Lock& l : held)
    for (const auto& w : l.group_->members)
      if (auto o = w.lock()) everyone.push_back(std::move(o));
  std::sort(everyone.begin(), everyone.end());
  everyone.erase(std::unique(everyone.begin(), everyone.end()), everyone.end());
  for (const auto& o : everyone) {
    merged->members.push_back(o);
    std::lock_guard<std::mutex> g(o->group_mu_);
    o->group_ = merged;
  }
}

Observer& Observer::observe(const TensorView& value) {
  const Lock held = lock();
  const std::string label = tensor_label();
  return observe_with(
      value, [&] { return flatten_for_calibration(value, base_name_, args_, {}, label); }, true);
}

Observer& Observer::observe_flattened(const TensorView& value) {
  const Lock held = lock();
  const std::string label = tensor_label();
  QOBS_CHECK(value.numel() > 0, ShapeError, label, ": empty flattened value of shape ", shape_str(value.shape),
             " (R3.1)");
  if (value.dim() >= 2) {
    const int64_t last = value.shape.back();
    const Strategy st = args_.get_strategy();
    if ((st == Strategy::kGroup || st == Strategy::kTensorGroup) && args_.group_size)
      QOBS_CHECK(last == *args_.group_size, ShapeError, label, ": flattened value of shape ", shape_str(value.shape),
                 " has groups of ", last, " elements, the args say group_size ", *args_.group_size, " (R3.1, R3.2)");
    if (st == Strategy::kBlock && args_.block_structure)
      QOBS_CHECK(last == (*args_.block_structure)[0] * (*args_.block_structure)[1], ShapeError, label,
                 ": flattened value of shape ", shape_str(value.shape), " has blocks of ", last,
                 " elements, the args' block_structure ", (*args_.block_structure)[0], "x", (*args_.block_structure)[1],
                 " has ", (*args_.block_structure)[0] * (*args_.block_structure)[1], " (R3.1, R3.2)");
  }
  return observe_with(
      value, [&] { return flat_view_of_flattened(value, label); }, false);
}

Observer& Observer::observe_with(const TensorView& value, const std::function<FlatView()>& flatten, bool forward) {
  if (forward && value.numel() == 0) return *this;                        // R6.1.2-1
  if (forward && is_weight_observer() && has_statistics()) return *this;  // R6.1.2-2, Q27
  const std::string label = tensor_label();
  const bool check_after = statistics_reveal_non_finite();
  if (!check_after) {
    check_observable(value, label, accepts_integer_input());
    observe_flat(flatten());
  } else {
    const bool is_float = check_observable_dtype(value, label, accepts_integer_input());
    std::map<std::string, Tensor> before = is_float ? state_ : std::map<std::string, Tensor>{};
    observe_flat(flatten());
    if (is_float && !statistics_finite()) {
      // Finite input can still overflow a moving average to inf; that keeps the
      // reference's result. A non-finite input is rejected with the state untouched.
      if (kernels::first_non_finite(value) >= 0) {
        state_ = std::move(before);
        extremes_.reset();
        check_observable(value, label, accepts_integer_input());
      }
    }
  }
  if (forward && !partners_.empty()) fused_statistics_members();  // R6.1.2-5
  return *this;
}

void Observer::observe_flat(const FlatView& flat) {
  const Lock held = lock();
  extremes_.reset();
  if (!update_state_with_extremes(flat, extremes_)) update_state(state_, flat);
}

bool Observer::statistics_finite() const {
  // a group's min is at most its max: an infinite statistic shows in the extremes
  if (extremes_) return std::isfinite(extremes_->first) && std::isfinite(extremes_->second);
  for (const auto& n : statistic_names()) {
    const auto it = state_.find(n);
    if (it != state_.end() && is_floating(it->second.dtype()) && kernels::first_non_finite(it->second.view()) >= 0)
      return false;
  }
  return true;
}

bool Observer::has_statistics() const {
  const Lock held = lock();
  for (const auto& n : statistic_names())
    if (!state_.count(n)) return false;
  return true;
}

std::vector<std::pair<std::string, Tensor>> Observer::get_statistics() const {
  const Lock held = lock();
  QOBS_CHECK(has_statistics(), PreconditionError, "No statistics available for ", name(), " observer of '",
             tensor_label(), "' (R6.1.6)");
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& n : statistic_names()) out.emplace_back(n, state_.at(n));
  return out;
}

void Observer::bind_weight(const TensorView& weight) {
  const Lock held = lock();
  bound_weight_ = weight;
  has_bound_weight_ = true;
}

void Observer::unbind_weight() {
  const Lock held = lock();
  has_bound_weight_ = false;
}

void Observer::attach(int64_t in_features) {
  const Lock held = lock();
  attach_locked(in_features);
}

void Observer::detach() {
  const Lock held = lock();
  detach_locked();
}

void Observer::accumulate_input(const TensorView& x) {
  const Lock held = lock();
  accumulate_input_locked(x);
}

void Observer::observe_bound_weight() {
  QOBS_CHECK(has_bound_weight_, PreconditionError, "fused observer ", name(), " of '", options_.label,
             "' has no statistics and no bound module weight to observe (R6.10.3)");
  observe(bound_weight_);
}

std::vector<std::shared_ptr<Observer>> Observer::fused_partners() const {
  const Lock held = lock();
  std::vector<std::shared_ptr<Observer>> out;
  for (const auto& w : partners_)
    if (auto p = w.lock()) out.push_back(std::move(p));
  return out;
}

std::vector<std::shared_ptr<Observer>> Observer::fused_statistics_members() {
  std::vector<std::shared_ptr<Observer>> members;
  members.push_back(shared_from_this());
  for (const auto& w : partners_) {
    auto p = w.lock();
    QOBS_CHECK(p != nullptr, PreconditionError, "a fused partner of '", options_.label, "' no longer exists (R6.10.3)");
    members.push_back(std::move(p));
  }
  for (auto& m : members)
    if (!m->has_statistics()) m->observe_bound_weight();
  return members;
}

namespace {

/// max (or min) of n values as floats, NaN-propagating, in eight independent lanes. kMax
/// is a template argument and bf16 loads are inline: the run-time choice and a call to
/// bf16_to_float per element were a third of this scan's time on NVFP4 statistics.
template <bool kMax, typename Load>
double nan_extreme_of(int64_t n, Load value) {
  const float init = kMax ? -INFINITY : INFINITY;
  float m[8] = {init, init, init, init, init, init, init, init};
  int nan[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) {
      const float v = value(i + l);
      m[l] = kMax ? std::max(m[l], v) : std::min(m[l], v);
      nan[l] |= v != v;
    }
  for (; i < n; ++i) {
    const float v = value(i);
    m[0] = kMax ? std::max(m[0], v) : std::min(m[0], v);
    nan[0] |= v != v;
  }
  float r = m[0];
  for (int l = 0; l < 8; ++l) {
    if (nan[l]) return NAN;
    r = kMax ? std::max(r, m[l]) : std::min(r, m[l]);
  }
  return r;
}

template <bool kMax>
double nan_extreme_typed(const Tensor& t) {
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kF32:
      return nan_extreme_of<kMax>(n, [p = t.data_as<float>()](int64_t i) { return p[i]; });
    case DType::kBF16:
      return nan_extreme_of<kMax>(n, [p = t.data_as<uint16_t>()](int64_t i) {
        return std::bit_cast<float>(static_cast<uint32_t>(p[i]) << 16);  // bf16_to_float, inline
      });
    case DType::kF16:
      return nan_extreme_of<kMax>(n, [p = t.data_as<uint16_t>()](int64_t i) { return f16_to_float(p[i]); });
    default: {
      double m = kMax ? -INFINITY : INFINITY;
      for (int64_t i = 0; i < n; ++i) m = kMax ? detail::nan_max(m, t.get(i)) : detail::nan_min(m, t.get(i));
      return m;
    }
  }
}

/// max (or min) of a statistics tensor, NaN-propagating (torch.max / torch.min): typed
/// loops for the float statistics dtypes (one NVFP4 weight has a million).
double nan_extreme(const Tensor& t, bool want_max) {
  return want_max ? nan_extreme_typed<true>(t) : nan_extreme_typed<false>(t);
}

}  // namespace

std::optional<Tensor> Observer::get_global_scale() {
  const Lock held = lock();
  if (args_.get_strategy() != Strategy::kTensorGroup) return std::nullopt;
  std::vector<std::shared_ptr<Observer>> members;
  if (partners_.empty()) {
    QOBS_CHECK(has_statistics(), PreconditionError, "No statistics available for ", name(), " observer of '",
               tensor_label(), "' (R6.1.5)");
    members.push_back(shared_from_this());
  } else {
    members = fused_statistics_members();
  }
  // R6.1.5: A = max over members of max(max_vals) and -min(min_vals), starting from the
  // first member's max(max_vals); exact in the statistics' dtype.
  DType dt = members[0]->state_.at("max_vals").dtype();
  double A = -INFINITY;
  bool first = true;
  for (const auto& m : members) {
    const Tensor& mn = m->state_.at("min_vals");
    const Tensor& mx = m->state_.at("max_vals");
    dt = detail::promote_float_dtypes(dt, mx.dtype());
    double mmax, mmin;
    if (m->extremes_) {
      mmin = m->extremes_->first;
      mmax = m->extremes_->second;
    } else {
      const auto vmax = kernels::nan_min_max(mx.view()), vmin = kernels::nan_min_max(mn.view());
      mmax = vmax ? vmax->second : nan_extreme(mx, true);
      mmin = vmin ? vmin->first : nan_extreme(mn, false);
    }
    A = first ? mmax : detail::nan_max(A, mmax);
    A = detail::nan_max(A, -mmin);
    first = false;
  }
  return generate_gparam(Tensor::from_values(dt, {1}, {-A}), Tensor::from_values(dt, {1}, {A}), options_.mode);
}

QParams Observer::get_qparams() {
  const Lock held = lock();
  QOBS_CHECK(has_statistics(), PreconditionError, "No statistics available for ", name(), " observer of '",
             tensor_label(), "': observe a tensor first (R6.1.4)");
  QParams out;
  out.global_scale = get_global_scale();
  auto sz = qparams_from_statistics(out.global_scale ? &*out.global_scale : nullptr);
  out.scale = std::move(sz.scale);
  out.zero_point = std::move(sz.zero_point);
  delete_statistics(true);
  return out;
}

ScaleZeroPoint Observer::qparams_from_statistics(const Tensor* global_scale) {
  return kernels::calculate_qparams(state_.at("min_vals"), state_.at("max_vals"), args_, global_scale, options_.mode,
                                    options_.num_threads);
}

void Observer::delete_statistics(bool cooperative) {
  const Lock held = lock();
  auto partners = fused_partners();
  if (!cooperative || partners.empty()) {
    state_.clear();
    extremes_.reset();
    on_statistics_deleted();
    done_ = false;
    return;
  }
  done_ = true;
  if (std::all_of(partners.begin(), partners.end(), [](const auto& p) { return p->done_; })) {
    for (auto& p : partners) {
      p->state_.clear();
      p->extremes_.reset();
      p->on_statistics_deleted();
      p->done_ = false;
    }
    state_.clear();
    extremes_.reset();
    on_statistics_deleted();
    done_ = false;
  }
}

// ---- fusion -----------------------------------------------------------------------------

const std::vector<std::vector<std::string>>& fused_layer_names() {
  static const std::vector<std::vector<std::string>> k{
      {"gate_proj", "up_proj"}, {"q_proj", "k_proj", "v_proj"}, {"q_a_proj", "kv_a_proj_with_mqa"}, {"w1", "w3"}};
  return k;
}

void fuse_observers(const std::vector<std::shared_ptr<Observer>>& group) {
  std::vector<std::shared_ptr<Observer>> members;
  for (const auto& o : group)
    if (o) members.push_back(o);
  const bool any_tg = std::any_of(members.begin(), members.end(),
                                  [](const auto& o) { return o->args().get_strategy() == Strategy::kTensorGroup; });
  if (!any_tg) return;
  for (const auto& o : members) {
    QOBS_CHECK(o->is_weight_observer(), PreconditionError, "fused layer '", o->options().label,
               "' has no weight observer (R6.10.2)");
    QOBS_CHECK(o->args().get_strategy() == Strategy::kTensorGroup, PreconditionError, "fused layer '",
               o->options().label, "' has a non-TENSOR_GROUP weight observer (strategy ",
               to_string(o->args().get_strategy()), ") among tensor_group partners (R6.10.2)");
  }
  // Fused observers read and consume each other's statistics (R6.10.4): from here on
  // they share one lock, with every observer any of them was fused with before.
  const std::vector<Observer::Lock> held = Observer::lock_all(members);
  for (const auto& o : members) {
    o->partners_.clear();
    o->done_ = false;
    for (const auto& p : members)
      if (p != o) o->partners_.push_back(p);
  }
  Observer::merge_lock_groups(held, members);
}

}  // namespace qobs
