// The weight observers on FP6 (R2.8): MXFP6 groups of 32 with E8M0 scales (R2.4.5), FP6
// per channel and in groups of 16 with float scales. memoryless_minmax, memoryless_mse,
// mse and lsq_mse at every SIMD level (the vector kernels) give the bytes they give at
// the scalar level (every kernel's scalar twin), on tails, data on the E2M3 grid's ties
// and its +-7.5 saturation, all-zero and all-equal groups, signed zeros, subnormals and
// huge ranges, in f32 / bf16 / f16; NaN and Inf are the same error at every level.
// The kernels' own comparisons with their plain references are in tests/kernels/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/simd/simd_level.h"
#include "qobs/error.h"
#include "qobs/observer.h"
#include "test_util.h"

namespace qobs {
namespace {

using kernels::available_simd_levels;
using kernels::ScopedSimdLevel;
using kernels::SimdLevel;
using testing::describe_difference;

enum class Data { kNormal, kZeroGroups, kEqualGroups, kSignedZeros, kSubnormal, kHuge, kGrid };

/// n values of `kind`; kGrid: testing::fp6_grid_values.
std::vector<double> make_values(int64_t n, Data kind, uint32_t seed) {
  if (kind == Data::kGrid) return testing::fp6_grid_values(n, seed);
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 0.05);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::size_t g = i / 16;
    double x = nd(rng);
    switch (kind) {
      case Data::kNormal:
        break;
      case Data::kZeroGroups:
        if (g % 3 == 1) x = 0.0;
        break;
      case Data::kEqualGroups:
        if (g % 2 == 0) x = 0.375 * static_cast<double>(g % 5) - 0.75;
        break;
      case Data::kSignedZeros:
        x = i % 3 == 0 ? (i % 2 ? -0.0 : 0.0) : x;
        break;
      case Data::kSubnormal:
        x *= 1e-38;
        break;
      case Data::kHuge:
        if (i % 7 == 3) x *= 1e4;
        break;
      case Data::kGrid:
        break;
    }
    v[i] = x;
  }
  return v;
}

QuantizationArgs fp6_args(Strategy st, std::optional<int64_t> group, bool mx) {
  QuantizationArgs a;
  a.num_bits = 6;
  a.type = QuantType::kFloat;
  a.strategy = st;
  a.group_size = group;
  if (mx) a.scale_dtype = DType::kU8;
  return a.validated();
}

QParams observe_at(SimdLevel level, const std::string& observer, const QuantizationArgs& args, const Tensor& w) {
  ScopedSimdLevel guard(level);
  auto obs = load_observer(observer, "weight", args);
  obs->observe(w.view());
  return obs->get_qparams();
}

struct Fp6Case {
  std::string name;
  QuantizationArgs args;
  std::vector<int64_t> cols;
};

std::vector<Fp6Case> cases() {
  return {{"mxfp6_group32", fp6_args(Strategy::kGroup, 32, true), {32, 96, 4128}},
          {"fp6_channel", fp6_args(Strategy::kChannel, std::nullopt, false), {1, 7, 33, 131, 4099}},
          {"fp6_group16", fp6_args(Strategy::kGroup, 16, false), {16, 48, 160}}};
}

const char* const kObservers[] = {"memoryless_minmax", "memoryless_mse", "mse", "lsq_mse"};

TEST(Fp6Observers, EveryLevelEqualsTheScalarTwins) {
  const std::vector<SimdLevel> levels = available_simd_levels();
  if (levels.back() == SimdLevel::kScalar) GTEST_SKIP() << "no SIMD level on this machine";
  int64_t compared = 0;
  for (const Fp6Case& c : cases())
    for (int64_t cols : c.cols)
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
        for (Data kind : {Data::kNormal, Data::kZeroGroups, Data::kEqualGroups, Data::kSignedZeros, Data::kSubnormal,
                          Data::kHuge, Data::kGrid}) {
          const int64_t rows = cols > 1000 ? 2 : 3;
          const Tensor w =
              Tensor::from_values(dt, {rows, cols}, make_values(rows * cols, kind, static_cast<uint32_t>(cols)));
          for (const char* observer : kObservers) {
            const QParams want = observe_at(SimdLevel::kScalar, observer, c.args, w);
            for (SimdLevel level : levels) {
              if (level == SimdLevel::kScalar) continue;
              const QParams got = observe_at(level, observer, c.args, w);
              const std::string at = c.name + " " + observer + " cols " + std::to_string(cols) + " " +
                                     std::string(dtype_name(dt)) + " data " + std::to_string(static_cast<int>(kind)) +
                                     " " + std::string(kernels::to_string(level));
              ASSERT_EQ(describe_difference(want.scale, got.scale), "") << at;
              ASSERT_EQ(describe_difference(want.zero_point, got.zero_point), "") << at;
              ++compared;
            }
          }
        }
  EXPECT_GT(compared, 0);
}

TEST(Fp6Observers, NonFiniteWeightIsTheSameErrorAtEveryLevel) {
  for (const Fp6Case& c : cases())
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
      for (double bad : {NAN, INFINITY, -INFINITY})
        for (int64_t at : {0, 13, 95}) {
          std::vector<double> v = make_values(3 * 96, Data::kGrid, 3);
          v[static_cast<std::size_t>(96 + at)] = bad;
          const Tensor w = Tensor::from_values(dt, {3, 96}, v);
          for (const char* observer : kObservers) {
            std::string first;
            for (SimdLevel level : available_simd_levels()) {
              std::string msg;
              try {
                observe_at(level, observer, c.args, w);
              } catch (const InvalidArgument& e) {
                msg = e.what();
              }
              EXPECT_FALSE(msg.empty()) << c.name << " " << observer << " " << kernels::to_string(level);
              if (first.empty()) first = msg;
              EXPECT_EQ(msg, first) << c.name << " " << observer << " " << kernels::to_string(level);
            }
          }
        }
}

}  // namespace
}  // namespace qobs
