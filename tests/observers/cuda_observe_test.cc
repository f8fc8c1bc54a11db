// qobs/cuda.h on a real CUDA device against the CPU observers: observe_weight then
// qparams_from_statistics must give get_qparams' bytes for every data-free weight
// observer with a device path, INT4 sym / asym g128, INT8 channel, FP8, NVFP4 (with
// fused members sharing a global scale) and MXFP4, in f32, bf16 and f16. Skipped, with
// the runtime's reason, where there is no device; what needs no device (the reasons a
// call stays on the CPU) runs everywhere.
#include <gtest/gtest.h>

#include <random>

#include "kernels/kernels_cuda.h"
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

TEST(CudaObserve, UnsupportedCallsSayWhy) {
  const QuantizationArgs a = QuantizationArgs::from_json(R"({"num_bits": 4, "strategy": "group", "group_size": 16})");
  auto lsq = load_observer("lsq_mse", "weight", a);
  const Tensor t = Tensor::from_floats(DType::kF32, {4, 32}, weights(128, 1));
  EXPECT_NE(cuda::device_unsupported(*lsq, t.view()), "");
  if (!cuda::available()) EXPECT_EQ(cuda::device_unsupported(*lsq, t.view()), cuda::unavailable_reason());
}

TEST(CudaObserve, WeightObserversEqualTheCpuObservers) {
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  const auto& b = kernels::cuda::require_backend();
  const char* formats[] = {
      R"({"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 128})",
      R"({"num_bits": 4, "type": "int", "symmetric": false, "strategy": "group", "group_size": 128})",
      R"({"num_bits": 8, "type": "int", "symmetric": true, "strategy": "channel"})",
      R"({"num_bits": 8, "type": "float", "symmetric": true, "strategy": "channel"})",
      R"({"num_bits": 4, "type": "float", "symmetric": true, "strategy": "tensor_group", "group_size": 16, "scale_dtype": "float8_e4m3fn"})",
      R"({"num_bits": 4, "type": "float", "symmetric": true, "strategy": "group", "group_size": 32, "scale_dtype": "uint8"})",
  };
  for (const char* js : formats)
    for (const char* obs : {"memoryless_minmax", "memoryless_mse", "nvfp4_expanded_mse"})
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
        const QuantizationArgs a = args_of(js);
        const Tensor w = Tensor::from_floats(dt, {256, 512}, weights(256 * 512, 7));
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
        const cuda::QParamsLayout l = cuda::qparams_layout(*dev, st);
        DeviceBuffer s(b, shape_numel(l.scale_shape) * dtype_size(l.scale_dtype), Stream{});
        DeviceBuffer z(b, shape_numel(l.zero_point_shape) * dtype_size(l.zero_point_dtype), Stream{});
        DeviceBuffer g(b, sizeof(float), Stream{});
        cuda::qparams_from_statistics(*dev, st, {}, s.get(), z.get(), l.has_global_scale ? g.get() : nullptr);
        Tensor gs = Tensor::uninitialized(l.scale_dtype, l.scale_shape);
        Tensor gz = Tensor::uninitialized(l.zero_point_dtype, l.zero_point_shape);
        b.copy(gs.data(), s.get(), gs.nbytes(), CopyKind::kDeviceToHost, Stream{});
        b.copy(gz.data(), z.get(), gz.nbytes(), CopyKind::kDeviceToHost, Stream{});
        Tensor gg = Tensor::uninitialized(DType::kF32, {1});
        if (l.has_global_scale) b.copy(gg.data(), g.get(), 4, CopyKind::kDeviceToHost, Stream{});
        b.synchronize(Stream{});
        const std::string what = std::string(obs) + " " + js + " " + std::string(dtype_name(dt));
        EXPECT_EQ(testing::describe_difference(want.scale, gs), "") << what;
        EXPECT_EQ(testing::describe_difference(want.zero_point, gz), "") << what;
        if (l.has_global_scale) EXPECT_EQ(testing::describe_difference(*want.global_scale, gg), "") << what;
      }
}

TEST(CudaObserve, FusedGlobalScaleAndStatisticCopiesEqualTheCpuObservers) {
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
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

TEST(CudaObserve, NonFiniteWeightsAreRejectedAsOnTheCpu) {
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  const auto& b = kernels::cuda::require_backend();
  const QuantizationArgs a = args_of(R"({"num_bits": 4, "strategy": "group", "group_size": 16})");
  std::vector<float> v = weights(64, 2);
  v[37] = NAN;
  const Tensor w = Tensor::from_floats(DType::kF32, {2, 32}, v);
  auto o = load_observer("memoryless_mse", "weight", a);
  DeviceBuffer dw(b, w.nbytes(), Stream{});
  b.copy(dw.get(), w.data(), w.nbytes(), CopyKind::kHostToDevice, Stream{});
  testing::expect_error<InvalidArgument>([&] { cuda::observe_weight(*o, TensorView(dw.get(), DType::kF32, {2, 32})); },
                                         {"non-finite", "flat index 37"});
}

}  // namespace
}  // namespace qobs
