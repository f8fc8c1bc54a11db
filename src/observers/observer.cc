// Observer base: the two-phase contract (R6.1), fusion (R6.10), mergeable statistics
// (R6.11) and the registry (R6.2).
#include "qobs/observer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <mutex>

#include "core/arith.h"
#include "core/bytes.h"
#include "core/check.h"
#include "core/text.h"
#include "observers/builtin_observers.h"
#include "observers/lsq_observers.h"

namespace qobs {

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kSum: return "sum";
  }
  return "";
}

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
    if (std::all_of(observers.begin(), observers.end(), [&](const auto& o) {
          return std::binary_search(groups.begin(), groups.end(), o->group());
        }))
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

namespace {

bool is_integer_dtype(DType dt) {
  return dt == DType::kI8 || dt == DType::kI16 || dt == DType::kI32 || dt == DType::kI64 || dt == DType::kU8;
}

/// The dtype rule of observed tensors; true for float tensors (which may hold NaN / Inf).
bool check_observable_dtype(const TensorView& v, const std::string& label, bool allow_integer) {
  const bool is_float = v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16;
  if (!is_float)
    QOBS_CHECK(allow_integer && is_integer_dtype(v.dtype), TypeError, label,
               allow_integer ? ": min-max observers accept float32, bfloat16, float16 or integer tensors, got "
                             : ": this observer accepts float32, bfloat16 or float16 tensors, got ",
               dtype_name(v.dtype), " (docs/DEVIATIONS.md D11)");
  return is_float;
}

void check_observable(const TensorView& v, const std::string& label, bool allow_integer) {
  if (!check_observable_dtype(v, label, allow_integer)) return;  // integers are always finite
  const int64_t i = kernels::first_non_finite(v);  // threaded scan of the bit patterns
  if (i >= 0) {
    const double x = v.get(i);
    QOBS_THROW(InvalidArgument, label, ": non-finite value ", x, " at flat index ", i, " of shape ", shape_str(v.shape),
               " (observed tensors must be finite: the reference would produce a NaN/Inf scale; docs/DEVIATIONS.md)");
  }
}

}  // namespace

Observer& Observer::observe(const TensorView& value) {
  const Lock held = lock();
  const std::string label = tensor_label();
  return observe_with(value, [&] { return flatten_for_calibration(value, base_name_, args_, {}, label); }, true);
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
                 " elements, the args' block_structure ", (*args_.block_structure)[0], "x",
                 (*args_.block_structure)[1], " has ", (*args_.block_structure)[0] * (*args_.block_structure)[1],
                 " (R3.1, R3.2)");
  }
  return observe_with(value, [&] { return flat_view_of_flattened(value, label); }, false);
}

Observer& Observer::observe_with(const TensorView& value, const std::function<FlatView()>& flatten, bool forward) {
  if (forward && value.numel() == 0) return *this;                      // R6.1.2-1
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
    case DType::kF32: return nan_extreme_of<kMax>(n, [p = t.data_as<float>()](int64_t i) { return p[i]; });
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
  const bool any_tg = std::any_of(members.begin(), members.end(), [](const auto& o) {
    return o->args().get_strategy() == Strategy::kTensorGroup;
  });
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

// ---- statistics ------------------------------------------------------------------------

Statistics Observer::export_statistics() const {
  const Lock held = lock();
  Statistics s;
  s.observer = std::string(name());
  s.contributions = contributions_;
  const auto table = sync_table();
  for (const auto& [n, t] : state_) {
    ReduceOp op = ReduceOp::kAvg;
    bool synced = false;
    for (const auto& [tn, top] : table)
      if (tn == n) { op = top; synced = true; }
    // Statistics the reference never syncs are exported with the op that keeps a
    // single rank's value meaningful: min for minima, max for maxima.
    if (!synced) op = n == "min_vals" ? ReduceOp::kMin : (n == "max_vals" ? ReduceOp::kMax : ReduceOp::kSum);
    s.items.push_back({n, t, op});
  }
  return s;
}

void Observer::import_statistics(const Statistics& stats) {
  QOBS_CHECK(stats.observer.empty() || normalize_observer_name(stats.observer) == normalize_observer_name(name()),
             InvalidArgument, "statistics of observer '", stats.observer, "' cannot be imported into ", name());
  const Lock held = lock();
  state_.clear();
  extremes_.reset();
  for (const auto& it : stats.items) state_[it.name] = it.value;
  contributions_ = stats.contributions;
}

void Observer::merge_statistics(const Statistics& other) {
  const auto table = sync_table();
  if (table.empty()) return;  // memoryless observers: the reference never reduces (R6.11.1)
  const Lock held = lock();
  extremes_.reset();
  Statistics mine = export_statistics();
  // keep only synced statistics in the reduction; others stay as they are
  Statistics a, b;
  a.observer = b.observer = mine.observer;
  a.contributions = mine.contributions;
  b.contributions = other.contributions;
  for (const auto& [n, op] : table) {
    const Tensor* x = mine.find(n);
    const Tensor* y = other.find(n);
    if (!x && !y) continue;
    if (!x) { state_[n] = *y; continue; }
    if (!y) continue;
    a.items.push_back({n, *x, op});
    b.items.push_back({n, *y, op});
  }
  const Statistics ranks[2] = {a, b};
  Statistics merged = reduce_statistics(ranks);
  for (const auto& it : merged.items) state_[it.name] = it.value;
  contributions_ = a.contributions + b.contributions;
}

const Tensor* Statistics::find(std::string_view name) const {
  for (const auto& it : items)
    if (it.name == name) return &it.value;
  return nullptr;
}

Statistics reduce_statistics(std::span<const Statistics> ranks) {
  QOBS_CHECK(!ranks.empty(), InvalidArgument, "reduce_statistics: no statistics given");
  Statistics out;
  out.observer = ranks[0].observer;
  out.contributions = 0;
  for (const auto& r : ranks) out.contributions += r.contributions;
  for (const auto& item : ranks[0].items) {
    Tensor acc = item.value;
    const DType dt = acc.dtype();
    std::vector<double> sum(static_cast<std::size_t>(acc.numel()));
    for (int64_t i = 0; i < acc.numel(); ++i) sum[i] = 0;
    double weight_total = 0;
    for (const auto& r : ranks) {
      const Tensor* t = r.find(item.name);
      QOBS_CHECK(t != nullptr, InvalidArgument, "reduce_statistics: statistic '", item.name,
                 "' is missing on one of the ranks");
      QOBS_CHECK(t->shape() == acc.shape() && t->dtype() == dt, InvalidArgument, "reduce_statistics: size mismatch for '",
                 item.name, "': ", shape_str(t->shape()), " ", dtype_name(t->dtype()), " vs ", shape_str(acc.shape()),
                 " ", dtype_name(dt));
      const double w = static_cast<double>(r.contributions);
      for (int64_t i = 0; i < acc.numel(); ++i) {
        const double v = t->get(i);
        switch (item.reduce) {
          case ReduceOp::kMin: if (&r != &ranks[0]) acc.set(i, detail::nan_min(acc.get(i), v)); break;
          case ReduceOp::kMax: if (&r != &ranks[0]) acc.set(i, detail::nan_max(acc.get(i), v)); break;
          case ReduceOp::kSum: sum[i] += v; break;
          case ReduceOp::kAvg: sum[i] += v * w; break;
        }
      }
      weight_total += w;
    }
    if (item.reduce == ReduceOp::kSum)
      for (int64_t i = 0; i < acc.numel(); ++i) acc.set(i, sum[i]);
    if (item.reduce == ReduceOp::kAvg)
      for (int64_t i = 0; i < acc.numel(); ++i) acc.set(i, sum[i] / weight_total);
    out.items.push_back({item.name, std::move(acc), item.reduce});
  }
  return out;
}

namespace {

constexpr char kMagic[8] = {'Q', 'O', 'B', 'S', 'S', 'T', 'A', 'T'};

}  // namespace

std::vector<uint8_t> Statistics::serialize() const {
  detail::ByteWriter w;
  w.put_bytes(kMagic, sizeof kMagic);
  w.put<uint32_t>(1);  // format version
  w.put_string<uint32_t>(observer, "observer name");
  w.put<int64_t>(contributions);
  w.put<uint32_t>(static_cast<uint32_t>(items.size()));
  for (const auto& it : items) {
    w.put_string<uint32_t>(it.name, "statistic name");
    w.put(it.reduce);
    w.put(it.value.dtype());
    w.put<uint32_t>(static_cast<uint32_t>(it.value.dim()));
    for (int64_t d : it.value.shape()) w.put<int64_t>(d);
    w.put<uint64_t>(it.value.nbytes());
    w.put_bytes(it.value.data(), it.value.nbytes());  // the tensor's own (little-endian) element bytes
  }
  return w.take();
}

Statistics Statistics::deserialize(std::span<const uint8_t> bytes) {
  detail::ByteReader r(bytes, "statistics bytes");
  QOBS_CHECK(std::memcmp(r.get_bytes(sizeof kMagic, "magic").data(), kMagic, sizeof kMagic) == 0, IoError,
             "statistics bytes do not start with QOBSSTAT");
  const uint32_t version = r.get<uint32_t>("version");
  QOBS_CHECK(version == 1, IoError, "statistics format version ", version, " is not supported (expected 1)");
  Statistics s;
  s.observer = r.get_string<uint32_t>("observer name");
  s.contributions = r.get<int64_t>("contributions");
  QOBS_CHECK(s.contributions >= 1, IoError, "statistics: contributions ", s.contributions, " must be >= 1");
  const uint32_t n = r.get<uint32_t>("item count");
  for (uint32_t k = 0; k < n; ++k) {
    Statistic it;
    it.name = r.get_string<uint32_t>("statistic name");
    const uint8_t op = r.get<uint8_t>("reduce op");
    QOBS_CHECK(op <= static_cast<uint8_t>(ReduceOp::kSum), IoError, "statistics: invalid reduce op ", int(op));
    it.reduce = static_cast<ReduceOp>(op);
    const uint8_t dt = r.get<uint8_t>("dtype");
    QOBS_CHECK(dt <= static_cast<uint8_t>(DType::kBool), IoError, "statistics: invalid dtype code ", int(dt));
    const uint32_t rank = r.get<uint32_t>("rank");
    QOBS_CHECK(rank <= 8, IoError, "statistics: rank ", rank, " of '", it.name, "' is implausible");
    Shape shape;
    int64_t numel = 1;
    for (uint32_t d = 0; d < rank; ++d) {
      const int64_t v = r.get<int64_t>("shape");
      QOBS_CHECK(v >= 0 && v <= (int64_t{1} << 40), IoError, "statistics: invalid dimension ", v);
      shape.push_back(v);
      numel *= v;
      QOBS_CHECK(numel <= (int64_t{1} << 40), IoError, "statistics: tensor '", it.name, "' is implausibly large");
    }
    const uint64_t nbytes = r.get<uint64_t>("byte count");
    QOBS_CHECK(nbytes == static_cast<uint64_t>(numel) * dtype_size(static_cast<DType>(dt)), IoError,
               "statistics: '", it.name, "' declares ", nbytes, " bytes for shape ", shape_str(shape));
    const auto data = r.get_bytes(nbytes, "tensor bytes");
    it.value = Tensor::from_bytes(static_cast<DType>(dt), shape, data.data(), nbytes);
    s.items.push_back(std::move(it));
  }
  QOBS_CHECK(r.remaining() == 0, IoError, "statistics: ", r.remaining(), " trailing bytes");
  return s;
}

// ---- registry ---------------------------------------------------------------------------

std::string normalize_observer_name(std::string_view name) {
  std::string out = ascii_lower(name);
  for (char& c : out)
    if (c == '_' || c == ' ') c = '-';
  return out;
}

namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::pair<std::string, ObserverFactory>> entries;  // registry spelling
  std::size_t builtin_count = 0;
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    using namespace detail;
    auto add = [&](std::string n, ObserverFactory f) { reg->entries.emplace_back(std::move(n), std::move(f)); };
    add("memoryless_minmax", [](const std::string& b, const QuantizationArgs& a, const ObserverOptions& o) {
      return std::make_shared<MemorylessMinMaxObserver>(b, a, o);
    });
    add("static_minmax", [](const std::string& b, const QuantizationArgs& a, const ObserverOptions& o) {
      return std::make_shared<StaticMinMaxObserver>(b, a, o);
    });
    add("minmax", [](const std::string& b, const QuantizationArgs& a, const ObserverOptions& o) {
      return std::make_shared<MovingAverageMinMaxObserver>(b, a, o);
    });
    add("memoryless_mse", [](const std::string& b, const QuantizationArgs& a, const ObserverOptions& o) {
      return std::make_shared<MseObserver>(MseObserver::Kind::kMemoryless, b, a, o);
    });
    add("mse", [](const std::string& b, const QuantizationArgs& a, const ObserverOptions& o) {
      return std::make_shared<MseObserver>(MseObserver::Kind::kMovingAverage, b, a, o);
    });
    add("nvfp4_expanded_mse", [](const std::string& b, const QuantizationArgs& a, const ObserverOptions& o) {
      return std::make_shared<MseObserver>(MseObserver::Kind::kNvfp4Expanded, b, a, o);
    });
    add("imatrix_mse", [](const std::string& b, const QuantizationArgs& a, const ObserverOptions& o) {
      return std::make_shared<ImatrixMseObserver>(ImatrixMseObserver::Kind::kImatrix, b, a, o);
    });
    add("nvfp4_expanded_imatrix", [](const std::string& b, const QuantizationArgs& a, const ObserverOptions& o) {
      return std::make_shared<ImatrixMseObserver>(ImatrixMseObserver::Kind::kNvfp4Expanded, b, a, o);
    });
    // R6.13.1: an alias; the reference hands back an nvfp4_expanded_mse observer
    add("fouroversix", [](const std::string& b, const QuantizationArgs& a, const ObserverOptions& o) {
      return std::make_shared<MseObserver>(MseObserver::Kind::kNvfp4Expanded, b, a, o);
    });
    // qobs's own least-squares observers (docs/LSQ.md), beside the reference's
    add("lsq_mse", [](const std::string& b, const QuantizationArgs& a, const ObserverOptions& o) {
      return std::make_shared<LsqObserver>(b, a, o);
    });
    add("imatrix_lsq", [](const std::string& b, const QuantizationArgs& a, const ObserverOptions& o) {
      return std::make_shared<ImatrixLsqObserver>(b, a, o);
    });
    reg->builtin_count = reg->entries.size();
    return reg;
  }();
  return *r;
}

}  // namespace

void register_observer(std::string_view name, ObserverFactory factory) {
  QOBS_CHECK(!name.empty() && factory, InvalidArgument, "register_observer needs a name and a factory");
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  const std::string key = normalize_observer_name(name);
  for (std::size_t i = 0; i < r.entries.size(); ++i) {
    if (normalize_observer_name(r.entries[i].first) != key) continue;
    QOBS_CHECK(i >= r.builtin_count, InvalidArgument, "observer name '", name,
               "' is a built-in observer and cannot be replaced (R6.2.2)");
    r.entries[i].second = std::move(factory);
    return;
  }
  r.entries.emplace_back(std::string(name), std::move(factory));
}

std::vector<std::string> registered_observers() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> out;
  for (const auto& e : r.entries) out.push_back(e.first);
  return out;
}

std::shared_ptr<Observer> load_observer(std::string_view name, std::string_view base_name, const QuantizationArgs& args,
                                        const ObserverKwargs& kwargs, const ObserverOptions& options) {
  ObserverFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    const std::string key = normalize_observer_name(name);
    for (const auto& e : r.entries)
      if (normalize_observer_name(e.first) == key) factory = e.second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : registered_observers()) known += (known.empty() ? "" : ", ") + n;
    QOBS_THROW(UnknownName, "unknown observer '", name, "' (registered: ", known, ") (R6.2.1)");
  }
  // Q25: the reference merges kwargs into the shared args object; qobs merges into a copy.
  QuantizationArgs merged = args.strategy ? args : args.validated();
  for (const auto& [k, v] : kwargs) merged.observer_kwargs[k] = v;
  return factory(std::string(base_name), merged, options);
}

bool observer_needs_importance(std::string_view name) {
  const std::string n = normalize_observer_name(name);
  return n == "imatrix-mse" || n == "nvfp4-expanded-imatrix" || n == "imatrix-lsq";
}

std::string calibration_observer_name(std::string_view base_name, std::string_view name) {
  if (base_name == "weight") {
    if (name == "static_minmax" || name == "minmax") return "memoryless_minmax";
    if (name == "mse") return "memoryless_mse";
  }
  return std::string(name);
}

std::vector<double> grid_candidates(const Observer& observer) {
  if (const auto* m = dynamic_cast<const detail::MseObserver*>(&observer))
    return kernels::grid_candidates(m->search_config());
  if (const auto* m = dynamic_cast<const detail::ImatrixMseObserver*>(&observer))
    return kernels::grid_candidates(m->search_config());
  return {};
}

std::string imatrix_search_path(const Observer& observer) {
  if (const auto* m = dynamic_cast<const detail::ImatrixMseObserver*>(&observer)) return m->last_path();
  return {};
}

// ---- generation-2 adapter (R7.4) --------------------------------------------------------

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
