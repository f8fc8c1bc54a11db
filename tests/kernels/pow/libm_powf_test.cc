// The libm powf replay stands in for std::pow only for the exhaustively verified
// builds of the dispatched powf (kernels/pow/libm_powf.h). tests/CMakeLists.txt reruns
// this suite and the fast-vs-reference searches with glibc's unfused __powf_sse2
// forced (GLIBC_TUNABLES) and with the std::pow fallback forced (QOBS_POWF=libm).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/pow/libm_powf.h"
#include "qobs/qobs.h"
#include "test_util.h"

namespace qobs::kernels {
namespace {

using testing::float_bits;

/// std::pow on values the compiler cannot fold (GCC folds constant powf correctly
/// rounded, which is not what libm returns).
float libm_pow(float x, float y) {
  volatile float vx = x, vy = y;
  return std::pow(static_cast<float>(vx), static_cast<float>(vy));
}

// Under the unfused __powf_sse2 the fused replay differs from std::pow at this input;
// the former 20k-input probe set still accepted the tables.
TEST(LibmPowf, ReplayIsUsedOnlyWhereItEqualsTheDispatchedPowf) {
  const detail::LocatedPowf& loc = detail::located_libm_powf();
  if (!loc.found) GTEST_SKIP() << "libm powf constants not located: kernels use std::pow per lane";
  const float x = 0x1.288bdcp-8f, y = 2.4f;
  const bool agrees = float_bits(detail::powf_replay(x, y, loc.tables)) == float_bits(libm_pow(x, y));
  if (!agrees) EXPECT_EQ(detail::libm_powf_tables(), nullptr) << "replay accepted though it differs from powf";
  if (!agrees) EXPECT_FALSE(detail::powf_matches(y));
  const detail::PowfTables* t = detail::libm_powf_tables();
  if (!t) return;
  EXPECT_TRUE(loc.verified);
  // a dense sweep where quantization errors live
  for (uint32_t u = float_bits(0x1p-30f); u < float_bits(0x1p10f); u += 4099) {
    float v;
    std::memcpy(&v, &u, 4);
    for (float e : {2.4f, 2.40625f, 2.400390625f, 0.5f, 3.7f})
      ASSERT_EQ(float_bits(detail::powf_replay(v, e, *t)), float_bits(libm_pow(v, e))) << v << "^" << e;
  }
}

TEST(LibmPowf, ForcedFallbackAndEnvironmentSwitchSelectStdPow) {
  const detail::PowfTables* before = detail::libm_powf_tables();
  detail::force_libm_powf_for_testing(true);
  EXPECT_EQ(detail::libm_powf_tables(), nullptr);
  EXPECT_FALSE(detail::powf_matches(2.4f));
  detail::force_libm_powf_for_testing(false);
  EXPECT_EQ(detail::libm_powf_tables(), before);
  const char* env = std::getenv("QOBS_POWF");
  if (env && std::string(env) == "libm") EXPECT_EQ(before, nullptr);
}

/// MSE qparams of an observer over data with a heavy tail (|e|^2.4 error terms in f32).
QParams mse_qparams(const std::vector<float>& data, Shape shape, const std::string& strategy) {
  QuantizationArgs a;
  a.num_bits = 4;
  a.symmetric = false;
  a.strategy = parse_strategy(strategy);
  if (strategy == "group") a.group_size = 32;
  a = a.validated();
  auto o = load_observer("memoryless_mse", "weight", a);
  o->observe(TensorView(data.data(), DType::kF32, std::move(shape)));
  return o->get_qparams();
}

TEST(LibmPowf, StdPowFallbackGivesTheFastPathsQParams) {
  std::mt19937 rng(11);
  std::student_t_distribution<float> dist(3.0f);
  std::vector<float> data(64 * 256);
  for (float& v : data) v = dist(rng);
  for (const char* strategy : {"channel", "group", "tensor"}) {
    const QParams fast = mse_qparams(data, {64, 256}, strategy);
    detail::force_libm_powf_for_testing(true);
    const QParams fallback = mse_qparams(data, {64, 256}, strategy);
    detail::force_libm_powf_for_testing(false);
    EXPECT_TRUE(fast.scale.bit_equal(fallback.scale)) << strategy;
    EXPECT_TRUE(fast.zero_point.bit_equal(fallback.zero_point)) << strategy;
  }
}

// Offline tool, not part of the suite: run with --gtest_also_run_disabled_tests on a
// new libm build to compare powf_replay with the dispatched powf for every
// non-negative float x (QOBS_POWF_Y: the exponent, default 2.4), then add the printed
// fingerprint to kVerifiedPowf (libm_powf.cc) if nothing differs.
TEST(LibmPowf, DISABLED_ExhaustiveCheckOfDispatchedPowf) {
  const detail::LocatedPowf& loc = detail::located_libm_powf();
  ASSERT_TRUE(loc.found);
  const char* ys = std::getenv("QOBS_POWF_Y");
  const float y = ys ? std::strtof(ys, nullptr) : 2.4f;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t bad = 0;
  for (uint32_t u = 0; u < 0x7f800000u; ++u) {  // finite x: the replay's domain
    float x;
    std::memcpy(&x, &u, 4);
    if (float_bits(detail::powf_replay(x, y, loc.tables)) != float_bits(libm_pow(x, y)) && bad++ < 5)
      ADD_FAILURE() << std::hexfloat << x << "^" << y;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("fingerprint 0x%016llx y=%a mismatches=%lld (%.1f s)\n", static_cast<unsigned long long>(loc.fingerprint),
              static_cast<double>(y), static_cast<long long>(bad), s);
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace qobs::kernels
