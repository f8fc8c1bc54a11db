// qobs/cuda.h on a real CUDA device against the CPU observers: observe_weight then
// qparams_from_statistics must give get_qparams' bytes for every data-free weight
// observer with a device path, INT4 sym / asym g128, INT8 channel, FP8, NVFP4 (with
// fused members sharing a global scale) and MXFP4, in f32, bf16 and f16; and for the
// importance-weighted imatrix_mse and nvfp4_expanded_imatrix, with importance holding
// zeros and huge values, on weights with tails and all-zero / all-equal groups, their
// errors and uniform fallbacks included. Skipped, with the runtime's reason, where there
// is no device, and run again on the host emulation of the backend everywhere; what needs
// no device (the reasons a call stays on the CPU, the argument checks) runs everywhere.
// The activation observers (ActivationStatistics) and the imatrix hook
// (DeviceImportance) batch after batch against the CPU observers: statistics and
// qparams, tails, signed zeros, subnormals, all-equal and all-zero batches, and NaN / Inf
// batches.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <typeinfo>

#include "kernels/kernels_cuda.h"
#include "pipeline/host_backend.h"
#include "qobs/qobs.h"
#include "test_util.h"

namespace qobs {
namespace {

using kernels::cuda::CopyKind;
using kernels::cuda::DeviceBuffer;
using kernels::cuda::Stream;

std::vector<float> weights(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = nd(rng);
  for (int64_t i = 0; i < n; i += 97) v[static_cast<std::size_t>(i)] *= 15.0f;  // outliers
  return v;
}

QuantizationArgs args_of(const char* preset_json) { return QuantizationArgs::from_json(preset_json); }

/// The device tests run twice: on the CUDA device (skipped, with the runtime's reason,
/// where there is none) and on the host emulation of the backend
/// (tests/pipeline/host_backend.h: the same kernel bodies over every index, lazy
/// streams), so that the code of qobs/cuda.h around the kernels is tested on every
/// machine and a missed synchronisation shows there too.
class CudaObserveOn : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "HostEmulation") {
      emulated_ = std::make_unique<testing::EmulatedDevice>();
    } else if (!cuda::available()) {
      GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    }
  }
  std::unique_ptr<testing::EmulatedDevice> emulated_;
};

INSTANTIATE_TEST_SUITE_P(, CudaObserveOn, ::testing::Values("Device", "HostEmulation"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

TEST(CudaObserve, UnsupportedCallsSayWhy) {
  const QuantizationArgs a = QuantizationArgs::from_json(R"({"num_bits": 4, "strategy": "group", "group_size": 16})");
  auto lsq = load_observer("lsq_mse", "weight", a);
  const Tensor t = Tensor::from_floats(DType::kF32, {4, 32}, weights(128, 1));
  EXPECT_NE(cuda::device_unsupported(*lsq, t.view()), "");
  if (!cuda::available()) EXPECT_EQ(cuda::device_unsupported(*lsq, t.view()), cuda::unavailable_reason());
  EXPECT_EQ(cuda::path_unsupported(*lsq, t.view()), "observer lsq_mse has no device path");
  // imatrix_lsq shares imatrix_mse's importance but searches in phase 2: no device path
  auto imatrix_lsq = load_observer("imatrix_lsq", "weight", a);
  EXPECT_EQ(cuda::path_unsupported(*imatrix_lsq, t.view()), "observer imatrix_lsq has no device path");
  EXPECT_NE(cuda::device_unsupported(*imatrix_lsq, t.view()), "");
  // the importance-weighted searches have one, importance or not (the uniform fallback, Q8)
  for (const char* name : {"imatrix_mse", "nvfp4_expanded_imatrix"})
    EXPECT_EQ(cuda::path_unsupported(*load_observer(name, "weight", a), t.view()), "") << name;
  EXPECT_EQ(cuda::path_unsupported(*load_observer("imatrix_mse", "input", a), t.view()),
            "the device path calibrates weights, not input");
}

struct DeviceBatch {
  DeviceBuffer buf;
  TensorView view;
};

DeviceBatch to_device(const kernels::cuda::Backend& b, const Tensor& t) {
  DeviceBatch d{DeviceBuffer(b, t.nbytes(), Stream{}), {}};
  b.copy(d.buf.get(), t.data(), t.nbytes(), CopyKind::kHostToDevice, Stream{});
  d.view = TensorView(d.buf.get(), t.dtype(), t.shape());
  return d;
}

/// Phase 2 on the device for statistics `st` (fused: the group's statistics, these
/// first; empty when alone), copied back to the host.
QParams device_qparams(const Observer& dev, const cuda::DeviceStatistics& st,
                       const std::vector<const cuda::DeviceStatistics*>& fused = {}) {
  const auto& b = kernels::cuda::require_backend();
  const cuda::QParamsLayout l = cuda::qparams_layout(dev, st);
  DeviceBuffer s(b, shape_numel(l.scale_shape) * dtype_size(l.scale_dtype), Stream{});
  DeviceBuffer z(b, shape_numel(l.zero_point_shape) * dtype_size(l.zero_point_dtype), Stream{});
  DeviceBuffer g(b, sizeof(float), Stream{});
  cuda::qparams_from_statistics(dev, st, fused, s.get(), z.get(), l.has_global_scale ? g.get() : nullptr);
  QParams out;
  out.scale = Tensor::uninitialized(l.scale_dtype, l.scale_shape);
  out.zero_point = Tensor::uninitialized(l.zero_point_dtype, l.zero_point_shape);
  b.copy(out.scale.data(), s.get(), out.scale.nbytes(), CopyKind::kDeviceToHost, Stream{});
  b.copy(out.zero_point.data(), z.get(), out.zero_point.nbytes(), CopyKind::kDeviceToHost, Stream{});
  if (l.has_global_scale) {
    out.global_scale = Tensor::uninitialized(DType::kF32, {1});
    b.copy(out.global_scale->data(), g.get(), 4, CopyKind::kDeviceToHost, Stream{});
  }
  b.synchronize(Stream{});
  return out;
}

void expect_same_qparams(const QParams& want, const QParams& got, const std::string& what) {
  EXPECT_EQ(testing::describe_difference(want.scale, got.scale), "") << what;
  EXPECT_EQ(testing::describe_difference(want.zero_point, got.zero_point), "") << what;
  ASSERT_EQ(want.global_scale.has_value(), got.global_scale.has_value()) << what;
  if (want.global_scale) EXPECT_EQ(testing::describe_difference(*want.global_scale, *got.global_scale), "") << what;
}

TEST_P(CudaObserveOn, WeightObserversEqualTheCpuObservers) {
  const auto& b = kernels::cuda::require_backend();
  const char* formats[] = {
      R"({"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 128})",
      R"({"num_bits": 4, "type": "int", "symmetric": false, "strategy": "group", "group_size": 128})",
      R"({"num_bits": 8, "type": "int", "symmetric": true, "strategy": "channel"})",
      R"({"num_bits": 8, "type": "float", "symmetric": true, "strategy": "channel"})",
      R"({"num_bits": 4, "type": "float", "symmetric": true, "strategy": "tensor_group", "group_size": 16, "scale_dtype": "float8_e4m3fn"})",
      R"({"num_bits": 4, "type": "float", "symmetric": true, "strategy": "group", "group_size": 32, "scale_dtype": "uint8"})",
      R"({"num_bits": 6, "type": "float", "symmetric": true, "strategy": "group", "group_size": 32, "scale_dtype": "uint8"})",
      R"({"num_bits": 6, "type": "float", "symmetric": true, "strategy": "channel"})",
  };
  for (const char* js : formats)
    for (const char* obs : {"memoryless_minmax", "memoryless_mse", "nvfp4_expanded_mse"})
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
        const QuantizationArgs a = args_of(js);
        // the emulation runs every kernel body on one host thread: fewer rows keep it (and
        // its sanitizer build) quick; the columns, and so every group layout, stay the same
        const int64_t rows = emulated_ ? 40 : 256;
        const Tensor w = Tensor::from_floats(dt, {rows, 512}, weights(rows * 512, 7));
        std::shared_ptr<Observer> cpu, dev;
        try {
          cpu = load_observer(obs, "weight", a);
          dev = load_observer(obs, "weight", a);
        } catch (const std::exception&) {
          continue;  // an observer the args' format refuses, on the CPU too
        }
        DeviceBuffer dw(b, w.nbytes(), Stream{});
        b.copy(dw.get(), w.data(), w.nbytes(), CopyKind::kHostToDevice, Stream{});
        const TensorView dv(dw.get(), dt, w.shape());
        if (!cuda::device_unsupported(*dev, dv).empty()) continue;
        cpu->observe(w.view());
        const QParams want = cpu->get_qparams();
        const cuda::DeviceStatistics st = cuda::observe_weight(*dev, dv);
        expect_same_qparams(want, device_qparams(*dev, st),
                            std::string(obs) + " " + js + " " + std::string(dtype_name(dt)));
      }
}

TEST_P(CudaObserveOn, FusedGlobalScaleAndStatisticCopiesEqualTheCpuObservers) {
  const auto& b = kernels::cuda::require_backend();
  const QuantizationArgs a = args_of(
      R"({"num_bits": 4, "type": "float", "symmetric": true, "strategy": "tensor_group", "group_size": 16, "scale_dtype": "float8_e4m3fn"})");
  std::vector<Tensor> ws;
  std::vector<std::shared_ptr<Observer>> cpu, dev;
  std::vector<DeviceBuffer> dws;
  std::vector<cuda::DeviceStatistics> stats;
  for (int m = 0; m < 3; ++m) {
    std::vector<float> v = weights(64 * 128, 30 + m);
    for (float& x : v) x *= static_cast<float>(m + 1);
    ws.push_back(Tensor::from_floats(DType::kBF16, {64, 128}, v));
    cpu.push_back(load_observer("memoryless_mse", "weight", a));
    dev.push_back(load_observer("memoryless_mse", "weight", a));
    dws.emplace_back(b, ws.back().nbytes(), Stream{});
    b.copy(dws.back().get(), ws.back().data(), ws.back().nbytes(), CopyKind::kHostToDevice, Stream{});
    stats.push_back(cuda::observe_weight(*dev.back(), TensorView(dws.back().get(), DType::kBF16, {64, 128})));
  }
  fuse_observers(cpu);
  for (int m = 0; m < 3; ++m) cpu[m]->bind_weight(ws[m].view());
  const Tensor want = *cpu[1]->get_global_scale();
  // member 1's view of the group: itself first
  const std::vector<const cuda::DeviceStatistics*> fused{&stats[1], &stats[0], &stats[2]};
  DeviceBuffer g(b, sizeof(float), Stream{});
  cuda::global_scale_from_statistics(*dev[1], stats[1], fused, g.get());
  Tensor got = Tensor::uninitialized(DType::kF32, {1});
  b.copy(got.data(), g.get(), 4, CopyKind::kDeviceToHost, Stream{});
  // the statistics copied on the device equal those copied to the host, and the CPU's
  const auto [mn, mx] = stats[2].to_host();
  DeviceBuffer cmn(b, mn.nbytes(), Stream{}), cmx(b, mx.nbytes(), Stream{});
  stats[2].copy_to(cmn.get(), cmx.get());
  Tensor gmn = Tensor::uninitialized(mn.dtype(), mn.shape()), gmx = Tensor::uninitialized(mx.dtype(), mx.shape());
  b.copy(gmn.data(), cmn.get(), gmn.nbytes(), CopyKind::kDeviceToHost, Stream{});
  b.copy(gmx.data(), cmx.get(), gmx.nbytes(), CopyKind::kDeviceToHost, Stream{});
  b.synchronize(Stream{});
  EXPECT_EQ(testing::describe_difference(want, got), "");
  EXPECT_EQ(testing::describe_difference(mn, gmn), "");
  EXPECT_EQ(testing::describe_difference(mx, gmx), "");
  const auto host = cpu[2]->get_statistics();  // observed for get_global_scale (R6.10.3)
  EXPECT_EQ(testing::describe_difference(host[0].second, mn), "");
  EXPECT_EQ(testing::describe_difference(host[1].second, mx), "");
  EXPECT_EQ(stats[2].device(), b.device_of(dws[2].get()));
  // a strategy without a global scale has none to give
  auto ch = load_observer("memoryless_minmax", "weight", args_of(R"({"num_bits": 8, "strategy": "channel"})"));
  const cuda::DeviceStatistics cs = cuda::observe_weight(*ch, TensorView(dws[0].get(), DType::kBF16, {64, 128}));
  testing::expect_error<InvalidArgument>([&] { cuda::global_scale_from_statistics(*ch, cs, {}, g.get()); },
                                         {"only tensor_group observers have a global scale"});
}

TEST_P(CudaObserveOn, NonFiniteWeightsAreRejectedAsOnTheCpu) {
  const auto& b = kernels::cuda::require_backend();
  const QuantizationArgs a = args_of(R"({"num_bits": 4, "strategy": "group", "group_size": 16})");
  std::vector<float> v = weights(64, 2);
  v[37] = NAN;
  const Tensor w = Tensor::from_floats(DType::kF32, {2, 32}, v);
  auto o = load_observer("memoryless_mse", "weight", a);
  DeviceBuffer dw(b, w.nbytes(), Stream{});
  b.copy(dw.get(), w.data(), w.nbytes(), CopyKind::kHostToDevice, Stream{});
  testing::expect_error<InvalidArgument>(
      [&] {
        cuda::observe_weight(*o, TensorView(dw.get(), DType::kF32, {2, 32}));
      },
      {"non-finite", "flat index 37"});
}

// ---- importance-weighted weights -----------------------------------------------------

/// An imatrix observer's importance after `count` input rows over `cols` features:
/// squares of a skewed scale, no importance in every seventh column; `huge`: two
/// columns of 1e28 and 3e30, which leave the others' weights near 2^-100.
Statistics importance_of(int64_t cols, uint32_t seed, bool huge, int64_t count = 96) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> sum(static_cast<std::size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    const float v = u(rng) * (c % 16 < 4 ? 30.0f : 1.0f);
    sum[static_cast<std::size_t>(c)] = c % 7 == 3 ? 0.0f : v * v * static_cast<float>(count);
  }
  if (huge) {
    sum[1] = 3e30f;
    sum[static_cast<std::size_t>(cols - 2)] = 1e28f;
  }
  Tensor n(DType::kI64, {});
  n.set(0, static_cast<double>(count));
  return Statistics{"",
                    {{"importance_sum", Tensor::from_floats(DType::kF32, {cols}, sum), ReduceOp::kSum},
                     {"importance_count", std::move(n), ReduceOp::kSum}},
                    1};
}

/// The observer's importance as its forward-pre hook would have left it.
void give_importance(Observer& o, const Statistics& st) {
  o.attach(st.find("importance_sum")->numel());
  o.import_statistics(st);
}

/// A weight with tails (an odd number of rows), a row of zeros and a row of equal values
/// (all-zero and all-equal groups in every strategy).
Tensor imatrix_weight(DType dt, int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<float> v = weights(rows * cols, seed);
  for (int64_t c = 0; c < cols; ++c) {
    v[static_cast<std::size_t>(2 * cols + c)] = 0.0f;
    v[static_cast<std::size_t>(4 * cols + c)] = -0.8125f;
  }
  return Tensor::from_floats(dt, {rows, cols}, v);
}

const char* const kImatrixFormats[] = {
    R"({"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 128})",
    R"({"num_bits": 4, "type": "int", "symmetric": false, "strategy": "group", "group_size": 128})",
    R"({"num_bits": 8, "type": "int", "symmetric": true, "strategy": "channel"})",
    R"({"num_bits": 4, "type": "float", "symmetric": true, "strategy": "tensor_group", "group_size": 16, "scale_dtype": "float8_e4m3fn"})",
};

TEST_P(CudaObserveOn, ImatrixObserversEqualTheCpuObservers) {
  const auto& b = kernels::cuda::require_backend();
  int compared = 0, weighted = 0;
  for (const char* js : kImatrixFormats)
    for (const char* obs : {"imatrix_mse", "nvfp4_expanded_imatrix"})
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
        for (bool huge : {false, true}) {
          const QuantizationArgs a = args_of(js);
          // channel: columns that are no multiple of a vector's width
          const int64_t rows = 37, cols = a.get_strategy() == Strategy::kChannel ? 200 : 256;
          const Tensor w = imatrix_weight(dt, rows, cols, 11);
          const Statistics imp = importance_of(cols, 5, huge);
          auto cpu = load_observer(obs, "weight", a);
          auto dev = load_observer(obs, "weight", a);
          auto uniform = load_observer(obs, "weight", a);  // no importance: the Q8 fallback
          give_importance(*cpu, imp);
          give_importance(*dev, imp);
          const std::string what =
              std::string(obs) + " " + js + " " + std::string(dtype_name(dt)) + (huge ? " huge importance" : "");
          DeviceBatch d = to_device(b, w);
          const std::string why = cuda::device_unsupported(*dev, d.view);
          if (why.find("libm powf") != std::string::npos) continue;  // norm 2.4 in f32 on a host whose powf differs
          ASSERT_EQ(why, "") << what;
          cpu->observe(w.view());
          const QParams want = cpu->get_qparams();
          const cuda::DeviceStatistics st = cuda::observe_weight(*dev, d.view);
          EXPECT_FALSE(dev->has_statistics()) << what;  // the device keeps them
          EXPECT_EQ(imatrix_search_path(*dev), "importance") << what;
          expect_same_qparams(want, device_qparams(*dev, st), what);
          ++compared;
          // the importance changes the result: a device path that ignored it would fail above
          uniform->observe(w.view());
          if (!uniform->get_qparams().scale.bit_equal(want.scale)) ++weighted;
        }
  EXPECT_GE(compared, 36);
  EXPECT_GE(weighted, compared * 3 / 4) << weighted << " of " << compared;
}

// NVFP4's global scale shared by fused members (R6.10) from nvfp4_expanded_imatrix
// statistics: each member searches with its own importance.
TEST_P(CudaObserveOn, FusedImatrixMembersEqualTheCpuObservers) {
  const auto& b = kernels::cuda::require_backend();
  const QuantizationArgs a = args_of(kImatrixFormats[3]);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    std::vector<Tensor> ws;
    std::vector<std::shared_ptr<Observer>> cpu, dev;
    std::vector<DeviceBatch> dws;
    std::vector<cuda::DeviceStatistics> stats;
    for (int m = 0; m < 3; ++m) {
      ws.push_back(imatrix_weight(dt, m == 0 ? 67 : 33, 128, 40 + m));
      const Statistics imp = importance_of(128, 50 + m, m == 2);
      cpu.push_back(load_observer("nvfp4_expanded_imatrix", "weight", a));
      dev.push_back(load_observer("nvfp4_expanded_imatrix", "weight", a));
      give_importance(*cpu.back(), imp);
      give_importance(*dev.back(), imp);
      dws.push_back(to_device(b, ws.back()));
      stats.push_back(cuda::observe_weight(*dev.back(), dws.back().view));
    }
    fuse_observers(cpu);
    for (int m = 0; m < 3; ++m) cpu[m]->bind_weight(ws[m].view());
    for (int m = 0; m < 3; ++m) {
      cpu[m]->observe(ws[m].view());
      const QParams want = cpu[m]->get_qparams();
      std::vector<const cuda::DeviceStatistics*> fused{&stats[m]};
      for (int i = 0; i < 3; ++i)
        if (i != m) fused.push_back(&stats[i]);
      expect_same_qparams(want, device_qparams(*dev[m], stats[m], fused),
                          "member " + std::to_string(m) + " " + std::string(dtype_name(dt)));
    }
  }
}

// Without usable importance the device does what the CPU observer does: raise its error
// (no input reached an attached module, R6.12.3; strict=true, R6.8.4) with its message,
// or search uniformly (Q8) and say so in imatrix_search_path.
TEST_P(CudaObserveOn, ImatrixWithoutImportanceRaisesOrFallsBackAsOnTheCpu) {
  const auto& b = kernels::cuda::require_backend();
  const QuantizationArgs group = args_of(kImatrixFormats[0]);
  const QuantizationArgs tensor = args_of(R"({"num_bits": 8, "type": "int", "symmetric": true, "strategy": "tensor"})");
  const Tensor w = imatrix_weight(DType::kBF16, 9, 256, 3);
  DeviceBatch d = to_device(b, w);
  const ObserverOptions opt{.label = "model.layers.0.mlp.up_proj.weight"};
  Statistics zeros = importance_of(256, 1, false);
  zeros.items[0].value = Tensor(DType::kF32, {256});
  struct Case {
    const char* what;
    const QuantizationArgs* args;
    bool strict;
    std::function<void(Observer&)> give;
  };
  const Case cases[] = {
      {"attached, no input", &group, false, [](Observer& o) { o.attach(256); }},
      {"attached, no input, strict", &group, true, [](Observer& o) { o.attach(256); }},
      {"not attached", &group, false, [](Observer&) {}},
      {"not attached, strict", &group, true, [](Observer&) {}},
      {"all zeros", &group, false, [&](Observer& o) { give_importance(o, zeros); }},
      {"all zeros, strict", &group, true, [&](Observer& o) { give_importance(o, zeros); }},
      {"another size", &group, false, [](Observer& o) { give_importance(o, importance_of(384, 2, false)); }},
      {"tensor strategy", &tensor, false, [](Observer& o) { give_importance(o, importance_of(256, 2, false)); }},
      {"tensor strategy, strict", &tensor, true, [](Observer& o) { give_importance(o, importance_of(256, 2, false)); }},
  };
  int raised = 0, fell_back = 0;
  for (const char* name : {"imatrix_mse", "nvfp4_expanded_imatrix"})
    for (const Case& c : cases) {
      const std::string what = std::string(name) + ", " + c.what;
      auto cpu = load_observer(name, "weight", *c.args, {{"strict", c.strict}}, opt);
      auto dev = load_observer(name, "weight", *c.args, {{"strict", c.strict}}, opt);
      c.give(*cpu);
      c.give(*dev);
      ASSERT_EQ(cuda::device_unsupported(*dev, d.view), "") << what;
      std::string cpu_error, dev_error;
      QParams want;
      try {
        cpu->observe(w.view());
        want = cpu->get_qparams();
      } catch (const std::exception& e) {
        cpu_error = std::string(typeid(e).name()) + ": " + e.what();
      }
      std::optional<cuda::DeviceStatistics> st;
      try {
        st = cuda::observe_weight(*dev, d.view);
      } catch (const std::exception& e) {
        dev_error = std::string(typeid(e).name()) + ": " + e.what();
      }
      EXPECT_EQ(dev_error, cpu_error) << what;
      if (!cpu_error.empty()) {
        ++raised;
        continue;
      }
      ASSERT_TRUE(st.has_value()) << what;
      EXPECT_EQ(imatrix_search_path(*dev), imatrix_search_path(*cpu)) << what;
      EXPECT_EQ(imatrix_search_path(*dev).rfind("uniform fallback: ", 0), 0u) << what;
      expect_same_qparams(want, device_qparams(*dev, *st), what);
      ++fell_back;
    }
  EXPECT_EQ(raised, 2 * 5);
  EXPECT_EQ(fell_back, 2 * 4);
}

// ---- activations --------------------------------------------------------------------

// the strategies activations take (their statistics' layouts), INT and FP8 qparams; the
// device sweep below stays small enough for compute-sanitizer's stages of gpu_check
const char* const kActivationFormats[] = {
    R"({"num_bits": 8, "type": "int", "symmetric": true, "strategy": "tensor"})",
    R"({"num_bits": 8, "type": "int", "symmetric": false, "strategy": "group", "group_size": 16})",
    R"({"num_bits": 8, "type": "float", "symmetric": true, "strategy": "tensor"})",
};

/// Batch k of a sequence for the activation tests: normal values with outliers, then
/// signed zeros, subnormals, all-equal, all-zero; `bad` >= 0 puts a NaN (bad % 2 == 0)
/// or -Inf at that flat index.
std::vector<float> batch_values(int64_t n, int k, int64_t bad = -1) {
  std::vector<float> v = weights(n, 100 + static_cast<uint32_t>(k));
  for (int64_t i = 0; i < n; ++i) {
    float& x = v[static_cast<std::size_t>(i)];
    switch (k % 5) {
      case 1:
        if (i % 3 == 0) x = (i % 2) ? -0.0f : 0.0f;
        break;
      case 2:
        x *= 1e-37f;
        break;
      case 3:
        x = -0.8125f;
        break;
      case 4:
        x = 0.0f;
        break;
      default:
        break;
    }
  }
  if (bad >= 0) v[static_cast<std::size_t>(bad)] = bad % 2 == 0 ? NAN : -INFINITY;
  return v;
}

TEST(CudaObserve, ActivationCallsSayWhyTheyStayOnTheCpu) {
  const Tensor x = Tensor::from_floats(DType::kF32, {2, 32}, weights(64, 3));
  const QuantizationArgs a = args_of(kActivationFormats[0]);
  cuda::ActivationStatistics acts;
  auto mse = load_observer("mse", "input", a);
  auto weight = load_observer("memoryless_minmax", "weight", a);
  auto mm = load_observer("minmax", "input", a);
  EXPECT_NE(acts.unsupported(*mse, x.view()).find("observer mse has no device path for activations"),
            std::string::npos);
  EXPECT_NE(acts.unsupported(*weight, x.view()).find("a weight observer"), std::string::npos);
  const Tensor ints = Tensor::from_values(DType::kI32, {2, 2}, {1, 2, 3, 4});
  EXPECT_NE(acts.unsupported(*mm, ints.view()).find("a int32 batch"), std::string::npos)
      << acts.unsupported(*mm, ints.view());
  if (!cuda::available()) {
    // host memory on a machine without a device: the runtime's reason
    EXPECT_EQ(acts.unsupported(*mm, x.view()), cuda::unavailable_reason());
    testing::expect_error<InvalidArgument>([&] { acts.observe(*mm, x.view()); },
                                           {"minmax on the device", cuda::unavailable_reason()});
  } else {
    EXPECT_NE(acts.unsupported(*mm, x.view()).find("not in CUDA device memory"), std::string::npos);
  }
  testing::expect_error<InvalidArgument>([&] { acts.observe(*mse, x.view()); },
                                         {"mse on the device", "has no device path"});
  // an empty batch changes nothing (R6.1.2-1), whatever the observer; nothing to store
  acts.observe(*mse, TensorView(x.data(), DType::kF32, {0, 32}));
  EXPECT_TRUE(acts.empty());
  acts.store_into(*mm);
  EXPECT_FALSE(mm->has_statistics());

  cuda::DeviceImportance imp;
  auto im =
      load_observer("imatrix_mse", "weight", args_of(R"({"num_bits": 4, "strategy": "group", "group_size": 16})"));
  EXPECT_NE(imp.unsupported(*mm, x.view()).find("collects no importance"), std::string::npos);
  EXPECT_NE(imp.unsupported(*im, x.view()).find("not attached"), std::string::npos);
  im->attach(32);
  EXPECT_NE(imp.unsupported(*im, ints.view()).find("a int32 input"), std::string::npos);
  EXPECT_NE(imp.unsupported(*im, TensorView(x.data(), DType::kF32, {64})).find("an input of 1 dimensions"),
            std::string::npos);
  EXPECT_NE(imp.unsupported(*im, TensorView(x.data(), DType::kF32, {32, 2}, {1, 32})).find("non-contiguous"),
            std::string::npos);
  if (!cuda::available()) {
    EXPECT_EQ(imp.unsupported(*im, x.view()), cuda::unavailable_reason());
    testing::expect_error<InvalidArgument>([&] { imp.accumulate(*im, x.view()); },
                                           {"imatrix_mse importance on the device", cuda::unavailable_reason()});
  }
  EXPECT_TRUE(imp.empty());
  imp.store_into(*im);  // nothing accumulated: the observer's importance stays
  const Statistics st = im->export_statistics();
  ASSERT_NE(st.find("importance_count"), nullptr);
  EXPECT_EQ(st.find("importance_count")->get(0), 0.0);
}

void expect_same_statistics(const Observer& want, const Observer& got, const std::string& what) {
  const Statistics w = want.export_statistics(), g = got.export_statistics();
  for (const char* n : {"min_vals", "max_vals", "importance_sum", "importance_count"}) {
    ASSERT_EQ(w.find(n) == nullptr, g.find(n) == nullptr) << what << " " << n;
    if (w.find(n)) EXPECT_EQ(testing::describe_difference(*w.find(n), *g.find(n)), "") << what << " " << n;
  }
}

TEST_P(CudaObserveOn, ActivationObserversEqualTheCpuObservers) {
  const auto& b = kernels::cuda::require_backend();
  struct Obs {
    const char* name;
    double c;
  };
  const Obs observers[] = {
      {"memoryless_minmax", 0}, {"static_minmax", 0}, {"minmax", 0.01}, {"minmax", 0.25}, {"minmax", 1.0}};
  // tails: odd row counts, groups of 16 in 48- and 528-column rows
  const Shape shapes[] = {{4, 7, 48}, {1, 33 * 16}, {2, 3, 5, 16}, {257, 64}};
  for (const char* js : kActivationFormats)
    for (const Obs& o : observers)
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
        for (const Shape& shape : shapes) {
          QuantizationArgs a = args_of(js);
          if (std::string(o.name) == "minmax") a.observer_kwargs["averaging_constant"] = o.c;
          auto cpu = load_observer(o.name, "input", a);
          auto dev = load_observer(o.name, "input", a);
          cuda::ActivationStatistics acts;
          std::vector<DeviceBatch> keep;  // alive until the stream has read them
          const std::string what = std::string(o.name) + " c=" + std::to_string(o.c) + " " + js + " " +
                                   std::string(dtype_name(dt)) + " " + shape_str(shape);
          for (int k = 0; k < 7; ++k) {
            const Tensor x = Tensor::from_floats(dt, shape, batch_values(shape_numel(shape), k));
            keep.push_back(to_device(b, x));
            const std::string why = acts.unsupported(*dev, keep.back().view);
            ASSERT_EQ(why, "") << what;
            cpu->observe(x.view());
            acts.observe(*dev, keep.back().view);
            if (k == 3 || k == 6) {
              // storing in the middle, then continuing from the observer's statistics
              acts.store_into(*dev);
              expect_same_statistics(*cpu, *dev, what + " batch " + std::to_string(k));
            }
          }
          const QParams want = cpu->get_qparams();
          const QParams got = dev->get_qparams();
          EXPECT_EQ(testing::describe_difference(want.scale, got.scale), "") << what;
          EXPECT_EQ(testing::describe_difference(want.zero_point, got.zero_point), "") << what;
        }
}

TEST_P(CudaObserveOn, NonFiniteActivationBatchesRaiseOnStoreWithTheCpuStatistics) {
  const auto& b = kernels::cuda::require_backend();
  for (const char* name : {"memoryless_minmax", "static_minmax", "minmax"})
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
      for (int64_t bad : {int64_t{0}, int64_t{77}, int64_t{4 * 7 * 48 - 1}}) {
        const QuantizationArgs a = args_of(kActivationFormats[1]);
        auto cpu = load_observer(name, "input", a);
        auto dev = load_observer(name, "input", a);
        cuda::ActivationStatistics acts;
        std::vector<DeviceBatch> keep;
        const Shape shape{4, 7, 48};
        const std::string what = std::string(name) + " " + std::string(dtype_name(dt)) + " at " + std::to_string(bad);
        for (int k = 0; k < 5; ++k) {
          // batch 2 holds the non-finite value; batch 4 another one
          const int64_t at = k == 2 ? bad : k == 4 ? 5 : -1;
          const Tensor x = Tensor::from_floats(dt, shape, batch_values(shape_numel(shape), k, at));
          keep.push_back(to_device(b, x));
          if (k == 2) {
            testing::expect_error<InvalidArgument>([&] { cpu->observe(x.view()); }, {"non-finite"});
          } else if (k < 2) {
            cpu->observe(x.view());
          }
          acts.observe(*dev, keep.back().view);
        }
        testing::expect_error<InvalidArgument>(
            [&] { acts.store_into(*dev); },
            {"non-finite value", "at flat index " + std::to_string(bad), "of shape (4, 7, 48)", "in batch 3 of 5"});
        EXPECT_TRUE(acts.empty()) << what;
        expect_same_statistics(*cpu, *dev, what);
      }
  // a first batch that is not finite leaves an observer without statistics as it was
  auto dev = load_observer("static_minmax", "input", args_of(kActivationFormats[0]));
  const Tensor x = Tensor::from_floats(DType::kF32, {2, 32}, batch_values(64, 0, 9));
  DeviceBatch d = to_device(b, x);
  cuda::ActivationStatistics acts;
  acts.observe(*dev, d.view);
  testing::expect_error<InvalidArgument>([&] { acts.store_into(*dev); }, {"non-finite value -inf", "flat index 9"});
  EXPECT_FALSE(dev->has_statistics());
}

TEST_P(CudaObserveOn, ActivationShapeAndDtypeChangesAreRefusedAsOnTheCpu) {
  const auto& b = kernels::cuda::require_backend();
  const QuantizationArgs a = args_of(kActivationFormats[0]);
  // running statistics of another shape than a tensor observer's (1,), as imported from elsewhere
  Statistics st;
  st.observer = "static_minmax";
  st.items = {
      {"min_vals", Tensor::from_floats(DType::kBF16, {3}, std::vector<float>{-1.0f, -2.0f, -3.0f}), ReduceOp::kMin},
      {"max_vals", Tensor::from_floats(DType::kBF16, {3}, std::vector<float>{1.0f, 2.0f, 3.0f}), ReduceOp::kMax}};
  auto dev = load_observer("static_minmax", "input", a);
  auto cpu = load_observer("static_minmax", "input", a);
  cpu->import_statistics(st);
  dev->import_statistics(st);
  const Tensor x1 = Tensor::from_floats(DType::kBF16, {4, 32}, weights(128, 1));
  const Tensor x3 = Tensor::from_floats(DType::kF32, {4, 32}, weights(128, 3));
  DeviceBatch d1 = to_device(b, x1), d3 = to_device(b, x3);
  cuda::ActivationStatistics acts;
  testing::expect_error<ShapeError>([&] { cpu->observe(x1.view()); }, {"does not match the running statistics"});
  testing::expect_error<ShapeError>([&] { acts.observe(*dev, d1.view); }, {"does not match the running statistics"});
  acts.store_into(*dev);
  expect_same_statistics(*cpu, *dev, "static_minmax after a shape error");
  // a batch of another dtype than the statistics so far, on the device or in the observer
  auto fresh = load_observer("static_minmax", "input", a);
  cuda::ActivationStatistics acts2;
  acts2.observe(*fresh, d1.view);
  const std::string want = "a float32 batch after statistics of dtype bfloat16";
  EXPECT_EQ(acts2.unsupported(*fresh, d3.view), want);
  acts2.store_into(*fresh);
  EXPECT_EQ(cuda::ActivationStatistics().unsupported(*fresh, d3.view), want);
  // memoryless_minmax takes each batch's statistics, but not into running ones of another shape
  auto memoryless = load_observer("memoryless_minmax", "input", a);
  st.observer = "memoryless_minmax";
  memoryless->import_statistics(st);
  EXPECT_NE(cuda::ActivationStatistics().unsupported(*memoryless, d1.view).find("differs from (3,) so far"),
            std::string::npos);
}

TEST_P(CudaObserveOn, ImatrixImportanceEqualsTheCpuObserver) {
  const auto& b = kernels::cuda::require_backend();
  const QuantizationArgs a = args_of(R"({"num_bits": 4, "strategy": "group", "group_size": 16})");
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t in : {16, 33, 4096}) {
      auto cpu = load_observer("imatrix_mse", "weight", a);
      auto dev = load_observer("imatrix_mse", "weight", a);
      cpu->attach(in);
      dev->attach(in);
      cuda::DeviceImportance imp;
      std::vector<DeviceBatch> keep;
      const std::string what = std::string(dtype_name(dt)) + " in=" + std::to_string(in);
      for (int k = 0; k < 7; ++k) {
        const Shape shape = k % 2 ? Shape{3, 5, in} : Shape{k + 1, in};
        std::vector<float> v = batch_values(shape_numel(shape), k);
        if (k == 6) v[3] = NAN;  // no finiteness rule for the hook: NaN propagates as on the CPU
        const Tensor x = Tensor::from_floats(dt, shape, v);
        keep.push_back(to_device(b, x));
        ASSERT_EQ(imp.unsupported(*dev, keep.back().view), "") << what;
        cpu->accumulate_input(x.view());
        imp.accumulate(*dev, keep.back().view);
        if (k == 3) {
          imp.store_into(*dev);
          expect_same_statistics(*cpu, *dev, what + " batch 3");
        }
      }
      testing::expect_error<InvalidArgument>(
          [&] {
            imp.accumulate(*dev, TensorView(keep.back().buf.get(), dt, {2, in + 1}));
          },
          {"does not end in in_features"});
      imp.store_into(*dev);
      expect_same_statistics(*cpu, *dev, what);
    }
}

}  // namespace
}  // namespace qobs
