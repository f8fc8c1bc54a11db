// --config documents: a compressed-tensors QuantizationConfig or an llm-compressor
// recipe's QuantizationModifier, turned into the one QuantizationConfig JSON that core
// parses (QuantizationConfig::from_json: group schemes, preset groups, kv_cache_scheme);
// and the one typing rule of YAML scalars, for --config YAML and --observer-kwarg values.
#include <re2/re2.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/text.h"
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
    QOBS_CHECK(m.contains("scheme"), InvalidArgument, source,
               ": QuantizationModifier has neither config_groups nor scheme");
    const std::vector<std::string> targets =
        m.contains("targets") ? string_list(m["targets"], "targets", source) : std::vector<std::string>{"Linear"};
    json groups = json::object();
    const json& s = m["scheme"];
    if (s.is_string()) {
      groups["group_0"] = json::parse(preset_scheme(s.get<std::string>(), targets).to_config_json());
    } else {
      QOBS_CHECK(s.is_object(), InvalidArgument, source, ": scheme must be a preset name or a map preset -> targets");
      for (const auto& [preset, t] : s.items())
        groups["group_" + std::to_string(groups.size())] =
            json::parse(preset_scheme(preset, string_list(t, "scheme." + preset, source)).to_config_json());
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
      QOBS_THROW(
          InvalidArgument, source,
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

// ---- YAML plain scalars: the one typing rule ----------------------------------------------

namespace {

// PyYAML's implicit resolvers (yaml/resolver.py), which yaml.safe_load applies and
// llm-compressor reads recipes with, in its order: bool, float, int, null. Anything else
// is a string (timestamps too: qobs has no date values).
const RE2& yaml_bool() {
  static const RE2 re("yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF");
  return re;
}
const RE2& yaml_float() {
  static const RE2 re(R"([-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?)"
                      R"(|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))");
  return re;
}
const RE2& yaml_int() {
  static const RE2 re(R"([-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)"
                      R"(|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)");
  return re;
}
const RE2& yaml_null() {
  static const RE2 re("~|null|Null|NULL|");
  return re;
}

/// `text` without its '_' separators and its sign; `negative` receives the sign.
std::string unsigned_part(std::string_view text, bool& negative) {
  std::string s;
  for (const char ch : text)
    if (ch != '_') s += ch;
  negative = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.erase(0, 1);
  return s;
}

/// dec = dec * base + digit on a decimal digit string: integers of any size convert
/// exactly (PyYAML's are unbounded; beyond int64 they are FieldValue::BigInt).
void mul_add(std::string& dec, int base, int digit) {
  int carry = digit;
  for (auto it = dec.rbegin(); it != dec.rend(); ++it) {
    const int x = (*it - '0') * base + carry;
    *it = static_cast<char>('0' + x % 10);
    carry = x / 10;
  }
  for (; carry > 0; carry /= 10) dec.insert(dec.begin(), static_cast<char>('0' + carry % 10));
}

/// SafeConstructor.construct_yaml_int on a scalar the int resolver matched: 0b binary,
/// 0x hexadecimal, a leading 0 octal, base 60 with ':' (1:30 is 90), else decimal.
FieldValue yaml_int_value(std::string_view text) {
  bool negative = false;
  const std::string s = unsigned_part(text, negative);
  std::string dec = "0";
  const auto add_digits = [&](std::string_view part, int base) {
    // '0b_' and '0x_' match the resolver but have no digits: PyYAML fails on them too
    QOBS_CHECK(!part.empty(), InvalidArgument, "'", text, "' is not an integer: no digits after its prefix");
    for (const char ch : part) mul_add(dec, base, ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
  };
  const std::string_view v = s;
  if (v.starts_with("0b")) {
    add_digits(v.substr(2), 2);
  } else if (v.starts_with("0x")) {
    add_digits(v.substr(2), 16);
  } else if (v.size() > 1 && v[0] == '0') {
    add_digits(v, 8);
  } else if (const auto colon = v.find(':'); colon != std::string_view::npos) {
    add_digits(v.substr(0, colon), 10);
    for (std::string_view rest = v.substr(colon + 1);;) {
      const auto next = rest.find(':');
      int sixty = 0;  // one base-60 digit: at most two decimal digits
      for (const char ch : rest.substr(0, next)) sixty = sixty * 10 + (ch - '0');
      mul_add(dec, 60, sixty);
      if (next == std::string_view::npos) break;
      rest.remove_prefix(next + 1);
    }
  } else {
    add_digits(v, 10);
  }
  dec.erase(0, std::min(dec.find_first_not_of('0'), dec.size() - 1));
  const std::string_view limit = negative ? "9223372036854775808" : "9223372036854775807";
  if (dec.size() > limit.size() || (dec.size() == limit.size() && dec > limit))
    return {FieldValue::BigInt{(negative ? "-" : "") + dec}};
  int64_t out = 0;
  const std::string signed_dec = (negative ? "-" : "") + dec;
  std::from_chars(signed_dec.data(), signed_dec.data() + signed_dec.size(), out);
  return {out};
}

/// SafeConstructor.construct_yaml_float on a scalar the float resolver matched.
double yaml_float_value(std::string_view text) {
  bool negative = false;
  const std::string s = ascii_lower(unsigned_part(text, negative));
  const double sign = negative ? -1.0 : 1.0;
  if (s == ".inf") return sign * std::numeric_limits<double>::infinity();
  if (s == ".nan") return std::numeric_limits<double>::quiet_NaN();
  // strtod reads the C locale's '.', the locale every program starts in (qobs never
  // changes it); it rounds correctly, as Python's float() does.
  const auto number = [](const std::string& part) { return std::strtod(part.c_str(), nullptr); };
  if (s.find(':') == std::string::npos) return sign * number(s);
  // base 60 as PyYAML sums it, in doubles: the parts from the last, each times 60^k
  std::vector<double> parts;
  for (std::size_t at = 0;;) {
    const auto next = s.find(':', at);
    parts.push_back(number(s.substr(at, next - at)));
    if (next == std::string::npos) break;
    at = next + 1;
  }
  double value = 0.0, base = 1.0;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    value += *it * base;
    base *= 60;
  }
  return sign * value;
}

}  // namespace

FieldValue yaml_plain_scalar(std::string_view text) {
  const std::string t(text);
  if (RE2::FullMatch(t, yaml_bool())) {
    const std::string l = ascii_lower(text);
    return {l == "yes" || l == "true" || l == "on"};
  }
  if (RE2::FullMatch(t, yaml_float())) return {yaml_float_value(text)};
  if (RE2::FullMatch(t, yaml_int())) return yaml_int_value(text);
  if (RE2::FullMatch(t, yaml_null())) return {nullptr};
  return {std::string(text)};
}

}  // namespace qobs
