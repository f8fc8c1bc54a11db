// The config.json qobs writes, against what compressed-tensors 0.20.1 writes
// (tests/golden/ct020_configs.json from tools/make_golden_ct020.py): every preset's
// quantization_config on the same tiny Llama, with the tensors of its down_proj (R8.7,
// R8.9); QuantizationArgs' serializer on the fields a user set (R8.7.5); and
// moe_sparsity_config read and written (R1.6.5).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "qobs/io.h"
#include "qobs/pipeline.h"
#include "test_util.h"

namespace qobs {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

std::optional<testing::Golden> golden() { return testing::load_golden("ct020_configs.json"); }

/// The reference's tiny Llama (ct020_configs.json tiny_llama), bf16, with random weights.
void write_tiny_llama(const fs::path& dir, const json& cfg, const std::string& extra_config = "") {
  const int64_t h = cfg["hidden_size"], im = cfg["intermediate_size"], v = cfg["vocab_size"];
  const int64_t heads = cfg["num_attention_heads"], kv = cfg["num_key_value_heads"];
  const int64_t kvd = h / heads * kv;
  std::map<std::string, Shape> shapes{
      {"model.embed_tokens.weight", {v, h}}, {"model.norm.weight", {h}}, {"lm_head.weight", {v, h}}};
  for (int64_t l = 0; l < cfg["num_hidden_layers"].get<int64_t>(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    shapes[p + "self_attn.q_proj.weight"] = {h, h};
    shapes[p + "self_attn.k_proj.weight"] = {kvd, h};
    shapes[p + "self_attn.v_proj.weight"] = {kvd, h};
    shapes[p + "self_attn.o_proj.weight"] = {h, h};
    shapes[p + "mlp.gate_proj.weight"] = {im, h};
    shapes[p + "mlp.up_proj.weight"] = {im, h};
    shapes[p + "mlp.down_proj.weight"] = {h, im};
    shapes[p + "input_layernorm.weight"] = {h};
    shapes[p + "post_attention_layernorm.weight"] = {h};
  }
  std::mt19937 gen(7);
  std::normal_distribution<double> d(0.0, 0.02);
  std::vector<std::pair<std::string, Tensor>> t;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<double> vals(static_cast<std::size_t>(n));
    for (auto& x : vals) x = d(gen);
    t.emplace_back(name, Tensor::from_values(DType::kBF16, shape, vals));
  }
  fs::create_directories(dir);
  write_safetensors((dir / "model.safetensors").string(), t);
  std::ofstream(dir / "config.json") << R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], )"
                                     << R"("num_hidden_layers": )" << cfg["num_hidden_layers"] << extra_config << "}";
}

json written_config(const fs::path& out) {
  std::ifstream f(out / "config.json");
  return json::parse(f)["quantization_config"];
}

TEST(ConfigShape, EveryPresetAsCompressedTensors020WritesIt) {
  auto g = golden();
  if (!g) GTEST_SKIP() << "golden file absent";
  TempDir dir;
  write_tiny_llama(dir.path / "in", g->doc["tiny_llama"]);
  int same = 0, refused = 0;
  for (const auto& [name, p] : g->doc["presets"].items()) {
    SCOPED_TRACE(name);
    const json& mc = p["model_compressor"];
    QuantizeOptions o;
    o.model_path = (dir.path / "in").string();
    o.output_dir = (dir.path / ("out_" + name)).string();
    o.scheme = name;
    o.baseline = false;
    if (mc["written"].is_null()) {  // UNQUANTIZED: the reference writes nothing
      EXPECT_THROW(quantize_checkpoint(o), InvalidArgument);
      ++refused;
      continue;
    }
    const json& in = p["input_activations"];
    if (!in.is_null() && in["fields"]["dynamic"] != true) {
      // static or "local" input activations need calibration data (R1.6.2); the group
      // qobs would write is still the reference's
      testing::expect_error<InvalidArgument>([&] { quantize_checkpoint(o); }, {"R1.6.2"});
      QuantizationScheme s = preset_scheme(name);
      s.format = infer_compression_format(s);
      EXPECT_EQ(json::parse(s.to_config_json()), mc["written"]["config_groups"]["group_0"]);
      ++refused;
      continue;
    }
    quantize_checkpoint(o);
    const json q = written_config(o.output_dir);
    EXPECT_EQ(q, mc["written"]) << "qobs: " << q.dump(1) << "\nreference: " << mc["written"].dump(1);
    // the down_proj tensors: names, dtypes, shapes (R8.9)
    const Checkpoint c = Checkpoint::open(o.output_dir);
    for (const auto& [tname, spec] : mc["down_proj_state_dict"].items()) {
      const auto where = c.find(tname);
      ASSERT_TRUE(where.has_value()) << tname;
      const TensorInfo& info = *where->second;
      EXPECT_EQ("torch." + std::string(dtype_name(info.dtype)), spec[0].get<std::string>()) << tname;
      EXPECT_EQ(info.shape, spec[1].get<Shape>()) << tname;
    }
    ++same;
  }
  EXPECT_EQ(same + refused, static_cast<int>(g->doc["presets"].size()));
  EXPECT_EQ(refused, 3);  // UNQUANTIZED, FP8, NVFP4
}

/// The reference's serializer writes observer and zp_dtype only when the user set them
/// (pydantic's model_fields_set): the same args from a JSON holding exactly those fields.
TEST(ConfigShape, ArgsWriteOnlyWhatTheUserSet) {
  auto g = golden();
  if (!g) GTEST_SKIP() << "golden file absent";
  int n = 0;
  for (const json& c : g->doc["args_cases"]) {
    SCOPED_TRACE(c["id"].get<std::string>());
    json given = json::object();
    for (const auto& f : c["fields_set"]) given[f.get<std::string>()] = c["fields"][f.get<std::string>()];
    // the assignment cases set observer after construction: a field the user set either way
    const QuantizationArgs a = QuantizationArgs::from_json(given.dump());
    EXPECT_EQ(json::parse(a.to_config_json()), c["model_dump_json_mode"]) << a.to_config_json();
    // and parsing the written form gives equal args
    EXPECT_EQ(QuantizationArgs::from_json(a.to_config_json()), a);
    ++n;
  }
  EXPECT_EQ(n, 17);
}

TEST(ConfigShape, MoeSparsityConfigReadAndWritten) {
  auto g = golden();
  if (!g) GTEST_SKIP() << "golden file absent";
  for (const json& c : g->doc["config_cases"]) {
    SCOPED_TRACE(c["id"].get<std::string>());
    const QuantizationConfig q = QuantizationConfig::from_json(c["model_dump"].dump());
    EXPECT_EQ(json::parse(q.to_json()), c["model_dump"]);
  }
  for (const char* bad : {R"({"method": "drop", "num_experts": [1]})", R"({"method": "prune", "num_experts": [1.5]})",
                          R"({"method": "prune", "num_experts": [true]})", R"({"method": "prune"})", R"([1, 2])"}) {
    SCOPED_TRACE(bad);
    const std::string doc = std::string(R"({"config_groups": {}, "moe_sparsity_config": )") + bad + "}";
    testing::expect_error<InvalidArgument>([&] { QuantizationConfig::from_json(doc); },
                                           {"moe_sparsity_config", "R1.6.5"});
  }
}

/// moe_sparsity_config comes from --config or from an input model whose
/// quantization_config quantizes nothing (an expert-pruned dense model), and is written
/// into the output's quantization_config (R1.6.5).
TEST(ConfigShape, MoeSparsityConfigIsCarriedIntoTheOutput) {
  auto g = golden();
  if (!g) GTEST_SKIP() << "golden file absent";
  const json moe = {{"method", "novice"}, {"num_experts", {nullptr}}};
  TempDir dir;
  write_tiny_llama(dir.path / "pruned", g->doc["tiny_llama"],
                   ", \"quantization_config\": {\"config_groups\": {}, \"moe_sparsity_config\": " + moe.dump() + "}");
  QuantizeOptions o;
  o.model_path = (dir.path / "pruned").string();
  o.output_dir = (dir.path / "out1").string();
  o.scheme = "MXFP6A16";
  o.baseline = false;
  quantize_checkpoint(o);
  EXPECT_EQ(written_config(o.output_dir)["moe_sparsity_config"], moe);

  write_tiny_llama(dir.path / "dense", g->doc["tiny_llama"]);
  QuantizeOptions c;
  c.model_path = (dir.path / "dense").string();
  c.output_dir = (dir.path / "out2").string();
  c.baseline = false;
  const json doc = {{"config_groups", {{"MXFP6A16", {"Linear"}}}},
                    {"ignore", {"lm_head"}},
                    {"moe_sparsity_config", {{"method", "prune"}, {"num_experts", {3}}}}};
  c.config = quantization_config_from_document(doc.dump(), "cfg.json");
  c.config_source = "cfg.json";
  quantize_checkpoint(c);
  const json q = written_config(c.output_dir);
  EXPECT_EQ(q["moe_sparsity_config"], doc["moe_sparsity_config"]);
  EXPECT_EQ(q["config_groups"]["MXFP6A16"]["format"], "mxfp6-pack-quantized");

  // a --config that contradicts the model's own
  c.model_path = (dir.path / "pruned").string();
  c.output_dir = (dir.path / "out3").string();
  testing::expect_error<InvalidArgument>([&] { quantize_checkpoint(c); }, {"moe_sparsity_config", "R1.6.5"});
  // a quantized input model stays refused
  write_tiny_llama(dir.path / "quantized", g->doc["tiny_llama"],
                   ", \"quantization_config\": {\"config_groups\": {\"W4A16\": [\"Linear\"]}}");
  o.model_path = (dir.path / "quantized").string();
  o.output_dir = (dir.path / "out4").string();
  testing::expect_error<InvalidArgument>([&] { quantize_checkpoint(o); }, {"already has a quantization_config"});
}

/// R6.9.1 / Q34: in checkpoint mode `mse` on weights is memoryless_mse, as oneshot has it
/// (llm-compressor's model_free_ptq fails on it instead), and the config records the name
/// given (R8.7.5); every tensor equals the memoryless_mse run's.
TEST(CheckpointMode, MseObserverMeansMemorylessMseForWeights) {
  auto g = golden();
  if (!g) GTEST_SKIP() << "golden file absent";
  TempDir dir;
  write_tiny_llama(dir.path / "in", g->doc["tiny_llama"]);
  std::map<std::string, std::vector<std::pair<std::string, Tensor>>> tensors;
  for (const char* observer : {"mse", "memoryless_mse", "memoryless_minmax"}) {
    QuantizeOptions o;
    o.model_path = (dir.path / "in").string();
    o.output_dir = (dir.path / observer).string();
    o.scheme = "MXFP6A16";
    o.observer = observer;
    o.baseline = false;
    quantize_checkpoint(o);
    const json w = written_config(o.output_dir)["config_groups"]["group_0"]["weights"];
    EXPECT_EQ(w["observer"], observer);
    const Checkpoint c = Checkpoint::open(o.output_dir);
    for (const auto& shard : c.shards())
      for (const auto& t : shard.tensors()) tensors[observer].emplace_back(t.name, shard.load(t.name));
  }
  ASSERT_EQ(tensors["mse"].size(), tensors["memoryless_mse"].size());
  int64_t differ_from_minmax = 0;
  for (std::size_t i = 0; i < tensors["mse"].size(); ++i) {
    EXPECT_EQ(tensors["mse"][i].first, tensors["memoryless_mse"][i].first);
    EXPECT_EQ(testing::describe_difference(tensors["memoryless_mse"][i].second, tensors["mse"][i].second), "")
        << tensors["mse"][i].first;
    differ_from_minmax +=
        !testing::describe_difference(tensors["memoryless_minmax"][i].second, tensors["mse"][i].second).empty();
  }
  EXPECT_GT(differ_from_minmax, 0) << "the search chose no other scale than min-max: the test cannot tell them apart";
}

}  // namespace
}  // namespace qobs
