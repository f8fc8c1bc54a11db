// The matching language of --targets / --ignore / --config (compressed-tensors' syntax),
// checked against the reference's own matcher (tests/golden/match.json, written by
// tools/make_match_golden.py), the --config output against model_free_ptq's config, and
// hub ids resolved in a generated Hugging Face cache.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "pipeline/match.h"
#include "pipeline/plan.h"
#include "qobs/io.h"
#include "qobs/pipeline.h"
#include "test_util.h"

namespace qobs {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;
using testing::TempDir;

nlohmann::json golden() {
  const auto g = testing::load_golden("match.json");
  if (!g) throw std::runtime_error("tests/golden/match.json missing");
  return g->doc;
}

std::vector<Shape> shapes_of(const nlohmann::json& tensors) {
  std::vector<Shape> s;
  for (const auto& t : tensors) s.push_back(t[1].get<Shape>());
  return s;
}

// A checkpoint with the golden model's tensor names and shapes (values do not matter for
// matching and config output).
void write_golden_llama(const fs::path& dir, const nlohmann::json& tensors) {
  fs::create_directories(dir);
  std::vector<std::pair<std::string, Tensor>> t;
  for (const auto& e : tensors) {
    const Shape shape = e[1].get<Shape>();
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<double> v(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01 * static_cast<double>(static_cast<int>(i % 29) - 14);
    t.emplace_back(e[0].get<std::string>(), Tensor::from_values(DType::kF32, shape, v));
  }
  write_safetensors((dir / "model.safetensors").string(), t);
  std::ofstream(dir / "config.json") << R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})";
}

TEST(Match, AgreesWithCompressedTensorsOnRealModuleLists) {
  const nlohmann::json g = golden();
  for (const auto& [model, entry] : g["models"].items()) {
    const std::vector<Shape> shapes = shapes_of(entry["tensors"]);
    std::vector<std::pair<std::string, const Shape*>> tensors;
    for (std::size_t i = 0; i < shapes.size(); ++i) tensors.emplace_back(entry["tensors"][i][0], &shapes[i]);
    const auto modules = detail::modules_of(tensors);
    // Every module the reference lists (those owning a parameter) is a module here, and
    // the inferred class agrees wherever it is one qobs infers.
    std::set<std::string> names;
    for (const auto& m : modules) names.insert(m.name);
    for (const auto& [name, cls] : entry["classes"].items()) {
      EXPECT_TRUE(names.count(name)) << model << ": " << name;
      for (const auto& m : modules)
        if (m.name == name && (cls == "Linear" || cls == "Embedding")) EXPECT_EQ(m.cls, cls) << model << ": " << name;
    }
    const std::vector<std::string> patterns = g["patterns"];
    const detail::Patterns p(patterns, "--targets");
    for (std::size_t i = 0; i < patterns.size(); ++i) {
      std::vector<std::string> got;
      for (const auto& m : modules)
        if (p.matches(i, m)) got.push_back(m.name);
      EXPECT_EQ(got, entry["matches"][patterns[i]].get<std::vector<std::string>>()) << model << ": " << patterns[i];
    }
  }
}

QuantizationConfig golden_groups_config(const nlohmann::json& g) {
  nlohmann::json c;
  c["config_groups"] = g["groups"];
  c["ignore"] = g["ignore"];
  return QuantizationConfig::from_json(c.dump());
}

// Overlapping targets: exact name beats regex beats class; the reference's
// apply_quantization_config picks the same group for every module.
TEST(Match, GroupPrecedenceAsApplyQuantizationConfig) {
  const nlohmann::json g = golden();
  TempDir dir;
  write_golden_llama(dir.path / "in", g["models"]["llama"]["tensors"]);
  QuantizeOptions o;
  o.model_path = (dir.path / "in").string();
  o.config = golden_groups_config(g);
  const Checkpoint ckpt = Checkpoint::open(o.model_path);
  const detail::QuantizePlan plan = detail::plan_quantize(ckpt, o, detail::resolve_groups(o));
  std::map<std::string, std::string> got;
  for (const auto& m : plan.modules) got[m.module] = plan.groups[m.group].name;
  for (const auto& [module, group] : g["precedence"].items()) {
    if (group.is_null()) EXPECT_FALSE(got.count(module)) << module;
    else EXPECT_EQ(got[module], group.get<std::string>()) << module;
  }
  // model.embed_tokens is an Embedding: `Linear` does not take it
  EXPECT_FALSE(got.count("model.embed_tokens"));
}

// What model_free_ptq (llm-compressor 0.14.0.1 on compressed-tensors 0.20.1) writes as
// quantization_config for the same config: the same object, plus the empty
// sparsity_config that compressed-tensors' own writer adds (R8.7).
TEST(Match, ConfigOutputAsModelFreePtqWritesIt) {
  const nlohmann::json g = golden();
  for (const auto& [name, c] : g["configs"].items()) {
    TempDir dir;
    write_golden_llama(dir.path / "in", g["models"]["llama"]["tensors"]);
    QuantizeOptions o;
    o.model_path = (dir.path / "in").string();
    o.output_dir = (dir.path / "out").string();
    o.baseline = false;
    o.config = quantization_config_from_document(c["input"].dump(), name);
    quantize_checkpoint(o);
    std::ifstream f(dir.path / "out" / "config.json");
    nlohmann::json q = nlohmann::json::parse(f)["quantization_config"];
    EXPECT_EQ(q["sparsity_config"], nlohmann::json::object());
    q.erase("sparsity_config");
    EXPECT_EQ(q, c["quantization_config"])
        << name << "\nqobs: " << q.dump(1) << "\nreference: " << c["quantization_config"].dump(1);
    const std::string summary = inspect_checkpoint((dir.path / "out").string());
    EXPECT_NE(summary.find(name == "mixed_formats" ? "mixed-precision" : "pack-quantized"), std::string::npos)
        << summary;
  }
}

// The issue's commands: `--ignore 're:.*mlp.*'` was a silent no-op, `--targets Linear`
// matched nothing.
TEST(Match, ReferenceSyntaxOnTheCommandLineOptions) {
  const nlohmann::json g = golden();
  TempDir dir;
  write_golden_llama(dir.path / "in", g["models"]["llama"]["tensors"]);
  const Checkpoint c = Checkpoint::open((dir.path / "in").string());
  TargetPlan p = plan_targets(c, {}, {"re:.*mlp.*"});
  EXPECT_EQ(p.quantize.size(), 8u);  // the attention projections only
  for (const auto& m : p.quantize) EXPECT_NE(m.find("self_attn"), std::string::npos) << m;
  p = plan_targets(c, {"Linear"}, {});
  EXPECT_EQ(p.quantize.size(), 15u);  // lm_head is a Linear, as in transformers and model_free_ptq
  EXPECT_EQ(p.quantize.back(), "lm_head");
  p = plan_targets(c, {}, {});
  EXPECT_EQ(p.ignored, std::vector<std::string>{"lm_head"});  // qobs's default leaves lm_head out
  p = plan_targets(c, {"Embedding", "re:model\\.layers\\.1\\.mlp\\..*"}, {"model.layers.1.mlp.up_proj"});
  EXPECT_EQ(p.quantize, (std::vector<std::string>{"model.embed_tokens", "model.layers.1.mlp.gate_proj",
                                                  "model.layers.1.mlp.down_proj"}));
  // re: is anchored at the start (Python re.match): `re:mlp` matches nothing -> refused
  expect_error<InvalidArgument>(
      [&] { plan_targets(c, {}, {"re:mlp"}); },
      {"--ignore pattern 're:mlp' matches no module", "model.layers.0.self_attn.q_proj (Linear)"});
  // a plain pattern is an exact name or class; the old search spelling gets a hint
  expect_error<InvalidArgument>([&] { plan_targets(c, {"q_proj"}, {}); },
                                {"--targets pattern 'q_proj' matches no module", "write 're:.*q_proj'"});
  expect_error<InvalidArgument>([&] { plan_targets(c, {"LlamaAttention"}, {}); },
                                {"'LlamaAttention' matches no module", "Linear, Embedding"});
  // Python-only regex syntax names the pattern
  expect_error<InvalidArgument>([&] { plan_targets(c, {}, {"re:.*(?<!mlp)\\.up_proj"}); },
                                {"--ignore pattern 're:.*(?<!mlp)\\.up_proj'", "lookaround"});
  expect_error<InvalidArgument>([&] { plan_targets(c, {}, {"re:(model)\\.\\1"}); }, {"backreferences"});
}

TEST(Match, ConfigDocuments) {
  // a recipe's QuantizationModifier with scheme + targets + ignore
  QuantizationConfig c = quantization_config_from_document(
      R"({"quant_stage": {"quant_modifiers": {"QuantizationModifier": {"scheme": "W4A16", "targets": ["Linear"],
          "ignore": ["lm_head"]}}}})",
      "recipe.json");
  ASSERT_EQ(c.config_groups.size(), 1u);
  EXPECT_EQ(c.config_groups[0].first, "group_0");
  EXPECT_EQ(c.config_groups[0].second, preset_scheme("W4A16", {"Linear"}));
  EXPECT_EQ(c.ignore, std::vector<std::string>{"lm_head"});
  // scheme as a map preset -> targets
  c = quantization_config_from_document(
      R"({"s": [{"QuantizationModifier": {"scheme": {"W8A16": ["re:.*attn.*"], "W4A16": ["re:.*mlp.*"]}}}]})", "r");
  ASSERT_EQ(c.config_groups.size(), 2u);
  EXPECT_EQ(c.config_groups[1].second.targets, std::vector<std::string>{"re:.*mlp.*"});
  // a config.json's quantization_config
  c = quantization_config_from_document(R"({"quantization_config": {"config_groups": {"g": {"targets": ["Linear"],
      "weights": {"num_bits": 8}}}}})",
                                        "config.json");
  EXPECT_EQ(c.config_groups[0].second.weights->num_bits, 8);
  expect_error<InvalidArgument>(
      [] { quantization_config_from_document(R"({"stage": {"GPTQModifier": {"scheme": "W4A16"}}})", "r.yaml"); },
      {"r.yaml", "QuantizationModifier", "GPTQModifier"});
  expect_error<UnknownName>(
      [] { quantization_config_from_document(R"({"QuantizationModifier": {"scheme": "W9A9"}})", "r.yaml"); },
      {"r.yaml"});
  expect_error<InvalidArgument>(
      [] {
        quantization_config_from_document(
            R"({"config_groups": {"g": {"targets": ["Linear"], "weights": {"bogus": 1}}}})", "c.json");
      },
      {"c.json"});
}

// ---- hub ids ---------------------------------------------------------------------------

struct EnvGuard {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const std::string& k, const std::optional<std::string>& v) {
    const char* old = std::getenv(k.c_str());
    saved.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
    if (v) setenv(k.c_str(), v->c_str(), 1);
    else unsetenv(k.c_str());
  }
  ~EnvGuard() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      if (it->second) setenv(it->first.c_str(), it->second->c_str(), 1);
      else unsetenv(it->first.c_str());
    }
  }
};

const std::string kMain = "1111111111111111111111111111111111111111";
const std::string kOld = "2222222222222222222222222222222222222222";

// models--org--tiny with refs/main -> kMain and refs/v1 -> kOld, files as links into blobs.
void make_cache(const fs::path& hub) {
  const fs::path repo = hub / "models--org--tiny";
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "refs");
  std::ofstream(repo / "refs" / "main") << kMain;  // huggingface_hub writes no newline
  std::ofstream(repo / "refs" / "v1") << kOld << "\n";
  int sha = 0;
  for (const auto& [commit, module] : {std::pair{kMain, std::string("model.layers.0.mlp.up_proj")},
                                       std::pair{kOld, std::string("model.layers.0.mlp.down_proj")}}) {
    const fs::path snap = repo / "snapshots" / commit;
    fs::create_directories(snap);
    std::vector<double> v(16 * 128, 0.5);
    const std::string blob = "blob" + std::to_string(sha++);
    write_safetensors((repo / "blobs" / blob).string(),
                      {{module + ".weight", Tensor::from_values(DType::kF32, {16, 128}, v)}});
    fs::create_symlink("../../blobs/" + blob, snap / "model.safetensors");
  }
}

TEST(Hub, ResolvesCachedRevisions) {
  TempDir dir;
  make_cache(dir.path / "hubcache");
  EnvGuard env;
  env.set("HF_HUB_CACHE", (dir.path / "hubcache").string());
  const fs::path repo = dir.path / "hubcache" / "models--org--tiny";
  EXPECT_EQ(resolve_model_path("org/tiny"), (repo / "snapshots" / kMain).string());
  EXPECT_EQ(resolve_model_path("org/tiny", "v1"), (repo / "snapshots" / kOld).string());
  EXPECT_EQ(resolve_model_path("org/tiny", kOld), (repo / "snapshots" / kOld).string());
  // an existing path wins and is returned as given
  EXPECT_EQ(resolve_model_path(dir.path.string()), dir.path.string());

  // the snapshot quantizes like a folder
  QuantizeOptions o;
  o.model_path = resolve_model_path("org/tiny", "v1");
  o.output_dir = (dir.path / "out").string();
  o.scheme = "W4A16";
  o.baseline = false;
  const QuantizeReport r = quantize_checkpoint(o);
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors[0].module, "model.layers.0.mlp.down_proj");

  // HF_HOME/hub when HF_HUB_CACHE is unset
  env.set("HF_HUB_CACHE", std::nullopt);
  env.set("HF_HOME", dir.path.string());
  fs::rename(dir.path / "hubcache", dir.path / "hub");
  EXPECT_EQ(resolve_model_path("org/tiny"), (dir.path / "hub" / "models--org--tiny" / "snapshots" / kMain).string());
  // ~/.cache/huggingface/hub when neither is set
  env.set("HF_HOME", std::nullopt);
  env.set("XDG_CACHE_HOME", std::nullopt);
  env.set("HOME", (dir.path / "home").string());
  fs::create_directories(dir.path / "home" / ".cache" / "huggingface");
  fs::rename(dir.path / "hub", dir.path / "home" / ".cache" / "huggingface" / "hub");
  EXPECT_EQ(resolve_model_path("org/tiny", "v1"),
            (dir.path / "home" / ".cache" / "huggingface" / "hub" / "models--org--tiny" / "snapshots" / kOld).string());
}

TEST(Hub, NotCachedSaysWhereItLookedAndNeverDownloads) {
  TempDir dir;
  make_cache(dir.path / "hub");
  EnvGuard env;
  env.set("HF_HUB_CACHE", (dir.path / "hub").string());
  expect_error<IoError>([] { resolve_model_path("meta-llama/Llama-3.1-8B"); },
                        {"meta-llama/Llama-3.1-8B", "$HF_HUB_CACHE", "models--meta-llama--Llama-3.1-8B",
                         "never downloads", "huggingface-cli download meta-llama/Llama-3.1-8B"});
  expect_error<IoError>([] { resolve_model_path("org/tiny", "v2"); },
                        {"revision 'v2' is not cached", "cached refs:", "main", "v1", "--revision v2"});
  expect_error<IoError>([] { resolve_model_path("org/tiny", "3333333333333333333333333333333333333333"); },
                        {"snapshot", "is not in the cache"});
  expect_error<IoError>([] { resolve_model_path("./no/such/dir"); }, {"no such file or folder"});
  expect_error<IoError>([] { resolve_model_path("org/tiny", "../../x"); }, {"not cached"});
}

}  // namespace
}  // namespace qobs
