// QuantizationScheme (R1.4): validated(), its JSON, and the compression format a scheme
// implies (infer_compression_format).
#include <string>
#include <vector>

#include "core/args_json.h"
#include "core/check.h"
#include "qobs/args.h"

namespace qobs {

QuantizationScheme QuantizationScheme::validated() const {
  QuantizationScheme s = *this;
  if (s.weights) s.weights = s.weights->validated();
  if (s.input_activations) {
    s.input_activations = s.input_activations->validated();
    const Strategy st = s.input_activations->get_strategy();
    QOBS_CHECK(st == Strategy::kToken || st == Strategy::kTensor || st == Strategy::kGroup ||
                   st == Strategy::kTensorGroup || st == Strategy::kAttnHead,
               NotImplementedError, "input_activations with strategy ", to_string(st), " are not supported (R1.4.2)");
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

namespace detail {

namespace {

// One layout for both forms of the args (R1.3.5, R8.7.5).
ojson scheme_json(const QuantizationScheme& s, ojson (*args_json)(const QuantizationArgs&)) {
  ojson j;
  j["targets"] = s.targets;
  j["weights"] = s.weights ? args_json(*s.weights) : ojson(nullptr);
  j["input_activations"] = s.input_activations ? args_json(*s.input_activations) : ojson(nullptr);
  j["output_activations"] = s.output_activations ? args_json(*s.output_activations) : ojson(nullptr);
  j["format"] = s.format ? ojson(*s.format) : ojson(nullptr);
  return j;
}

}  // namespace

ojson scheme_to_ojson(const QuantizationScheme& s) { return scheme_json(s, &args_to_ojson); }
ojson scheme_to_config_ojson(const QuantizationScheme& s) { return scheme_json(s, &args_to_config_ojson); }

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

}  // namespace detail

std::string QuantizationScheme::to_json(int indent) const { return detail::scheme_to_ojson(*this).dump(indent); }
std::string QuantizationScheme::to_config_json(int indent) const {
  return detail::scheme_to_config_ojson(*this).dump(indent);
}
QuantizationScheme QuantizationScheme::from_json(std::string_view json) {
  return detail::scheme_from_ojson(detail::parse_json(json, "QuantizationScheme"));
}

std::string infer_compression_format(const QuantizationScheme& scheme) {
  if (scheme.format) return *scheme.format;
  if (!scheme.weights) return "dense";
  const QuantizationArgs& w = *scheme.weights;
  const bool g32 = w.group_size && *w.group_size == 32;
  const bool g16 = w.group_size && *w.group_size == 16;
  if (w.type == QuantType::kFloat && w.num_bits == 4 && g32) return "mxfp4-pack-quantized";
  if (w.type == QuantType::kFloat && w.num_bits == 6 && g32) return "mxfp6-pack-quantized";
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
