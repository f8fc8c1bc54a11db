#include "pipeline/match.h"

#include <re2/re2.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "core/check.h"
#include "core/text.h"

namespace qobs::detail {

namespace {

std::string last_component(std::string_view module) {
  const auto p = module.rfind('.');
  return std::string(p == std::string_view::npos ? module : module.substr(p + 1));
}

bool is_regex_entry(const std::string& p) { return p.starts_with("re:"); }

// The class names a checkpoint lets qobs infer (infer_module_class).
constexpr const char* kKnownClasses[] = {"Linear", "Embedding"};

}  // namespace

std::string infer_module_class(std::string_view module, const Shape& weight_shape) {
  if (weight_shape.size() != 2) return "";
  const std::string m = ascii_lower(module);
  const std::string last = last_component(m);
  // transformers' names for nn.Embedding tables: embed_tokens, word_embeddings,
  // position_embeddings, token_type_embeddings, GPT-2's wte / wpe.
  if (m.find("embed") != std::string::npos || last == "wte" || last == "wpe") return "Embedding";
  // Norms with a 2-D weight and rotary tables are neither Linear nor Embedding.
  for (const char* word : {"norm", "position", "token_type", "rotary"})
    if (m.find(word) != std::string::npos) return "";
  if (last.starts_with("ln_") || last == "ln") return "";
  return "Linear";
}

std::vector<ModuleEntry> modules_of(const std::vector<std::pair<std::string, const Shape*>>& tensors) {
  std::vector<ModuleEntry> out;
  std::map<std::string, std::size_t> index;
  for (const auto& [name, shape] : tensors) {
    const auto dot = name.rfind('.');
    if (dot == std::string::npos) continue;  // a top-level tensor belongs to no named module
    const std::string module = name.substr(0, dot);
    auto [it, fresh] = index.emplace(module, out.size());
    if (fresh) out.push_back(ModuleEntry{module, "", nullptr});
    if (std::string_view(name).substr(dot + 1) == "weight" && shape->size() == 2) {
      ModuleEntry& e = out[it->second];
      e.weight = shape;
      e.cls = infer_module_class(module, *shape);
    }
  }
  return out;
}

std::vector<ModuleEntry> checkpoint_modules(const Checkpoint& checkpoint) {
  std::vector<std::pair<std::string, const Shape*>> tensors;
  for (const SafetensorsFile& shard : checkpoint.shards())
    for (const TensorInfo& t : shard.tensors()) tensors.emplace_back(t.name, &t.shape);
  return modules_of(tensors);
}

Patterns::Patterns(std::vector<std::string> patterns, std::string what)
    : patterns_(std::move(patterns)), what_(std::move(what)) {
  RE2::Options opt;
  opt.set_log_errors(false);  // library code never prints; the error goes into the exception
  for (const std::string& p : patterns_) {
    if (!is_regex_entry(p)) {
      res_.push_back(nullptr);
      continue;
    }
    res_.push_back(std::make_unique<RE2>(p.substr(3), opt));
    QOBS_CHECK(res_.back()->ok(), InvalidArgument, what_, " pattern '", p,
               "' is not a regular expression qobs can run: ", res_.back()->error(),
               ". qobs runs `re:` patterns with RE2 (linear time), which has Python re's syntax except lookaround "
               "((?=, (?!, (?<=, (?<!) and backreferences (\\1, (?P=name)); rewrite the pattern without them");
  }
}

Patterns::~Patterns() = default;
Patterns::Patterns(Patterns&&) noexcept = default;
Patterns& Patterns::operator=(Patterns&&) noexcept = default;

bool Patterns::matches_name(std::size_t i, const std::string& name) const {
  if (!res_[i]) return patterns_[i] == name;
  // Python's re.match: anchored at the start only.
  return res_[i]->Match(name, 0, name.size(), RE2::ANCHOR_START, nullptr, 0);
}

bool Patterns::matches(std::size_t i, const ModuleEntry& m) const {
  // A class name never contains ':', so an `re:` entry matches names only.
  return matches_name(i, m.name) || (!res_[i] && !m.cls.empty() && patterns_[i] == m.cls);
}

bool Patterns::any(const ModuleEntry& m) const {
  for (std::size_t i = 0; i < patterns_.size(); ++i)
    if (matches(i, m)) return true;
  return false;
}

std::vector<std::size_t> Patterns::ordered_matches(const ModuleEntry& m) const {
  std::vector<std::size_t> order(patterns_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  // match_targets sorts by ("re:" in target, target): the test is "contains", not "starts with".
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const bool ra = patterns_[a].find("re:") != std::string::npos;
    const bool rb = patterns_[b].find("re:") != std::string::npos;
    return ra != rb ? rb : patterns_[a] < patterns_[b];
  });
  std::vector<std::size_t> out;
  for (std::size_t i : order)
    if (matches_name(i, m.name)) out.push_back(i);
  for (std::size_t i : order)
    if (!res_[i] && !m.cls.empty() && patterns_[i] == m.cls &&
        std::find_if(out.begin(), out.end(), [&](std::size_t k) { return patterns_[k] == patterns_[i]; }) == out.end())
      out.push_back(i);
  return out;
}

void Patterns::require_each_matches(const std::vector<ModuleEntry>& modules) const {
  for (std::size_t i = 0; i < patterns_.size(); ++i) {
    if (std::any_of(modules.begin(), modules.end(), [&](const ModuleEntry& m) { return matches(i, m); })) continue;
    const std::string& p = patterns_[i];
    std::ostringstream hint;
    std::size_t shown = 0;
    for (const ModuleEntry& m : modules) {
      if (!m.weight) continue;
      if (shown == 5) {
        hint << ", ...";
        break;
      }
      hint << (shown++ ? ", " : "") << m.name << (m.cls.empty() ? "" : " (" + m.cls + ")");
    }
    std::string old_style;
    if (!res_[i]) {
      // qobs used to search plain patterns as regexes; say how to write that now.
      RE2::Options opt;
      opt.set_log_errors(false);
      const RE2 search(p, opt);
      const bool would_have_matched =
          search.ok() && std::any_of(modules.begin(), modules.end(),
                                     [&](const ModuleEntry& m) { return RE2::PartialMatch(m.name, search); });
      if (would_have_matched)
        old_style =
            ". A plain pattern is an exact module name or a class name (compressed-tensors' syntax); for a "
            "regex searched in the name write 're:" +
            (p.starts_with("^") ? p.substr(1) : ".*" + p) + "'";
      else
        old_style = ". A plain pattern is an exact module name or a class name qobs can infer from a checkpoint (" +
                    std::string(kKnownClasses[0]) + ", " + kKnownClasses[1] + "); write 're:<regex>' for a regex";
    }
    QOBS_THROW(InvalidArgument, what_, " pattern '", p, "' matches no module of the checkpoint", old_style,
               ". Modules: ", hint.str());
  }
}

}  // namespace qobs::detail
