// The CUDA calculate_qparams's arithmetic (qparams_cuda.h) run on the CPU over every
// element (cuda/host_grid.h) against ref::calculate_qparams: INT2/4/8 symmetric and
// asymmetric, FP8 (with an FP8 zero point), NVFP4 with its global scale read from
// device memory, MXFP4, statistics in f32 / bf16 / f16, both numeric modes.
//
// Tolerance policy: none; scales and zero points must be the reference's bytes.
#include <gtest/gtest.h>

#include <random>

#include "kernels/kernel_test_data.h"
#include "kernels/qparams/qparams_cuda.h"

namespace qobs::kernels {
namespace {

using namespace qobs::kernels::testdata;

TEST(QParamsCuda, BodiesEqualTheReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const QuantizationArgs formats[] = {
      make_args(2, QuantType::kInt, true, Strategy::kChannel),
      make_args(4, QuantType::kInt, true, Strategy::kGroup, 16),
      make_args(4, QuantType::kInt, false, Strategy::kGroup, 16),
      make_args(8, QuantType::kInt, false, Strategy::kChannel),
      make_args(8, QuantType::kFloat, true, Strategy::kChannel),
      make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3),
      make_args(4, QuantType::kFloat, true, Strategy::kGroup, 32, DType::kU8),
  };
  for (const QuantizationArgs& args : formats)
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
      for (NumericMode mode : {NumericMode::kParity, NumericMode::kWide})
        for (bool global : {false, true}) {
          if (global && args.get_strategy() != Strategy::kTensorGroup) continue;
          const int64_t n = 1000;
          std::vector<float> lo(n), hi(n);
          for (int64_t i = 0; i < n; ++i) {
            float a = nd(rng) * (i % 5 == 0 ? 1e-3f : 1.0f), b = nd(rng);
            if (i % 11 == 0) a = b = 0.0f;    // a zero range
            if (i % 13 == 0) a = b = -0.75f;  // an all-equal group
            if (i % 17 == 0) b = a = 1e-39f;  // subnormal statistics
            lo[static_cast<std::size_t>(i)] = std::min(a, b);
            hi[static_cast<std::size_t>(i)] = std::max(a, b);
          }
          const Tensor mn = Tensor::from_floats(dt, {10, 100}, lo), mx = Tensor::from_floats(dt, {10, 100}, hi);
          const Tensor g = Tensor::from_values(DType::kF32, {1}, {2688.0 / 3.7});
          const ScaleZeroPoint want = ref::calculate_qparams(mn, mx, args, global ? &g : nullptr, mode);
          cuda::QParamsArgs a;
          a.mins = mn.data();
          a.maxs = mx.data();
          a.stat_dtype = dt;
          a.n = n;
          a.plan = qobs::detail::QParamPlan::make(args, dt, global ? std::optional<double>(1.0) : std::nullopt, mode);
          const float gf = static_cast<float>(g.get(0));
          a.global_scale = global ? &gf : nullptr;
          Tensor scale = Tensor::uninitialized(a.plan.scale_dt, mn.shape());
          Tensor zp = Tensor::uninitialized(a.plan.zp_dtype, mn.shape());
          int non_finite = 0;
          a.scale = scale.data();
          a.zero_point = zp.data();
          a.non_finite = &non_finite;
          for (int64_t i = 0; i < n; ++i) cuda::qparams_elem(a, i);
          const std::string what = std::string(to_string(args.get_strategy())) +
                                   " bits=" + std::to_string(args.num_bits) + " " + std::string(dtype_name(dt)) +
                                   (global ? " global" : "");
          EXPECT_EQ(non_finite, 0) << what;
          EXPECT_EQ(testing::describe_difference(want.scale, scale), "") << what;
          EXPECT_EQ(testing::describe_difference(want.zero_point, zp), "") << what;
        }
}

TEST(QParamsCuda, NonFiniteStatisticsAreFlagged) {
  const QuantizationArgs args = make_args(4, QuantType::kInt, true, Strategy::kChannel);
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    const Tensor mn = Tensor::from_values(DType::kF32, {3}, {-1.0, static_cast<double>(bad), -2.0});
    const Tensor mx = Tensor::from_values(DType::kF32, {3}, {1.0, 2.0, 3.0});
    EXPECT_THROW(ref::calculate_qparams(mn, mx, args, nullptr, NumericMode::kParity), InvalidArgument);
    cuda::QParamsArgs a;
    a.mins = mn.data();
    a.maxs = mx.data();
    a.n = 3;
    a.plan = qobs::detail::QParamPlan::make(args, DType::kF32, std::nullopt, NumericMode::kParity);
    Tensor scale = Tensor::uninitialized(a.plan.scale_dt, {3}), zp = Tensor::uninitialized(a.plan.zp_dtype, {3});
    int non_finite = 0;
    a.scale = scale.data();
    a.zero_point = zp.data();
    a.non_finite = &non_finite;
    for (int64_t i = 0; i < 3; ++i) cuda::qparams_elem(a, i);
    EXPECT_EQ(non_finite, 1) << bad;
  }
}

}  // namespace
}  // namespace qobs::kernels
