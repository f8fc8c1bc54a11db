// The vector pow kernels (pow_simd.h): the libm powf replay bit for bit, and the
// certified approximation inside its bound.
//
// Tolerance policy: none. Every implementation must give the plain reference's bits
// (the reference fixes a canonical summation order where one is needed; the vector
// |e|^norm replays libm's powf exactly, libm_powf.h).
#include <gtest/gtest.h>

#include "kernels/kernel_test_data.h"

namespace qobs::kernels {
namespace {

using namespace qobs::kernels::testdata;

TEST(LibmPowf, ReplayMatchesStdPowBitForBit) {
  const detail::PowfTables* t = detail::libm_powf_tables();
  if (!t) GTEST_SKIP() << "libm powf constants not located: kernels use std::pow per lane";
  std::mt19937 rng(7);
  std::vector<float> xs{0.0f, 1.0f, 0x1p-149f, 0x1.fffffep-127f, 0x1p-126f, 3.0e38f, INFINITY};
  for (int e = -149; e < 128; e += 3)
    for (int k = 0; k < 40; ++k) xs.push_back(std::ldexp(1.0f + static_cast<float>(rng() % 8388608) / 8388608.0f, e));
  for (float y : {2.4f, 0.5f, 1.7f, 3.3f, 7.9f}) {
    ASSERT_TRUE(detail::powf_matches(y)) << y;
    for (float x : xs)
      if (std::isfinite(x))
        ASSERT_EQ(float_bits(detail::powf_replay(x, y, *t)), float_bits(std::pow(x, y))) << x << "^" << y;
    for (SimdLevel level : available_simd_levels()) {
      if (level == SimdLevel::kScalar) continue;
      std::vector<float> out(xs.size());
      detail::pow_simd(level)->replay(xs.data(), static_cast<int64_t>(xs.size()), y, *t, out.data());
      for (std::size_t i = 0; i < xs.size(); ++i)
        ASSERT_EQ(float_bits(out[i]), float_bits(std::pow(xs[i], y)))
            << xs[i] << "^" << y << " at " << to_string(level);
    }
  }
}

TEST(LibmPowf, ApproximationStaysFourTimesInsideItsBound) {
  // The certified fast path relies on |approx - x^y| <= kPowApproxRelErr * x^y (scaled
  // for y > 2.4) for results in [2^-124, 2^127); check a dense sample with margin.
  std::vector<float> xs;
  for (uint32_t u = float_bits(0x1p-125f); u < float_bits(0x1p50f); u += 1021) {
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);
  }
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    for (float y : {2.4f, 2.40625f, 1.0f, 1.7f, 3.3f, 7.9f}) {
      std::vector<float> out(xs.size());
      detail::pow_simd(level)->approx(xs.data(), static_cast<int64_t>(xs.size()), y, out.data());
      const double bound = detail::kPowApproxRelErr * std::max(1.0, y / 2.4);
      double worst = 0;
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const double truth = std::pow(static_cast<double>(xs[i]), static_cast<double>(y));
        if (truth < 0x1p-124 || truth >= 0x1p126) continue;  // absolute slack / exact path
        worst = std::max(worst, std::fabs(out[i] - truth) / truth);
      }
      EXPECT_LT(worst, bound / 4) << "y=" << y << " at " << to_string(level);
    }
  }
}

}  // namespace
}  // namespace qobs::kernels
