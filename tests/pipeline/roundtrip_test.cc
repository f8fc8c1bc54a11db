// quantize_checkpoint end to end on small synthetic checkpoints: every scheme is
// written, read back, unpacked and dequantized, and must equal fake_quantize() of the
// original weight with the stored qparams bit for bit (R8.2.5); plus the config
// (R8.7), sharding (R8.8.2), fusion (R6.10), Q17 and the error paths.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pipeline/compress.h"
#include "qobs/collective.h"
#include "qobs/io.h"
#include "qobs/packing.h"
#include "qobs/pipeline.h"
#include "qobs/qobs.h"
#include "pipeline/checkpoint_fixture.h"
#include "test_util.h"

namespace qobs {
namespace {
namespace fs = std::filesystem;

using testing::folder_bytes;
using testing::make_model;
using testing::random_weight;
using testing::run_ranks;
using testing::TempDir;
using testing::write_model;

Tensor decode_scale(const Tensor& stored, DType md) {
  if (stored.dtype() == DType::kU8) return decode_e8m0(stored, md);
  return stored.to(md);
}

// For every quantized module: dequantized(written) == fake_quantize(original, stored qparams).
void expect_round_trip(const fs::path& out, const std::map<std::string, Tensor>& model,
                       const std::string& scheme_name) {
  QuantizeOptions o;
  o.scheme = scheme_name;
  const QuantizationScheme scheme = resolve_scheme(o);
  const QuantizationArgs& a = *scheme.weights;
  const std::string format = *scheme.format;
  const Checkpoint c = Checkpoint::open(out.string());
  int checked = 0;
  for (const auto& [name, w] : model) {
    const std::string module = name.substr(0, name.size() - 7);
    if (!c.find(module + ".weight_scale")) continue;
    const DType md = detail::model_dtype_of(w.dtype());
    const Tensor scale =
        decode_scale(c.shards()[c.find(module + ".weight_scale")->first].load(module + ".weight_scale"), md);
    std::optional<Tensor> g;
    if (auto gi = c.find(module + ".weight_global_scale"))
      g = c.shards()[gi->first].load(module + ".weight_global_scale");
    Tensor zp(a.zp_dtype ? *a.zp_dtype : a.pytorch_dtype(), scale.shape());  // the module's zeros (R5.7.4)
    if (!a.symmetric) {
      const Tensor z = c.shards()[c.find(module + ".weight_zero_point")->first].load(module + ".weight_zero_point");
      zp = format == "pack-quantized" ? unpack_zero_points(z, a.num_bits, scale.shape()[0]).reshaped(scale.shape()) : z;
    }
    // the MXFP6 compressor quantizes without a zero point, so -0.0 keeps its sign (R8.10.1)
    Tensor expected =
        fake_quantize(w.view(), scale, format == "mxfp6-pack-quantized" ? nullptr : &zp, a, nullptr, g ? &*g : nullptr);
    if (a.type == QuantType::kInt) {
      // Fused QDQ keeps the sign of round(-0.3) = -0.0, but an integer code has no
      // negative zero, so any loader (the reference's included) reads +0.0 there. The
      // comparison is bitwise apart from that one documented case.
      for (int64_t i = 0; i < expected.numel(); ++i)
        if (expected.get(i) == 0) expected.set(i, 0.0);
    }
    const Tensor actual = load_dequantized_weight(c, module, a, format, md);
    ASSERT_EQ(expected.dtype(), actual.dtype()) << module;
    if (!expected.bit_equal(actual)) {
      int64_t i = 0;
      while (i < expected.numel() && expected.get(i) == actual.get(i) &&
             std::signbit(expected.get(i)) == std::signbit(actual.get(i)))
        ++i;
      if (i == expected.numel()) FAIL() << "shapes " << shape_str(expected.shape()) << " " << shape_str(actual.shape());
      FAIL() << scheme_name << " " << module << " " << dtype_name(w.dtype()) << ": first difference at " << i
             << ": expected " << expected.get(i) << ", got " << actual.get(i) << " (x " << w.get(i) << ")";
    }
    // The stored scale is the observer's, converted to the model dtype (R5.7.5).
    if (!g) {
      auto obs = load_observer(calibration_observer_name("weight", *a.observer), "weight", a);
      obs->observe(w.view());
      const QParams qp = obs->get_qparams();
      EXPECT_TRUE(qp.scale.to(md).bit_equal(scale)) << module;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 14) << scheme_name;  // 7 Linear layers x 2 (not lm_head, not embeddings)
  // Unquantized tensors are copied byte for byte.
  for (const char* n : {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
                        "model.layers.1.self_attn.q_proj.bias", "model.layers.0.input_layernorm.weight"}) {
    const auto f = c.find(n);
    ASSERT_TRUE(f.has_value()) << n;
    EXPECT_TRUE(c.shards()[f->first].load(n).bit_equal(model.at(n))) << n;
  }
}

QuantizeReport run(const fs::path& in, const fs::path& out, const std::string& scheme, int threads = 1) {
  QuantizeOptions o;
  o.model_path = in.string();
  o.output_dir = out.string();
  o.scheme = scheme;
  o.threads = threads;
  o.overwrite = true;
  o.baseline = false;
  return quantize_checkpoint(o);
}

class RoundTrip : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(RoundTrip, R8_2_5_DequantizedEqualsFakeQuantizeBitForBit) {
  const auto& [scheme, dt] = GetParam();
  TempDir dir;
  const auto model = make_model(dt);
  write_model(dir.path / "in", model);
  const QuantizeReport r = run(dir.path / "in", dir.path / "out", scheme);
  EXPECT_EQ(r.tensors.size(), 14u);
  expect_round_trip(dir.path / "out", model, scheme);
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<std::string, DType>>& info) {
  return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Schemes, RoundTrip,
                         ::testing::Combine(::testing::Values("W4A16", "W4A16_ASYM", "W8A16", "W3A16", "W8A8", "W4A8",
                                                              "FP8_DYNAMIC", "FP8_BLOCK", "NVFP4A16", "MXFP4A16",
                                                              "MXFP4", "MXFP8A16", "MXFP4XFP8", "MXFP6A16", "MXFP6A8"),
                                            ::testing::Values(DType::kF32, DType::kBF16, DType::kF16)),
                         param_name);

TEST(Pipeline, R8_9_TensorListingPerFormat) {
  TempDir dir;
  const auto model = make_model(DType::kBF16);
  write_model(dir.path / "in", model);
  const auto listing = [&](const std::string& scheme) {
    run(dir.path / "in", dir.path / scheme, scheme);
    const SafetensorsFile f = SafetensorsFile::open((dir.path / scheme / "model.safetensors").string());
    std::ostringstream os;
    for (const char* local :
         {"weight", "weight_packed", "weight_scale", "weight_zero_point", "weight_global_scale", "weight_shape"})
      if (const TensorInfo* t = f.find(std::string("model.layers.0.mlp.gate_proj.") + local))
        os << local << ":" << safetensors_dtype_name(t->dtype) << shape_str(t->shape) << " ";
    return os.str();
  };
  // gate_proj: O = 256, I = 128
  EXPECT_EQ(listing("W4A16"), "weight_packed:I32(256, 16) weight_scale:BF16(256, 1) weight_shape:I64(2,) ");
  EXPECT_EQ(listing("W4A16_ASYM"),
            "weight_packed:I32(256, 16) weight_scale:BF16(256, 1) weight_zero_point:I32(32, 1) weight_shape:I64(2,) ");
  EXPECT_EQ(listing("W8A16"), "weight_packed:I32(256, 32) weight_scale:BF16(256, 1) weight_shape:I64(2,) ");
  EXPECT_EQ(listing("W8A8"), "weight:I8(256, 128) weight_scale:BF16(256, 1) ");
  EXPECT_EQ(listing("FP8_DYNAMIC"), "weight:F8_E4M3(256, 128) weight_scale:BF16(256, 1) ");
  EXPECT_EQ(listing("FP8_BLOCK"), "weight:F8_E4M3(256, 128) weight_scale:BF16(2, 1) ");
  EXPECT_EQ(listing("NVFP4A16"), "weight_packed:U8(256, 64) weight_scale:F8_E4M3(256, 8) weight_global_scale:F32(1,) ");
  EXPECT_EQ(listing("MXFP4A16"), "weight_packed:U8(256, 64) weight_scale:U8(256, 4) ");
  // R8.10.1: four FP6 codes in three bytes
  EXPECT_EQ(listing("MXFP6A16"), "weight_packed:U8(256, 96) weight_scale:U8(256, 4) ");
}

TEST(Pipeline, R8_7_ConfigAndCopiedFiles) {
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kBF16));
  const QuantizeReport r = run(dir.path / "in", dir.path / "out", "NVFP4A16");
  std::ifstream in(dir.path / "out" / "config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json cfg = nlohmann::json::parse(text);
  EXPECT_EQ(text, cfg.dump(2) + "\n");    // keys sorted, 2-space indent (R8.7.3)
  EXPECT_EQ(cfg["model_type"], "llama");  // original keys kept (R8.8.3)
  const auto& q = cfg["quantization_config"];
  EXPECT_EQ(q["quant_method"], "compressed-tensors");
  EXPECT_EQ(q["format"], "nvfp4-pack-quantized");
  EXPECT_EQ(q["quantization_status"], "compressed");
  EXPECT_EQ(q["ignore"], nlohmann::json::array({"lm_head"}));
  EXPECT_EQ(q["config_groups"]["group_0"]["targets"], nlohmann::json::array({"Linear"}));
  EXPECT_EQ(q["config_groups"]["group_0"]["weights"]["scale_dtype"], "torch.float8_e4m3fn");
  EXPECT_EQ(q["config_groups"]["group_0"]["weights"]["strategy"], "tensor_group");
  EXPECT_TRUE(q["kv_cache_scheme"].is_null());
  EXPECT_TRUE(q.contains("version"));
  EXPECT_TRUE(fs::exists(dir.path / "out" / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir.path / "out" / "extra" / "notes.txt"));
  EXPECT_TRUE(fs::exists(dir.path / "out" / "qobs-report.json"));
  EXPECT_TRUE(fs::exists(dir.path / "out" / "qobs-report.csv"));
  EXPECT_EQ(r.ignored, std::vector<std::string>({"lm_head"}));
  // nothing left beside the output
  for (const auto& e : fs::directory_iterator(dir.path))
    EXPECT_EQ(e.path().filename().string().find(".qobs-"), std::string::npos) << e.path();
}

TEST(Pipeline, R6_10_FusedSiblingsShareOneGlobalScale) {
  TempDir dir;
  auto model = make_model(DType::kBF16);
  write_model(dir.path / "in", model);
  run(dir.path / "in", dir.path / "out", "NVFP4A16");
  const Checkpoint c = Checkpoint::open((dir.path / "out").string());
  const auto g = [&](const std::string& m) { return c.shards()[0].load(m + ".weight_global_scale").get(0); };
  const auto own = [&](const std::string& m) {  // the unfused global scale of one layer
    auto obs = load_observer("memoryless_minmax", "weight", *preset_scheme("NVFP4A16").weights);
    obs->observe(model.at(m + ".weight").view());
    return obs->get_qparams().global_scale->get(0);
  };
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const double gq = g(p + "self_attn.q_proj");
    EXPECT_EQ(gq, g(p + "self_attn.k_proj"));
    EXPECT_EQ(gq, g(p + "self_attn.v_proj"));
    // the shared scale serves the member with the largest magnitude: the smallest scale
    EXPECT_EQ(gq, std::min({own(p + "self_attn.q_proj"), own(p + "self_attn.k_proj"), own(p + "self_attn.v_proj")}));
    EXPECT_EQ(g(p + "mlp.gate_proj"), g(p + "mlp.up_proj"));
    EXPECT_EQ(g(p + "mlp.gate_proj"), std::min(own(p + "mlp.gate_proj"), own(p + "mlp.up_proj")));
    EXPECT_EQ(g(p + "mlp.down_proj"), own(p + "mlp.down_proj"));  // not fused
    EXPECT_EQ(g(p + "self_attn.o_proj"), own(p + "self_attn.o_proj"));
  }
}

TEST(Pipeline, Q17_Fp4SignOfZeroInTheCheckpoint) {
  TempDir dir;
  auto model = make_model(DType::kBF16);
  write_model(dir.path / "in", model);
  run(dir.path / "in", dir.path / "out", "NVFP4A16");
  const Checkpoint c = Checkpoint::open((dir.path / "out").string());
  const std::string m = "model.layers.0.mlp.up_proj";
  const Tensor values = unpack_fp4(c.shards()[0].load(m + ".weight_packed"), DType::kF32);
  const Tensor& w = model.at(m + ".weight");
  int neg_zero = 0, pos_zero = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    if (w.get(i) == 0 && std::signbit(w.get(i))) {  // exact -0.0 -> +0.0, code 0 (R8.5.6)
      EXPECT_EQ(values.get(i), 0.0);
      EXPECT_FALSE(std::signbit(values.get(i))) << i;
      ++pos_zero;
    } else if (w.get(i) == -1e-6 || (w.get(i) < 0 && w.get(i) > -1e-5)) {  // rounds to -0.0, code 8
      EXPECT_TRUE(values.get(i) == 0.0 && std::signbit(values.get(i))) << i << " " << values.get(i);
      ++neg_zero;
    }
  }
  EXPECT_GT(pos_zero, 0);
  EXPECT_GT(neg_zero, 0);
}

TEST(Pipeline, R8_8_2_ShardedLikeTheInput) {
  TempDir dir;
  const auto model = make_model(DType::kF16);
  write_model(dir.path / "in", model, 3);
  // another copy of the weights that the index does not list (as Mistral repositories have)
  write_safetensors((dir.path / "in" / "consolidated.safetensors").string(),
                    {{"layers.0.w", Tensor::from_values(DType::kF16, {1}, {1})}});
  std::ofstream(dir.path / "in" / "pytorch_model.bin") << "unquantized weights";
  run(dir.path / "in", dir.path / "out", "W4A16_ASYM");
  EXPECT_FALSE(fs::exists(dir.path / "out" / "consolidated.safetensors"));
  EXPECT_FALSE(fs::exists(dir.path / "out" / "pytorch_model.bin"));
  const Checkpoint c = Checkpoint::open((dir.path / "out").string());
  EXPECT_TRUE(c.sharded());
  EXPECT_EQ(c.shard_names(), Checkpoint::open((dir.path / "in").string()).shard_names());
  // quantized tensors stay in the shard of the weight they replace
  const Checkpoint in = Checkpoint::open((dir.path / "in").string());
  EXPECT_EQ(c.find("model.layers.1.mlp.up_proj.weight_packed")->first,
            in.find("model.layers.1.mlp.up_proj.weight")->first);
  std::ifstream idx(dir.path / "out" / "model.safetensors.index.json");
  const nlohmann::json j = nlohmann::json::parse(idx);
  EXPECT_EQ(j["weight_map"].size(), c.num_tensors());
  EXPECT_EQ(j["metadata"]["total_size"].get<uint64_t>(), c.total_bytes());
  expect_round_trip(dir.path / "out", model, "W4A16_ASYM");
}

TEST(Pipeline, ThreadsGiveIdenticalFiles) {
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kBF16));
  run(dir.path / "in", dir.path / "one", "NVFP4A16", 1);
  run(dir.path / "in", dir.path / "three", "NVFP4A16", 3);
  const auto bytes = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  EXPECT_EQ(bytes(dir.path / "one" / "model.safetensors"), bytes(dir.path / "three" / "model.safetensors"));
}

// One thread budget: layers and the kernels inside them share --threads threads, so the
// split of the kernels' work changes with the count; the checkpoint must not. MSE
// observers exercise the threaded grid search, NVFP4 the fused q/k/v and gate/up groups.
TEST(Pipeline, AnyThreadCountGivesByteIdenticalFolders) {
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kBF16, 128, 3));
  for (const char* scheme : {"W4A16", "NVFP4A16"}) {
    std::map<std::string, std::string> first;
    for (int threads : {1, 2, 3, 5}) {
      QuantizeOptions o;
      o.model_path = (dir.path / "in").string();
      o.output_dir = (dir.path / "out").string();
      o.report_dir = (dir.path / "report").string();  // timings stay out of the compared folder
      o.scheme = scheme;
      o.observer = "memoryless_mse";
      o.threads = threads;
      o.overwrite = true;
      quantize_checkpoint(o);
      const auto files = folder_bytes(dir.path / "out");
      if (threads == 1) {
        first = files;
        EXPECT_GT(first.count("model.safetensors"), 0u);
      } else {
        EXPECT_TRUE(files == first) << scheme << ": " << threads << " threads differ from 1";
      }
    }
  }
}

// The steps are one sequence for one process and for several: ranks split the jobs and
// write their tensors at the planned offsets of shared shard files, and the folder is
// the single process's byte for byte (as tools/test_mpi.sh checks under mpirun).
TEST(Pipeline, RanksGiveTheSingleProcessFolder) {
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kBF16, 128, 3), 2);
  QuantizeOptions o;
  o.model_path = (dir.path / "in").string();
  o.output_dir = (dir.path / "out").string();
  o.report_dir = (dir.path / "report").string();  // timings stay out of the compared folder
  o.scheme = "NVFP4A16";
  o.threads = 2;
  o.overwrite = true;
  const QuantizeReport single = quantize_checkpoint(o);
  const auto want = folder_bytes(dir.path / "out");
  EXPECT_TRUE(single.ranks.empty());
  for (const auto& t : single.tensors) EXPECT_FALSE(t.rank.has_value()) << t.module;
  for (int n : {1, 3, 8}) {  // 8: more ranks than jobs
    const auto got = run_ranks(o, n);
    for (int r = 0; r < n; ++r) ASSERT_EQ(got[static_cast<std::size_t>(r)].second, "") << n << " ranks, rank " << r;
    EXPECT_TRUE(folder_bytes(dir.path / "out") == want) << n << " ranks";
    const QuantizeReport& rep = *got[0].first;
    ASSERT_EQ(rep.ranks.size(), static_cast<std::size_t>(n));
    int64_t modules = 0;
    for (const RankReport& k : rep.ranks) modules += k.modules;
    EXPECT_EQ(modules, static_cast<int64_t>(single.tensors.size()));
    ASSERT_EQ(rep.tensors.size(), single.tensors.size());
    for (std::size_t i = 0; i < rep.tensors.size(); ++i) {
      EXPECT_EQ(rep.tensors[i].module, single.tensors[i].module);
      EXPECT_EQ(rep.tensors[i].sqnr_db, single.tensors[i].sqnr_db) << rep.tensors[i].module;
      ASSERT_TRUE(rep.tensors[i].rank.has_value()) << rep.tensors[i].module;
      EXPECT_LT(*rep.tensors[i].rank, n);
    }
  }
}

// A failing tensor on one rank: every rank fails with that rank's error and type, and
// nothing is published or left behind.
TEST(Pipeline, OneRanksErrorIsEveryRanksAndNothingIsPublished) {
  TempDir dir;
  auto model = make_model(DType::kBF16, 128, 3);
  model["model.layers.2.mlp.down_proj.weight"].set(5, NAN);
  write_model(dir.path / "in", model, 2);
  QuantizeOptions o;
  o.model_path = (dir.path / "in").string();
  o.output_dir = (dir.path / "out").string();
  o.scheme = "W4A16";
  o.threads = 1;
  const auto got = run_ranks(o, 3);
  for (const auto& [report, error] : got) {
    EXPECT_FALSE(report.has_value());
    EXPECT_NE(error.find("model.layers.2.mlp.down_proj.weight"), std::string::npos) << error;
    EXPECT_NE(error.find("non-finite"), std::string::npos) << error;
  }
  EXPECT_FALSE(fs::exists(dir.path / "out"));
  for (const auto& e : fs::directory_iterator(dir.path)) EXPECT_TRUE(e.path().filename() == "in") << e.path();
}

TEST(Pipeline, TargetSelection) {
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kF32, 128, 1));
  const Checkpoint c = Checkpoint::open((dir.path / "in").string());
  TargetPlan p = plan_targets(c, {}, {});
  EXPECT_EQ(p.quantize.size(), 7u);
  EXPECT_EQ(p.ignored, std::vector<std::string>({"lm_head"}));
  p = plan_targets(c, {}, {"re:.*mlp\\.down_proj$"});
  EXPECT_EQ(p.quantize.size(), 6u);
  EXPECT_EQ(p.ignored, std::vector<std::string>({"lm_head", "model.layers.0.mlp.down_proj"}));
  p = plan_targets(c, {"lm_head", "re:.*q_proj"}, {});
  EXPECT_EQ(p.quantize, std::vector<std::string>({"lm_head", "model.layers.0.self_attn.q_proj"}));
  EXPECT_FALSE(is_linear_weight("model.embed_tokens.weight", {64, 128}));
  EXPECT_FALSE(is_linear_weight("encoder.layer.0.attention.output.LayerNorm.weight", {384, 384}));
  EXPECT_FALSE(is_linear_weight("transformer.wte.weight", {50257, 768}));
  EXPECT_TRUE(is_linear_weight("encoder.layer.0.attention.self.query.weight", {384, 384}));
  EXPECT_FALSE(is_linear_weight("encoder.layer.0.attention.self.query.bias", {384}));
  EXPECT_THROW(plan_targets(c, {"re:("}, {}), InvalidArgument);
}

std::string error_of(const QuantizeOptions& o) {
  try {
    quantize_checkpoint(o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Pipeline, BadInputGivesClearErrorsAndLeavesNothing) {
  TempDir dir;
  auto model = make_model(DType::kBF16, 128, 1);
  model["model.layers.0.mlp.odd_proj.weight"] = random_weight(DType::kBF16, 8, 100, 3);
  write_model(dir.path / "in", model);
  QuantizeOptions o;
  o.model_path = (dir.path / "in").string();
  o.output_dir = (dir.path / "out").string();
  o.scheme = "W4A16";
  std::string e = error_of(o);
  EXPECT_NE(e.find("model.layers.0.mlp.odd_proj.weight: group_size 128 does not divide 100 columns"), std::string::npos)
      << e;
  o.ignore = {"model.layers.0.mlp.odd_proj"};
  o.scheme = "FP8";
  EXPECT_NE(error_of(o).find("calibration data"), std::string::npos);
  o.scheme = "NVFP4";
  EXPECT_NE(error_of(o).find("calibration data"), std::string::npos);
  o.scheme = "W4A16";
  o.observer = "imatrix_mse";
  EXPECT_NE(error_of(o).find("calibration data"), std::string::npos);
  o.observer = "nvfp4_expanded_imatrix";  // R6.12.3
  EXPECT_NE(error_of(o).find("calibration data"), std::string::npos);
  o.observer = "no_such_observer";
  EXPECT_FALSE(error_of(o).empty());
  o.observer.reset();
  o.observer_kwargs["maxshrink"] = std::string("lots");
  o.observer = "memoryless_mse";
  EXPECT_FALSE(error_of(o).empty());
  o.observer_kwargs.clear();
  o.scheme = "W99A16";
  EXPECT_FALSE(error_of(o).empty());
  // a fused sibling left out of a tensor_group scheme (R6.10.2)
  o.scheme = "NVFP4A16";
  o.ignore = {"model.layers.0.mlp.odd_proj", "re:.*k_proj"};
  EXPECT_NE(error_of(o).find("fused"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path / "out"));
  for (const auto& en : fs::directory_iterator(dir.path))
    EXPECT_EQ(en.path().filename().string().find(".qobs-"), std::string::npos) << en.path();

  // corrupt shard: the error names the file
  {
    std::fstream f(dir.path / "in" / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.write("\xff\xff\xff\x7f\0\0\0\0", 8);
  }
  o.ignore = {"model.layers.0.mlp.odd_proj"};
  o.scheme = "W4A16";
  e = error_of(o);
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("exceeds the file size"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir.path / "out"));
}

TEST(Pipeline, ExistingOutputAndDryRun) {
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kBF16, 128, 1));
  fs::create_directories(dir.path / "out");
  std::ofstream(dir.path / "out" / "keep.txt") << "old";
  QuantizeOptions o;
  o.model_path = (dir.path / "in").string();
  o.output_dir = (dir.path / "out").string();
  o.scheme = "W8A16";
  EXPECT_NE(error_of(o).find("already exists"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir.path / "out" / "keep.txt"));
  o.dry_run = true;
  const QuantizeReport r = quantize_checkpoint(o);
  EXPECT_EQ(r.tensors.size(), 7u);
  EXPECT_EQ(r.output_bytes, 0u);
  EXPECT_TRUE(fs::exists(dir.path / "out" / "keep.txt"));
  EXPECT_FALSE(fs::exists(dir.path / "out" / "model.safetensors"));
  o.dry_run = false;
  o.overwrite = true;
  quantize_checkpoint(o);
  EXPECT_FALSE(fs::exists(dir.path / "out" / "keep.txt"));
  EXPECT_TRUE(fs::exists(dir.path / "out" / "model.safetensors"));
  o.output_dir = o.model_path;  // never the input
  EXPECT_NE(error_of(o).find("is the input checkpoint"), std::string::npos);
}

TEST(Pipeline, ReportFigures) {
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kF32, 128, 1));
  QuantizeOptions o;
  o.model_path = (dir.path / "in").string();
  o.output_dir = (dir.path / "out").string();
  o.scheme = "W4A16";
  o.observer = "memoryless_mse";
  const QuantizeReport r = quantize_checkpoint(o);
  ASSERT_EQ(r.tensors.size(), 7u);
  for (const TensorReport& t : r.tensors) {
    EXPECT_EQ(t.observer, "memoryless_mse");
    EXPECT_GT(t.sqnr_db, 5.0);
    EXPECT_NEAR(t.sqnr_db, -10.0 * std::log10(t.rel_mse), 1e-9);
    ASSERT_TRUE(t.baseline_sqnr_db.has_value());
    // the MSE search never does worse than plain min-max on the same weights
    EXPECT_GE(t.sqnr_db, *t.baseline_sqnr_db - 1e-9) << t.module;
  }
  const nlohmann::json j = nlohmann::json::parse(r.to_json());
  EXPECT_EQ(j["tensors"].size(), 7u);
  EXPECT_EQ(j["tensors"][0]["observer"], "memoryless_mse");
  std::istringstream csv(r.to_csv());
  std::string line;
  int lines = 0;
  while (std::getline(csv, line)) ++lines;
  EXPECT_EQ(lines, 8);
  EXPECT_NE(r.summary_table().find("7 tensors quantized"), std::string::npos);
}

TEST(Pipeline, InspectSummarises) {
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kBF16, 128, 1));
  run(dir.path / "in", dir.path / "out", "W4A16");
  const std::string s = inspect_checkpoint((dir.path / "out").string(), true);
  EXPECT_NE(s.find("pack-quantized"), std::string::npos) << s;
  EXPECT_NE(s.find("model.layers.0.mlp.up_proj.weight_packed  I32 (256, 16)"), std::string::npos) << s;
  EXPECT_NE(s.find("quantized modules (weight_scale tensors): 7"), std::string::npos) << s;
  EXPECT_NE(inspect_checkpoint((dir.path / "in").string()).find("quantization_config: none"), std::string::npos);
}

TEST(Pipeline, InspectShowsConfigFieldsOfAnyType) {
  // A quantization_config whose fields have unexpected JSON types (found by the checkpoint
  // fuzzer: "quant_method": 1 escaped as a nlohmann type_error) is described, not trusted.
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kBF16, 128, 1));
  const auto set_config = [&](const std::string& qc) {
    std::ofstream(dir.path / "in" / "config.json") << R"({"model_type": "llama", "quantization_config": )" << qc << "}";
  };
  set_config(
      R"({"quant_method": 1, "format": null, "config_groups": {"g": [1], "h": {"targets": "x", "weights": )"
      R"({"type": 4, "num_bits": "four", "strategy": [], "group_size": 1.5, "symmetric": "no"}}}, "ignore": [2]})");
  std::string s;
  ASSERT_NO_THROW(s = inspect_checkpoint((dir.path / "in").string()));
  EXPECT_NE(s.find("quantization_config: 1, format null"), std::string::npos) << s;
  EXPECT_NE(s.find("g: targets []"), std::string::npos) << s;
  EXPECT_NE(s.find("h: targets \"x\", weights 4four [] group 1.5 sym"), std::string::npos) << s;
  set_config("5");
  ASSERT_NO_THROW(s = inspect_checkpoint((dir.path / "in").string()));
  EXPECT_NE(s.find("quantization_config: ?, format ?"), std::string::npos) << s;
}

}  // namespace
}  // namespace qobs
