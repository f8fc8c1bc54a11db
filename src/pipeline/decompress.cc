// Decoding compressed-tensors weights back to dense ones, as a loader does (RULES
// §8.3-8.6, §8.10). Used by `qobs dequantize`, the round-trip tests and the transformers check.
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "qobs/packing.h"
#include "qobs/pipeline.h"
#include "qobs/qparams.h"

namespace qobs {
namespace {

Tensor load(const Checkpoint& c, const std::string& name) {
  const auto w = c.find(name);
  QOBS_CHECK(w.has_value(), IoError, c.dir(), ": tensor '", name, "' is missing");
  return c.shards()[w->first].load(name);
}

bool has(const Checkpoint& c, const std::string& name) { return c.find(name).has_value(); }

}  // namespace

Tensor load_dequantized_weight(const Checkpoint& c, std::string_view module_sv, const QuantizationArgs& args_in,
                               const std::string& format, DType md) {
  const std::string m(module_sv);
  const QuantizationArgs a = args_in.validated();
  const Tensor stored_scale = load(c, m + ".weight_scale");
  Tensor q, scale;
  std::optional<Tensor> zp, g;
  if (format == "pack-quantized") {
    const Tensor shape = load(c, m + ".weight_shape");
    QOBS_CHECK(shape.numel() == 2, IoError, m, ".weight_shape: expected 2 entries (R8.3.2)");
    const int64_t rows = static_cast<int64_t>(shape.get(0)), cols = static_cast<int64_t>(shape.get(1));
    q = unpack_int_rows(load(c, m + ".weight_packed"), a.num_bits, cols, m + ".weight_packed");
    QOBS_CHECK(q.shape() == Shape({rows, cols}), IoError, m, ".weight_packed: ", shape_str(q.shape()),
               " does not match weight_shape ", shape_str({rows, cols}));
    scale = stored_scale;
    if (has(c, m + ".weight_zero_point")) {
      const Tensor z = load(c, m + ".weight_zero_point");
      const Strategy s = a.get_strategy();
      zp = (s == Strategy::kGroup || s == Strategy::kChannel || s == Strategy::kTensorGroup)
               ? unpack_zero_points(z, a.num_bits, scale.shape()[0], m + ".weight_zero_point").reshaped(scale.shape())
               : z;
    }
  } else if (format == "nvfp4-pack-quantized" || format == "mxfp4-pack-quantized") {
    q = unpack_fp4(load(c, m + ".weight_packed"), md, m + ".weight_packed");
    scale = format == "mxfp4-pack-quantized" ? decode_e8m0(stored_scale, md) : stored_scale.to(md);
    if (has(c, m + ".weight_global_scale")) g = load(c, m + ".weight_global_scale");
  } else if (format == "mxfp6-pack-quantized") {
    q = unpack_fp6(load(c, m + ".weight_packed"), md, m + ".weight_packed");  // R8.10.2
    scale = decode_e8m0(stored_scale, md);
  } else if (format == "int-quantized" || format == "float-quantized" || format == "naive-quantized" ||
             format == "mxfp8-quantized") {
    q = load(c, m + ".weight");
    scale = format == "mxfp8-quantized" ? decode_e8m0(stored_scale, md) : stored_scale.to(md);
    if (has(c, m + ".weight_zero_point")) zp = load(c, m + ".weight_zero_point");
    if (has(c, m + ".weight_global_scale")) g = load(c, m + ".weight_global_scale");
  } else {
    QOBS_THROW(InvalidArgument, m, ": cannot decode format '", format, "'");
  }
  return dequantize(q.view(), scale, zp ? &*zp : nullptr, a, nullptr, g ? &*g : nullptr, md);
}

int64_t dequantize_checkpoint(const std::string& path, const std::string& out_file, std::optional<DType> dtype) {
  const Checkpoint c = Checkpoint::open(path);
  QOBS_CHECK(!c.config_json().empty(), IoError, path, ": no config.json with a quantization_config");
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(c.config_json());
  } catch (const nlohmann::json::exception& e) {
    QOBS_THROW(IoError, path, "/config.json: not valid JSON: ", e.what());
  }
  QOBS_CHECK(cfg.is_object() && cfg.contains("quantization_config"), IoError, path,
             "/config.json: no quantization_config");
  const auto& qc = cfg["quantization_config"];
  QOBS_CHECK(qc.is_object(), IoError, path, "/config.json: quantization_config is not an object");
  QOBS_CHECK(qc.contains("config_groups") && qc["config_groups"].is_object() && qc["config_groups"].size() == 1,
             InvalidArgument, path, ": only checkpoints with exactly one config group are decoded");
  const auto group_it = qc["config_groups"].begin();
  const auto& group = group_it.value();
  // (a const json's operator[] on a missing key is undefined behaviour, not an error)
  QOBS_CHECK(group.is_object() && group.contains("weights") && group["weights"].is_object(), InvalidArgument, path,
             "/config.json: config group '", group_it.key(),
             "' has no \"weights\" object; only weight-quantized "
             "checkpoints are decoded");
  const QuantizationArgs args = QuantizationArgs::from_json(group["weights"].dump());
  const std::string format = group.value("format", qc.value("format", std::string()));
  DType model_dtype = DType::kF32;
  for (const char* key : {"torch_dtype", "dtype"})
    if (cfg.contains(key) && cfg[key].is_string()) model_dtype = parse_dtype(cfg[key].get<std::string>());
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& shard : c.shards())
    for (const auto& t : shard.tensors()) {
      const std::string suffix = ".weight_scale";
      if (t.name.size() <= suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      const std::string module = t.name.substr(0, t.name.size() - suffix.size());
      const DType md = dtype ? *dtype : (is_floating(t.dtype) && t.dtype != DType::kF8E4M3) ? t.dtype : model_dtype;
      out.emplace_back(module + ".weight", load_dequantized_weight(c, module, args, format, md));
    }
  write_safetensors(out_file, out);
  return static_cast<int64_t>(out.size());
}

}  // namespace qobs
