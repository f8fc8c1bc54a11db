// The observer registry (R6.2): name normalization, the built-in observers under the
// reference's names, user registrations, load_observer, and the questions asked of an
// observer by name or kind (needs importance, calibration name, grid candidates, search
// path).
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/text.h"
#include "kernels/kernels.h"
#include "observers/builtin_observers.h"
#include "observers/lsq_observers.h"
#include "qobs/observer.h"

namespace qobs {

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

}  // namespace qobs
