// --device (QuantizeOptions::device, docs/CLI.md "Devices"): the device names and their
// resolution, the placement of jobs on a CUDA device and its notes, and
// quantize_checkpoint's device path, whose output folder must be the CPU run's byte for
// byte, with the same report figures. The device path runs on a host emulation of the
// CUDA backend everywhere (DeviceEmulation, host_backend.h) and on a real GPU where
// there is one (PipelineCuda, skipped with the runtime's reason otherwise).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "pipeline/checkpoint_fixture.h"
#include "pipeline/device.h"
#include "pipeline/host_backend.h"
#include "pipeline/plan.h"
#include "qobs/qobs.h"
#include "test_util.h"

namespace qobs {
namespace {
namespace fs = std::filesystem;

using testing::EmulatedDevice;
using testing::folder_bytes;
using testing::make_model;
using testing::TempDir;
using testing::write_model;

// ---- names ---------------------------------------------------------------------------

TEST(DeviceSpec, CpuCudaAndAnIndex) {
  EXPECT_EQ(parse_device("cpu"), DeviceSpec{});
  EXPECT_EQ(parse_device("cuda").kind, DeviceSpec::Kind::kCuda);
  EXPECT_FALSE(parse_device("cuda").index.has_value());
  EXPECT_EQ(parse_device("cuda:0").index, 0);
  EXPECT_EQ(parse_device("cuda:12").index, 12);
  for (const char* s : {"cpu", "cuda", "cuda:0", "cuda:7"}) EXPECT_EQ(parse_device(s).str(), s);
}

TEST(DeviceSpec, BadValuesNameTheValue) {
  for (const char* s : {"gpu", "CUDA", "cuda:", "cuda:-1", "cuda:01", "cuda:x", "cuda:1.0", "cuda:1234567", " cpu", ""})
    testing::expect_error<InvalidArgument>([&] { parse_device(s); },
                                           {"--device " + std::string(s) + ":", "cpu, cuda or cuda:N"});
}

TEST(DeviceSpec, RanksTakeTheDevicesOfTheirHostInTurn) {
  EXPECT_EQ(cuda_device_for_rank(0, 1), 0);
  EXPECT_EQ(cuda_device_for_rank(3, 1), 0);
  EXPECT_EQ(cuda_device_for_rank(3, 2), 1);
  EXPECT_EQ(cuda_device_for_rank(5, 8), 5);
  EXPECT_EQ(cuda_device_for_rank(9, 8), 1);
  testing::expect_error<InvalidArgument>([] { cuda_device_for_rank(0, 0); }, {"no CUDA device"});
}

TEST(DeviceSpec, CpuNeedsNoDevice) { EXPECT_EQ(resolve_device(DeviceSpec{}, 3), DeviceSpec{}); }

// Without a device, --device cuda is refused before anything is read or written.
TEST(DeviceSpec, CudaWithoutADeviceFailsBeforeAnythingIsWritten) {
  if (cuda::available()) GTEST_SKIP() << "a CUDA device is present";
  TempDir dir;
  QuantizeOptions o;
  o.model_path = (dir.path / "missing-model").string();  // not even read
  o.output_dir = (dir.path / "out").string();
  o.scheme = "W4A16";
  o.device = parse_device("cuda");
  testing::expect_error<InvalidArgument>([&] { quantize_checkpoint(o); },
                                         {"--device cuda: ", cuda::unavailable_reason()});
  EXPECT_TRUE(fs::is_empty(dir.path));
}

TEST(DeviceEmulation, ResolveChecksTheIndexAndGivesRanksTheirOwn) {
  EmulatedDevice emulated;  // two devices
  EXPECT_EQ(resolve_device(parse_device("cuda")).index, 0);
  EXPECT_EQ(resolve_device(parse_device("cuda"), 3).index, 1);
  EXPECT_EQ(resolve_device(parse_device("cuda:1"), 0).index, 1);  // an index is kept on every rank
  testing::expect_error<InvalidArgument>([] { resolve_device(parse_device("cuda:2")); },
                                         {"--device cuda:2: the CUDA runtime sees 2 devices (cuda:0 to cuda:1)"});
}

// ---- placement -----------------------------------------------------------------------

// Two config groups: the attention layers in FP8 blocks of 128x128 (k/v, 64 rows, need
// padded blocks: a copy the device path does not make), the MLP in INT4 with lsq_mse (no
// device path).
QuantizeOptions mixed_config(const fs::path& model) {
  QuantizeOptions o;
  o.model_path = model.string();
  o.config_source = "mixed.json";
  o.config = quantization_config_from_document(R"({"config_groups": {
      "attn": {"targets": ["re:.*self_attn.*"], "weights": {"num_bits": 8, "type": "float", "strategy": "block",
               "block_structure": [128, 128], "symmetric": true, "dynamic": false, "observer": "memoryless_minmax"}},
      "mlp": {"targets": ["re:.*mlp.*"], "weights": {"num_bits": 4, "type": "int", "strategy": "group",
              "group_size": 128, "symmetric": true, "dynamic": false, "observer": "lsq_mse"}}},
      "ignore": ["lm_head"]})",
                                               o.config_source);
  return o;
}

QuantizeOptions preset(const fs::path& model, const std::string& scheme, const std::string& observer) {
  QuantizeOptions o;
  o.model_path = model.string();
  o.scheme = scheme;
  o.observer = observer;
  return o;
}

// A plan and the checkpoint its modules point into.
struct Planned {
  explicit Planned(const QuantizeOptions& o)
      : ckpt(Checkpoint::open(o.model_path)), plan(detail::plan_quantize(ckpt, o, detail::resolve_groups(o))) {}
  Checkpoint ckpt;
  detail::QuantizePlan plan;
};

// Module -> on the device, by module name.
std::map<std::string, bool> placed(const detail::QuantizePlan& plan, const detail::Placement& p) {
  std::map<std::string, bool> out;
  for (std::size_t j = 0; j < plan.jobs.size(); ++j)
    for (const std::size_t m : plan.jobs[j].members) out[plan.modules[m].module] = p.on_device(j);
  return out;
}

TEST(DevicePlacement, ObserversWithADevicePathRunThereAndTheOthersStay) {
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kBF16));
  for (const char* observer : {"memoryless_minmax", "memoryless_mse"}) {
    const Planned p(preset(dir.path / "in", "W4A16", observer));
    const detail::Placement where = detail::place_jobs(p.plan, true);
    EXPECT_EQ(where.device_modules, 14) << observer;
    EXPECT_EQ(where.cpu_modules, 0) << observer;
    EXPECT_TRUE(where.cpu_notes(p.plan).empty()) << observer;
  }
  const Planned p(preset(dir.path / "in", "W4A16", "lsq_mse"));
  const detail::Placement where = detail::place_jobs(p.plan, true);
  EXPECT_EQ(where.device_modules, 0);
  EXPECT_EQ(where.cpu_modules, 14);
  // one line for the one reason, not one per weight
  const std::vector<std::string> notes = where.cpu_notes(p.plan);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].rfind("14 weights stay on the CPU: ", 0), 0u) << notes[0];
  EXPECT_NE(notes[0].find("lsq_mse"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("(model.layers.0.mlp.down_proj, ...)"), std::string::npos) << notes[0];
  // MXFP6's FP6 codes are packed on the CPU (R8.10.1), whatever the observer
  const Planned mx(preset(dir.path / "in", "MXFP6A16", "memoryless_minmax"));
  const detail::Placement mx_where = detail::place_jobs(mx.plan, true);
  EXPECT_EQ(mx_where.device_modules, 0);
  EXPECT_EQ(mx_where.cpu_modules, 14);
  const std::vector<std::string> mx_notes = mx_where.cpu_notes(mx.plan);
  ASSERT_EQ(mx_notes.size(), 1u);
  EXPECT_EQ(
      mx_notes[0].rfind("14 weights stay on the CPU: mxfp6-pack-quantized (the device path packs no FP6 codes)", 0), 0u)
      << mx_notes[0];
}

TEST(DevicePlacement, EachReasonIsOneNote) {
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kBF16));
  const Planned p(mixed_config(dir.path / "in"));
  const detail::Placement where = detail::place_jobs(p.plan, true);
  const auto on = placed(p.plan, where);
  for (const char* layer : {"model.layers.0.", "model.layers.1."}) {
    const std::string l = layer;
    EXPECT_TRUE(on.at(l + "self_attn.q_proj") && on.at(l + "self_attn.o_proj")) << l;
    EXPECT_FALSE(on.at(l + "self_attn.k_proj") || on.at(l + "self_attn.v_proj")) << l;
    EXPECT_FALSE(on.at(l + "mlp.gate_proj") || on.at(l + "mlp.up_proj") || on.at(l + "mlp.down_proj")) << l;
  }
  EXPECT_EQ(where.device_modules, 4);
  EXPECT_EQ(where.cpu_modules, 10);
  const std::vector<std::string> notes = where.cpu_notes(p.plan);  // in the order of the jobs
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0].rfind("6 weights stay on the CPU: observer lsq_mse", 0), 0u) << notes[0];
  EXPECT_EQ(notes[1].rfind("4 weights stay on the CPU: a layout whose flattening needs a copy (block padding)", 0), 0u)
      << notes[1];
  EXPECT_NE(notes[1].find("(model.layers.0.self_attn.k_proj, ...)"), std::string::npos) << notes[1];
}

// One member without a device path keeps its fused group on the CPU: the members share
// one global scale (R6.10), which one side alone cannot compute.
TEST(DevicePlacement, AFusedGroupGoesWhole) {
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kBF16));
  Planned p(preset(dir.path / "in", "NVFP4A16", "memoryless_mse"));
  // a member whose weight the device path does not read (the CPU observers refuse f64
  // too, so no checkpoint can hold one; the placement reads only the planned dtype)
  std::map<std::string, TensorInfo> f64;
  for (detail::PlannedModule& pm : p.plan.modules)
    if (pm.module == "model.layers.0.self_attn.k_proj" || pm.module == "model.layers.1.mlp.down_proj") {
      TensorInfo& t = f64[pm.module] = *pm.weight;
      t.dtype = DType::kF64;
      pm.weight = &t;
    }
  ASSERT_EQ(f64.size(), 2u);
  const detail::Placement where = detail::place_jobs(p.plan, true);
  const auto on = placed(p.plan, where);
  for (const char* m : {"q_proj", "k_proj", "v_proj"}) {
    EXPECT_FALSE(on.at(std::string("model.layers.0.self_attn.") + m)) << m;
    EXPECT_TRUE(on.at(std::string("model.layers.1.self_attn.") + m)) << m;
  }
  EXPECT_TRUE(on.at("model.layers.0.self_attn.o_proj"));
  EXPECT_TRUE(on.at("model.layers.1.mlp.gate_proj") && on.at("model.layers.1.mlp.up_proj"));
  EXPECT_FALSE(on.at("model.layers.1.mlp.down_proj"));
  EXPECT_EQ(where.cpu_modules, 4);
  EXPECT_EQ(where.device_modules, 10);
  const std::vector<std::string> notes = where.cpu_notes(p.plan);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].rfind("4 weights stay on the CPU: a float64 weight", 0), 0u) << notes[0];
}

// ---- the device path against the CPU path -------------------------------------------

struct RunResult {
  std::map<std::string, std::string> files;
  QuantizeReport report;
  std::vector<std::string> log;
};

RunResult quantize_into(QuantizeOptions o, const fs::path& out, const DeviceSpec& device, int threads) {
  o.output_dir = out.string();
  o.report_dir = (out.parent_path() / (out.filename().string() + "-report")).string();  // timings stay out
  o.threads = threads;
  o.overwrite = true;
  o.device = device;
  RunResult r;
  o.log = [&](const std::string& line) { r.log.push_back(line); };
  r.report = quantize_checkpoint(o);
  r.files = folder_bytes(out);
  return r;
}

bool same_double(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }
bool same_double(const std::optional<double>& a, const std::optional<double>& b) {
  return a.has_value() == b.has_value() && (!a || same_double(*a, *b));
}

// The report's figures, every field but the timings.
void expect_same_report(const QuantizeReport& want, const QuantizeReport& got, const std::string& what) {
  ASSERT_EQ(want.tensors.size(), got.tensors.size()) << what;
  for (std::size_t i = 0; i < want.tensors.size(); ++i) {
    const TensorReport &a = want.tensors[i], &b = got.tensors[i];
    EXPECT_EQ(a.module, b.module) << what;
    EXPECT_EQ(a.shape, b.shape) << what << " " << a.module;
    EXPECT_EQ(a.dtype, b.dtype) << what << " " << a.module;
    EXPECT_EQ(a.observer, b.observer) << what << " " << a.module;
    EXPECT_TRUE(same_double(a.rel_mse, b.rel_mse))
        << what << " " << a.module << ": " << a.rel_mse << " vs " << b.rel_mse;
    EXPECT_TRUE(same_double(a.sqnr_db, b.sqnr_db)) << what << " " << a.module;
    EXPECT_TRUE(same_double(a.baseline_rel_mse, b.baseline_rel_mse)) << what << " " << a.module;
    EXPECT_TRUE(same_double(a.baseline_sqnr_db, b.baseline_sqnr_db)) << what << " " << a.module;
    EXPECT_TRUE(same_double(a.global_scale, b.global_scale)) << what << " " << a.module;
  }
  EXPECT_EQ(want.copied_tensors, got.copied_tensors) << what;
  EXPECT_EQ(want.output_bytes, got.output_bytes) << what;
}

// Quantized in `dir` with --device `device`, options `o` give the CPU run's folder and
// report, every weight (7 of make_model's one layer) on the device.
void expect_device_run_equals_cpu(const QuantizeOptions& o, const fs::path& dir, const DeviceSpec& device,
                                  const std::string& what) {
  const RunResult cpu = quantize_into(o, dir / "cpu", DeviceSpec{}, 2);
  const RunResult dev = quantize_into(o, dir / "dev", device, 3);
  EXPECT_TRUE(cpu.files == dev.files) << what << ": the output folders differ";
  expect_same_report(cpu.report, dev.report, what);
  // the device and every weight on it
  if (dev.log.empty()) {
    ADD_FAILURE() << what << ": nothing logged";
    return;
  }
  EXPECT_NE(dev.log[0].find("7 of 7 weights are calibrated, quantized and packed on the GPU"), std::string::npos)
      << dev.log[0];
  EXPECT_EQ(dev.log.size(), 1u) << what;
}

// The schemes and observers of the device path's promise: each (scheme, observer) pair,
// quantized with --device `device`, gives the CPU run's folder and report, every weight
// on the device. Returns the pairs compared.
int expect_device_runs_equal_cpu(const fs::path& dir, DType dt, const std::vector<std::string>& schemes,
                                 const DeviceSpec& device) {
  write_model(dir / "in", make_model(dt, 128, 1));
  int compared = 0;
  for (const std::string& scheme : schemes)
    for (const std::string observer : {"memoryless_minmax", "memoryless_mse", "nvfp4_expanded_mse"}) {
      const std::string what = scheme + " " + observer + " " + std::string(dtype_name(dt)) + " " + device.str();
      expect_device_run_equals_cpu(preset(dir / "in", scheme, observer), dir, device, what);
      ++compared;
    }
  return compared;
}

const std::vector<std::string> kSchemes = {"W4A16", "W4A16_ASYM", "W8A16", "FP8_DYNAMIC", "NVFP4A16", "MXFP4A16"};

TEST(DeviceEmulation, CheckpointIsTheCpuRunsByteForByte) {
  EmulatedDevice emulated;
  TempDir dir;
  EXPECT_EQ(expect_device_runs_equal_cpu(dir.path, DType::kBF16, kSchemes, parse_device("cuda:1")), 18);
  EXPECT_EQ(emulated.backend().held_bytes(), 0u) << "device or pinned memory left after the runs";
}

TEST(DeviceEmulation, OtherWeightDtypes) {
  EmulatedDevice emulated;
  for (DType dt : {DType::kF32, DType::kF16}) {
    TempDir dir;
    EXPECT_EQ(expect_device_runs_equal_cpu(dir.path, dt, {"W4A16_ASYM", "NVFP4A16"}, parse_device("cuda")), 6);
  }
}

// An importance file for the linear modules of `model` (R6.12.4): per module skewed
// sums of squares, some columns without importance.
ImportanceMap importance_for(const std::map<std::string, Tensor>& model) {
  ImportanceMap out;
  uint32_t seed = 70;
  for (const auto& [name, w] : model) {
    if (name.find("_proj.weight") == std::string::npos) continue;
    const int64_t cols = w.shape()[1];
    std::mt19937 rng(seed++);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> sum(static_cast<std::size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) {
      const float v = u(rng) * (c % 16 < 4 ? 30.0f : 1.0f);
      sum[static_cast<std::size_t>(c)] = c % 7 == 3 ? 0.0f : 40.0f * v * v;
    }
    out[name.substr(0, name.size() - 7)] = ModuleImportance{Tensor::from_floats(DType::kF32, {cols}, sum), 40};
  }
  return out;
}

// The importance-weighted observers with --importance: every weight on the device, the
// CPU run's folder and report. Returns the pairs compared.
int expect_imatrix_runs_equal_cpu(const fs::path& dir, const DeviceSpec& device) {
  const auto model = make_model(DType::kBF16, 128, 1);
  write_model(dir / "in", model);
  const fs::path imp = dir / "importance.safetensors";
  write_importance(imp.string(), importance_for(model));
  int compared = 0;
  for (const std::string scheme : {"W4A16_ASYM", "NVFP4A16"})
    for (const std::string observer : {"imatrix_mse", "nvfp4_expanded_imatrix"}) {
      QuantizeOptions o = preset(dir / "in", scheme, observer);
      o.importance_path = imp.string();
      expect_device_run_equals_cpu(o, dir, device, scheme + " " + observer + " " + device.str());
      ++compared;
    }
  return compared;
}

TEST(DeviceEmulation, ImatrixWithAnImportanceFileIsTheCpuRunByteForByte) {
  EmulatedDevice emulated;
  TempDir dir;
  EXPECT_EQ(expect_imatrix_runs_equal_cpu(dir.path, parse_device("cuda:1")), 4);
  EXPECT_EQ(emulated.backend().held_bytes(), 0u) << "device or pinned memory left after the runs";
}

// Weights without a device path run on the CPU beside the others; the folder is still
// the CPU run's, and each reason is said once. Returns the device run's log.
std::vector<std::string> expect_mixed_run_equals_cpu(const fs::path& dir) {
  write_model(dir / "in", make_model(DType::kBF16));
  const RunResult cpu = quantize_into(mixed_config(dir / "in"), dir / "cpu", DeviceSpec{}, 2);
  const RunResult dev = quantize_into(mixed_config(dir / "in"), dir / "dev", parse_device("cuda"), 4);
  EXPECT_TRUE(cpu.files == dev.files);
  expect_same_report(cpu.report, dev.report, "mixed.json");
  EXPECT_TRUE(cpu.log.empty());  // the CPU says nothing
  if (dev.log.size() != 3u) {
    ADD_FAILURE() << dev.log.size() << " lines logged";
    return dev.log;
  }
  EXPECT_NE(dev.log[0].find(": 4 of 14 weights are calibrated, quantized and packed on the GPU"), std::string::npos)
      << dev.log[0];
  EXPECT_EQ(dev.log[1].rfind("6 weights stay on the CPU: observer lsq_mse", 0), 0u) << dev.log[1];
  EXPECT_EQ(dev.log[2].rfind("4 weights stay on the CPU: a layout whose flattening needs a copy", 0), 0u) << dev.log[2];
  return dev.log;
}

TEST(DeviceEmulation, FallbacksMixWithTheDeviceAndAreLoggedOnce) {
  EmulatedDevice emulated;
  TempDir dir;
  const std::vector<std::string> log = expect_mixed_run_equals_cpu(dir.path);
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log[0],
            "--device cuda:0: host emulation of CUDA device 0: 4 of 14 weights are calibrated, quantized "
            "and packed on the GPU");
}

// MXFP6 with --device cuda: every weight stays on the CPU, said once, and the folder
// and report are the CPU run's (the device path packs no FP6 codes, R8.10.1).
TEST(DeviceEmulation, Mxfp6StaysOnTheCpu) {
  EmulatedDevice emulated;
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kBF16, 128, 1));
  const RunResult cpu =
      quantize_into(preset(dir.path / "in", "MXFP6A16", "memoryless_mse"), dir.path / "cpu", DeviceSpec{}, 2);
  const RunResult dev =
      quantize_into(preset(dir.path / "in", "MXFP6A16", "memoryless_mse"), dir.path / "dev", parse_device("cuda"), 3);
  EXPECT_TRUE(cpu.files == dev.files);
  expect_same_report(cpu.report, dev.report, "MXFP6A16");
  ASSERT_EQ(dev.log.size(), 2u);
  EXPECT_NE(dev.log[0].find(": 0 of 7 weights are calibrated, quantized and packed on the GPU"), std::string::npos)
      << dev.log[0];
  EXPECT_EQ(dev.log[1].rfind("7 weights stay on the CPU: mxfp6-pack-quantized (the device path packs no FP6 codes)", 0),
            0u)
      << dev.log[1];
}

// FP6 (MXFP6 and FP6 per channel) quantized by qobs/cuda.h on the emulated device
// without a zero point, as the MXFP6 compressor quantizes (R8.10.1): the CPU's bytes,
// -0.0 included. (The observers on FP6: tests/observers/cuda_observe_test.cc.)
TEST(DeviceEmulation, Fp6QuantizeEqualsTheCpu) {
  EmulatedDevice emulated;
  const kernels::cuda::Backend& b = emulated.backend();
  using kernels::cuda::CopyKind;
  using kernels::cuda::DeviceBuffer;
  using kernels::cuda::Stream;
  for (
      const char* js :
      {R"({"num_bits": 6, "type": "float", "symmetric": true, "strategy": "group", "group_size": 32, "scale_dtype": "uint8"})",
       R"({"num_bits": 6, "type": "float", "symmetric": true, "strategy": "channel"})"})
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      const QuantizationArgs a = QuantizationArgs::from_json(js);
      std::vector<double> v = testing::fp6_grid_values(8 * 96, 1);
      for (std::size_t i = 0; i < v.size(); i += 5) v[i] *= 0.37;  // off the grid too
      const Tensor w = Tensor::from_values(dt, {8, 96}, v);
      auto obs = load_observer("memoryless_minmax", "weight", a);
      obs->observe(w.view());
      const Tensor scale = obs->get_qparams().scale.to(dt);
      const Tensor want = quantize(w.view(), scale, nullptr, a);
      DeviceBuffer dw(b, w.nbytes(), Stream{}), ds(b, scale.nbytes(), Stream{});
      b.copy(dw.get(), w.data(), w.nbytes(), CopyKind::kHostToDevice, Stream{});
      b.copy(ds.get(), scale.data(), scale.nbytes(), CopyKind::kHostToDevice, Stream{});
      const TensorView dv(dw.get(), dt, w.shape()), dsv(ds.get(), scale.dtype(), scale.shape());
      const cuda::QdqLayout ql = cuda::quantize_layout(dv, dsv, nullptr, a);
      DeviceBuffer dq(b, shape_numel(ql.shape) * dtype_size(ql.dtype), Stream{});
      cuda::quantize(dv, dsv, nullptr, a, nullptr, std::nullopt, dq.get());
      Tensor got = Tensor::uninitialized(ql.dtype, ql.shape);
      b.copy(got.data(), dq.get(), got.nbytes(), CopyKind::kDeviceToHost, Stream{});
      b.synchronize(Stream{});
      EXPECT_EQ(testing::describe_difference(want, got), "") << js << " " << dtype_name(dt);
    }
}

// Several ranks, each on its own device: the single process's folder.
TEST(DeviceEmulation, RanksOnTheirOwnDevicesGiveTheSingleProcessFolder) {
  EmulatedDevice emulated;
  TempDir dir;
  write_model(dir.path / "in", make_model(DType::kBF16, 128, 3), 2);
  QuantizeOptions o;
  o.model_path = (dir.path / "in").string();
  o.output_dir = (dir.path / "out").string();
  o.report_dir = (dir.path / "report").string();
  o.scheme = "NVFP4A16";
  o.observer = "memoryless_mse";
  o.threads = 2;
  o.overwrite = true;
  quantize_checkpoint(o);
  const auto want = folder_bytes(dir.path / "out");
  const auto got = testing::run_ranks(o, 3, [](int rank, QuantizeOptions& mine) {
    mine.device = resolve_device(parse_device("cuda"), rank);  // ranks 0 and 2 on device 0, rank 1 on 1
  });
  for (const auto& [report, error] : got) EXPECT_EQ(error, "");
  EXPECT_TRUE(folder_bytes(dir.path / "out") == want);
}

// An error on the device is the CPU's: a non-finite weight names the tensor, and
// nothing is published.
TEST(DeviceEmulation, ANonFiniteWeightFailsAsOnTheCpu) {
  EmulatedDevice emulated;
  TempDir dir;
  auto model = make_model(DType::kBF16);
  model["model.layers.1.mlp.up_proj.weight"].set(77, NAN);
  write_model(dir.path / "in", model);
  QuantizeOptions o;
  o.model_path = (dir.path / "in").string();
  o.output_dir = (dir.path / "out").string();
  o.scheme = "W4A16";
  o.device = parse_device("cuda");
  testing::expect_error<InvalidArgument>([&] { quantize_checkpoint(o); },
                                         {"model.layers.1.mlp.up_proj.weight", "non-finite", "flat index 77"});
  EXPECT_FALSE(fs::exists(dir.path / "out"));
  EXPECT_EQ(emulated.backend().held_bytes(), 0u);
}

TEST(PipelineCuda, CheckpointIsTheCpuRunsByteForByte) {
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  TempDir dir;
  EXPECT_EQ(expect_device_runs_equal_cpu(dir.path, DType::kBF16, kSchemes, parse_device("cuda")), 18);
}

TEST(PipelineCuda, ImatrixWithAnImportanceFileIsTheCpuRunByteForByte) {
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  TempDir dir;
  EXPECT_EQ(expect_imatrix_runs_equal_cpu(dir.path, parse_device("cuda")), 4);
}

TEST(PipelineCuda, FallbacksMixWithTheDevice) {
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  TempDir dir;
  const std::vector<std::string> log = expect_mixed_run_equals_cpu(dir.path);
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log[0].rfind("--device cuda:0: " + cuda::describe_device(0) + ": ", 0), 0u) << log[0];
}

}  // namespace
}  // namespace qobs
