// QuantizationConfig (R1.6): its JSON (config groups, preset groups, kv_cache_scheme),
// merge, and the class names an ignore list carries.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/args_json.h"
#include "core/check.h"
#include "qobs/args.h"

namespace qobs {

using detail::args_from_ojson;
using detail::args_to_config_ojson;
using detail::ojson;
using detail::parse_json;
using detail::scheme_from_ojson;
using detail::scheme_to_config_ojson;
using detail::string_list;

bool QuantizationConfig::requires_calibration_data() const {
  if (kv_cache_scheme) return true;
  for (const auto& [name, s] : config_groups) {
    if (s.weights && s.weights->observer && *s.weights->observer == "imatrix_mse") return true;
    if (s.input_activations && s.input_activations->dynamic != Dynamic::kTrue) return true;
    if (s.output_activations && s.output_activations->dynamic == Dynamic::kFalse) return true;
  }
  return false;
}

void QuantizationConfig::merge(const QuantizationConfig& other) {
  std::vector<std::string> kept;
  for (const auto& entry : ignore) {
    bool drop = false;
    if (entry.rfind("re:", 0) != 0)
      for (const auto& [n, s] : other.config_groups)
        for (const auto& t : s.targets) drop = drop || t == entry;
    if (!drop) kept.push_back(entry);
  }
  ignore = std::move(kept);
  for (const auto& [n, s] : other.config_groups) {
    std::string name = n;
    auto taken = [&](const std::string& x) {
      return std::any_of(config_groups.begin(), config_groups.end(), [&](const auto& p) { return p.first == x; });
    };
    for (int k = 1; taken(name); ++k) name = n + "_" + std::to_string(k);
    config_groups.emplace_back(name, s);
  }
  std::vector<std::string> formats;
  for (const auto& [n, s] : config_groups)
    if (s.format && std::find(formats.begin(), formats.end(), *s.format) == formats.end()) formats.push_back(*s.format);
  if (formats.size() == 1) format = formats[0];
  else if (formats.size() > 1) format = "mixed-precision";
  quantization_status = std::max(quantization_status, other.quantization_status);
}

namespace {

ojson moe_to_ojson(const ExpertSparsityConfig& m) {
  ojson n = ojson::array();
  for (const auto& e : m.num_experts) n.push_back(e ? ojson(*e) : ojson(nullptr));
  return ojson{{"method", m.method}, {"num_experts", n}};
}

// R1.6.5: compressed-tensors 0.20's ExpertSparsityConfig (method an enum, num_experts
// strict integers or null; other keys are ignored as pydantic's default does).
ExpertSparsityConfig moe_from_ojson(const ojson& j) {
  QOBS_CHECK(j.is_object(), InvalidArgument, "QuantizationConfig.moe_sparsity_config must be an object, got ", j.dump(),
             " (R1.6.5)");
  ExpertSparsityConfig m;
  QOBS_CHECK(j.contains("method") && j["method"].is_string() && (j["method"] == "prune" || j["method"] == "novice"),
             InvalidArgument, "QuantizationConfig.moe_sparsity_config.method must be \"prune\" or \"novice\", got ",
             j.contains("method") ? j["method"].dump() : std::string("nothing"), " (R1.6.5)");
  m.method = j["method"].get<std::string>();
  QOBS_CHECK(j.contains("num_experts") && j["num_experts"].is_array(), InvalidArgument,
             "QuantizationConfig.moe_sparsity_config.num_experts must be a list of integers or nulls, got ",
             j.contains("num_experts") ? j["num_experts"].dump() : std::string("nothing"), " (R1.6.5)");
  for (const auto& e : j["num_experts"]) {
    QOBS_CHECK(e.is_null() || e.is_number_integer(), InvalidArgument,
               "QuantizationConfig.moe_sparsity_config.num_experts: ", e.dump(),
               " is neither an integer nor null (R1.6.5)");
    m.num_experts.push_back(e.is_null() ? std::nullopt : std::optional<int64_t>(e.get<int64_t>()));
  }
  return m;
}

}  // namespace

std::string QuantizationConfig::to_json(int indent) const {
  ojson j;
  ojson groups = ojson::object();
  for (const auto& [n, s] : config_groups) groups[n] = scheme_to_config_ojson(s);
  j["config_groups"] = groups;
  j["quant_method"] = quant_method;
  j["kv_cache_scheme"] = kv_cache_scheme ? args_to_config_ojson(*kv_cache_scheme) : ojson(nullptr);
  j["format"] = format;
  j["quantization_status"] = std::string(to_string(quantization_status));
  j["global_compression_ratio"] = global_compression_ratio ? ojson(*global_compression_ratio) : ojson(nullptr);
  j["ignore"] = ignore;
  j["moe_sparsity_config"] = moe_sparsity_config ? moe_to_ojson(*moe_sparsity_config) : ojson(nullptr);
  return j.dump(indent);
}

QuantizationConfig QuantizationConfig::from_json(std::string_view json) {
  const ojson j = parse_json(json, "QuantizationConfig");
  QOBS_CHECK(j.is_object(), InvalidArgument, "QuantizationConfig JSON must be an object");
  QuantizationConfig c;
  if (j.contains("config_groups") && !j["config_groups"].is_null()) {
    QOBS_CHECK(j["config_groups"].is_object(), InvalidArgument,
               "QuantizationConfig.config_groups must be an object of named groups, got ", j["config_groups"].dump(),
               " (R1.6.1)");
    for (auto it = j["config_groups"].begin(); it != j["config_groups"].end(); ++it) {
      if (it.value().is_array() && is_preset_name(it.key())) {
        c.config_groups.emplace_back(
            it.key(),
            preset_scheme(it.key(), string_list(it.value(), "QuantizationConfig.config_groups." + it.key(), "R1.6.1")));
      } else {
        c.config_groups.emplace_back(it.key(), scheme_from_ojson(it.value()));
      }
    }
  }
  if (j.contains("quant_method") && j["quant_method"].is_string()) c.quant_method = j["quant_method"];
  if (j.contains("kv_cache_scheme") && !j["kv_cache_scheme"].is_null())
    c.kv_cache_scheme = args_from_ojson(j["kv_cache_scheme"]);
  if (j.contains("format") && j["format"].is_string()) c.format = j["format"];
  if (j.contains("quantization_status") && j["quantization_status"].is_string()) {
    const std::string st = j["quantization_status"];
    bool found = false;
    for (auto v : {QuantizationStatus::kInitialized, QuantizationStatus::kCalibration, QuantizationStatus::kFrozen,
                   QuantizationStatus::kCompressed, QuantizationStatus::kDecompressed})
      if (st == to_string(v)) {
        c.quantization_status = v;
        found = true;
      }
    QOBS_CHECK(found, InvalidArgument, "quantization_status '", st, "' is not a known status (R1.6.1)");
  }
  if (j.contains("global_compression_ratio") && j["global_compression_ratio"].is_number())
    c.global_compression_ratio = j["global_compression_ratio"].get<double>();
  if (j.contains("ignore") && !j["ignore"].is_null())
    c.ignore = string_list(j["ignore"], "QuantizationConfig.ignore", "R1.6.1");
  if (j.contains("moe_sparsity_config") && !j["moe_sparsity_config"].is_null())
    c.moe_sparsity_config = moe_from_ojson(j["moe_sparsity_config"]);
  return c;
}

std::string module_type_for_ignore(std::string_view class_name) {
  const std::string n(class_name);
  const bool gate_like = n.find("Router") != std::string::npos || n.find("Gate") != std::string::npos ||
                         n.find("Gating") != std::string::npos;
  if (gate_like && n.find("ExpertMLP") == std::string::npos) return "Linear";
  return n;
}

}  // namespace qobs
