// Importance files and `quantize_checkpoint` with QuantizeOptions::importance_path
// (R6.12.4): the written qparams equal those of the observer API fed the same
// statistics, every bad file is refused before any output is written, and merging
// applies the statistics' SUM.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "pipeline/compress.h"
#include "qobs/io.h"
#include "qobs/pipeline.h"
#include "qobs/qobs.h"
#include "test_util.h"

namespace qobs {
namespace {
namespace fs = std::filesystem;

using testing::expect_error;
using testing::TempDir;

constexpr int64_t kHidden = 128;

Tensor random_tensor(DType dt, Shape shape, uint32_t seed, double sd) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> n(0, sd);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& x : v) x = n(gen);
  return Tensor::from_values(dt, std::move(shape), v);
}

// One decoder layer: fused q/k/v and gate/up (R6.10), o_proj and down_proj alone.
std::map<std::string, Tensor> layer_weights() {
  const std::string p = "model.layers.0.";
  std::map<std::string, Tensor> m;
  uint32_t seed = 10;
  for (const char* n : {"self_attn.q_proj", "self_attn.o_proj"})
    m[p + n + ".weight"] = random_tensor(DType::kBF16, {kHidden, kHidden}, seed++, 0.05);
  for (const char* n : {"self_attn.k_proj", "self_attn.v_proj"})
    m[p + n + ".weight"] = random_tensor(DType::kBF16, {kHidden / 2, kHidden}, seed++, 0.05);
  for (const char* n : {"mlp.gate_proj", "mlp.up_proj"})
    m[p + n + ".weight"] = random_tensor(DType::kBF16, {2 * kHidden, kHidden}, seed++, 0.05);
  m[p + "mlp.down_proj.weight"] = random_tensor(DType::kBF16, {kHidden, 2 * kHidden}, seed++, 0.05);
  return m;
}

fs::path write_checkpoint(const fs::path& dir, const std::map<std::string, Tensor>& weights) {
  fs::create_directories(dir);
  std::vector<std::pair<std::string, Tensor>> t(weights.begin(), weights.end());
  t.emplace_back("model.norm.weight", Tensor::from_values(DType::kBF16, {kHidden}, std::vector<double>(kHidden, 1.0)));
  write_safetensors((dir / "model.safetensors").string(), t);
  std::ofstream(dir / "config.json") << R"({"model_type": "llama"})";
  return dir;
}

std::string module_of(const std::string& weight) { return weight.substr(0, weight.size() - 7); }

// What `qobs.collect_importance` writes: per module the statistics an imatrix_mse
// observer accumulates from a few input batches with a skewed feature scale (so the
// importance changes the search).
ImportanceMap collect(const std::map<std::string, Tensor>& weights, int batches = 2) {
  ImportanceMap out;
  uint32_t seed = 100;
  QuantizationArgs args;
  args.strategy = Strategy::kChannel;
  for (const auto& [name, w] : weights) {
    const int64_t in = w.shape()[1];
    auto obs = load_observer("imatrix_mse", "weight", args.validated());
    obs->attach(in);
    for (int b = 0; b < batches; ++b) {
      Tensor x = random_tensor(DType::kBF16, {2, 3, in}, seed++, 1.0);
      for (int64_t i = 0; i < x.numel(); ++i)
        if (i % in < 8) x.set(i, x.get(i) * 30.0);
      obs->accumulate_input(x.view());
    }
    const Statistics s = obs->export_statistics();
    out[module_of(name)] =
        ModuleImportance{*s.find("importance_sum"), static_cast<int64_t>(s.find("importance_count")->get(0))};
  }
  return out;
}

QuantizeOptions options(const fs::path& in, const fs::path& out, const std::string& scheme, const std::string& observer,
                        const fs::path& importance) {
  QuantizeOptions o;
  o.model_path = in.string();
  o.output_dir = out.string();
  o.scheme = scheme;
  o.observer = observer;
  o.importance_path = importance.string();
  o.threads = 2;
  o.baseline = false;
  return o;
}

// The observers of a fused group fed the same statistics through the observer API,
// calibrated and compressed as the pipeline does; every output tensor must match.
void expect_same_as_observer_api(const fs::path& out, const std::map<std::string, Tensor>& weights,
                                 const ImportanceMap& imp, const std::string& scheme, const std::string& observer,
                                 const std::vector<std::vector<std::string>>& groups) {
  QuantizeOptions so;
  so.scheme = scheme;
  const QuantizationScheme s = resolve_scheme(so);
  const Checkpoint c = Checkpoint::open(out.string());
  int checked = 0;
  for (const auto& group : groups) {
    std::vector<std::shared_ptr<Observer>> obs;
    for (const auto& m : group) {
      obs.push_back(load_observer(observer, "weight", *s.weights));
      const ModuleImportance& e = imp.at(m);
      Tensor count(DType::kI64, {});
      count.set(0, static_cast<double>(e.count));
      obs.back()->attach(e.sum.numel());
      obs.back()->merge_statistics(
          Statistics{"", {{"importance_sum", e.sum, ReduceOp::kSum}, {"importance_count", count, ReduceOp::kSum}}, 1});
      obs.back()->bind_weight(weights.at(m + ".weight").view());
    }
    if (obs.size() > 1) fuse_observers(obs);
    for (std::size_t k = 0; k < group.size(); ++k) {
      const std::string& m = group[k];
      obs[k]->observe(weights.at(m + ".weight").view());
      const QParams qp = obs[k]->get_qparams();
      EXPECT_EQ(imatrix_search_path(*obs[k]), "importance") << m;
      const detail::Compressed want =
          detail::compress_weight(weights.at(m + ".weight").view(), qp, *s.weights, *s.format, m + ".weight");
      for (const auto& [local, t] : want.tensors) {
        const auto where = c.find(m + "." + local);
        ASSERT_TRUE(where.has_value()) << m << "." << local;
        EXPECT_TRUE(c.shards()[where->first].load(m + "." + local).bit_equal(t))
            << scheme << " " << observer << " " << m << "." << local;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 7);
}

const std::vector<std::vector<std::string>> kFused = {
    {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj"},
    {"model.layers.0.self_attn.o_proj"},
    {"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"},
    {"model.layers.0.mlp.down_proj"}};

std::vector<std::vector<std::string>> unfused() {
  std::vector<std::vector<std::string>> g;
  for (const auto& f : kFused)
    for (const auto& m : f) g.push_back({m});
  return g;
}

TEST(Importance, FileRoundTripKeepsTheStatisticsBitForBit) {
  TempDir dir;
  const ImportanceMap imp = collect(layer_weights());
  const std::string f = (dir.path / "imp.safetensors").string();
  write_importance(f, imp);
  const ImportanceMap back = read_importance(f);
  ASSERT_EQ(back.size(), imp.size());
  for (const auto& [m, e] : imp) {
    EXPECT_TRUE(back.at(m).sum.bit_equal(e.sum)) << m;
    EXPECT_EQ(back.at(m).count, e.count) << m;
    EXPECT_EQ(e.count, 12) << m;  // 2 batches of 2 x 3 rows
  }
  const SafetensorsFile sf = SafetensorsFile::open(f);
  EXPECT_EQ(sf.metadata().at("qobs.format"), "qobs-importance");
  EXPECT_EQ(sf.find("model.layers.0.mlp.up_proj.importance_count")->dtype, DType::kI64);
  EXPECT_EQ(sf.find("model.layers.0.mlp.up_proj.importance_sum")->dtype, DType::kF32);
  // only the file, no temporary left beside it
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

struct Case {
  std::string scheme, observer;
  bool fused;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.scheme << " " << c.observer; }
};

class ImportanceQuantize : public ::testing::TestWithParam<Case> {};

TEST_P(ImportanceQuantize, QParamsEqualTheObserverApiFedTheSameImportance) {
  const Case& p = GetParam();
  TempDir dir;
  const auto weights = layer_weights();
  const ImportanceMap imp = collect(weights);
  write_importance((dir.path / "imp.safetensors").string(), imp);
  const fs::path in = write_checkpoint(dir.path / "in", weights);
  const QuantizeReport r =
      quantize_checkpoint(options(in, dir.path / "out", p.scheme, p.observer, dir.path / "imp.safetensors"));
  EXPECT_EQ(r.tensors.size(), 7u);
  expect_same_as_observer_api(dir.path / "out", weights, imp, p.scheme, p.observer, p.fused ? kFused : unfused());

  // The importance reaches the search: the same observer with uniform importance
  // writes another scale.
  QuantizeOptions so;
  so.scheme = p.scheme;
  const QuantizationScheme s = resolve_scheme(so);
  const std::string m = "model.layers.0.self_attn.o_proj";
  auto uniform = load_observer(p.observer, "weight", *s.weights);
  Tensor ones = Tensor::from_values(DType::kF32, {kHidden}, std::vector<double>(kHidden, 1.0));
  Tensor count(DType::kI64, {});
  count.set(0, 1);
  uniform->attach(kHidden);
  uniform->import_statistics(
      Statistics{"", {{"importance_sum", ones, ReduceOp::kSum}, {"importance_count", count, ReduceOp::kSum}}, 1});
  uniform->observe(weights.at(m + ".weight").view());
  const detail::Compressed uc =
      detail::compress_weight(weights.at(m + ".weight").view(), uniform->get_qparams(), *s.weights, *s.format, m);
  const Checkpoint c = Checkpoint::open((dir.path / "out").string());
  for (const auto& [local, t] : uc.tensors)
    if (local == "weight_scale")
      EXPECT_FALSE(t.bit_equal(c.shards()[0].load(m + ".weight_scale"))) << "importance made no difference";
}

INSTANTIATE_TEST_SUITE_P(Observers, ImportanceQuantize,
                         ::testing::Values(Case{"W4A16", "imatrix_mse", false}, Case{"W4A16", "imatrix_lsq", false},
                                           Case{"NVFP4A16", "nvfp4_expanded_imatrix", true},
                                           Case{"NVFP4A16", "imatrix_lsq", true}),
                         [](const auto& info) { return info.param.scheme + "_" + info.param.observer; });

// A file written past write_importance's checks: what a foreign or damaged writer leaves.
void write_raw(const fs::path& f, const std::map<std::string, std::pair<Tensor, int64_t>>& entries,
               std::map<std::string, std::string> md = {{"qobs.format", "qobs-importance"},
                                                        {"qobs.format_version", "1"}}) {
  std::vector<std::pair<std::string, Tensor>> t;
  for (const auto& [m, e] : entries) {
    t.emplace_back(m + ".importance_sum", e.first);
    Tensor c(DType::kI64, {});
    c.data_as<int64_t>()[0] = e.second;
    t.emplace_back(m + ".importance_count", c);
  }
  write_safetensors(f.string(), t, md);
}

std::map<std::string, std::pair<Tensor, int64_t>> raw_of(const ImportanceMap& imp) {
  std::map<std::string, std::pair<Tensor, int64_t>> r;
  for (const auto& [m, e] : imp) r[m] = {e.sum, e.count};
  return r;
}

// Each bad file: a clear error naming the file (and module), and no output folder or
// temporary folder left.
TEST(Importance, BadFilesAreRefusedBeforeAnyOutput) {
  TempDir dir;
  const auto weights = layer_weights();
  const fs::path in = write_checkpoint(dir.path / "in", weights);
  const ImportanceMap imp = collect(weights);
  const fs::path f = dir.path / "imp.safetensors";
  const std::string up = "model.layers.0.mlp.up_proj";
  const auto quantize = [&] { quantize_checkpoint(options(in, dir.path / "out", "W4A16", "imatrix_mse", f)); };
  const auto nothing_written = [&] {
    EXPECT_FALSE(fs::exists(dir.path / "out"));
    for (const auto& e : fs::directory_iterator(dir.path))
      EXPECT_EQ(e.path().filename().string().find(".qobs-"), std::string::npos) << e.path();
  };

  auto raw = raw_of(imp);
  raw.erase(up);
  write_raw(f, raw);
  expect_error<InvalidArgument>(quantize, {f.string(), "no importance for " + up, "imatrix_mse", "R6.12.4"});
  nothing_written();

  raw = raw_of(imp);
  raw[up].first = random_tensor(DType::kF32, {kHidden + 1}, 3, 1.0);
  for (int64_t i = 0; i < raw[up].first.numel(); ++i) raw[up].first.set(i, std::abs(raw[up].first.get(i)));
  write_raw(f, raw);
  expect_error<InvalidArgument>(quantize, {f.string(), up + ".importance_sum has 129 values", "128 input features"});
  nothing_written();

  const auto with_value = [&](double v, int64_t count) {
    auto r = raw_of(imp);
    r[up].first.set(5, v);
    r[up].second = count;
    write_raw(f, r);
  };
  with_value(std::nan(""), 12);
  expect_error<InvalidArgument>(quantize, {f.string(), up + ".importance_sum[5]", "not a finite number"});
  nothing_written();
  with_value(std::numeric_limits<double>::infinity(), 12);
  expect_error<InvalidArgument>(quantize, {up + ".importance_sum[5]", "not a finite number"});
  with_value(-1.0, 12);
  expect_error<InvalidArgument>(quantize, {f.string(), up + ".importance_sum[5]", "negative"});
  nothing_written();
  with_value(1.0, 0);
  expect_error<InvalidArgument>(quantize, {f.string(), up + ".importance_count is 0", "no input reached"});
  nothing_written();
  with_value(1.0, -3);
  expect_error<InvalidArgument>(quantize, {up + ".importance_count is -3"});

  // a module the checkpoint does not have: a file of another model
  raw = raw_of(imp);
  raw["model.layers.7.mlp.up_proj"] = raw[up];
  write_raw(f, raw);
  expect_error<InvalidArgument>(quantize, {f.string(), "model.layers.7.mlp.up_proj", "another model"});
  nothing_written();

  // damaged files: IoError naming the file
  write_importance(f.string(), imp);
  const auto size = fs::file_size(f);
  fs::resize_file(f, size - 40);
  expect_error<IoError>(quantize, {f.string()});
  nothing_written();
  { std::ofstream(f, std::ios::binary | std::ios::trunc) << "not a safetensors file at all"; }
  expect_error<IoError>(quantize, {f.string()});
  nothing_written();
  write_raw(f, raw_of(imp), {{"format", "pt"}});
  expect_error<IoError>(quantize, {f.string(), "not a qobs importance file"});
  write_raw(f, raw_of(imp), {{"qobs.format", "qobs-importance"}, {"qobs.format_version", "9"}});
  expect_error<IoError>(quantize, {f.string(), "version 9"});
  {
    std::vector<std::pair<std::string, Tensor>> t = {{up + ".importance_sum", imp.at(up).sum},
                                                     {up + ".extra", imp.at(up).sum}};
    write_safetensors(f.string(), t, {{"qobs.format", "qobs-importance"}, {"qobs.format_version", "1"}});
  }
  expect_error<IoError>(quantize, {f.string(), "unexpected tensor " + up + ".extra"});
  write_safetensors(f.string(), {{up + ".importance_sum", imp.at(up).sum}},
                    {{"qobs.format", "qobs-importance"}, {"qobs.format_version", "1"}});
  expect_error<InvalidArgument>(quantize, {f.string(), "but no " + up + ".importance_count"});
  write_safetensors(f.string(), {{up + ".importance_sum", imp.at(up).sum.to(DType::kF64)}},
                    {{"qobs.format", "qobs-importance"}, {"qobs.format_version", "1"}});
  expect_error<IoError>(quantize, {f.string(), "must be a 1-D F32 tensor"});
  nothing_written();
  fs::remove(f);
  expect_error<IoError>(quantize, {f.string()});
  nothing_written();
}

TEST(Importance, OptionsNameTheFlag) {
  TempDir dir;
  const auto weights = layer_weights();
  const fs::path in = write_checkpoint(dir.path / "in", weights);
  write_importance((dir.path / "imp.safetensors").string(), collect(weights));
  QuantizeOptions o = options(in, dir.path / "out", "W4A16", "imatrix_lsq", dir.path / "imp.safetensors");
  o.importance_path.reset();
  expect_error<InvalidArgument>([&] { quantize_checkpoint(o); }, {"imatrix_lsq", "--importance FILE", "R6.12.4"});
  o.observer = "memoryless_mse";
  o.importance_path = (dir.path / "imp.safetensors").string();
  expect_error<InvalidArgument>([&] { quantize_checkpoint(o); }, {"--importance", "would be ignored"});
  EXPECT_FALSE(fs::exists(dir.path / "out"));
  // modules outside the importance observer's reach need no entry: --ignore leaves one out
  auto imp = collect(weights);
  imp.erase("model.layers.0.mlp.down_proj");
  write_importance((dir.path / "imp.safetensors").string(), imp);
  o.observer = "imatrix_mse";
  o.ignore = {"model.layers.0.mlp.down_proj"};
  EXPECT_EQ(quantize_checkpoint(o).tensors.size(), 6u);
}

TEST(Importance, WriteRefusesBadStatisticsAndLeavesNothing) {
  TempDir dir;
  ImportanceMap imp = collect(layer_weights());
  const std::string f = (dir.path / "imp.safetensors").string();
  imp.begin()->second.sum.set(3, std::nan(""));
  expect_error<InvalidArgument>([&] { write_importance(f, imp); }, {f, imp.begin()->first + ".importance_sum[3]"});
  EXPECT_TRUE(fs::is_empty(dir.path));
  expect_error<InvalidArgument>([&] { write_importance(f, {}); }, {f, "no module"});
  EXPECT_TRUE(fs::is_empty(dir.path));
}

// SUM per statistic (R6.8.2): counts add exactly; each sum element is the f32 value of
// the exact sum of the files' values. So a file of batches 1..k merged with a file of
// batch k+1 equals collecting the k+1 batches in one run, bit for bit (the observer adds
// each batch's f32 total to its f32 sum, one rounding per batch, the same rounding).
TEST(Importance, MergeIsTheStatisticsSum) {
  TempDir dir;
  const auto weights = layer_weights();
  const std::string up = "model.layers.0.mlp.up_proj";
  std::map<std::string, Tensor> one = {{up + ".weight", weights.at(up + ".weight")}};
  QuantizationArgs args;
  args.strategy = Strategy::kChannel;
  const auto batch = [&](uint32_t seed) { return random_tensor(DType::kBF16, {4, kHidden}, seed, 1.0); };
  const auto observer_over = [&](std::vector<uint32_t> seeds) {
    auto obs = load_observer("imatrix_mse", "weight", args.validated());
    obs->attach(kHidden);
    for (uint32_t s : seeds) obs->accumulate_input(batch(s).view());
    const Statistics st = obs->export_statistics();
    return ModuleImportance{*st.find("importance_sum"), static_cast<int64_t>(st.find("importance_count")->get(0))};
  };
  const fs::path a = dir.path / "a.safetensors", b = dir.path / "b.safetensors", m = dir.path / "m.safetensors";
  write_importance(a.string(), {{up, observer_over({1, 2, 3})}});
  write_importance(b.string(), {{up, observer_over({4})}});
  const ImportanceMap merged = merge_importance({a.string(), b.string()}, m.string());
  const ModuleImportance all = observer_over({1, 2, 3, 4});
  EXPECT_TRUE(merged.at(up).sum.bit_equal(all.sum));
  EXPECT_EQ(merged.at(up).count, 16);
  EXPECT_TRUE(read_importance(m.string()).at(up).sum.bit_equal(all.sum));

  // mismatches name the file, the module and the rule; nothing is written
  const fs::path c = dir.path / "c.safetensors", bad = dir.path / "bad.safetensors";
  write_importance(c.string(), {{up, observer_over({5})}, {"model.layers.0.mlp.gate_proj", observer_over({6})}});
  expect_error<InvalidArgument>(
      [&] {
        merge_importance({a.string(), c.string()}, bad.string());
      },
      {c.string(), "model.layers.0.mlp.gate_proj", a.string(), "same modules", "R6.12.4"});
  expect_error<InvalidArgument>(
      [&] {
        merge_importance({c.string(), a.string()}, bad.string());
      },
      {a.string(), "no importance for model.layers.0.mlp.gate_proj", "R6.12.4"});
  ModuleImportance shorter{Tensor(DType::kF32, {kHidden / 2}), 3};
  write_importance(c.string(), {{up, shorter}});
  expect_error<InvalidArgument>(
      [&] {
        merge_importance({a.string(), c.string()}, bad.string());
      },
      {c.string(), up + ".importance_sum has 64 values", "128"});
  EXPECT_FALSE(fs::exists(bad));
}

}  // namespace
}  // namespace qobs
