// calculate_qparams (kernels/qparams): the threaded driver and the vector R4.1 against
// the scalar element step, bit for bit, at every level and thread count.
//
// Tolerance policy: none. Every implementation must give the plain reference's bits
// (the reference fixes a canonical summation order where one is needed; the vector
// |e|^norm replays libm's powf exactly, libm_powf.h).
#include <gtest/gtest.h>

#include "kernels/kernel_test_data.h"

namespace qobs::kernels {
namespace {

using namespace qobs::kernels::testdata;

TEST(QParamsKernels, EqualCalculateQParamsForAnyThreadCount) {
  // kernels::calculate_qparams spreads R4.1's element-wise step over threads; every
  // plan (INT sym / asym, NVFP4 with global scale and FP8 scales, MXFP4, bf16 statistics)
  // must give the bytes of qobs::calculate_qparams, across task boundaries (8192).
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  const int64_t n = 3 * 8192 + 77;
  std::vector<float> lo(static_cast<std::size_t>(n)), hi(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float a = nd(rng), b = nd(rng);
    lo[static_cast<std::size_t>(i)] = i % 97 == 0 ? 0.0f : std::min(a, b);
    hi[static_cast<std::size_t>(i)] = i % 89 == 0 ? 0.0f : std::max(a, b);
  }
  const Tensor gscale = Tensor::from_values(DType::kF32, {1}, {448.0 * 6.0 / 0.3});
  struct Plan {
    std::string name;
    QuantizationArgs args;
    const Tensor* g;
    DType stat_dt;
  };
  const std::vector<Plan> plans{
      {"int4_sym", make_args(4, QuantType::kInt, true, Strategy::kChannel), nullptr, DType::kF32},
      {"int8_asym", make_args(8, QuantType::kInt, false, Strategy::kChannel), nullptr, DType::kF32},
      {"int4_asym_bf16", make_args(4, QuantType::kInt, false, Strategy::kChannel), nullptr, DType::kBF16},
      {"nvfp4", make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3), &gscale,
       DType::kF32},
      {"mxfp4", make_args(4, QuantType::kFloat, true, Strategy::kGroup, 32, DType::kU8), nullptr, DType::kF32},
      {"mxfp6", make_args(6, QuantType::kFloat, true, Strategy::kGroup, 32, DType::kU8), nullptr, DType::kBF16},
      {"fp6", make_args(6, QuantType::kFloat, true, Strategy::kChannel), nullptr, DType::kF16}};
  for (const Plan& p : plans) {
    const Tensor mn = Tensor::from_floats(p.stat_dt, {n / 7, 7}, std::span<const float>(lo.data(), n / 7 * 7));
    const Tensor mx = Tensor::from_floats(p.stat_dt, {n / 7, 7}, std::span<const float>(hi.data(), n / 7 * 7));
    const ScaleZeroPoint ref = qobs::calculate_qparams(mn, mx, p.args, p.g, NumericMode::kParity);
    for (int threads : {1, 2, 3}) {
      const ScaleZeroPoint got = calculate_qparams(mn, mx, p.args, p.g, NumericMode::kParity, threads);
      ASSERT_EQ(got.scale.shape(), ref.scale.shape()) << p.name;
      ASSERT_EQ(got.scale.dtype(), ref.scale.dtype()) << p.name;
      ASSERT_EQ(got.zero_point.dtype(), ref.zero_point.dtype()) << p.name;
      EXPECT_EQ(0, std::memcmp(got.scale.data(), ref.scale.data(), ref.scale.nbytes())) << p.name << " " << threads;
      EXPECT_EQ(0, std::memcmp(got.zero_point.data(), ref.zero_point.data(), ref.zero_point.nbytes()))
          << p.name << " " << threads;
    }
  }
}

TEST(QParamsKernels, EqualScalarR41BitForBitAtEveryLevel) {
  // cpu::calculate_qparams_f32 (the SIMD R4.1 of the common plans) against the scalar
  // qobs::calculate_qparams, on statistics that reach every branch: zero ranges (eps,
  // Q23's zero point), one-signed ranges, signed zeros, subnormal and huge values,
  // equal min and max, and lengths around the vector widths and the 8192-element tasks.
  std::mt19937 rng(41);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  auto stats = [&](int64_t n, std::vector<float>& lo, std::vector<float>& hi) {
    lo.resize(static_cast<std::size_t>(n));
    hi.resize(static_cast<std::size_t>(n));
    const float special[] = {0.0f, -0.0f, 1e-42f, -1e-42f, 3e38f, -3e38f, 0.5f, -0.25f, 1e-30f};
    for (int64_t i = 0; i < n; ++i) {
      float a = nd(rng), b = nd(rng);
      switch (i % 11) {
        case 0:
          a = b = 0.0f;
          break;  // zero range
        case 1:
          a = std::fabs(a), b = std::fabs(b);
          break;  // positive only
        case 2:
          a = -std::fabs(a), b = -std::fabs(b);
          break;  // negative only
        case 3:
          a = special[i % 9], b = special[(i / 9) % 9];
          break;  // the edges
        case 4:
          b = a;
          break;  // min == max
        default:
          break;
      }
      lo[static_cast<std::size_t>(i)] = std::min(a, b);
      hi[static_cast<std::size_t>(i)] = std::max(a, b);
    }
  };
  struct Plan {
    std::string name;
    QuantizationArgs args;
    const Tensor* g = nullptr;
  };
  std::vector<Plan> plans;
  for (int bits : {2, 3, 4, 8})
    for (bool sym : {true, false})
      plans.push_back({"int" + std::to_string(bits) + (sym ? "_sym" : "_asym"),
                       make_args(bits, QuantType::kInt, sym, Strategy::kChannel)});
  QuantizationArgs u8 = make_args(8, QuantType::kInt, false, Strategy::kChannel);
  u8.zp_dtype = DType::kU8;
  plans.push_back({"int8_asym_u8zp", u8});
  plans.push_back({"fp8_sym", make_args(8, QuantType::kFloat, true, Strategy::kChannel)});
  plans.push_back({"fp6_sym", make_args(6, QuantType::kFloat, true, Strategy::kChannel)});
  // NVFP4: global scale x scale, rounded to FP8 E4M3 (a large global scale saturates at 448)
  const Tensor g_typical = Tensor::from_values(DType::kF32, {1}, {448.0 * 6.0 / 0.3});
  const Tensor g_large = Tensor::from_values(DType::kF32, {1}, {3e7});
  const QuantizationArgs nvfp4 = make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3);
  plans.push_back({"nvfp4", nvfp4, &g_typical});
  plans.push_back({"nvfp4_saturating", nvfp4, &g_large});
  // statistics in f32, and in bf16 / f16 (rounded per op in parity mode, not in wide)
  struct Stats {
    DType dt;
    NumericMode mode;
  };
  std::vector<float> lo, hi;
  int64_t fast_runs = 0;
  for (const Stats& st : {Stats{DType::kF32, NumericMode::kParity}, Stats{DType::kBF16, NumericMode::kParity},
                          Stats{DType::kF16, NumericMode::kParity}, Stats{DType::kBF16, NumericMode::kWide}})
    for (int64_t n : {1, 7, 8, 9, 17, 8192 + 13})
      for (const Plan& p : plans) {
        stats(n, lo, hi);
        for (std::size_t i = 0; i < lo.size(); ++i)  // keep f16 statistics finite
          if (st.dt == DType::kF16) lo[i] = std::clamp(lo[i], -6e4f, 6e4f), hi[i] = std::clamp(hi[i], -6e4f, 6e4f);
        const Tensor mn = Tensor::from_floats(st.dt, {n}, lo), mx = Tensor::from_floats(st.dt, {n}, hi);
        const ScaleZeroPoint ref = qobs::calculate_qparams(mn, mx, p.args, p.g, st.mode);
        for (SimdLevel level : available_simd_levels())
          for (int threads : {1, 2}) {
            const auto got = cpu::calculate_qparams_simd(mn, mx, p.args, p.g, st.mode, level, threads);
            if (!got) continue;  // a plan or level the vector path leaves to the scalar one
            ++fast_runs;
            ASSERT_EQ(got->scale.shape(), ref.scale.shape()) << p.name;
            ASSERT_EQ(got->scale.dtype(), ref.scale.dtype()) << p.name;
            ASSERT_EQ(got->zero_point.dtype(), ref.zero_point.dtype()) << p.name;
            EXPECT_EQ(0, std::memcmp(got->scale.data(), ref.scale.data(), ref.scale.nbytes()))
                << p.name << " " << dtype_name(st.dt) << " n=" << n << " " << to_string(level);
            EXPECT_EQ(0, std::memcmp(got->zero_point.data(), ref.zero_point.data(), ref.zero_point.nbytes()))
                << p.name << " " << dtype_name(st.dt) << " n=" << n << " " << to_string(level);
          }
      }
  if (available_simd_levels().back() != SimdLevel::kScalar) EXPECT_GT(fast_runs, 0);
  // non-finite statistics stay the scalar path's error (R4.1)
  lo.assign(9, 0.0f);
  hi.assign(9, 1.0f);
  hi[5] = INFINITY;
  const Tensor mn = Tensor::from_floats(DType::kF32, {9}, lo), mx = Tensor::from_floats(DType::kF32, {9}, hi);
  const QuantizationArgs a = make_args(4, QuantType::kInt, true, Strategy::kChannel);
  EXPECT_FALSE(
      cpu::calculate_qparams_simd(mn, mx, a, nullptr, NumericMode::kParity, available_simd_levels().back(), 1));
  EXPECT_THROW(calculate_qparams(mn, mx, a, nullptr, NumericMode::kParity, 1), InvalidArgument);
}

TEST(QParamsKernels, NonFiniteStatisticAnywhereIsTheScalarPathsError) {
  // The kernel itself notices a NaN / Inf statistic (no scan beforehand): in a full
  // vector, in a tail, in a later 1024-element block or 8192-element task, in min or
  // max, in f32 and in bf16 / f16 statistics, on every level and thread count.
  const int64_t n = 3 * 8192 + 13;
  const QuantizationArgs nvfp4 = make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3);
  const Tensor g = Tensor::from_values(DType::kF32, {1}, {448.0 * 6.0 / 0.3});
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t at : {int64_t{0}, int64_t{1000}, int64_t{1030}, int64_t{8192 + 7}, n - 1})
      for (float bad : {NAN, INFINITY, -INFINITY})
        for (bool in_max : {false, true}) {
          std::vector<float> lo(static_cast<std::size_t>(n), -0.5f), hi(static_cast<std::size_t>(n), 0.25f);
          (in_max ? hi : lo)[static_cast<std::size_t>(at)] = bad;
          const Tensor mn = Tensor::from_floats(dt, {n}, lo), mx = Tensor::from_floats(dt, {n}, hi);
          for (SimdLevel level : available_simd_levels())
            for (int threads : {1, 2, 3}) {
              EXPECT_FALSE(cpu::calculate_qparams_simd(mn, mx, nvfp4, &g, NumericMode::kParity, level, threads))
                  << dtype_name(dt) << " at=" << at << " " << bad << " " << to_string(level) << " t" << threads;
            }
          EXPECT_THROW(calculate_qparams(mn, mx, nvfp4, &g, NumericMode::kParity, 1), InvalidArgument);
        }
}

}  // namespace
}  // namespace qobs::kernels
