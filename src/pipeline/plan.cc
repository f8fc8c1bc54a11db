#include "pipeline/plan.h"

#include <re2/re2.h>

#include <algorithm>
#include <map>
#include <memory>

#include "core/check.h"
#include "qobs/formats.h"
#include "qobs/observer.h"

namespace qobs {

namespace {

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

std::string module_of(std::string_view tensor_name) {
  return std::string(tensor_name.substr(0, tensor_name.size() - std::string_view(".weight").size()));
}

std::string last_component(const std::string& module) {
  const auto p = module.rfind('.');
  return p == std::string::npos ? module : module.substr(p + 1);
}

// RE2 rather than std::regex: std::regex backtracks recursively and overflows the stack
// on long module names (a 50k-character name with `.*lm_head`); RE2 runs in linear time.
std::vector<std::unique_ptr<RE2>> compile(const std::vector<std::string>& patterns, const char* what) {
  RE2::Options opt;
  opt.set_log_errors(false);  // library code never prints; the error goes into the exception
  std::vector<std::unique_ptr<RE2>> out;
  for (const auto& p : patterns) {
    out.push_back(std::make_unique<RE2>(p, opt));
    QOBS_CHECK(out.back()->ok(), InvalidArgument, what, " pattern '", p,
               "' is not a valid RE2 regular expression (no backreferences or lookaround): ", out.back()->error());
  }
  return out;
}

// Searched anywhere in the name, as std::regex_search did.
bool any_match(const std::vector<std::unique_ptr<RE2>>& res, const std::string& s) {
  return std::any_of(res.begin(), res.end(), [&](const auto& r) { return RE2::PartialMatch(s, *r); });
}

}  // namespace

// ---- target selection -------------------------------------------------------------

bool is_linear_weight(std::string_view tensor_name, const Shape& shape) {
  if (shape.size() != 2 || !tensor_name.ends_with(".weight")) return false;
  const std::string m = lower(module_of(tensor_name));
  // Embedding tables and norms are 2-D or named "*.weight" too; transformers names them
  // with these words (embed_tokens, word_embeddings, wte/wpe, LayerNorm, *_norm, ln_f).
  for (const char* word : {"embed", "norm", "position", "token_type", "rotary"})
    if (m.find(word) != std::string::npos) return false;
  const std::string last = last_component(m);
  if (last == "wte" || last == "wpe" || last.rfind("ln_", 0) == 0 || last == "ln") return false;
  return true;
}

TargetPlan plan_targets(const Checkpoint& ckpt, const std::vector<std::string>& targets,
                        const std::vector<std::string>& ignore) {
  const auto t_re = compile(targets, "--targets");
  const auto i_re = compile(ignore, "--ignore");
  TargetPlan plan;
  for (const SafetensorsFile& shard : ckpt.shards())
    for (const TensorInfo& t : shard.tensors()) {
      if (!std::string_view(t.name).ends_with(".weight") || t.shape.size() != 2) continue;
      const std::string m = module_of(t.name);
      const bool linear = is_linear_weight(t.name, t.shape);
      bool chosen;
      if (!t_re.empty()) chosen = any_match(t_re, m);
      else chosen = linear && last_component(m) != "lm_head";  // lm_head only when targeted
      if (chosen && any_match(i_re, m)) chosen = false;
      if (chosen) plan.quantize.push_back(m);
      else if (linear) plan.ignored.push_back(m);
    }
  return plan;
}

// ---- scheme -----------------------------------------------------------------------

QuantizationScheme resolve_scheme(const QuantizeOptions& o) {
  QuantizationScheme s = preset_scheme(o.scheme, {"Linear"});
  QOBS_CHECK(s.weights.has_value(), InvalidArgument, "scheme ", o.scheme, " quantizes no weights");
  QuantizationArgs w = *s.weights;
  if (o.observer) w.observer = *o.observer;
  for (const auto& [k, v] : o.observer_kwargs) w.observer_kwargs[k] = v;
  s.weights = w.validated();
  s = s.validated();
  const auto needs_data = [&](const std::optional<QuantizationArgs>& a) {
    return a && a->dynamic != Dynamic::kTrue;
  };
  QOBS_CHECK(!needs_data(s.input_activations), InvalidArgument, "scheme ", o.scheme,
             " has static input activations (dynamic ",
             s.input_activations && s.input_activations->dynamic == Dynamic::kLocal ? "\"local\"" : "false",
             "): its input scales need activation statistics from calibration data, which `qobs quantize` does not "
             "run (R1.6.2). Use a weight-only or dynamic-activation scheme (e.g. FP8_DYNAMIC instead of FP8, "
             "NVFP4A16 instead of NVFP4).");
  QOBS_CHECK(!needs_data(s.output_activations), InvalidArgument, "scheme ", o.scheme,
             " quantizes output activations statically, which needs calibration data (R1.6.2)");
  const std::string obs = calibration_observer_name("weight", s.weights->observer.value_or("memoryless_minmax"));
  QOBS_CHECK(obs != "imatrix_mse" && obs != "imatrix_lsq", InvalidArgument, "observer ", obs,
             " needs input-activation importance from calibration data (R6.8), which `qobs "
             "quantize` does not run; choose memoryless_mse or memoryless_minmax");
  // Instantiate once so that an unknown name or a bad kwarg fails before any work.
  load_observer(obs, "weight", *s.weights);
  s.format = infer_compression_format(s);
  return s;
}

// ---- the plan of one conversion ------------------------------------------------------

namespace detail {

namespace {

// Fused sibling groups for tensor_group weights (R6.10), else one job per module; in
// checkpoint order of each job's first member, so progress follows the file.
std::vector<Job> plan_jobs(const Checkpoint& ckpt, const std::vector<PlannedModule>& modules, Strategy strategy) {
  std::map<std::string, std::size_t> module_index;
  for (std::size_t i = 0; i < modules.size(); ++i) module_index[modules[i].module] = i;
  std::vector<Job> jobs;
  std::vector<bool> assigned(modules.size(), false);
  if (strategy == Strategy::kTensorGroup) {
    for (std::size_t i = 0; i < modules.size(); ++i) {
      if (assigned[i]) continue;
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
          QOBS_CHECK(it != module_index.end(), InvalidArgument, parent + g, " is not quantized but its fused siblings (",
                     parent, group[0], ", ...) are: tensor_group layers of a fused group share one global scale "
                     "(R6.10.2), so quantize or ignore all of them");
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
    return *std::min_element(a.members.begin(), a.members.end()) < *std::min_element(b.members.begin(), b.members.end());
  });
  return jobs;
}

}  // namespace

QuantizePlan plan_quantize(const Checkpoint& ckpt, const QuantizeOptions& o, QuantizationScheme scheme) {
  QuantizePlan p;
  p.scheme = std::move(scheme);
  p.format = *p.scheme.format;
  p.observer = calibration_observer_name("weight", p.weight_args().observer.value_or("memoryless_minmax"));
  // Quantizing a compressed checkpoint again would treat packed codes as weights.
  QOBS_CHECK(ckpt.config_json().find("\"quantization_config\"") == std::string::npos, InvalidArgument, o.model_path,
             ": config.json already has a quantization_config; qobs quantizes unquantized checkpoints only");
  p.targets = plan_targets(ckpt, o.targets, o.ignore);
  QOBS_CHECK(!p.targets.quantize.empty(), InvalidArgument, o.model_path,
             ": no tensor matches the targets (2-D Linear weights by default; see --targets)");

  for (const std::string& m : p.targets.quantize) {
    const auto where = ckpt.find(m + ".weight");
    PlannedModule pm{m, where->first, where->second, {}};
    pm.outputs = plan_compressed(p.weight_args(), p.format, pm.weight->dtype, pm.weight->shape, m + ".weight");
    p.modules.push_back(std::move(pm));
  }
  p.jobs = plan_jobs(ckpt, p.modules, p.weight_args().get_strategy());

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
