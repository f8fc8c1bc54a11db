// The kernel drivers on a real CUDA device (kernels_cuda.h) against the CPU path, bit for
// bit: the launches, device memory and atomics that the host-grid tests of the bodies
// (tests/kernels/<concept>/*_cuda_test.cc) cannot show. Skipped, with the runtime's
// reason, where there is no device (every CI machine).
//
// Tolerance policy: none, except that a NaN result compares as NaN: an NVIDIA GPU
// returns its canonical NaN where x86 keeps an operand's payload (docs/RULES.md A6).
#include <gtest/gtest.h>

#include <random>

#include "kernels/kernel_test_data.h"
#include "kernels/kernels_cuda.h"
#include "kernels/qdq/qdq_call.h"
#include "qparams/packing_rows.h"

namespace qobs::kernels {
namespace {

using namespace qobs::kernels::testdata;
using cuda::Backend;
using cuda::CopyKind;
using cuda::DeviceBuffer;
using cuda::Stream;

/// The backend, or the test is skipped with the reason.
#define REQUIRE_DEVICE()                                                       \
  const Backend* dev_ = cuda::backend();                                       \
  if (!dev_) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason(); \
  const Backend& b = *dev_

DeviceBuffer upload(const Backend& b, const void* p, std::size_t n) {
  DeviceBuffer d(b, n, Stream{});
  b.copy(d.get(), p, n, CopyKind::kHostToDevice, Stream{});
  return d;
}

Tensor download(const Backend& b, const void* p, DType dt, const Shape& shape) {
  Tensor t = Tensor::uninitialized(dt, shape);
  b.copy(t.data(), p, t.nbytes(), CopyKind::kDeviceToHost, Stream{});
  b.synchronize(Stream{});
  return t;
}

/// A view of the same layout over device memory.
FlatView on_device(const FlatView& f, const void* device_data) {
  FlatView d = f;
  d.data = device_data;
  d.owned.reset();
  return d;
}

TEST(CudaDevice, MinMaxStatisticsEqualTheCpuPath) {
  REQUIRE_DEVICE();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const Format& fmt : formats_for(128)) {
      const Tensor t = Tensor::from_floats(dt, {64, 128}, make_data(64 * 128, Pattern::kSignedZeros, 3));
      const auto f = flatten_in_place(t.view(), "weight", fmt.args);
      if (!f) continue;
      const auto want = minmax_stats(*f, 1);
      DeviceBuffer x = upload(b, t.data(), t.nbytes());
      const std::size_t nb = static_cast<std::size_t>(want.first.nbytes());
      DeviceBuffer mn(b, nb, Stream{}), mx(b, nb, Stream{});
      cuda::minmax_stats(b, on_device(*f, x.get()), dt, mn.get(), mx.get(), Stream{});
      EXPECT_EQ(testing::describe_difference(want.first, download(b, mn.get(), dt, want.first.shape())), "")
          << fmt.name;
      EXPECT_EQ(testing::describe_difference(want.second, download(b, mx.get(), dt, want.second.shape())), "")
          << fmt.name;
    }
}

TEST(CudaDevice, GridSearchEqualsTheCpuPath) {
  REQUIRE_DEVICE();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const Format& fmt : formats_for(256))
      for (const GridSearchConfig& cfg : {mse_cfg(), nvfp4_cfg()}) {
        if (cfg.expand > 1 && !fmt.args.is_fp4()) continue;
        const Tensor t = Tensor::from_floats(dt, {96, 256}, make_data(96 * 256, Pattern::kNormal, 5));
        const auto f = flatten_in_place(t.view(), "weight", fmt.args);
        if (!f) continue;
        const QuantizationArgs sargs = search_args(fmt.args);
        DeviceBuffer x = upload(b, t.data(), t.nbytes());
        const auto plan = cuda::cuda_search_plan(on_device(*f, x.get()), sargs, cfg, nullptr);
        if (!plan.unsupported.empty()) continue;
        const GridSearchResult want = grid_search(*f, sargs, cfg);
        const int64_t nq = f->layout.num_qparams();
        DeviceBuffer mn(b, nq * sizeof(float), Stream{}), mx(b, nq * sizeof(float), Stream{});
        cuda::grid_search(b, plan, mn.get(), mx.get(), DType::kF32, Stream{});
        const Tensor got_mn = download(b, mn.get(), DType::kF32, {nq}),
                     got_mx = download(b, mx.get(), DType::kF32, {nq});
        for (int64_t q = 0; q < nq; ++q) {
          ASSERT_EQ(float_bits(got_mn.data_as<float>()[q]), float_bits(want.best_min[q])) << fmt.name << " q=" << q;
          ASSERT_EQ(float_bits(got_mx.data_as<float>()[q]), float_bits(want.best_max[q])) << fmt.name << " q=" << q;
        }
      }
}

TEST(CudaDevice, QParamsQdqAndPackingEqualTheCpuPath) {
  REQUIRE_DEVICE();
  const QuantizationArgs a = make_args(4, QuantType::kInt, false, Strategy::kGroup, 32);
  const Tensor w = Tensor::from_floats(DType::kBF16, {64, 256}, make_data(64 * 256, Pattern::kNormal, 9));
  const auto f = flatten_in_place(w.view(), "weight", a);
  ASSERT_TRUE(f.has_value());
  const auto [mn, mx] = minmax_stats(*f, 1);
  const ScaleZeroPoint want = calculate_qparams(mn, mx, a, nullptr, NumericMode::kParity, 1);
  DeviceBuffer dmn = upload(b, mn.data(), mn.nbytes()), dmx = upload(b, mx.data(), mx.nbytes());
  const auto plan = qobs::detail::QParamPlan::make(a.validated(), mn.dtype(), std::nullopt, NumericMode::kParity);
  DeviceBuffer ds(b, want.scale.nbytes(), Stream{}), dz(b, want.zero_point.nbytes(), Stream{});
  cuda::calculate_qparams(b, dmn.get(), dmx.get(), mn.dtype(), mn.numel(), plan, nullptr, ds.get(), dz.get(), true,
                          Stream{});
  EXPECT_EQ(testing::describe_difference(want.scale, download(b, ds.get(), want.scale.dtype(), want.scale.shape())),
            "");
  EXPECT_EQ(testing::describe_difference(want.zero_point,
                                         download(b, dz.get(), want.zero_point.dtype(), want.zero_point.shape())),
            "");
  // quantize to int8 codes, then pack
  const Tensor q = qdq(QdqOp::kQuantize, w.view(), want.scale, &want.zero_point, a, nullptr, nullptr, DType::kI8,
                       NumericMode::kParity, 1);
  DeviceBuffer dw = upload(b, w.data(), w.nbytes());
  const QdqCall call = resolve_qdq_layout(QdqOp::kQuantize, w.view(), want.scale.dtype(), want.scale.shape(), true,
                                          true, a, nullptr, DType::kI8, NumericMode::kParity);
  auto qa = cuda::cuda_qdq_args(call, w.view(), want.scale.dtype(), NumericMode::kParity);
  ASSERT_TRUE(qa.has_value());
  DeviceBuffer dq(b, q.nbytes(), Stream{});
  qa->x = dw.get();
  qa->scale = ds.get();
  qa->zero_point = dz.get();
  qa->zp_dtype = want.zero_point.dtype();
  qa->out = dq.get();
  cuda::qdq(b, *qa, Stream{});
  EXPECT_EQ(testing::describe_difference(q, download(b, dq.get(), DType::kI8, q.shape())), "");
  const Tensor packed = pack_int_rows(q, 4, "w", 1);
  DeviceBuffer dp(b, packed.nbytes(), Stream{});
  cuda::pack_int_rows(b, dq.as<int8_t>(), 64, 256, 4, dp.as<uint32_t>(), "w", Stream{});
  EXPECT_EQ(testing::describe_difference(packed, download(b, dp.get(), DType::kI32, packed.shape())), "");
}

TEST(CudaDevice, ColumnSumsAndNonFiniteScanEqualTheCpuPath) {
  REQUIRE_DEVICE();
  const Tensor x = Tensor::from_floats(DType::kBF16, {512, 96}, make_data(512 * 96, Pattern::kNormal, 4));
  std::vector<double> want(96, 0.0);
  sum_squares_by_column(x.view(), 96, want.data(), 1);
  DeviceBuffer dx = upload(b, x.data(), x.nbytes());
  std::vector<double> zeros(96, 0.0);
  DeviceBuffer acc = upload(b, zeros.data(), zeros.size() * sizeof(double));
  cuda::sum_squares_by_column(b, TensorView(dx.get(), DType::kBF16, {512, 96}), 96, acc.as<double>(), Stream{});
  const Tensor got = download(b, acc.get(), DType::kF64, {96});
  for (int64_t c = 0; c < 96; ++c) ASSERT_EQ(double_bits(got.data_as<double>()[c]), double_bits(want[c])) << c;
  EXPECT_EQ(cuda::first_non_finite(b, TensorView(dx.get(), DType::kBF16, {512, 96}), Stream{}), -1);
}

}  // namespace
}  // namespace qobs::kernels
