#include "pipeline/plan.h"

#include <algorithm>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/text.h"
#include "pipeline/match.h"
#include "qobs/formats.h"
#include "qobs/observer.h"

namespace qobs {

bool is_linear_weight(std::string_view tensor_name, const Shape& shape) {
  if (!tensor_name.ends_with(".weight")) return false;
  return detail::infer_module_class(tensor_name.substr(0, tensor_name.size() - 7), shape) == "Linear";
}

namespace detail {

namespace {

bool is_lm_head(const std::string& module) {
  const auto p = module.rfind('.');
  return (p == std::string::npos ? module : module.substr(p + 1)) == "lm_head";
}

// Chooses the modules to quantize and the group of each, as compressed-tensors'
// apply_quantization_config does: a module is taken when a target matches it (name or
// class) and no ignore entry does; of several matching targets the most specific wins
// (match_targets: exact name, then regex, then class), and a target listed by several
// groups belongs to the last of them (target_to_scheme is a dict).
struct Selection {
  TargetPlan plan;
  std::vector<std::size_t> group;  ///< per plan.quantize entry
};

Selection select_modules(const std::vector<ModuleEntry>& modules, const std::vector<std::vector<std::string>>& targets,
                         const std::vector<std::string>& ignore, bool default_targets, const std::string& what) {
  std::vector<std::string> all_targets;
  std::map<std::string, std::size_t> target_group;
  for (std::size_t g = 0; g < targets.size(); ++g)
    for (const std::string& t : targets[g]) {
      if (!target_group.count(t)) all_targets.push_back(t);
      target_group[t] = g;
    }
  const Patterns t_pat(all_targets, what.empty() ? "--targets" : what + " targets");
  const Patterns i_pat(ignore, what.empty() ? "--ignore" : what + " ignore");
  if (!default_targets) t_pat.require_each_matches(modules);
  i_pat.require_each_matches(modules);
  Selection s;
  for (const ModuleEntry& m : modules) {
    if (!m.weight) continue;
    const bool linear = m.cls == "Linear";
    std::vector<std::size_t> hits = t_pat.ordered_matches(m);
    // qobs's default keeps lm_head unquantized (llm-compressor's examples ignore it);
    // an explicit `Linear` target takes it, as transformers' lm_head is an nn.Linear.
    if (default_targets && is_lm_head(m.name)) hits.clear();
    if (!hits.empty() && !i_pat.any(m)) {
      s.plan.quantize.push_back(m.name);
      s.group.push_back(target_group.at(t_pat[hits[0]]));
    } else if (linear) {
      s.plan.ignored.push_back(m.name);
    }
  }
  return s;
}

}  // namespace

}  // namespace detail

TargetPlan plan_targets(const Checkpoint& ckpt, const std::vector<std::string>& targets,
                        const std::vector<std::string>& ignore) {
  const bool dflt = targets.empty();
  return detail::select_modules(detail::checkpoint_modules(ckpt), {dflt ? std::vector<std::string>{"Linear"} : targets},
                                ignore, dflt, "")
      .plan;
}

// ---- scheme -----------------------------------------------------------------------

namespace {

// The observer override applied and every check that needs no data, for one group
// (`label`: the preset name or "group <name> of <config file>").
QuantizationScheme resolve_one(QuantizationScheme s, const QuantizeOptions& o, const std::string& label) {
  QOBS_CHECK(s.weights.has_value(), InvalidArgument, label, " quantizes no weights");
  QuantizationArgs w = *s.weights;
  if (o.observer) {
    w.observer = *o.observer;
    w.observer_inferred = false;  // the user's: written into the config (R8.7.5)
  }
  for (const auto& [k, v] : o.observer_kwargs) w.observer_kwargs[k] = v;
  s.weights = w.validated();
  s = s.validated();
  const auto needs_data = [&](const std::optional<QuantizationArgs>& a) { return a && a->dynamic != Dynamic::kTrue; };
  QOBS_CHECK(!needs_data(s.input_activations), InvalidArgument, label, " has static input activations (dynamic ",
             s.input_activations && s.input_activations->dynamic == Dynamic::kLocal ? "\"local\"" : "false",
             "): its input scales need activation statistics from calibration data, which `qobs quantize` does not "
             "run (R1.6.2). Use a weight-only or dynamic-activation scheme (e.g. FP8_DYNAMIC instead of FP8, "
             "NVFP4A16 instead of NVFP4).");
  QOBS_CHECK(!needs_data(s.output_activations), InvalidArgument, label,
             " quantizes output activations statically, which needs calibration data (R1.6.2)");
  const std::string obs = calibration_observer_name("weight", s.weights->observer.value_or("memoryless_minmax"));
  QOBS_CHECK(!observer_needs_importance(obs) || o.importance_path, InvalidArgument, label, ": observer ", obs,
             " needs input-activation importance from calibration data (R6.8, R6.12), which `qobs quantize` does "
             "not run: collect it where the model runs with qobs.collect_importance and pass the file with "
             "--importance FILE (R6.12.4), or choose memoryless_mse, nvfp4_expanded_mse or memoryless_minmax");
  // Instantiate once so that an unknown name or a bad kwarg fails before any work.
  load_observer(obs, "weight", *s.weights);
  s.format = infer_compression_format(s);
  return s;
}

}  // namespace

QuantizationScheme resolve_scheme(const QuantizeOptions& o) {
  return resolve_one(preset_scheme(o.scheme, {"Linear"}), o, "scheme " + o.scheme);
}

namespace detail {

std::vector<PlanGroup> resolve_groups(const QuantizeOptions& o) {
  const auto group = [](std::string name, QuantizationScheme s) {
    std::string obs = calibration_observer_name("weight", s.weights->observer.value_or("memoryless_minmax"));
    return PlanGroup{std::move(name), std::move(s), std::move(obs)};
  };
  std::vector<PlanGroup> out;
  if (!o.config) {
    out.push_back(group("group_0", resolve_scheme(o)));
  } else {
    QOBS_CHECK(o.scheme.empty(), InvalidArgument, "--scheme ", o.scheme,
               " and --config both give the scheme; use one (the config's groups name their schemes)");
    QOBS_CHECK(o.targets.empty(), InvalidArgument,
               "--targets and --config: the config's groups carry their targets; add them there");
    QOBS_CHECK(!o.config->config_groups.empty(), InvalidArgument, o.config_source, ": the config has no config_groups");
    for (const auto& [name, s] : o.config->config_groups) {
      QOBS_CHECK(!s.targets.empty(), InvalidArgument, o.config_source, ": config group ", name, " has no targets");
      out.push_back(group(name, resolve_one(s, o, "config group " + name + " of " + o.config_source)));
    }
  }
  // A file no observer reads would be silently ignored: almost surely a mistyped observer.
  QOBS_CHECK(
      !o.importance_path ||
          std::any_of(out.begin(), out.end(), [](const PlanGroup& g) { return observer_needs_importance(g.observer); }),
      InvalidArgument, "--importance ", *o.importance_path,
      ": no weight observer of this run uses importance (imatrix_mse, nvfp4_expanded_imatrix, imatrix_lsq), "
      "so the file would be ignored (R6.12.4)");
  return out;
}

}  // namespace detail

// ---- the plan of one conversion ------------------------------------------------------

namespace detail {

namespace {

// Fused sibling groups for tensor_group weights (R6.10), else one job per module; in
// checkpoint order of each job's first member, so progress follows the file.
std::vector<Job> plan_jobs(const Checkpoint& ckpt, const std::vector<PlannedModule>& modules,
                           const std::vector<PlanGroup>& groups) {
  std::map<std::string, std::size_t> module_index;
  for (std::size_t i = 0; i < modules.size(); ++i) module_index[modules[i].module] = i;
  std::vector<Job> jobs;
  std::vector<bool> assigned(modules.size(), false);
  {
    for (std::size_t i = 0; i < modules.size(); ++i) {
      if (assigned[i] || groups[modules[i].group].weight_args().get_strategy() != Strategy::kTensorGroup) continue;
      const std::string& m = modules[i].module;
      const auto dot = m.rfind('.');
      const std::string parent = dot == std::string::npos ? "" : m.substr(0, dot + 1);
      const std::string leaf = m.substr(parent.size());
      for (const auto& group : fused_layer_names()) {
        if (std::find(group.begin(), group.end(), leaf) == group.end()) continue;
        // R6.10.2: only groups whose every name exists as a sibling; each must then be
        // quantized (an ignored sibling would have no weight observer).
        bool all_exist = true;
        for (const auto& g : group) all_exist = all_exist && ckpt.find(parent + g + ".weight").has_value();
        if (!all_exist) break;
        Job job;
        for (const auto& g : group) {
          const auto it = module_index.find(parent + g);
          QOBS_CHECK(it != module_index.end(), InvalidArgument, parent + g,
                     " is not quantized but its fused siblings (", parent, group[0],
                     ", ...) are: tensor_group layers of a fused group share one global scale "
                     "(R6.10.2), so quantize or ignore all of them");
          QOBS_CHECK(modules[it->second].group == modules[i].group, InvalidArgument, parent + g, " and ", m,
                     " are fused siblings (one global scale, R6.10.2) but fall in different config groups (",
                     groups[modules[it->second].group].name, ", ", groups[modules[i].group].name,
                     "); give them the same group");
          job.members.push_back(it->second);
          assigned[it->second] = true;
        }
        jobs.push_back(std::move(job));
        break;
      }
    }
  }
  for (std::size_t i = 0; i < modules.size(); ++i)
    if (!assigned[i]) jobs.push_back(Job{{i}});
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
    return *std::min_element(a.members.begin(), a.members.end()) <
           *std::min_element(b.members.begin(), b.members.end());
  });
  return jobs;
}

// R6.12.4: each module an importance-weighted observer calibrates gets its entry of
// the file; the file must be of this checkpoint (every module it names has a 2-D
// weight here) and cover those modules with their in_features. A missing module is an
// error even where the observer would fall back to the uniform search (R6.8.4-3): a
// weight calibrated without the importance its run asked for is D15's data-free run.
void attach_importance(const Checkpoint& ckpt, const std::string& file, QuantizePlan& p) {
  ImportanceMap imp = read_importance(file);
  for (const auto& [module, m] : imp) {
    const auto w = ckpt.find(module + ".weight");
    QOBS_CHECK(w && w->second->shape.size() == 2, InvalidArgument, file, ": module ", module,
               " has no 2-D weight in the checkpoint; was the file collected from another model? (R6.12.4)");
  }
  for (PlannedModule& pm : p.modules) {
    const PlanGroup& g = p.groups[pm.group];
    if (!observer_needs_importance(g.observer)) continue;
    const auto it = imp.find(pm.module);
    QOBS_CHECK(it != imp.end(), InvalidArgument, file, ": no importance for ", pm.module, ", which observer ",
               g.observer,
               " quantizes; collect it over a model run that reaches the module, or leave the module "
               "out with --ignore (R6.12.4)");
    const int64_t in_features = pm.weight->shape[1];
    QOBS_CHECK(it->second.sum.numel() == in_features, InvalidArgument, file, ": ", pm.module, ".importance_sum has ",
               it->second.sum.numel(), " values but the weight ", pm.module, ".weight ", shape_str(pm.weight->shape),
               " has ", in_features, " input features (R6.12.4, R6.8.4-6)");
    pm.importance = std::move(it->second);
    imp.erase(it);
  }
}

/// The quantization_config of the input model's config.json, or nullopt without one.
std::optional<QuantizationConfig> input_quantization_config(const Checkpoint& ckpt, const std::string& path) {
  if (ckpt.config_json().find("\"quantization_config\"") == std::string::npos) return std::nullopt;
  const nlohmann::json cfg = nlohmann::json::parse(ckpt.config_json(), nullptr, false);
  QOBS_CHECK(cfg.is_object() && cfg.contains("quantization_config") && cfg["quantization_config"].is_object(),
             InvalidArgument, path,
             ": config.json already has a quantization_config; qobs quantizes unquantized "
             "checkpoints only");
  try {
    return QuantizationConfig::from_json(cfg["quantization_config"].dump());
  } catch (const InvalidArgument& e) {
    QOBS_THROW(InvalidArgument, path, "/config.json: quantization_config: ", e.what());
  }
}

}  // namespace

QuantizePlan plan_quantize(const Checkpoint& ckpt, const QuantizeOptions& o, std::vector<PlanGroup> groups) {
  QuantizePlan p;
  p.groups = std::move(groups);
  // model_free_ptq's update_config: one format, or "mixed-precision" when the groups differ.
  for (const PlanGroup& g : p.groups)
    p.format = p.format.empty() || p.format == g.format() ? g.format() : "mixed-precision";
  // Quantizing a compressed checkpoint again would treat packed codes as weights. A
  // quantization_config that quantizes nothing (an expert-pruned dense model, whose
  // config carries only moe_sparsity_config) is accepted and its moe_sparsity_config
  // carried over (R1.6.5).
  const std::optional<QuantizationConfig> input_qc = input_quantization_config(ckpt, o.model_path);
  QOBS_CHECK(!input_qc || (input_qc->config_groups.empty() && !input_qc->kv_cache_scheme), InvalidArgument,
             o.model_path,
             ": config.json already has a quantization_config; qobs quantizes unquantized checkpoints only");
  if (input_qc) p.moe_sparsity_config = input_qc->moe_sparsity_config;
  if (o.config && o.config->moe_sparsity_config) {
    QOBS_CHECK(!p.moe_sparsity_config || *p.moe_sparsity_config == *o.config->moe_sparsity_config, InvalidArgument,
               o.config_source, ": moe_sparsity_config differs from the one in ", o.model_path,
               "/config.json; the experts a model keeps are the model's (R1.6.5)");
    p.moe_sparsity_config = o.config->moe_sparsity_config;
  }
  const std::vector<ModuleEntry> modules = checkpoint_modules(ckpt);
  Selection sel;
  if (o.config) {
    p.config = *o.config;
    // model_free_ptq appends the command line's ignore entries to the config's.
    p.config->ignore.insert(p.config->ignore.end(), o.ignore.begin(), o.ignore.end());
    std::vector<std::vector<std::string>> targets;
    for (const PlanGroup& g : p.groups) targets.push_back(g.scheme.targets);
    sel = select_modules(modules, targets, p.config->ignore, false, o.config_source);
  } else {
    const bool dflt = o.targets.empty();
    sel = select_modules(modules, {dflt ? std::vector<std::string>{"Linear"} : o.targets}, o.ignore, dflt, "");
  }
  p.targets = std::move(sel.plan);
  QOBS_CHECK(!p.targets.quantize.empty(), InvalidArgument, o.model_path,
             ": no tensor matches the targets (2-D Linear weights by default; see --targets)");

  for (std::size_t i = 0; i < p.targets.quantize.size(); ++i) {
    const std::string& m = p.targets.quantize[i];
    const auto where = ckpt.find(m + ".weight");
    PlannedModule pm{m, where->first, where->second, {}, sel.group[i], std::nullopt};
    const PlanGroup& g = p.groups[pm.group];
    pm.outputs = plan_compressed(g.weight_args(), g.format(), pm.weight->dtype, pm.weight->shape, m + ".weight");
    p.modules.push_back(std::move(pm));
  }
  if (o.importance_path) attach_importance(ckpt, *o.importance_path, p);
  p.jobs = plan_jobs(ckpt, p.modules, p.groups);

  for (const PlannedModule& m : p.modules) p.replaced.insert(m.module + ".weight");
  p.shard_specs.resize(ckpt.shards().size());
  for (std::size_t s = 0; s < ckpt.shards().size(); ++s)
    for (const TensorInfo& t : ckpt.shards()[s].tensors())
      if (!p.replaced.count(t.name)) p.shard_specs[s].push_back({t.name, t.dtype, t.shape});
  for (const PlannedModule& m : p.modules)
    for (const auto& t : m.outputs) p.shard_specs[m.shard].push_back({m.module + "." + t.local, t.dtype, t.shape});
  return p;
}

}  // namespace detail
}  // namespace qobs
