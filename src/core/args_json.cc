// QuantizationArgs as JSON (R1.2, R1.3.5) and the one parser of its fields
// (args_from_fields): JSON documents, C++ callers and Python keywords get the same checks
// and messages. Also FieldValue and the observer kwargs read from one.
#include "core/args_json.h"

#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "qobs/args.h"

namespace qobs {

using detail::ojson;

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

/// A JSON value as the parser's input. An unsigned integer beyond int64 keeps its digits
/// (get<int64_t>() would wrap it to a negative number).
FieldValue field_from_ojson(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null:
      return {nullptr};
    case ojson::value_t::boolean:
      return {v.get<bool>()};
    case ojson::value_t::number_integer:
      return {v.get<int64_t>()};
    case ojson::value_t::number_unsigned: {
      const auto u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return {FieldValue::BigInt{std::to_string(u)}};
      return {static_cast<int64_t>(u)};
    }
    case ojson::value_t::number_float:
      return {v.get<double>()};
    case ojson::value_t::string:
      return {v.get<std::string>()};
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
    default:
      return {FieldValue::Foreign{v.type_name()}};  // binary / discarded: never from text
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
      a.block_structure = std::array<int64_t, 2>{int64_of((*l)[0], "block_structure element"),
                                                 int64_of((*l)[1], "block_structure element")};
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

}  // namespace

namespace detail {

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

ojson args_to_config_ojson(const QuantizationArgs& a) {
  ojson full = args_to_ojson(a);
  ojson j;
  for (auto it = full.begin(); it != full.end(); ++it) {
    const std::string& k = it.key();
    const bool drop = ((k == "actorder" || k == "block_structure" || k == "scale_dtype") && it.value().is_null()) ||
                      (k == "observer_kwargs" && it.value().empty()) ||
                      (k == "observer" && (it.value().is_null() || a.observer_inferred)) ||
                      (k == "zp_dtype" && (it.value().is_null() || a.zp_dtype_inferred));
    if (!drop) j[k] = it.value();
  }
  return j;
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

}  // namespace detail

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
      for (std::size_t i = 0; i < l.size(); ++i) {
        if (i) out += ',';
        out += l[i].dump();
      }
      return out + "]";
    }
    std::string operator()(const Map& m) const {
      std::string out = "{";
      for (std::size_t i = 0; i < m.size(); ++i) {
        if (i) out += ',';
        out += ojson(m[i].first).dump();
        out += ':';
        out += m[i].second.dump();
      }
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
    else
      QOBS_THROW(InvalidArgument, what, "['", key, "']: unsupported value ", x.dump(),
                 " (expected a boolean, integer, number or string, R1.2)");
  }
  return kw;
}

QuantizationArgs QuantizationArgs::from_fields(const FieldValue::Map& fields) { return args_from_fields(fields); }

std::string QuantizationArgs::to_json(int indent) const { return detail::args_to_ojson(*this).dump(indent); }
std::string QuantizationArgs::to_config_json(int indent) const {
  return detail::args_to_config_ojson(*this).dump(indent);
}

QuantizationArgs QuantizationArgs::from_json(std::string_view json) {
  return detail::args_from_ojson(detail::parse_json(json, "QuantizationArgs"));
}

}  // namespace qobs
