#include "qobs/args.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/text.h"
#include "qobs/formats.h"

namespace qobs {

using ojson = nlohmann::ordered_json;

namespace {

bool is_group_like(Strategy s) { return s == Strategy::kGroup || s == Strategy::kTensorGroup; }

}  // namespace

std::string_view to_string(QuantType v) { return v == QuantType::kInt ? "int" : "float"; }

std::string_view to_string(Strategy v) {
  switch (v) {
    case Strategy::kTensor: return "tensor";
    case Strategy::kChannel: return "channel";
    case Strategy::kGroup: return "group";
    case Strategy::kBlock: return "block";
    case Strategy::kToken: return "token";
    case Strategy::kTensorGroup: return "tensor_group";
    case Strategy::kAttnHead: return "attn_head";
  }
  return "";
}

std::string_view to_string(ActOrder v) {
  switch (v) {
    case ActOrder::kNone: return "";
    case ActOrder::kGroup: return "group";
    case ActOrder::kWeight: return "weight";
    case ActOrder::kDynamic: return "dynamic";
    case ActOrder::kStatic: return "static";
  }
  return "";
}

std::string_view to_string(QuantizationStatus s) {
  switch (s) {
    case QuantizationStatus::kInitialized: return "initialized";
    case QuantizationStatus::kCalibration: return "calibration";
    case QuantizationStatus::kFrozen: return "frozen";
    case QuantizationStatus::kCompressed: return "compressed";
    case QuantizationStatus::kDecompressed: return "decompressed";
  }
  return "";
}

QuantType parse_quant_type(std::string_view s) {
  const std::string l = ascii_lower(s);
  if (l == "int") return QuantType::kInt;
  if (l == "float") return QuantType::kFloat;
  QOBS_THROW(InvalidArgument, "type: '", s, "' is not one of int, float (R1.1.1)");
}

Strategy parse_strategy(std::string_view s) {
  const std::string l = ascii_lower(s);
  for (Strategy v : {Strategy::kTensor, Strategy::kChannel, Strategy::kGroup, Strategy::kBlock,
                     Strategy::kToken, Strategy::kTensorGroup, Strategy::kAttnHead})
    if (l == to_string(v)) return v;
  QOBS_THROW(InvalidArgument, "strategy: '", s,
             "' is not one of tensor, channel, group, block, token, tensor_group, attn_head (R1.1.2)");
}

Dynamic parse_dynamic(std::string_view s) {
  const std::string l = ascii_lower(s);
  if (l == "local") return Dynamic::kLocal;
  if (l == "true") return Dynamic::kTrue;
  if (l == "false") return Dynamic::kFalse;
  QOBS_THROW(InvalidArgument, "dynamic: string value '", s, "' must be \"local\" (R1.1.3)");
}

ActOrder parse_actorder(std::string_view s) {
  const std::string l = ascii_lower(s);
  if (l == "group") return ActOrder::kGroup;
  if (l == "weight") return ActOrder::kWeight;
  if (l == "dynamic") return ActOrder::kDynamic;
  if (l == "static") return ActOrder::kStatic;
  if (l == "true") return ActOrder::kGroup;
  if (l == "false" || l == "none" || l == "null" || l.empty()) return ActOrder::kNone;
  QOBS_THROW(InvalidArgument, "actorder: '", s, "' is not one of group, weight, dynamic, static (R1.1.4)");
}

ActOrder actorder_canonical(ActOrder a) {
  if (a == ActOrder::kDynamic) return ActOrder::kGroup;
  if (a == ActOrder::kStatic) return ActOrder::kWeight;
  return a;
}
bool actorder_equivalent(ActOrder a, ActOrder b) { return actorder_canonical(a) == actorder_canonical(b); }

double kwarg_as_double(const std::string& name, const KwargValue& v) {
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1.0 : 0.0;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  QOBS_THROW(InvalidArgument, "observer_kwargs['", name, "']: expected a number, got '",
             std::get<std::string>(v), "' (R6.7.1)");
}

std::array<int64_t, 2> parse_block_structure(std::string_view text) {
  std::vector<int64_t> parts;
  std::string cur;
  auto flush = [&]() {
    QOBS_CHECK(!cur.empty(), InvalidArgument, "block_structure '", text, "': expected \"AxB\" with two positive integers (R1.2.2)");
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(cur, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    QOBS_CHECK(used == cur.size(), InvalidArgument, "block_structure '", text, "': '", cur, "' is not an integer (R1.2.2)");
    parts.push_back(v);
    cur.clear();
  };
  for (char c : text) {
    if (c == 'x' || c == 'X') flush();
    else cur.push_back(c);
  }
  flush();
  QOBS_CHECK(parts.size() == 2 && parts[0] > 0 && parts[1] > 0, InvalidArgument, "block_structure '", text,
             "': must be two positive integers \"AxB\" (R1.2.2)");
  return {parts[0], parts[1]};
}

bool QuantizationArgs::is_mx() const {
  return (num_bits == 4 || num_bits == 8) && type == QuantType::kFloat && group_size && *group_size == 32 &&
         scale_dtype && *scale_dtype == DType::kU8;
}

std::pair<float, float> QuantizationArgs::q_range() const {
  if (type == QuantType::kInt) {
    QOBS_CHECK(num_bits >= 1 && num_bits <= 32, InvalidArgument, "num_bits ", num_bits, " out of range for int (R2.1)");
    const double hi = std::ldexp(1.0, num_bits - 1);
    return {static_cast<float>(-hi), static_cast<float>(hi - 1)};
  }
  if (num_bits == 8) return {-kFp8E4M3Max, kFp8E4M3Max};
  if (num_bits == 4) return {-kFp4E2M1Max, kFp4E2M1Max};
  QOBS_THROW(NotImplementedError, "float quantization with num_bits=", num_bits,
             " is not supported: only 4 (FP4 E2M1) and 8 (FP8 E4M3) (R4.1 step 2)");
}

DType QuantizationArgs::pytorch_dtype() const {
  if (type == QuantType::kFloat) {
    if (num_bits == 8) return DType::kF8E4M3;
    QOBS_THROW(NotImplementedError, "type float with num_bits=", num_bits,
               " has no storage dtype; give zp_dtype explicitly (R1.3.2)");
  }
  if (num_bits <= 8) return DType::kI8;
  if (num_bits <= 16) return DType::kI16;
  return DType::kI32;
}

Strategy QuantizationArgs::get_strategy() const {
  QOBS_CHECK(strategy.has_value(), PreconditionError, "QuantizationArgs: strategy not inferred; call validated() (R1.3.1)");
  return *strategy;
}

QuantizationArgs QuantizationArgs::validated() const {
  QuantizationArgs a = *this;
  // R1.2.2 field checks
  QOBS_CHECK(!a.group_size || *a.group_size >= -1, InvalidArgument, "group_size ", *a.group_size,
             " is invalid: must be -1, 0 or positive (R1.2.2)");
  if (a.block_structure)
    QOBS_CHECK((*a.block_structure)[0] > 0 && (*a.block_structure)[1] > 0, InvalidArgument, "block_structure [",
               (*a.block_structure)[0], ", ", (*a.block_structure)[1], "] must be two positive integers (R1.2.2)");
  // R1.3.1 step 1
  if (!a.strategy) {
    if (!a.group_size) a.strategy = Strategy::kTensor;
    else if (*a.group_size > 0) a.strategy = Strategy::kGroup;
    else if (*a.group_size == -1) a.strategy = Strategy::kChannel;
    else QOBS_THROW(InvalidArgument, "group_size 0 without a strategy cannot be inferred (R1.3.1-1)");
  }
  const Strategy s = *a.strategy;
  // step 2
  QOBS_CHECK(!(s == Strategy::kToken && a.dynamic == Dynamic::kFalse), InvalidArgument,
             "strategy token requires dynamic quantization: static token quantization is impossible (R1.3.1-2)");
  // step 3
  if (is_group_like(s))
    QOBS_CHECK(a.group_size && *a.group_size > 0, InvalidArgument, "strategy ", to_string(s),
               " requires a positive group_size, got ", a.group_size ? std::to_string(*a.group_size) : "null",
               " (R1.3.1-3)");
  // step 4
  if (a.group_size && *a.group_size > 0)
    QOBS_CHECK(is_group_like(s), InvalidArgument, "group_size ", *a.group_size, " given with strategy ",
               to_string(s), ": only group and tensor_group take a group_size (R1.3.1-4)");
  // step 5
  if (s == Strategy::kBlock)
    QOBS_CHECK(a.block_structure.has_value(), InvalidArgument, "strategy block requires block_structure (R1.3.1-5)");
  else
    QOBS_CHECK(!a.block_structure.has_value(), InvalidArgument, "block_structure given with strategy ",
               to_string(s), ": only block takes one (R1.3.1-5)");
  // step 6
  if (actorder_canonical(a.actorder) == ActOrder::kGroup)
    QOBS_CHECK(is_group_like(s), InvalidArgument, "actorder ", to_string(a.actorder), " requires strategy group or tensor_group, got ",
               to_string(s), " (R1.3.1-6)");
  // step 7
  if (a.dynamic != Dynamic::kFalse) {
    QOBS_CHECK(s == Strategy::kToken || s == Strategy::kTensor || s == Strategy::kTensorGroup || s == Strategy::kGroup,
               InvalidArgument, "dynamic quantization supports strategies token, tensor, tensor_group, group; got ",
               to_string(s), " (R1.3.1-7)");
    if (a.dynamic == Dynamic::kLocal) {
      QOBS_CHECK(s == Strategy::kTensorGroup, InvalidArgument, "dynamic \"local\" requires strategy tensor_group, got ",
                 to_string(s), " (R1.3.1-7)");
      if (!a.observer) a.observer = "minmax";
    } else {
      a.observer.reset();
    }
  } else if (!a.observer) {
    // step 8
    a.observer = "memoryless_minmax";
  }
  // step 9
  if (!a.zp_dtype) a.zp_dtype = a.is_fp4() ? DType::kF8E4M3 : a.pytorch_dtype();
  return a;
}

bool operator==(const QuantizationArgs& a, const QuantizationArgs& b) {
  return a.num_bits == b.num_bits && a.type == b.type && a.symmetric == b.symmetric && a.group_size == b.group_size &&
         a.strategy == b.strategy && a.block_structure == b.block_structure && a.dynamic == b.dynamic &&
         actorder_equivalent(a.actorder, b.actorder) && a.scale_dtype == b.scale_dtype && a.zp_dtype == b.zp_dtype &&
         a.observer == b.observer && a.observer_kwargs == b.observer_kwargs;
}

// ---- JSON -----------------------------------------------------------------------------

namespace {

ojson kwargs_to_json(const ObserverKwargs& kw) {
  ojson j = ojson::object();
  // (an explicit key variable: C++20 clang 14 cannot capture structured bindings)
  for (const auto& entry : kw) {
    const std::string& key = entry.first;
    std::visit([&](const auto& x) { j[key] = x; }, entry.second);
  }
  return j;
}

std::string dtype_json_name(DType dt) { return "torch." + std::string(dtype_name(dt)); }

ojson args_to_ojson(const QuantizationArgs& a) {
  ojson j;
  j["num_bits"] = a.num_bits;
  j["type"] = std::string(to_string(a.type));
  j["symmetric"] = a.symmetric;
  j["group_size"] = a.group_size ? ojson(*a.group_size) : ojson(nullptr);
  j["strategy"] = a.strategy ? ojson(std::string(to_string(*a.strategy))) : ojson(nullptr);
  j["block_structure"] =
      a.block_structure ? ojson::array({(*a.block_structure)[0], (*a.block_structure)[1]}) : ojson(nullptr);
  if (a.dynamic == Dynamic::kLocal) j["dynamic"] = "local";
  else j["dynamic"] = a.dynamic == Dynamic::kTrue;
  j["actorder"] = a.actorder == ActOrder::kNone ? ojson(nullptr) : ojson(std::string(to_string(a.actorder)));
  j["scale_dtype"] = a.scale_dtype ? ojson(dtype_json_name(*a.scale_dtype)) : ojson(nullptr);
  j["zp_dtype"] = (a.zp_dtype && !a.symmetric) ? ojson(dtype_json_name(*a.zp_dtype)) : ojson(nullptr);
  j["observer"] = a.observer ? ojson(*a.observer) : ojson(nullptr);
  j["observer_kwargs"] = kwargs_to_json(a.observer_kwargs);
  return j;
}

/// A JSON value as the parser's input. An unsigned integer beyond int64 keeps its digits
/// (get<int64_t>() would wrap it to a negative number).
FieldValue field_from_ojson(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return {nullptr};
    case ojson::value_t::boolean: return {v.get<bool>()};
    case ojson::value_t::number_integer: return {v.get<int64_t>()};
    case ojson::value_t::number_unsigned: {
      const auto u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return {FieldValue::BigInt{std::to_string(u)}};
      return {static_cast<int64_t>(u)};
    }
    case ojson::value_t::number_float: return {v.get<double>()};
    case ojson::value_t::string: return {v.get<std::string>()};
    case ojson::value_t::array: {
      FieldValue::List l;
      for (const auto& e : v) l.push_back(field_from_ojson(e));
      return {std::move(l)};
    }
    case ojson::value_t::object: {
      FieldValue::Map m;
      for (auto it = v.begin(); it != v.end(); ++it) m.emplace_back(it.key(), field_from_ojson(it.value()));
      return {std::move(m)};
    }
    default: return {FieldValue::Foreign{v.type_name()}};  // binary / discarded: never from text
  }
}

template <typename T>
const T* get(const FieldValue& v) {
  return std::get_if<T>(&v.value);
}
bool is_null(const FieldValue& v) { return get<std::nullptr_t>(v) != nullptr; }
bool is_int(const FieldValue& v) { return get<int64_t>(v) || get<FieldValue::BigInt>(v); }

/// An integer field; one beyond int64 is rejected naming `what` and its value.
int64_t int64_of(const FieldValue& v, std::string_view what) {
  if (const auto* big = get<FieldValue::BigInt>(v))
    QOBS_THROW(InvalidArgument, what, " ", big->digits, " is out of the int64 range [", INT64_MIN, ", ", INT64_MAX,
               "] (R1.2)");
  return *get<int64_t>(v);
}

/// The one parser of R1.2 (JSON documents and Python keywords both arrive here).
QuantizationArgs args_from_fields(const FieldValue::Map& fields) {
  QuantizationArgs a;
  for (const auto& field : fields) {
    // named references, not a structured binding: clang 14 cannot capture those
    const auto& k = field.first;
    const auto& v = field.second;
    auto need = [&](bool ok, const char* what) {
      QOBS_CHECK(ok, InvalidArgument, "QuantizationArgs.", k, ": expected ", what, ", got ", v.dump(), " (R1.2)");
    };
    const std::string* str = get<std::string>(v);
    if (k == "num_bits") {
      need(is_int(v), "an integer");
      const int64_t bits = int64_of(v, "num_bits");
      QOBS_CHECK(bits >= INT32_MIN && bits <= INT32_MAX, InvalidArgument, "num_bits ", bits,
                 " is out of the int32 range (R1.2)");
      a.num_bits = static_cast<int>(bits);
    } else if (k == "type") {
      need(str, "a string");
      a.type = parse_quant_type(*str);
    } else if (k == "symmetric") {
      need(get<bool>(v), "a boolean");
      a.symmetric = *get<bool>(v);
    } else if (k == "group_size") {
      need(is_null(v) || is_int(v), "an integer or null");
      if (!is_null(v)) a.group_size = int64_of(v, "group_size");
    } else if (k == "strategy") {
      need(is_null(v) || str, "a string or null");
      if (str) a.strategy = parse_strategy(*str);
    } else if (k == "block_structure") {
      if (is_null(v)) continue;
      if (str) {
        a.block_structure = parse_block_structure(*str);
        continue;
      }
      const auto* l = get<FieldValue::List>(v);
      need(l && l->size() == 2 && is_int((*l)[0]) && is_int((*l)[1]), "two positive integers");
      a.block_structure =
          std::array<int64_t, 2>{int64_of((*l)[0], "block_structure element"), int64_of((*l)[1], "block_structure element")};
      QOBS_CHECK((*a.block_structure)[0] > 0 && (*a.block_structure)[1] > 0, InvalidArgument, "block_structure ",
                 v.dump(), " must be two positive integers (R1.2.2)");
    } else if (k == "dynamic") {
      if (const bool* b = get<bool>(v)) {
        a.dynamic = *b ? Dynamic::kTrue : Dynamic::kFalse;
      } else {
        need(str, "a boolean or \"local\"");
        // R1.1.3: a string must spell "local"; "true"/"false" strings are not booleans.
        QOBS_CHECK(parse_dynamic(*str) == Dynamic::kLocal, InvalidArgument, "dynamic: string value '", *str,
                   "' must be \"local\" (R1.1.3)");
        a.dynamic = Dynamic::kLocal;
      }
    } else if (k == "actorder") {
      if (is_null(v)) a.actorder = ActOrder::kNone;
      else if (const bool* b = get<bool>(v)) a.actorder = *b ? ActOrder::kGroup : ActOrder::kNone;
      else {
        need(str, "a string, boolean or null");
        a.actorder = parse_actorder(*str);
      }
    } else if (k == "scale_dtype") {
      need(is_null(v) || str, "a dtype name or null");
      if (str) a.scale_dtype = parse_dtype(*str);
    } else if (k == "zp_dtype") {
      need(is_null(v) || str, "a dtype name or null");
      if (str) a.zp_dtype = parse_dtype(*str);
    } else if (k == "observer") {
      need(is_null(v) || str, "a string or null");
      if (str) a.observer = *str;
    } else if (k == "observer_kwargs") {
      a.observer_kwargs = observer_kwargs_from_field(v);
    } else {
      QOBS_THROW(InvalidArgument, "QuantizationArgs: unknown field '", k, "' (R1.2.1)");
    }
  }
  return a.validated();
}

QuantizationArgs args_from_ojson(const ojson& j) {
  QOBS_CHECK(j.is_object(), InvalidArgument, "QuantizationArgs JSON must be an object");
  return args_from_fields(std::get<FieldValue::Map>(field_from_ojson(j).value));
}

ojson parse_json(std::string_view text, const char* what) {
  try {
    return ojson::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    QOBS_THROW(InvalidArgument, what, ": invalid JSON: ", e.what());
  }
}

}  // namespace

std::string FieldValue::dump() const {
  struct Dump {
    std::string operator()(std::nullptr_t) const { return "null"; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(const BigInt& b) const { return b.digits; }
    std::string operator()(double d) const { return ojson(d).dump(); }  // JSON's spelling of a double
    std::string operator()(const std::string& s) const { return ojson(s).dump(); }
    std::string operator()(const List& l) const {
      std::string out = "[";
      for (std::size_t i = 0; i < l.size(); ++i) out += (i ? "," : "") + l[i].dump();
      return out + "]";
    }
    std::string operator()(const Map& m) const {
      std::string out = "{";
      for (std::size_t i = 0; i < m.size(); ++i) out += (i ? "," : "") + ojson(m[i].first).dump() + ":" + m[i].second.dump();
      return out + "}";
    }
    std::string operator()(const Foreign& f) const { return "<" + f.type_name + ">"; }
  };
  return std::visit(Dump{}, value);
}

ObserverKwargs observer_kwargs_from_field(const FieldValue& v, std::string_view what) {
  ObserverKwargs kw;
  if (is_null(v)) return kw;
  const auto* m = get<FieldValue::Map>(v);
  QOBS_CHECK(m, InvalidArgument, what, " must be an object of names to values, got ", v.dump(), " (R1.2)");
  for (const auto& [key, x] : *m) {
    if (const bool* b = get<bool>(x)) kw[key] = *b;
    else if (const int64_t* i = get<int64_t>(x)) kw[key] = *i;
    else if (const double* d = get<double>(x)) kw[key] = *d;
    else if (const std::string* s = get<std::string>(x)) kw[key] = *s;
    else QOBS_THROW(InvalidArgument, what, "['", key, "']: unsupported value ", x.dump(),
                    " (expected a boolean, integer, number or string, R1.2)");
  }
  return kw;
}

QuantizationArgs QuantizationArgs::from_fields(const FieldValue::Map& fields) { return args_from_fields(fields); }

std::string QuantizationArgs::to_json(int indent) const { return args_to_ojson(*this).dump(indent); }

QuantizationArgs QuantizationArgs::from_json(std::string_view json) {
  return args_from_ojson(parse_json(json, "QuantizationArgs"));
}

// ---- scheme ---------------------------------------------------------------------------

QuantizationScheme QuantizationScheme::validated() const {
  QuantizationScheme s = *this;
  if (s.weights) s.weights = s.weights->validated();
  if (s.input_activations) {
    s.input_activations = s.input_activations->validated();
    const Strategy st = s.input_activations->get_strategy();
    QOBS_CHECK(st == Strategy::kToken || st == Strategy::kTensor || st == Strategy::kGroup ||
                   st == Strategy::kTensorGroup || st == Strategy::kAttnHead,
               NotImplementedError, "input_activations with strategy ", to_string(st),
               " are not supported (R1.4.2)");
    QOBS_CHECK(s.input_activations->actorder == ActOrder::kNone, InvalidArgument,
               "actorder cannot be set on input activations (R1.4.2)");
  }
  if (s.output_activations) {
    s.output_activations = s.output_activations->validated();
    QOBS_CHECK(s.output_activations->actorder == ActOrder::kNone, InvalidArgument,
               "actorder cannot be set on output activations (R1.4.2)");
  }
  QOBS_CHECK(!(s.format && *s.format == "mixed-precision"), InvalidArgument,
             "a scheme's format cannot be \"mixed-precision\" (R1.4.2)");
  return s;
}

namespace {

ojson scheme_to_ojson(const QuantizationScheme& s) {
  ojson j;
  j["targets"] = s.targets;
  j["weights"] = s.weights ? args_to_ojson(*s.weights) : ojson(nullptr);
  j["input_activations"] = s.input_activations ? args_to_ojson(*s.input_activations) : ojson(nullptr);
  j["output_activations"] = s.output_activations ? args_to_ojson(*s.output_activations) : ojson(nullptr);
  j["format"] = s.format ? ojson(*s.format) : ojson(nullptr);
  return j;
}

// A JSON list of strings (targets, ignore lists), or InvalidArgument naming `what`.
std::vector<std::string> string_list(const ojson& v, const std::string& what, const char* rule) {
  QOBS_CHECK(v.is_array(), InvalidArgument, what, " must be a list of strings, got ", v.dump(), " (", rule, ")");
  std::vector<std::string> out;
  for (const auto& t : v) {
    QOBS_CHECK(t.is_string(), InvalidArgument, what, " must be a list of strings, got the element ", t.dump(), " (",
               rule, ")");
    out.push_back(t.get<std::string>());
  }
  return out;
}

QuantizationScheme scheme_from_ojson(const ojson& j) {
  QOBS_CHECK(j.is_object(), InvalidArgument, "QuantizationScheme JSON must be an object");
  QuantizationScheme s;
  bool has_targets = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    if (k == "targets") {
      s.targets = string_list(v, "QuantizationScheme.targets", "R1.4.1");
      has_targets = true;
    } else if (k == "weights") {
      if (!v.is_null()) s.weights = args_from_ojson(v);
    } else if (k == "input_activations") {
      if (!v.is_null()) s.input_activations = args_from_ojson(v);
    } else if (k == "output_activations") {
      if (!v.is_null()) s.output_activations = args_from_ojson(v);
    } else if (k == "format") {
      QOBS_CHECK(v.is_null() || v.is_string(), InvalidArgument, "QuantizationScheme.format must be a string, got ",
                 v.dump(), " (R1.4.1)");
      if (!v.is_null()) s.format = v.get<std::string>();
    } else {
      QOBS_THROW(InvalidArgument, "QuantizationScheme: unknown field '", k, "' (R1.4.1)");
    }
  }
  QOBS_CHECK(has_targets, InvalidArgument, "QuantizationScheme: field 'targets' is required (R1.4.1)");
  return s.validated();
}

}  // namespace

std::string QuantizationScheme::to_json(int indent) const { return scheme_to_ojson(*this).dump(indent); }
QuantizationScheme QuantizationScheme::from_json(std::string_view json) {
  return scheme_from_ojson(parse_json(json, "QuantizationScheme"));
}

// ---- presets (R1.5) -------------------------------------------------------------------

namespace {

QuantizationArgs int_weights(int bits, bool symmetric, std::optional<int64_t> group, Strategy strategy) {
  QuantizationArgs a;
  a.num_bits = bits;
  a.type = QuantType::kInt;
  a.symmetric = symmetric;
  a.group_size = group;
  a.strategy = strategy;
  return a;
}

QuantizationArgs dyn_token(int bits, QuantType type) {
  QuantizationArgs a;
  a.num_bits = bits;
  a.type = type;
  a.strategy = Strategy::kToken;
  a.dynamic = Dynamic::kTrue;
  return a;
}

QuantizationArgs fp4_args(int64_t group, Strategy strategy, DType scale_dtype) {
  QuantizationArgs a;
  a.num_bits = 4;
  a.type = QuantType::kFloat;
  a.group_size = group;
  a.strategy = strategy;
  a.scale_dtype = scale_dtype;
  a.zp_dtype = scale_dtype;
  return a;
}

const std::vector<std::string>& wxay_names() {
  static const std::vector<std::string> k{"W2A4",  "W2A8", "W2A16", "W3A4",  "W3A8", "W3A16", "W4A4",  "W4A8",
                                          "W4A16", "W5A8", "W5A16", "W6A8",  "W6A16", "W7A8", "W7A16", "W8A16"};
  return k;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names{"UNQUANTIZED"};
  for (const auto& n : wxay_names()) names.push_back(n);
  for (const char* n : {"W4A16_ASYM", "W8A8", "INT8", "W4AFP8", "FP8", "FP8_DYNAMIC", "FP8_BLOCK", "NVFP4A16", "NVFP4",
                        "MXFP4A16", "MXFP4", "MXFP8A16", "MXFP8"})
    names.emplace_back(n);
  return names;
}

bool is_preset_name(std::string_view name) {
  const std::string u = ascii_upper(name);
  for (const auto& n : preset_names())
    if (n == u) return true;
  return false;
}

QuantizationScheme preset_scheme(std::string_view name, std::vector<std::string> targets) {
  const std::string u = ascii_upper(name);
  QuantizationScheme s;
  s.targets = std::move(targets);
  if (u == "UNQUANTIZED") return s;
  if (std::find(wxay_names().begin(), wxay_names().end(), u) != wxay_names().end()) {
    const int wb = u[1] - '0';
    const int ab = std::stoi(u.substr(3));
    s.weights = int_weights(wb, true, 128, Strategy::kGroup);
    if (ab != 16) s.input_activations = dyn_token(ab, QuantType::kInt);
  } else if (u == "W4A16_ASYM") {
    s.weights = int_weights(4, false, 128, Strategy::kGroup);
  } else if (u == "W8A8" || u == "INT8") {
    s.weights = int_weights(8, true, std::nullopt, Strategy::kChannel);
    s.input_activations = dyn_token(8, QuantType::kInt);
  } else if (u == "W4AFP8") {
    s.weights = int_weights(4, true, 128, Strategy::kGroup);
    s.input_activations = dyn_token(8, QuantType::kFloat);
  } else if (u == "FP8") {
    QuantizationArgs w;
    w.num_bits = 8;
    w.type = QuantType::kFloat;
    w.strategy = Strategy::kTensor;
    s.weights = w;
    QuantizationArgs i = w;
    i.observer = "static_minmax";
    s.input_activations = i;
  } else if (u == "FP8_DYNAMIC") {
    QuantizationArgs w;
    w.num_bits = 8;
    w.type = QuantType::kFloat;
    w.strategy = Strategy::kChannel;
    s.weights = w;
    s.input_activations = dyn_token(8, QuantType::kFloat);
  } else if (u == "FP8_BLOCK") {
    QuantizationArgs w;
    w.num_bits = 8;
    w.type = QuantType::kFloat;
    w.strategy = Strategy::kBlock;
    w.block_structure = std::array<int64_t, 2>{128, 128};
    s.weights = w;
    QuantizationArgs i;
    i.num_bits = 8;
    i.type = QuantType::kFloat;
    i.strategy = Strategy::kGroup;
    i.group_size = 128;
    i.dynamic = Dynamic::kTrue;
    s.input_activations = i;
  } else if (u == "NVFP4A16" || u == "NVFP4") {
    s.weights = fp4_args(16, Strategy::kTensorGroup, DType::kF8E4M3);
    if (u == "NVFP4") {
      QuantizationArgs i = fp4_args(16, Strategy::kTensorGroup, DType::kF8E4M3);
      i.dynamic = Dynamic::kLocal;
      i.observer = "static_minmax";
      s.input_activations = i;
    }
  } else if (u == "MXFP4A16" || u == "MXFP4") {
    s.weights = fp4_args(32, Strategy::kGroup, DType::kU8);
    if (u == "MXFP4") {
      QuantizationArgs i = fp4_args(32, Strategy::kGroup, DType::kU8);
      i.dynamic = Dynamic::kTrue;
      s.input_activations = i;
    }
  } else if (u == "MXFP8A16" || u == "MXFP8") {
    QuantizationArgs w;
    w.num_bits = 8;
    w.type = QuantType::kFloat;
    w.group_size = 32;
    w.strategy = Strategy::kGroup;
    w.scale_dtype = DType::kU8;
    w.zp_dtype = DType::kU8;
    s.weights = w;
    if (u == "MXFP8") {
      QuantizationArgs i = w;
      i.dynamic = Dynamic::kTrue;
      s.input_activations = i;
    }
  } else {
    QOBS_THROW(UnknownName, "unknown preset scheme '", name, "' (R1.5.1)");
  }
  return s.validated();
}

// ---- config (R1.6) --------------------------------------------------------------------

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

std::string QuantizationConfig::to_json(int indent) const {
  ojson j;
  ojson groups = ojson::object();
  for (const auto& [n, s] : config_groups) groups[n] = scheme_to_ojson(s);
  j["config_groups"] = groups;
  j["quant_method"] = quant_method;
  j["kv_cache_scheme"] = kv_cache_scheme ? args_to_ojson(*kv_cache_scheme) : ojson(nullptr);
  j["format"] = format;
  j["quantization_status"] = std::string(to_string(quantization_status));
  j["global_compression_ratio"] = global_compression_ratio ? ojson(*global_compression_ratio) : ojson(nullptr);
  j["ignore"] = ignore;
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
        c.config_groups.emplace_back(it.key(), preset_scheme(it.key(), string_list(it.value(), "QuantizationConfig.config_groups." + it.key(), "R1.6.1")));
      } else {
        c.config_groups.emplace_back(it.key(), scheme_from_ojson(it.value()));
      }
    }
  }
  if (j.contains("quant_method") && j["quant_method"].is_string()) c.quant_method = j["quant_method"];
  if (j.contains("kv_cache_scheme") && !j["kv_cache_scheme"].is_null()) c.kv_cache_scheme = args_from_ojson(j["kv_cache_scheme"]);
  if (j.contains("format") && j["format"].is_string()) c.format = j["format"];
  if (j.contains("quantization_status") && j["quantization_status"].is_string()) {
    const std::string st = j["quantization_status"];
    bool found = false;
    for (auto v : {QuantizationStatus::kInitialized, QuantizationStatus::kCalibration, QuantizationStatus::kFrozen,
                   QuantizationStatus::kCompressed, QuantizationStatus::kDecompressed})
      if (st == to_string(v)) { c.quantization_status = v; found = true; }
    QOBS_CHECK(found, InvalidArgument, "quantization_status '", st, "' is not a known status (R1.6.1)");
  }
  if (j.contains("global_compression_ratio") && j["global_compression_ratio"].is_number())
    c.global_compression_ratio = j["global_compression_ratio"].get<double>();
  if (j.contains("ignore") && !j["ignore"].is_null()) c.ignore = string_list(j["ignore"], "QuantizationConfig.ignore", "R1.6.1");
  return c;
}

std::string module_type_for_ignore(std::string_view class_name) {
  const std::string n(class_name);
  const bool gate_like = n.find("Router") != std::string::npos || n.find("Gate") != std::string::npos ||
                         n.find("Gating") != std::string::npos;
  if (gate_like && n.find("ExpertMLP") == std::string::npos) return "Linear";
  return n;
}

std::string infer_compression_format(const QuantizationScheme& scheme) {
  if (scheme.format) return *scheme.format;
  if (!scheme.weights) return "dense";
  const QuantizationArgs& w = *scheme.weights;
  const bool g32 = w.group_size && *w.group_size == 32;
  const bool g16 = w.group_size && *w.group_size == 16;
  if (w.type == QuantType::kFloat && w.num_bits == 4 && g32) return "mxfp4-pack-quantized";
  if (w.type == QuantType::kFloat && w.num_bits == 8 && g32 && w.scale_dtype == DType::kU8) return "mxfp8-quantized";
  if (w.type == QuantType::kFloat && w.num_bits == 4 && g16) return "nvfp4-pack-quantized";
  const auto& in = scheme.input_activations;
  if (w.type == QuantType::kInt && in) return "int-quantized";
  if (w.type == QuantType::kInt && w.num_bits >= 1 && w.num_bits <= 8 && (!in || in->type == QuantType::kInt))
    return "pack-quantized";
  if (w.type == QuantType::kFloat && in) return "float-quantized";
  return "naive-quantized";
}

}  // namespace qobs
