// The grid search's branch-free qparams of shrunk ranges (qparam_math.h ShrunkQParams)
// against the general per-element R4.1 (compute_qparams_elem), value for value and
// bit for bit: the fast search relies on them being the same function.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/grid_search/select.h"
#include "qparams/qparam_math.h"
#include "test_util.h"

namespace qobs::detail {
namespace {

using qobs::testing::float_bits;

TEST(ShrunkQParams, EqualsComputeQParamsElemForEveryCandidate) {
  std::mt19937 rng(17);
  std::vector<std::pair<float, float>> ranges{
      {0, 0},          {-0.0f, 0.0f},           {-1, 1},       {0, 3}, {-3, 0}, {2, 5}, {-5, -2}, {-1e-40f, 1e-40f},
      {-1e30f, 1e30f}, {-0x1p-126f, 0x1p-130f}, {-0.0f, 7.5f}, {-8, 7}};
  for (int k = 0; k < 2000; ++k) {
    std::uniform_real_distribution<float> u(-1, 1);
    const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 80) - 60);
    float a = u(rng) * scale, b = u(rng) * scale;
    if (k % 7 == 0) a = std::fabs(a);    // positive-only ranges
    if (k % 11 == 0) b = -std::fabs(b);  // negative-only ranges
    ranges.emplace_back(std::min(a, b), std::max(a, b));
  }
  // the grid search's plans, and calculate_qparams's NVFP4 plan: a global scale (R4.2
  // values, and one large enough to saturate FP8 at 448) and FP8 E4M3 scales
  struct Extra {
    std::optional<double> global;
    bool fp8_scales;
  };
  // statistics in f32, and in bf16 / f16 whose every op rounds in parity mode
  struct Stats {
    DType dt;
    NumericMode mode;
  };
  for (const Stats& st : {Stats{DType::kF32, NumericMode::kParity}, Stats{DType::kBF16, NumericMode::kParity},
                          Stats{DType::kF16, NumericMode::kParity}, Stats{DType::kBF16, NumericMode::kWide}})
    for (int bits : {2, 3, 4, 8, -4})  // -4: FP4 (symmetric, float zero-point dtype)
      for (bool sym : {true, false})
        for (bool chunked : {false, true})
          for (const Extra& extra : {Extra{std::nullopt, false}, Extra{1.0, true}, Extra{2688.0 / 0.37, true},
                                     Extra{3e6, true}, Extra{17.0, false}}) {
            if (bits < 0 && !sym) continue;
            if (st.dt != DType::kF32 && (chunked || (extra.global && *extra.global == 3e6))) continue;  // time
            if (extra.global && chunked) continue;  // calculate_qparams plans: shrink 1 matters, chunking not
            QuantizationArgs args;
            args.num_bits = bits < 0 ? -bits : bits;
            args.type = bits < 0 ? QuantType::kFloat : QuantType::kInt;
            args.symmetric = sym;
            args.strategy = extra.global ? Strategy::kTensorGroup : Strategy::kGroup;
            args.group_size = 16;
            if (extra.fp8_scales) args.scale_dtype = DType::kF8E4M3;
            args = args.validated();
            const QParamPlan plan = QParamPlan::make(args, st.dt, extra.global, st.mode);
            const ShrunkQParams sq = ShrunkQParams::make(plan);
            ASSERT_TRUE(sq.usable);
            kernels::GridSearchConfig cfg;
            cfg.chunked = chunked;
            cfg.maxshrink = 0.95;  // shrinks down to 0.06: more zero-range and tiny cases
            const std::vector<double> shrink = search_shrink_factors(cfg, st.dt);
            std::vector<float> shrink_f(shrink.begin(), shrink.end());
            std::vector<float> sc(shrink.size()), zp(shrink.size());
            const Arith a{st.dt, st.mode};
            for (const auto& [m0_raw, M0_raw] : ranges) {
              // the statistics are values of their dtype
              const float m0 = static_cast<float>(round_to_float_dtype(st.dt, m0_raw));
              const float M0 = static_cast<float>(round_to_float_dtype(st.dt, M0_raw));
              if (!std::isfinite(m0) || !std::isfinite(M0)) continue;  // f16 overflows
              sq.compute(m0, M0, shrink_f.data(), static_cast<int64_t>(shrink.size()), sc.data(), zp.data());
              for (std::size_t i = 0; i < shrink.size(); ++i) {
                const ElemQParams ref = compute_qparams_elem(a.mul(m0, shrink[i]), a.mul(M0, shrink[i]), plan);
                ASSERT_EQ(float_bits(sc[i]), float_bits(static_cast<float>(ref.scale)))
                    << dtype_name(st.dt) << " bits=" << bits << " sym=" << sym << " global=" << extra.global.value_or(0)
                    << " range [" << m0 << ", " << M0 << "] i=" << i;
                ASSERT_EQ(float_bits(zp[i]), float_bits(static_cast<float>(ref.zero_point)))
                    << dtype_name(st.dt) << " bits=" << bits << " sym=" << sym << " global=" << extra.global.value_or(0)
                    << " range [" << m0 << ", " << M0 << "] i=" << i;
              }
            }
          }
}

TEST(ShrunkQParams, OnlyTheCommonPlansAreCovered) {
  auto fp4 = [](Strategy st, int64_t group, DType scale_dtype) {
    QuantizationArgs a;
    a.num_bits = 4;
    a.strategy = st;
    a.group_size = group;
    a.type = QuantType::kFloat;
    a.scale_dtype = scale_dtype;
    return a.validated();
  };
  const QuantizationArgs nvfp4 = fp4(Strategy::kTensorGroup, 16, DType::kF8E4M3);
  EXPECT_TRUE(ShrunkQParams::make(QParamPlan::make(nvfp4, DType::kF32, 2688.0, NumericMode::kParity)).usable);
  const QuantizationArgs mxfp4 = fp4(Strategy::kGroup, 32, DType::kU8);
  EXPECT_FALSE(ShrunkQParams::make(QParamPlan::make(mxfp4, DType::kF32, std::nullopt, NumericMode::kParity)).usable);
  QuantizationArgs i4;
  i4.num_bits = 4;
  i4.strategy = Strategy::kChannel;
  i4 = i4.validated();
  EXPECT_TRUE(ShrunkQParams::make(QParamPlan::make(i4, DType::kBF16, std::nullopt, NumericMode::kParity)).usable);
  EXPECT_FALSE(ShrunkQParams::make(QParamPlan::make(i4, DType::kF64, std::nullopt, NumericMode::kParity)).usable);
  EXPECT_TRUE(ShrunkQParams::make(QParamPlan::make(i4, DType::kF32, 2.0, NumericMode::kParity)).usable);
  EXPECT_TRUE(ShrunkQParams::make(QParamPlan::make(i4, DType::kF32, std::nullopt, NumericMode::kWide)).usable);
  QuantizationArgs bf16_scales = i4;
  bf16_scales.scale_dtype = DType::kBF16;
  EXPECT_FALSE(
      ShrunkQParams::make(QParamPlan::make(bf16_scales, DType::kF32, std::nullopt, NumericMode::kParity)).usable);
}

}  // namespace
}  // namespace qobs::detail
