// The certified cheap error terms of the INT grid search (kernels/grid_search/pow_poly.h): r =
// q - y for e / s, and the table + polynomial power. Their bound must hold for every input, or the fast search could decide a comparison
// differently from the reference. The fast-vs-reference search tests
// (tests/kernels/grid_search/grid_search_test.cc) check the end result bit for bit; these check the bound itself,
// on adversarial data (quotients a few ulps from a rounding tie, elements on the grid,
// heavy clamping, tiny and huge scales), so that a bound that is merely rarely
// exceeded cannot hide behind the interval logic's exact fallback.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/arith.h"
#include "kernels/kernels.h"
#include "kernels/grid_search/select.h"
#include "kernels/grid_search/pow_poly.h"
#include "kernels/grid_search/block_errors_simd.h"  // kSumBlock
#include "kernels/grid_search/poly_sums_simd.h"
#include "kernels/simd/simd_level.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels {
namespace {

using detail::PowPoly;

TEST(PowPoly, PlansExistForTheUsualNormsWithTightBounds) {
  for (double p : {1.0, 1.1, 1.7, 2.4, 2.40625, 2.5, 3.3, 4.5}) {
    PowPoly P;
    ASSERT_TRUE(detail::make_pow_poly(p, -12, &P)) << p;
    EXPECT_LE(P.rel_err, 0x1p-13) << p;
    EXPECT_LE(P.degree, 6) << p;
    EXPECT_EQ(P.floor, 0x1p-12f);
    EXPECT_EQ(P.limit, 16.0f);
  }
  PowPoly P;
  EXPECT_FALSE(detail::make_pow_poly(0.5, -12, &P));  // outside [1, 8]: not offered
  EXPECT_FALSE(detail::make_pow_poly(9.0, -12, &P));
}

TEST(PowPoly, ScalePowWithinItsBound) {
  std::mt19937 rng(3);
  for (double p : {1.1, 1.7, 2.4, 3.3}) {
    PowPoly P;
    ASSERT_TRUE(detail::make_pow_poly(p, -12, &P));
    double worst = 0;
    for (int e = -125; e <= 125; ++e)
      for (int k = 0; k < 64; ++k) {
        const float s = std::ldexp(1.0f + static_cast<float>(rng() % 8388608) / 8388608.0f, e);
        const double truth = std::pow(static_cast<double>(s), p);
        worst = std::max(worst, std::fabs(P.scale_pow(s) - truth) / truth);
      }
    EXPECT_LE(worst, P.scale_pow_rel_err) << p;
  }
}

/// The reference's f32 error of one candidate: its QDQ and powf terms, canonical sum.
double reference_error(const std::vector<float>& x, float s, float z, const qobs::detail::QdqPlan& plan, double p) {
  GridSearchConfig cfg;
  cfg.norm = p;
  const qobs::detail::ErrorModel em = qobs::detail::ErrorModel::make(cfg, DType::kF32);
  qobs::detail::ErrorSum sum;
  for (float v : x) sum.add(em.term(qobs::detail::qdq_elem(v, s, z, plan), v, 1.0f));
  return em.round(sum.total());
}

enum class Data { kNormal, kNearTies, kOnGrid, kTiny, kClampHeavy, kMixed };

std::vector<float> make(Data d, int64_t n, float s, float z, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    float& v = x[static_cast<std::size_t>(j)];
    const float k = static_cast<float>(static_cast<int>(rng() % 15) - 7);
    switch (d) {
      case Data::kNormal:
        v = nd(rng) * 3.0f * s;
        break;
      case Data::kNearTies: {
        // (k + 1/2 - z) * s moved by a few ulps: x / s lands next to a rounding tie
        v = (k + 0.5f - z) * s;
        uint32_t u;
        std::memcpy(&u, &v, 4);
        u += static_cast<uint32_t>(static_cast<int>(rng() % 9) - 4);
        std::memcpy(&v, &u, 4);
        break;
      }
      case Data::kOnGrid:
        v = (k - z) * s;
        break;  // e = 0 (below the table floor)
      case Data::kTiny:
        v = nd(rng) * s * 1e-5f;
        break;
      case Data::kClampHeavy:
        v = nd(rng) * 12.0f * s;
        break;
      case Data::kMixed:
        v = (j % 3 == 0) ? (k - z) * s : nd(rng) * 4.0f * s;
        break;
    }
  }
  return x;
}

TEST(PolySums, ReferenceErrorLiesInsideTheCertifiedInterval) {
  std::mt19937 rng(11);
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    for (double p : {2.4, 1.7, 3.3})
      for (int bits : {2, 3, 4, 8, -4})  // -4: FP4 E2M1 (symmetric only)
        for (bool sym : {true, false})
          for (int k_lo : {-12, -10}) {  // the grid search moves the window up for INT8
            if (bits < 0 && !sym) continue;
            PowPoly P;
            ASSERT_TRUE(detail::make_pow_poly(static_cast<float>(p), k_lo, &P));
            QuantizationArgs a;
            a.num_bits = bits < 0 ? -bits : bits;
            a.type = bits < 0 ? QuantType::kFloat : QuantType::kInt;
            a.symmetric = sym;
            a.strategy = Strategy::kTensor;
            a = a.validated();
            const qobs::detail::QdqPlan plan =
                qobs::detail::QdqPlan::make(a, DType::kF32, DType::kF32, true, !sym, NumericMode::kParity);
            for (Data d : {Data::kNormal, Data::kNearTies, Data::kOnGrid, Data::kTiny, Data::kClampHeavy, Data::kMixed})
              for (int64_t n : {1, 7, 8, 9, 16, 17, 31, 128, 129, 1000}) {
                // several candidates per call, scales across many binades
                std::vector<float> scales, zps;
                for (int c = 0; c < 5; ++c) {
                  scales.push_back(
                      std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, static_cast<int>(rng() % 60) - 30));
                  const float zp = sym ? 0.0f : static_cast<float>(static_cast<int>(rng() % 5) - 2);
                  zps.push_back(zp);
                }
                for (int c = 0; c < 5; ++c) {
                  const std::vector<float> x =
                      make(d, n, scales[static_cast<std::size_t>(c)], zps[static_cast<std::size_t>(c)], rng);
                  detail::PolySumArgs k;
                  k.x = x.data();
                  k.n = n;
                  k.num_candidates = 1;
                  k.scale = &scales[static_cast<std::size_t>(c)];
                  k.zp = &zps[static_cast<std::size_t>(c)];
                  k.has_zp = !sym;
                  k.grid = plan.grid;
                  k.q_min = static_cast<float>(plan.q_min);
                  k.q_max = static_cast<float>(plan.q_max);
                  k.poly = &P;
                  double sum = 0;
                  k.sums = &sum;
                  detail::poly_sums_simd(level)->run(k);
                  const std::string what = std::string(to_string(level)) + " p=" + std::to_string(p) +
                                           " bits=" + std::to_string(bits) + (sym ? " sym" : " asym") +
                                           " data=" + std::to_string(static_cast<int>(d)) + " n=" + std::to_string(n) +
                                           " k_lo=" + std::to_string(k_lo);
                  if (!std::isfinite(sum)) {
                    // only a |r| at or above the table's top (P.limit) may leave: clamped
                    // elements far outside a narrow grid
                    double rmax = 0;
                    for (float v : x)
                      rmax = std::max(rmax, std::fabs(qobs::detail::qdq_elem(v, scales[static_cast<std::size_t>(c)],
                                                                             zps[static_cast<std::size_t>(c)], plan) -
                                                      v) /
                                                scales[static_cast<std::size_t>(c)]);
                    EXPECT_GE(rmax, P.limit * 0.999) << what;
                    continue;
                  }
                  const float s = scales[static_cast<std::size_t>(c)];
                  const double E = reference_error(x, s, zps[static_cast<std::size_t>(c)], plan, static_cast<float>(p));
                  const double sp = P.scale_pow(s);
                  const double A = sum * sp;
                  const detail::PolySumBound b = detail::poly_sum_bound(P, n, detail::kSumBlock);
                  double xmax = 0;
                  for (float v : x) xmax = std::max(xmax, static_cast<double>(std::fabs(v)));
                  const double rho = detail::poly_r_error(xmax / s, std::fabs(zps[static_cast<std::size_t>(c)]),
                                                          std::max(std::fabs(plan.q_min), std::fabs(plan.q_max)));
                  const double slack = (b.abs_units + detail::poly_r_slack(P, rho, sum, n)) * sp + b.abs;
                  EXPECT_LE(A * (1 - b.rel) - slack, E) << what;
                  EXPECT_GE(A * (1 + b.rel) + slack, E) << what;
                  if (d == Data::kNormal && n >= 128) {
                    // typical groups: the estimate is close, and the interval narrow enough
                    // (default norm 2.4, INT4 and narrower) to decide most comparisons
                    EXPECT_LT(std::fabs(A - E) / E, 0x1p-13) << what;
                    if (bits <= 4 && p == 2.4) EXPECT_LT((2 * A * b.rel + 2 * slack) / E, 0x1p-11) << what;
                  }
                }
              }
          }
  }
}

TEST(PolySums, LeavesTheTableAsInfinity) {
  PowPoly P;
  ASSERT_TRUE(detail::make_pow_poly(2.4, -12, &P));
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    // x / s = 1000 clamps to 7: |r| = 993 >= 16
    std::vector<float> x(20, 1.0f);
    x[13] = 1000.0f;
    const float s = 1.0f, z = 0.0f;
    double sum = 0;
    detail::PolySumArgs k;
    k.x = x.data();
    k.n = static_cast<int64_t>(x.size());
    k.num_candidates = 1;
    k.scale = &s;
    k.zp = &z;
    k.q_min = -8;
    k.q_max = 7;
    k.poly = &P;
    k.sums = &sum;
    detail::poly_sums_simd(level)->run(k);
    EXPECT_TRUE(std::isinf(sum)) << to_string(level);
  }
}

TEST(RoundHalfEven, EqualsNearbyint) {
  std::vector<double> vs{0.0,
                         -0.0,
                         0.5,
                         -0.5,
                         1.5,
                         -1.5,
                         2.5,
                         -2.5,
                         0.49999999999999994,
                         -0.49999999999999994,
                         0x1p52,
                         -0x1p52,
                         0x1p52 - 0.5,
                         -(0x1p52 - 0.5),
                         0x1p53 + 2,
                         1e300,
                         -1e300,
                         INFINITY,
                         -INFINITY,
                         4503599627370495.5,
                         -4503599627370495.5,
                         127.5,
                         -128.5};
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200000; ++i) {
    double v;
    const uint64_t u = rng();
    std::memcpy(&v, &u, 8);
    if (!std::isnan(v)) vs.push_back(v);
    vs.push_back(static_cast<double>(static_cast<int64_t>(rng() % 2001) - 1000) / 4.0);
  }
  for (double v : vs) {
    const double a = qobs::detail::round_half_even(v), b = std::nearbyint(v);
    ASSERT_EQ(a, b) << v;
    ASSERT_EQ(std::signbit(a), std::signbit(b)) << v;
  }
  EXPECT_TRUE(std::isnan(qobs::detail::round_half_even(NAN)));
}

}  // namespace
}  // namespace qobs::kernels
