// --config documents: a compressed-tensors QuantizationConfig or an llm-compressor
// recipe's QuantizationModifier, turned into the one QuantizationConfig JSON that core
// parses (QuantizationConfig::from_json: group schemes, preset groups, kv_cache_scheme).
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "qobs/pipeline.h"

namespace qobs {

namespace {

using json = nlohmann::ordered_json;

// The first object under key `name` anywhere in the document (recipes nest modifiers
// under stage and group names of the user's choosing, as maps or lists).
const json* find_key(const json& j, const std::string& name) {
  if (j.is_object()) {
    if (j.contains(name)) return &j[name];
    for (const auto& [k, v] : j.items())
      if (const json* f = find_key(v, name)) return f;
  } else if (j.is_array()) {
    for (const auto& v : j)
      if (const json* f = find_key(v, name)) return f;
  }
  return nullptr;
}

// Modifier names found in the document, for the error when none is QuantizationModifier.
void modifier_names(const json& j, std::string& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (k.ends_with("Modifier")) out += (out.empty() ? "" : ", ") + k;
      modifier_names(v, out);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) modifier_names(v, out);
  }
}

std::vector<std::string> string_list(const json& v, const std::string& what, const std::string& source) {
  if (v.is_string()) return {v.get<std::string>()};
  QOBS_CHECK(v.is_array(), InvalidArgument, source, ": ", what, " must be a list of strings, got ", v.dump());
  std::vector<std::string> out;
  for (const auto& e : v) {
    QOBS_CHECK(e.is_string(), InvalidArgument, source, ": ", what, " must be a list of strings, got ", v.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

// QuantizationModifier (llm-compressor's QuantizationMixin fields): config_groups, or
// scheme (a preset name applied to `targets`, or a map preset -> targets), plus ignore
// and kv_cache_scheme.
json config_of_modifier(const json& m, const std::string& source) {
  QOBS_CHECK(m.is_object(), InvalidArgument, source, ": QuantizationModifier must be a mapping, got ", m.dump());
  for (const auto& [k, v] : m.items())
    QOBS_CHECK(k == "config_groups" || k == "scheme" || k == "targets" || k == "ignore" || k == "kv_cache_scheme",
               InvalidArgument, source, ": QuantizationModifier field '", k,
               "' is not supported by qobs (config_groups, scheme, targets, ignore, kv_cache_scheme)");
  QOBS_CHECK(!(m.contains("config_groups") && m.contains("scheme")), InvalidArgument, source,
             ": QuantizationModifier has both config_groups and scheme; give one");
  json c = json::object();
  if (m.contains("config_groups")) {
    c["config_groups"] = m["config_groups"];
  } else {
    QOBS_CHECK(m.contains("scheme"), InvalidArgument, source, ": QuantizationModifier has neither config_groups nor scheme");
    const std::vector<std::string> targets =
        m.contains("targets") ? string_list(m["targets"], "targets", source) : std::vector<std::string>{"Linear"};
    json groups = json::object();
    const json& s = m["scheme"];
    if (s.is_string()) {
      groups["group_0"] = json::parse(preset_scheme(s.get<std::string>(), targets).to_json());
    } else {
      QOBS_CHECK(s.is_object(), InvalidArgument, source, ": scheme must be a preset name or a map preset -> targets");
      for (const auto& [preset, t] : s.items())
        groups["group_" + std::to_string(groups.size())] =
            json::parse(preset_scheme(preset, string_list(t, "scheme." + preset, source)).to_json());
    }
    c["config_groups"] = groups;
  }
  if (m.contains("ignore")) c["ignore"] = string_list(m["ignore"], "ignore", source);
  if (m.contains("kv_cache_scheme")) c["kv_cache_scheme"] = m["kv_cache_scheme"];
  return c;
}

}  // namespace

QuantizationConfig quantization_config_from_document(std::string_view text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    QOBS_THROW(InvalidArgument, source, ": not valid JSON: ", e.what());
  }
  QOBS_CHECK(doc.is_object(), InvalidArgument, source, ": expected a mapping at the top level");
  // Errors of core's parser (and of a preset name) get the file's name in front.
  try {
    json config;
    if (doc.contains("config_groups")) {
      config = doc;  // a QuantizationConfig
    } else if (doc.contains("quantization_config") && doc["quantization_config"].is_object()) {
      config = doc["quantization_config"];  // a config.json
    } else if (const json* m = find_key(doc, "QuantizationModifier")) {
      config = config_of_modifier(*m, source);
    } else {
      std::string found;
      modifier_names(doc, found);
      QOBS_THROW(InvalidArgument, source,
                 ": neither a compressed-tensors QuantizationConfig (config_groups) nor an llm-compressor recipe with a "
                 "QuantizationModifier",
                 found.empty() ? std::string() : " (modifiers found: " + found + "; qobs runs weight calibration only)");
    }
    return QuantizationConfig::from_json(config.dump());
  } catch (const UnknownName& e) {
    if (std::string_view(e.what()).starts_with(source)) throw;
    QOBS_THROW(UnknownName, source, ": ", e.what());
  } catch (const InvalidArgument& e) {
    if (std::string_view(e.what()).starts_with(source)) throw;
    QOBS_THROW(InvalidArgument, source, ": ", e.what());
  }
}

}  // namespace qobs
