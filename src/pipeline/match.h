// Module matching in the reference's language (compressed-tensors' match_name /
// is_match / match_targets): a target or ignore entry is `re:<regex>` (Python re.match:
// anchored at the start of the module name, not at its end), an exact module name, or a
// module class name. A checkpoint has no classes, so each module's class is inferred
// from its tensors (infer_module_class). Regexes run on RE2 (linear time, docs/CLI.md).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qobs/io.h"
#include "qobs/tensor.h"

namespace re2 {
class RE2;
}

namespace qobs::detail {

/// A module as a checkpoint shows it: the prefix of at least one tensor name.
struct ModuleEntry {
  std::string name;
  std::string cls;      ///< "Linear", "Embedding" or "" (not inferable)
  const Shape* weight;  ///< its 2-D `.weight`, or nullptr (nothing to quantize)
};

/// The class transformers gives a module owning a 2-D weight: "Embedding" for the
/// embedding tables (embed_tokens, word/position/token_type embeddings, wte, wpe),
/// "" for norms, "Linear" for every other 2-D `<module>.weight` (lm_head included,
/// as in transformers). Modules without a 2-D weight get "".
std::string infer_module_class(std::string_view module, const Shape& weight_shape);

/// The modules of a list of (tensor name, shape), in order of first appearance.
std::vector<ModuleEntry> modules_of(const std::vector<std::pair<std::string, const Shape*>>& tensors);
std::vector<ModuleEntry> checkpoint_modules(const Checkpoint& checkpoint);

/// A list of target or ignore entries, compiled once. `what` names the option in errors
/// ("--targets", "ignore of config.yaml").
class Patterns {
 public:
  Patterns(std::vector<std::string> patterns, std::string what);
  ~Patterns();
  Patterns(Patterns&&) noexcept;
  Patterns& operator=(Patterns&&) noexcept;

  bool empty() const { return patterns_.empty(); }
  std::size_t size() const { return patterns_.size(); }
  const std::string& operator[](std::size_t i) const { return patterns_[i]; }
  /// match_name: `re:` prefix -> regex anchored at the start, else the exact name.
  bool matches_name(std::size_t i, const std::string& name) const;
  /// is_match: the name or the (inferred) class.
  bool matches(std::size_t i, const ModuleEntry& m) const;
  bool any(const ModuleEntry& m) const;
  /// The entries that match m, most specific first as match_targets orders them: exact
  /// names, then regexes (each sorted by text), then class names.
  std::vector<std::size_t> ordered_matches(const ModuleEntry& m) const;
  /// InvalidArgument naming the first entry that matches no module, with a few module
  /// names as hints (and the `re:` spelling when the entry reads like an old search regex).
  void require_each_matches(const std::vector<ModuleEntry>& modules) const;

 private:
  std::vector<std::string> patterns_;
  std::string what_;
  std::vector<std::unique_ptr<re2::RE2>> res_;  ///< per entry; null for exact/class entries
};

}  // namespace qobs::detail
