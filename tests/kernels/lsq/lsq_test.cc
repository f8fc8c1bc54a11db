// The least-squares search's fast paths against their references, bit for bit
// (docs/LSQ.md#L4): the group scorer and the refit's sums in lanes (lsq_error_simd.h)
// against the R5.1 element steps summed in the canonical order, the observer
// candidates in lanes (lsq_candidates_simd.h) against ShrunkQParams::compute, the
// candidate steps of lsq_observer_candidates.h against their plain definitions, and
// the whole search at every SIMD level and thread count against the plain reference
// kernels::ref::lsq_search (lsq_ref.cc), with a negative control showing that the
// comparison fails when the reference leaves out any part of the search.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/lsq/lsq_observer_candidates.h"
#include "kernels/grid_search/select.h"
#include "kernels/lsq/lsq_candidates_simd.h"
#include "kernels/lsq/lsq_cpu.h"
#include "kernels/lsq/lsq_error_simd.h"
#include "kernels/lsq/lsq_ref.h"
#include "kernels/simd/simd_level.h"
#include "qobs/qobs.h"
#include "qparams/qparam_math.h"
#include "test_util.h"

namespace qobs::kernels {
namespace {

using qobs::testing::double_bits;
using qobs::testing::float_bits;

enum class Data { kNormal, kZeros, kEqual, kSubnormal, kOutliers, kNonFinite, kHuge, kFp6Grid };

/// n values of `kind` on dt's grid (as f32).
std::vector<float> group_values(std::mt19937& rng, int64_t n, Data kind, DType dt) {
  std::normal_distribution<double> nd(0.0, 0.03);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    double x = nd(rng);
    switch (kind) {
      case Data::kNormal:
        break;
      case Data::kZeros:
        x = j % 3 == 0 ? x : (j % 2 ? -0.0 : 0.0);
        break;
      case Data::kEqual:
        x = -0.3125;
        break;
      case Data::kSubnormal:
        x *= dt == DType::kF16 ? 1e-5 : 1e-37;
        break;
      case Data::kOutliers:
        x *= j % 11 == 5 ? 40.0 : 1.0;
        break;
      case Data::kNonFinite:
        break;  // the search only (groups with NaN / Inf are not scored)
      case Data::kHuge:
        break;  // the search only
      case Data::kFp6Grid:
        break;  // the search only
    }
    v[static_cast<std::size_t>(j)] = static_cast<float>(round_to_float_dtype(dt, x));
  }
  return v;
}

QuantizationArgs grid_args(int bits, QuantType type, bool symmetric) {
  QuantizationArgs a;
  a.num_bits = bits;
  a.type = type;
  a.symmetric = symmetric;
  a.strategy = Strategy::kChannel;
  return a.validated();
}

std::optional<detail::Narrow> narrow(DType dt, NumericMode mode) { return detail::narrow_of(dt, mode); }

// The scorer in lanes == the R5.1 element steps (qdq_elem, with the zero point applied
// even when it is 0) summed in the canonical order, for every dtype, grid, length
// (tails around both vector widths), weighting and numeric mode.
TEST(LsqKernels, ScorerEqualsScalarStepsBitForBit) {
  std::mt19937 rng(3);
  struct Grid {
    int bits;
    QuantType type;
    bool symmetric;
  };
  std::vector<Grid> grids;
  for (int b = 2; b <= 8; ++b)
    for (bool sym : {true, false}) grids.push_back({b, QuantType::kInt, sym});
  grids.push_back({4, QuantType::kFloat, true});
  grids.push_back({6, QuantType::kFloat, true});
  grids.push_back({8, QuantType::kFloat, true});
  int checked = 0;
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    for (NumericMode mode : {NumericMode::kParity, NumericMode::kWide})
      for (DType x_dt : {DType::kF32, DType::kBF16, DType::kF16})
        // s_dt: the scale in x's dtype (INT / FP8 / MX), or f32 after a global scale (NVFP4)
        for (DType s_dt : {x_dt, DType::kF32})
          for (const Grid& gr : grids) {
            const QuantizationArgs args = grid_args(gr.bits, gr.type, gr.symmetric);
            const qobs::detail::QdqPlan plan = qobs::detail::QdqPlan::make(args, x_dt, s_dt, true, true, mode);
            const detail::LsqGroupArgs base{nullptr,
                                            nullptr,
                                            0,
                                            !gr.symmetric,
                                            *narrow(plan.y_dt, mode),
                                            *narrow(plan.s_dt, mode),
                                            plan.grid,
                                            static_cast<float>(plan.q_min),
                                            static_cast<float>(plan.q_max)};
            for (int64_t n : {1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 128, 131})
              for (Data kind : {Data::kNormal, Data::kZeros, Data::kEqual, Data::kSubnormal, Data::kOutliers})
                for (bool weighted : {false, true}) {
                  const std::vector<float> x = group_values(rng, n, kind, x_dt);
                  std::vector<float> w(static_cast<std::size_t>(n));
                  std::uniform_real_distribution<float> u(0.01f, 3.0f);
                  for (float& v : w) v = u(rng);
                  double amax = 0;
                  for (float v : x) amax = std::max(amax, std::fabs(static_cast<double>(v)));
                  if (amax == 0) amax = 1;
                  // scales around amax / q_max (clipping and not), on s_dt's grid; zero
                  // points across the range
                  std::vector<float> s, zx, zs;
                  std::vector<double> z;
                  for (double f : {0.05, 0.4, 0.93, 1.0, 1.61, 7.0})
                    for (double zp : gr.symmetric ? std::vector<double>{0.0}
                                                  : std::vector<double>{plan.q_min, 0.0, 1.0, plan.q_max}) {
                      const double sc = round_to_float_dtype(s_dt, amax / plan.q_max * f);
                      if (!(sc > 0)) continue;
                      s.push_back(static_cast<float>(sc));
                      z.push_back(zp);
                      zx.push_back(static_cast<float>(qobs::detail::Arith{x_dt, mode}.cast(zp)));
                      zs.push_back(static_cast<float>(qobs::detail::Arith{s_dt, mode}.cast(zp)));
                    }
                  detail::LsqGroupArgs g = base;
                  g.x = x.data();
                  g.w = weighted ? w.data() : nullptr;
                  g.n = n;
                  std::vector<double> err(s.size());
                  ASSERT_TRUE(detail::lsq_simd(level)->errors(g, s.data(), zx.data(), zs.data(),
                                                              static_cast<int64_t>(s.size()), err.data()));
                  for (std::size_t c = 0; c < s.size(); ++c) {
                    double part[detail::kLsqPartials] = {};
                    for (int64_t j = 0; j < n; ++j) {
                      const double d = x[static_cast<std::size_t>(j)] -
                                       qobs::detail::qdq_elem(x[static_cast<std::size_t>(j)], s[c], z[c], plan);
                      part[j % detail::kLsqPartials] +=
                          (weighted ? static_cast<double>(w[static_cast<std::size_t>(j)]) : 1.0) * d * d;
                    }
                    // the library's scalar scorer (kernels::ref::lsq_search's) sums in the same order
                    if (s_dt == x_dt && mode == NumericMode::kParity && c == 0) {
                      const Tensor t = Tensor::from_floats(x_dt, {1, n}, x);
                      const FlatView flat = flatten_for_calibration(t.view(), "weight", args);
                      ASSERT_EQ(double_bits(qdq_group_error(flat, args, s[c], z[c], 0, nullptr, mode,
                                                            weighted ? w.data() : nullptr)),
                                double_bits(combine_partials(part)));
                    }
                    // the refit's sums in lanes == the same sums over quantize_elem's codes
                    double want_sums[detail::kLsqRefitSums];
                    detail::lsq_refit_sums_scalar(x.data(), weighted ? w.data() : nullptr, n, s[c], z[c], plan,
                                                  want_sums);
                    double sums[detail::kLsqRefitSums];
                    ASSERT_TRUE(detail::lsq_simd(level)->refit_sums(g, s[c], zx[c], false, sums));
                    for (int i = 0; i < detail::kLsqRefitSums; ++i)
                      ASSERT_EQ(double_bits(sums[i]), double_bits(want_sums[i]))
                          << "refit sum " << i << " n " << n << " scale " << s[c] << " zp " << z[c];
                    // the symmetric refit's two sums alone: the same bits
                    double code_sums[detail::kLsqRefitSums];
                    ASSERT_TRUE(detail::lsq_simd(level)->refit_sums(g, s[c], zx[c], true, code_sums));
                    for (int i : {detail::kSumWQQ, detail::kSumWQX})
                      ASSERT_EQ(double_bits(code_sums[i]), double_bits(want_sums[i]))
                          << "code sum " << i << " n " << n << " scale " << s[c] << " zp " << z[c];
                    ASSERT_EQ(double_bits(detail::lsq_error_scalar(x.data(), weighted ? w.data() : nullptr, n, s[c],
                                                                   z[c], plan)),
                              double_bits(combine_partials(part)));
                    ASSERT_EQ(double_bits(err[c]), double_bits(combine_partials(part)))
                        << to_string(level) << " x " << dtype_name(x_dt) << " s " << dtype_name(s_dt) << " bits "
                        << gr.bits << (gr.symmetric ? " sym" : " asym") << " n " << n << " kind "
                        << static_cast<int>(kind) << " weighted " << weighted << " scale " << s[c] << " zp " << z[c];
                    ++checked;
                  }
                }
          }
  }
  if (checked == 0) GTEST_SKIP() << "no SIMD level on this machine";
}

// A candidate whose error is not finite (here an infinite scale: 0 x inf in the
// dequantization) is handed back to the scalar steps.
TEST(LsqKernels, ScorerRejectsNonFiniteError) {
  const QuantizationArgs args = grid_args(4, QuantType::kInt, true);
  const std::vector<float> x{0.5f, -0.25f, 0.0f};
  const float s[] = {INFINITY}, z[] = {0.0f};
  double err = 0;
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    const detail::LsqGroupArgs g{
        x.data(), nullptr, 3, false, detail::Narrow::kNone, detail::Narrow::kNone, qobs::detail::GridKind::kInt,
        -8.0f,    7.0f};
    EXPECT_FALSE(detail::lsq_simd(level)->errors(g, s, z, z, 1, &err)) << to_string(level);
  }
  (void)args;
}

// The observer candidates in lanes == ShrunkQParams::compute, including bf16 / f16
// statistics, zero and one-signed ranges and the NVFP4 global scale.
TEST(LsqKernels, CandidatesEqualShrunkQParams) {
  std::vector<float> shrink;
  for (int i = 0; i < 37; ++i) shrink.push_back(static_cast<float>(1.0 - 0.95 * i / 36));
  int checked = 0;
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    for (const char* preset : {"W4A16", "W4A16_ASYM", "W8A16", "NVFP4A16"})
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
        for (auto [m0, M0] : std::vector<std::pair<float, float>>{
                 {-0.5f, 0.75f}, {0.0f, 0.0f}, {0.125f, 3.0f}, {-2.0f, -0.001f}, {-1e-30f, 1e-30f}}) {
          const QuantizationArgs args = preset_scheme(preset).weights->validated();
          const std::optional<double> global =
              args.get_strategy() == Strategy::kTensorGroup ? std::optional<double>(448.0 * 6 / 0.3) : std::nullopt;
          const qobs::detail::QParamPlan qp = qobs::detail::QParamPlan::make(args, dt, global, NumericMode::kParity);
          const qobs::detail::ShrunkQParams q = qobs::detail::ShrunkQParams::make(qp);
          ASSERT_TRUE(q.usable) << preset;
          const float m = static_cast<float>(round_to_float_dtype(dt, m0)),
                      M = static_cast<float>(round_to_float_dtype(dt, M0));
          for (std::size_t n : {std::size_t{1}, std::size_t{8}, std::size_t{17}, shrink.size()}) {
            std::vector<float> s1(n), z1(n), s2(n), z2(n);
            q.compute(m, M, shrink.data(), static_cast<int64_t>(n), s1.data(), z1.data());
            detail::lsq_candidates_simd(level)->run(q, m, M, shrink.data(), static_cast<int64_t>(n), s2.data(),
                                                    z2.data());
            for (std::size_t i = 0; i < n; ++i) {
              ASSERT_EQ(float_bits(s1[i]), float_bits(s2[i]))
                  << preset << " " << dtype_name(dt) << " " << m << " " << M;
              ASSERT_EQ(float_bits(z1[i]), float_bits(z2[i]))
                  << preset << " " << dtype_name(dt) << " " << m << " " << M;
              ++checked;
            }
          }
        }
  }
  if (checked == 0) GTEST_SKIP() << "no SIMD level on this machine";
}

// The ideal-quantizer errors over a grid of scales (the INT proxies of docs/LSQ.md#L2,
// symmetric and asymmetric) in lanes == the scalar steps, bit for bit: lengths and candidate
// counts around both vector widths and the block of four vectors, weighted or not,
// zeros, equal groups, subnormal values, outliers, scales that clip everything or
// nothing, and sums that overflow to infinity. With a bound (the symmetric proxy's
// pruning), each error is the full sum or +inf for a sum above the bound.
TEST(LsqKernels, IdealErrorsEqualScalarStepsBitForBit) {
  std::mt19937 rng(43);
  int checked = 0;
  int64_t ideal_pruned = 0;
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    for (int64_t n : {1, 2, 7, 8, 9, 16, 17, 33, 128, 131})
      for (int64_t count : {1, 3, 8, 15, 16, 17, 31, 32, 33, 64, 65, 130})
        for (Data kind : {Data::kNormal, Data::kZeros, Data::kEqual, Data::kSubnormal, Data::kOutliers})
          for (bool weighted : {false, true}) {
            std::vector<float> x = group_values(rng, n, kind, DType::kBF16);
            if (kind == Data::kOutliers && n > 3) x[2] = 3e38f;  // the sums overflow
            std::vector<float> ax, lim, w;
            std::uniform_real_distribution<float> u(0.0f, 3.0f);
            float amax = 0;
            for (float v : x) {
              ax.push_back(std::fabs(v));
              lim.push_back(v >= 0 ? 7.0f : 8.0f);
              w.push_back(u(rng));
              amax = std::max(amax, std::fabs(v));
            }
            if (!(amax > 1e-30f)) amax = 1.0f;
            std::vector<float> s;
            std::uniform_real_distribution<float> f(0.02f, 3.0f);
            for (int64_t c = 0; c < count; ++c) s.push_back(amax / 7.5f * f(rng));
            const float* wp = weighted ? w.data() : nullptr;
            std::vector<float> want(static_cast<std::size_t>(count)), got(static_cast<std::size_t>(count), -1.0f);
            detail::lsq_ideal_errors_scalar(ax.data(), lim.data(), wp, n, s.data(), count, want.data());
            detail::lsq_simd(level)->ideal_errors(ax.data(), lim.data(), wp, n, s.data(), count, got.data(), HUGE_VALF);
            for (int64_t c = 0; c < count; ++c)
              ASSERT_EQ(float_bits(got[static_cast<std::size_t>(c)]), float_bits(want[static_cast<std::size_t>(c)]))
                  << to_string(level) << " n=" << n << " count=" << count << " kind=" << static_cast<int>(kind)
                  << " weighted=" << weighted << " candidate " << c;
            // with a bound (the median sum): each error the full sum, or +inf where the
            // full sum exceeds the bound
            std::vector<float> sorted = want;
            std::sort(sorted.begin(), sorted.end());
            const float bound = sorted[sorted.size() / 2];
            std::vector<float> got_p(static_cast<std::size_t>(count), -1.0f);
            detail::lsq_simd(level)->ideal_errors(ax.data(), lim.data(), wp, n, s.data(), count, got_p.data(), bound);
            for (int64_t c = 0; c < count; ++c) {
              const float p = got_p[static_cast<std::size_t>(c)], full = want[static_cast<std::size_t>(c)];
              if (float_bits(p) != float_bits(full)) {
                ASSERT_TRUE(std::isinf(p) && full > bound)
                    << "pruned " << to_string(level) << " n=" << n << " count=" << count
                    << " kind=" << static_cast<int>(kind) << " weighted=" << weighted << " candidate " << c << ": " << p
                    << " for " << full << ", bound " << bound;
                ++ideal_pruned;
              }
            }
            // the asymmetric proxy: signed values, zero points across (and beyond) the
            // code range of INT4 asymmetric (0..15), so some clamp every element
            std::vector<float> z;
            for (int64_t c = 0; c < count; ++c) z.push_back(static_cast<float>(static_cast<int>(rng() % 24) - 4));
            std::vector<float> want_a(static_cast<std::size_t>(count)), got_a(static_cast<std::size_t>(count), -1.0f);
            detail::lsq_ideal_errors_asym_scalar(x.data(), wp, n, s.data(), z.data(), count, 0.0f, 15.0f,
                                                 want_a.data());
            detail::lsq_simd(level)->ideal_errors_asym(x.data(), wp, n, s.data(), z.data(), count, 0.0f, 15.0f,
                                                       got_a.data());
            for (int64_t c = 0; c < count; ++c)
              ASSERT_EQ(float_bits(got_a[static_cast<std::size_t>(c)]), float_bits(want_a[static_cast<std::size_t>(c)]))
                  << "asym " << to_string(level) << " n=" << n << " count=" << count
                  << " kind=" << static_cast<int>(kind) << " weighted=" << weighted << " candidate " << c;
            ++checked;
          }
  }
  if (checked == 0) GTEST_SKIP() << "no SIMD level on this machine";
  EXPECT_GT(ideal_pruned, 0) << "no block stopped at its bound";
}

// The FP pruning's lower bounds in lanes == their scalar twin, bit for bit, and the
// twin == the definition (a plain sum of the terms that qualify, in element order, for
// groups short enough that the order cannot matter: one partial per element). Levels
// at the tails of both vector widths, thresholds at the elements' own magnitudes (the
// strict comparisons' edges), zeros, all-equal groups, subnormals and outliers.
TEST(LsqKernels, PruningBoundsEqualScalarStepsBitForBit) {
  std::mt19937 rng(47);
  int checked = 0;
  for (int64_t n : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 128, 131})
    for (Data kind : {Data::kNormal, Data::kZeros, Data::kEqual, Data::kSubnormal, Data::kOutliers})
      for (bool weighted : {false, true}) {
        std::vector<float> x = group_values(rng, n, kind, DType::kF32), w;
        std::uniform_real_distribution<float> u(0.0f, 3.0f);
        float amax = 0;
        for (float v : x) {
          w.push_back(u(rng));
          amax = std::max(amax, std::fabs(v));
        }
        std::vector<double> ts = {std::fabs(static_cast<double>(x[0])), std::fabs(static_cast<double>(x.back())),
                                  static_cast<double>(amax), 1e-300, 1e300};
        std::uniform_real_distribution<double> f(0.0, 1.2);
        for (int k = 0; k < 12; ++k) ts.push_back(static_cast<double>(amax) * f(rng));
        const float* wp = weighted ? w.data() : nullptr;
        for (double t : ts)
          for (auto kind_b : {detail::LsqBound::kClipped, detail::LsqBound::kZeroed}) {
            const double want = detail::lsq_bound_scalar(kind_b, x.data(), wp, n, t);
            if (n <= detail::kLsqPartials) {
              double plain = 0;
              for (int64_t j = 0; j < n; ++j) {
                const double a = std::fabs(static_cast<double>(x[static_cast<std::size_t>(j)]));
                const double wj = weighted ? static_cast<double>(w[static_cast<std::size_t>(j)]) : 1.0;
                if (kind_b == detail::LsqBound::kClipped && a > t) plain += wj * (a - t) * (a - t);
                if (kind_b == detail::LsqBound::kZeroed && a < t) plain += wj * a * a;
              }
              EXPECT_NEAR(want, plain, 1e-12 * plain) << "n=" << n << " t=" << t;
            }
            for (SimdLevel level : available_simd_levels()) {
              if (level == SimdLevel::kScalar) continue;
              const double got = detail::lsq_simd(level)->bound(kind_b, x.data(), wp, n, t);
              ASSERT_EQ(double_bits(got), double_bits(want))
                  << to_string(level) << " n=" << n << " kind=" << static_cast<int>(kind) << " weighted=" << weighted
                  << " bound=" << static_cast<int>(kind_b) << " t=" << t;
              ++checked;
            }
          }
      }
  if (checked == 0) GTEST_SKIP() << "no SIMD level on this machine";
}

// The proxy is the error of the nearest clamped code: checked against a plain double
// evaluation on small groups, where f32 rounding cannot reorder the candidates' errors
// by more than a few ulps.
TEST(LsqKernels, IdealErrorsAreTheNearestCodeError) {
  std::mt19937 rng(44);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> ax, lim;
    for (int j = 0; j < 16; ++j) {
      const float v = nd(rng);
      ax.push_back(std::fabs(v));
      lim.push_back(v >= 0 ? 7.0f : 8.0f);
    }
    const float s = 0.1f + 0.01f * static_cast<float>(trial);
    float got = 0;
    detail::lsq_ideal_errors_scalar(ax.data(), lim.data(), nullptr, 16, &s, 1, &got);
    double want = 0;
    for (int j = 0; j < 16; ++j) {
      double best = INFINITY;
      for (int k = 0; k <= static_cast<int>(lim[j]); ++k)
        best = std::min(best, std::fabs(ax[j] - k * static_cast<double>(s)));
      want += best * best;
    }
    EXPECT_NEAR(got, want, 1e-5 * want + 1e-12) << "trial " << trial;
    // asymmetric: INT4 codes 0..15 around the zero point z, the nearest one
    std::vector<float> x;
    for (int j = 0; j < 16; ++j) x.push_back(nd(rng));
    const float z = static_cast<float>(trial % 16);
    float got_a = 0;
    detail::lsq_ideal_errors_asym_scalar(x.data(), nullptr, 16, &s, &z, 1, 0.0f, 15.0f, &got_a);
    double want_a = 0;
    for (int j = 0; j < 16; ++j) {
      double best = INFINITY;
      for (int q = 0; q <= 15; ++q) best = std::min(best, std::fabs(x[j] - (q - z) * static_cast<double>(s)));
      want_a += best * best;
    }
    EXPECT_NEAR(got_a, want_a, 1e-5 * want_a + 1e-12) << "asym trial " << trial;
  }
}

TEST(LsqKernels, E4m3CodeSetRangeEqualsCodeByCode) {
  // add_range sets a run of codes a word at a time: every range of 0..127 (and empty
  // ones), over an empty set and over one that already holds codes, must give the bits
  // that adding its codes one by one gives.
  for (int lo = 0; lo <= 127; ++lo)
    for (int hi = lo - 1; hi <= 127; ++hi)
      for (int seed : {-1, 5, 64, 100}) {
        detail::E4m3CodeSet by_range, by_code;
        if (seed >= 0) {
          by_range.add(seed);
          by_code.add(seed);
        }
        by_range.add_range(lo, hi);
        for (int c = lo; c <= hi; ++c) by_code.add(c);
        ASSERT_EQ(by_range.bits[0], by_code.bits[0]) << lo << ".." << hi << " seed " << seed;
        ASSERT_EQ(by_range.bits[1], by_code.bits[1]) << lo << ".." << hi << " seed " << seed;
      }
}

// NVFP4: the observer candidates' stored scales as a set of E4M3 codes, iterated
// ascending, are exactly the sorted unique list the search sorted before
// (docs/LSQ.md#L4): every positive E4M3 value maps to its code, anything else (between
// codes, 0, eps, NaN, beyond 448) to none; over random ranges from the subnormal codes
// to saturation, f32 / bf16 / f16 statistics.
TEST(LsqKernels, E4m3CodeSetEqualsSortedCandidates) {
  std::vector<double> code_scale(127);
  for (int c = 0; c <= 126; ++c) code_scale[static_cast<std::size_t>(c)] = fp8_e4m3_to_float(static_cast<uint8_t>(c));
  for (int c = 1; c <= 126; ++c) {
    const float v = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    ASSERT_EQ(detail::e4m3_code_of(v, code_scale.data()), c);
    ASSERT_EQ(detail::e4m3_code_of(std::nextafter(v, 0.0f), code_scale.data()), -1) << c;
    ASSERT_EQ(detail::e4m3_code_of(std::nextafter(v, INFINITY), code_scale.data()), -1) << c;
  }
  for (float v : {0.0f, -0.0f, -1.0f, 1e-9f, 896.0f, INFINITY, NAN, 0x1p-10f})
    ASSERT_EQ(detail::e4m3_code_of(v, code_scale.data()), -1) << v;
  // a code whose stored scale is not its E4M3 value (another scale dtype) is no code
  std::vector<double> other = code_scale;
  other[40] = 0.3;
  ASSERT_EQ(detail::e4m3_code_of(fp8_e4m3_to_float(40), other.data()), -1);

  std::mt19937 rng(47);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> shrink;
  for (int i = 0; i < 200; ++i) shrink.push_back(static_cast<float>(1.0 - 0.95 * i / 199));
  const QuantizationArgs args = preset_scheme("NVFP4A16").weights->validated();
  int all_codes = 0;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int trial = 0; trial < 300; ++trial) {
      const double global = 448.0 * 6 / std::ldexp(0.3 + u(rng), static_cast<int>(rng() % 12) - 6);
      const qobs::detail::QParamPlan qp = qobs::detail::QParamPlan::make(args, dt, global, NumericMode::kParity);
      const qobs::detail::ShrunkQParams q = qobs::detail::ShrunkQParams::make(qp);
      const double mag = std::ldexp(1.0, static_cast<int>(rng() % 24) - 14);
      const float M = static_cast<float>(round_to_float_dtype(dt, mag * (u(rng) + 0.01)));
      const float m = static_cast<float>(round_to_float_dtype(dt, -mag * u(rng)));
      std::vector<float> fs(shrink.size()), fz(shrink.size());
      q.compute(m, M, shrink.data(), static_cast<int64_t>(shrink.size()), fs.data(), fz.data());
      std::set<double> want(fs.begin(), fs.end());
      detail::E4m3CodeSet set;
      bool codes = true;
      for (float v : fs) {
        const int c = detail::e4m3_code_of(v, code_scale.data());
        if (c < 0) codes = false;
        else set.add(c);
      }
      if (!codes) continue;  // the search starts over with the list
      ++all_codes;
      std::vector<double> got;
      set.for_each([&](int c) { got.push_back(code_scale[static_cast<std::size_t>(c)]); });
      ASSERT_EQ(got, std::vector<double>(want.begin(), want.end())) << dtype_name(dt) << " trial " << trial;
    }
  EXPECT_GT(all_codes, 600);
}

// NVFP4: the codes of a list's runs' ends and lone factors (lanes::E4m3Probes) are the
// codes of all its factors, computed one by one (docs/LSQ.md#L4): the reference's
// lists (memoryless_mse, imatrix_mse, nvfp4_expanded_mse, eager and chunked) and random
// dense and sparse ones, f32 / bf16 / f16 statistics, global scales over 12 octaves,
// ranges from the subnormal codes to saturation.
TEST(LsqKernels, E4m3ProbesGiveEveryFactorsCodes) {
  std::vector<double> code_scale(127);
  for (int c = 0; c <= 126; ++c) code_scale[static_cast<std::size_t>(c)] = fp8_e4m3_to_float(static_cast<uint8_t>(c));
  const double ratio = detail::e4m3_min_interval_ratio(code_scale.data());
  ASSERT_GT(ratio, 1.06);
  ASSERT_LT(ratio, 1.07);
  std::vector<double> other = code_scale;
  other[40] = 0.3;
  ASSERT_EQ(detail::e4m3_min_interval_ratio(other.data()), 0.0);  // no runs then

  std::mt19937 rng(53);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const QuantizationArgs args = preset_scheme("NVFP4A16").weights->validated();
  int compared = 0, probed_fewer = 0;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int trial = 0; trial < 400; ++trial) {
      std::vector<double> ps;
      if (trial % 4 < 3) {
        GridSearchConfig c;
        if (trial % 4 == 1) {
          c.imatrix = true;
          c.maxshrink = 0.95;
          c.grid = 20;
        } else if (trial % 4 == 2) {
          c.maxshrink = 1.0 - 0.8 / 1.8;
          c.grid = 200;
          c.expand = 1.8;
        }
        c.chunked = trial % 8 < 4;
        ps = qobs::detail::search_shrink_factors(c, dt);
        ps.push_back(1.0);
      } else {
        // random: dense (steps of ~0.5%) or sparse
        const double step = trial % 8 < 4 ? 0.005 : 0.08;
        for (double p = 0.05 + 0.1 * u(rng); p <= 1.0; p *= 1.0 + step * (0.2 + u(rng))) ps.push_back(p);
      }
      const std::vector<float> pf(ps.begin(), ps.end());
      const double global = 448.0 * 6 / std::ldexp(0.3 + u(rng), static_cast<int>(rng() % 12) - 6);
      const qobs::detail::QParamPlan qp = qobs::detail::QParamPlan::make(args, dt, global, NumericMode::kParity);
      const qobs::detail::ShrunkQParams q = qobs::detail::ShrunkQParams::make(qp);
      const detail::E4m3Probes pr = detail::e4m3_probes(pf, q.stat_round, ratio);
      const double mag = std::ldexp(1.0, static_cast<int>(rng() % 30) - 20);
      const float M = static_cast<float>(round_to_float_dtype(dt, mag * (u(rng) + 0.01)));
      const float m = static_cast<float>(round_to_float_dtype(dt, -mag * u(rng)));
      if (std::max(std::fabs(m), M) * static_cast<double>(pr.min_factor) <
          detail::e4m3_probe_floor(q.stat_round, q.half_range, q.global_scale))
        continue;  // the search computes every factor then
      std::vector<float> fs(pf.size()), fz(pf.size());
      q.compute(m, M, pf.data(), static_cast<int64_t>(pf.size()), fs.data(), fz.data());
      detail::E4m3CodeSet want;
      bool codes = true;
      for (float v : fs) {
        const int c = detail::e4m3_code_of(v, code_scale.data());
        if (c < 0) codes = false;
        else want.add(c);
      }
      std::vector<float> ps_fs(pr.factors.size()), ps_fz(pr.factors.size());
      q.compute(m, M, pr.factors.data(), static_cast<int64_t>(pr.factors.size()), ps_fs.data(), ps_fz.data());
      detail::E4m3CodeSet got;
      const bool probed = detail::add_probed_codes(pr, ps_fs.data(), code_scale.data(), got);
      // a factor with no code is one of the probes or lies between a run's ends, whose
      // codes then are not both codes
      ASSERT_EQ(probed, codes) << dtype_name(dt) << " trial " << trial;
      if (!codes) continue;
      ++compared;
      if (pr.factors.size() * 4 < pf.size()) ++probed_fewer;
      ASSERT_EQ(got.bits[0], want.bits[0]) << dtype_name(dt) << " trial " << trial << " range " << m << " " << M;
      ASSERT_EQ(got.bits[1], want.bits[1]) << dtype_name(dt) << " trial " << trial << " range " << m << " " << M;
    }
  EXPECT_GT(compared, 900);
  EXPECT_GT(probed_fewer, 300);  // the dense lists need a few probes, not every factor
}

// The MX observer candidates by bisection are the set compute_qparams_elem gives
// factor by factor: MXFP4 / MXFP8, bf16 / f16 / f32 / f64 statistics, the reference's
// shrink lists and random ones, ranges of either sign, tiny (subnormal, underflowing
// f16's scale) and huge (overflowing f16).
// L4: the observer lists merged as runs give std::stable_sort + std::unique's sequence:
// runs of descending scales as the lists arrive (with repeats and jumps back up),
// ascending and one-element runs, all-equal and empty lists, with zero points 0 or
// (as asymmetric lists have them) -0, +0 and others, so that of two equal pairs the
// first must be kept, each bit for bit; and with a NaN the stable sort itself.
TEST(LsqKernels, SortUniqueRunsEqualsSortAndUnique) {
  std::mt19937 rng(47);
  detail::SortRunsScratch scratch;  // reused, as the search reuses it
  std::uniform_int_distribution<int> len(0, 12), runs(0, 9), shape(0, 3);
  std::uniform_real_distribution<double> u(0.01, 2.0);
  auto less = [](const std::pair<double, double>& a, const std::pair<double, double>& b) {
    return a.first < b.first || (a.first == b.first && a.second < b.second);
  };
  auto bits = [](const std::vector<std::pair<double, double>>& v) {
    std::vector<uint64_t> out;
    for (const auto& [a, b] : v) {
      out.push_back(std::bit_cast<uint64_t>(a));
      out.push_back(std::bit_cast<uint64_t>(b));
    }
    return out;
  };
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::pair<double, double>> v;
    const int r = runs(rng);
    for (int k = 0; k < r; ++k) {
      const int n = len(rng), kind = shape(rng);
      // scales on a coarse grid, so that runs share values
      double s = std::round(u(rng) * 64) / 64;
      for (int i = 0; i < n; ++i) {
        const double zps[] = {0.0, -0.0, 1.0, -1.0};
        v.emplace_back(s, trial % 2 == 0 ? 0.0 : zps[rng() % 4]);
        // 0: descending with repeats, 1: ascending, 2: no order, 3: all equal
        if (kind == 0) s = std::max(0.0, s - std::round(u(rng) * 4) / 64);
        else if (kind == 1) s += std::round(u(rng) * 4) / 64;
        else if (kind == 2) s = std::round(u(rng) * 64) / 64;
      }
    }
    auto want = v;
    std::stable_sort(want.begin(), want.end(), less);
    want.erase(std::unique(want.begin(), want.end()), want.end());
    detail::sort_unique_runs(v, scratch);
    ASSERT_EQ(bits(v), bits(want)) << "trial " << trial;
  }
  std::vector<std::pair<double, double>> v{{1.0, 0.0}, {NAN, 0.0}, {0.5, 0.0}, {1.0, 0.0}, {0.25, 0.0}};
  auto want = v;
  std::stable_sort(want.begin(), want.end(), less);
  want.erase(std::unique(want.begin(), want.end()), want.end());
  detail::sort_unique_runs(v, scratch);
  ASSERT_EQ(bits(v), bits(want)) << "with a NaN";
}

TEST(LsqKernels, MxObserverCandidatesEqualEveryFactor) {
  std::mt19937 rng(43);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  // MXFP6's keys round with its element mantissa (R2.4.5), the others' with FP4's
  for (const char* preset : {"MXFP4A16", "MXFP6A16", "MXFP8A16"}) {
    const QuantizationArgs args = preset_scheme(preset).weights->validated();
    for (DType dt : {DType::kBF16, DType::kF16, DType::kF32, DType::kF64}) {
      const qobs::detail::QParamPlan qp = qobs::detail::QParamPlan::make(args, dt, std::nullopt, NumericMode::kParity);
      const qobs::detail::Arith a{dt, NumericMode::kParity};
      for (int trial = 0; trial < 200; ++trial) {
        std::vector<double> ps;
        if (trial % 2 == 0) {
          GridSearchConfig c;
          c.imatrix = trial % 4 == 0;
          c.maxshrink = c.imatrix ? 0.95 : 0.2;
          c.grid = c.imatrix ? 20 : 100;
          c.chunked = trial % 8 < 4;
          ps = qobs::detail::search_shrink_factors(c, dt);
          ps.push_back(1.0);
        } else {
          for (int i = 0, n = 1 + static_cast<int>(rng() % 120); i < n; ++i) ps.push_back(u(rng));
        }
        std::sort(ps.begin(), ps.end());
        ps.erase(std::unique(ps.begin(), ps.end()), ps.end());
        const double mag = std::ldexp(1.0, static_cast<int>(rng() % 300) - 150);
        const double hi = a.cast(mag * (trial % 5 == 4 ? -u(rng) : u(rng) + 0.5));
        const double lo = a.cast(trial % 3 == 0 ? -hi * u(rng) * 2 : (trial % 3 == 1 ? hi * 0.5 : -mag));
        std::set<std::pair<double, double>> want, got;
        for (double p : ps) {
          const auto q = qobs::detail::compute_qparams_elem(a.mul(lo, p), a.mul(hi, p), qp);
          want.emplace(q.scale, q.zero_point);
        }
        detail::mx_observer_candidates(ps, lo, hi, qp, a, [&](double sc, double z) { got.emplace(sc, z); });
        ASSERT_EQ(got, want) << preset << " " << dtype_name(dt) << " trial " << trial << " range " << lo << " " << hi;
      }
    }
  }
}

Tensor random_tensor(std::mt19937& rng, int64_t rows, int64_t cols, DType dt, Data kind) {
  std::exponential_distribution<double> ex(1.0);
  std::bernoulli_distribution sign(0.5);
  std::vector<double> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = (sign(rng) ? 1 : -1) * ex(rng) * 0.02;
    if (kind == Data::kZeros && (i / 16) % 3 == 1) v[i] = 0.0;  // whole zero groups
    if (kind == Data::kEqual && (i / 16) % 2 == 0) v[i] = 0.0625;
    if (kind == Data::kSubnormal) v[i] *= dt == DType::kF16 ? 1e-5 : 1e-37;
    if (kind == Data::kOutliers && i % 13 == 4) v[i] *= 30;
    if (kind == Data::kNonFinite && i % 173 == 9) v[i] = i % 2 ? NAN : (i % 3 ? INFINITY : -INFINITY);
    // near the dtype's largest value: dequantized codes and sums that overflow
    if (kind == Data::kHuge)
      v[i] = std::clamp(v[i] * (dt == DType::kF16 ? 1.5e6 : 8e38), -65504.0, 65504.0) /
             (dt == DType::kF16 ? 1.0 : 65504.0) * (dt == DType::kF16 ? 1.0 : 3.4e38);
  }
  // FP6 (R2.8): on the E2M3 grid's ties and saturation for power-of-two scales
  if (kind == Data::kFp6Grid) v = qobs::testing::fp6_grid_values(rows * cols, 0);
  return Tensor::from_values(dt, {rows, cols}, v);
}

/// Importance: uniform in [0.001, 4), or (zeros) with every fifth column 0, the other
/// columns skewed over six decades.
Tensor random_importance(std::mt19937& rng, int64_t rows, int64_t cols, bool zeros) {
  std::uniform_real_distribution<double> u(0.001, 4.0), e(-3.0, 3.0);
  std::vector<double> imp(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < imp.size(); ++i)
    imp[i] = !zeros ? u(rng) : (i % static_cast<std::size_t>(cols)) % 5 == 2 ? 0.0 : std::pow(10.0, e(rng));
  return Tensor::from_values(DType::kF32, {rows, cols}, imp);
}

/// Where two searches' stored qparams differ bit for bit (NaN == NaN, -0 != +0), or
/// nullopt.
std::optional<std::string> qparams_mismatch(const LsqSearchResult& got, const LsqSearchResult& want) {
  if (got.scale.size() != want.scale.size()) return "group counts differ";
  for (std::size_t q = 0; q < got.scale.size(); ++q)
    if (double_bits(got.scale[q]) != double_bits(want.scale[q]) ||
        double_bits(got.zero_point[q]) != double_bits(want.zero_point[q]))
      return "group " + std::to_string(q) + ": (" + std::to_string(got.scale[q]) + ", " +
             std::to_string(got.zero_point[q]) + ") vs (" + std::to_string(want.scale[q]) + ", " +
             std::to_string(want.zero_point[q]) + ")";
  return std::nullopt;
}

/// The fast search (kernels::lsq_search) at every SIMD level and 1, 2 and 3 threads
/// against the plain reference: the same stored qparams bit for bit, and at every
/// level and thread count the same number of scored candidates.
void expect_fast_equals_reference(const FlatView& flat, const QuantizationArgs& args, LsqSearchConfig cfg,
                                  const FlatView* weights, const Tensor* gs, const std::string& where) {
  const LsqSearchResult want = ref::lsq_search(flat, args, cfg, weights, gs);
  std::optional<int64_t> evaluations;
  for (SimdLevel level : available_simd_levels()) {
    ScopedSimdLevel guard(level);
    for (int threads : {1, 2, 3}) {
      cfg.num_threads = threads;
      const LsqSearchResult got = lsq_search(flat, args, cfg, weights, gs);
      const std::string at = where + " " + std::string(to_string(level)) + " threads " + std::to_string(threads);
      EXPECT_EQ(qparams_mismatch(got, want), std::nullopt) << at;
      if (!evaluations) evaluations = got.candidates_evaluated;
      EXPECT_EQ(got.candidates_evaluated, *evaluations) << at;
    }
  }
}

// The CPU path at every level (threaded) == the same path at the scalar level on one
// thread (the scalar twins of every vector kernel): the same stored qparams and the
// same number of scored candidates, for odd group lengths, every float dtype, INT2..8
// sym / asym, NVFP4, MXFP4, MXFP6, weighted and unweighted, groups on FP6's ties and
// saturation, and groups with NaN / Inf (the observers reject such weights; the kernel
// keeps their min-max qparams unscored at every level). FastSearchEqualsReference compares the path with the plain reference.
TEST(LsqKernels, SearchAtEveryLevelEqualsScalarReference) {
  std::mt19937 rng(29);
  struct Case {
    std::string name;
    QuantizationArgs args;
    int64_t cols;
  };
  std::vector<Case> cases;
  for (int bits : {2, 3, 4, 8})
    for (bool sym : {true, false})
      for (int64_t gs : bits == 4 ? std::vector<int64_t>{8, 24, 40, 128} : std::vector<int64_t>{40, 128}) {
        QuantizationArgs a = *preset_scheme(sym ? "W4A16" : "W4A16_ASYM").weights;
        a.num_bits = bits;
        a.group_size = gs;
        cases.push_back({"int" + std::to_string(bits) + (sym ? "_sym_g" : "_asym_g") + std::to_string(gs),
                         a.validated(), gs == 24 || gs == 40 ? 120 : 128});
      }
  cases.push_back({"nvfp4", preset_scheme("NVFP4A16").weights->validated(), 48});
  cases.push_back({"mxfp4", preset_scheme("MXFP4A16").weights->validated(), 96});
  cases.push_back({"mxfp6", preset_scheme("MXFP6A16").weights->validated(), 96});
  const Tensor gs_t = Tensor::from_values(DType::kF32, {1}, {448.0 * 6 / 0.3});
  for (const Case& c : cases)
    for (DType dt : {DType::kBF16, DType::kF16, DType::kF32})
      for (Data kind : {Data::kNormal, Data::kZeros, Data::kEqual, Data::kSubnormal, Data::kOutliers, Data::kNonFinite,
                        Data::kFp6Grid}) {
        const Tensor w = random_tensor(rng, 6, c.cols, dt, kind);
        std::vector<double> imp(static_cast<std::size_t>(6 * c.cols));
        std::uniform_real_distribution<double> u(0.001, 4.0);
        for (double& v : imp) v = u(rng);
        const Tensor wt = Tensor::from_values(DType::kF32, {6, c.cols}, imp);
        const FlatView flat = flatten_for_calibration(w.view(), "weight", c.args);
        const FlatView wflat = flatten_for_calibration(wt.view(), "weight", c.args);
        const Tensor* gsp = c.args.get_strategy() == Strategy::kTensorGroup ? &gs_t : nullptr;
        for (bool weighted : {false, true}) {
          LsqSearchConfig cfg;
          cfg.weighted = weighted;
          cfg.num_threads = 3;
          const LsqSearchResult want =
              cpu::lsq_search(flat, c.args, cfg, weighted ? &wflat : nullptr, gsp, SimdLevel::kScalar, 1);
          for (SimdLevel level : available_simd_levels()) {
            ScopedSimdLevel guard(level);
            const LsqSearchResult got = lsq_search(flat, c.args, cfg, weighted ? &wflat : nullptr, gsp);
            const std::string where = c.name + " " + std::string(dtype_name(dt)) + " kind " +
                                      std::to_string(static_cast<int>(kind)) + " weighted " + std::to_string(weighted) +
                                      " " + std::string(to_string(level));
            ASSERT_EQ(qparams_mismatch(got, want), std::nullopt) << where;
            ASSERT_EQ(got.candidates_evaluated, want.candidates_evaluated) << where;
          }
        }
      }
}

/// The formats of the fast-vs-reference comparison, each with a tensor width its
/// groups divide.
struct SearchCase {
  std::string name;
  QuantizationArgs args;
  int64_t rows, cols;
};

std::vector<SearchCase> search_cases() {
  std::vector<SearchCase> cases;
  auto int_args = [](int bits, bool sym, std::optional<int64_t> group) {
    QuantizationArgs a;
    a.num_bits = bits;
    a.symmetric = sym;
    a.strategy = group ? Strategy::kGroup : Strategy::kChannel;
    a.group_size = group;
    return a.validated();
  };
  for (int bits : {4, 8})
    for (bool sym : {true, false}) {
      const std::string n = "int" + std::to_string(bits) + (sym ? "_sym" : "_asym");
      cases.push_back({n + "_g128", int_args(bits, sym, 128), 4, 256});
      cases.push_back({n + "_g24", int_args(bits, sym, 24), 4, 72});  // a vector tail in every group
      cases.push_back({n + "_channel131", int_args(bits, sym, std::nullopt), 3, 131});
    }
  cases.push_back({"int4_sym_g8", int_args(4, true, 8), 4, 64});
  cases.push_back({"nvfp4", preset_scheme("NVFP4A16").weights->validated(), 4, 64});
  cases.push_back({"mxfp4", preset_scheme("MXFP4A16").weights->validated(), 4, 96});
  cases.push_back({"mxfp8", preset_scheme("MXFP8A16").weights->validated(), 2, 96});
  cases.push_back({"mxfp6", preset_scheme("MXFP6A16").weights->validated(), 4, 96});
  QuantizationArgs fp6;  // FP6 per channel with float scales (a tail in every row)
  fp6.num_bits = 6;
  fp6.type = QuantType::kFloat;
  fp6.strategy = Strategy::kChannel;
  cases.push_back({"fp6_channel131", fp6.validated(), 3, 131});
  cases.push_back({"fp8_channel", preset_scheme("FP8_DYNAMIC").weights->validated(), 3, 72});
  QuantizationArgs fp8_asym;  // E4M3 block scales with a zero point (the unpruned FP path)
  fp8_asym.num_bits = 8;
  fp8_asym.type = QuantType::kFloat;
  fp8_asym.symmetric = false;
  fp8_asym.strategy = Strategy::kGroup;
  fp8_asym.group_size = 16;
  fp8_asym.scale_dtype = DType::kF8E4M3;
  fp8_asym.zp_dtype = DType::kF8E4M3;
  cases.push_back({"fp8_asym_e4m3_g16", fp8_asym.validated(), 3, 48});
  QuantizationArgs block = int_args(8, true, std::nullopt);
  block.strategy = Strategy::kBlock;
  block.block_structure = std::array<int64_t, 2>{4, 8};
  cases.push_back({"int8_block_4x8_padded", block.validated(), 6, 20});
  return cases;
}

// L1-L3: the fast search (lanes at every level, pruning, look-ups, the ideal grid's
// early stop, the code sets and probes, 1-3 threads) chooses exactly what the plain
// reference, which scores every candidate, chooses: INT4 / INT8 sym and asym (groups of
// 128, 24 and 8, channels of 131), NVFP4 with its global scale, MXFP4 / MXFP6 / MXFP8,
// FP6 and FP8 channels, FP8 asymmetric E4M3 block scales, a padded INT8 block; f32 /
// bf16 / f16; normal, zero, equal, subnormal, outlier, non-finite, near-overflow groups
// and groups on FP6's ties and saturation; unweighted, weighted, and weighted with zero
// importance.
TEST(LsqKernels, FastSearchEqualsReference) {
  std::mt19937 rng(61);
  const Tensor gs_t = Tensor::from_values(DType::kF32, {1}, {448.0 * 6 / 0.3});
  for (const SearchCase& c : search_cases())
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
      for (Data kind : {Data::kNormal, Data::kZeros, Data::kEqual, Data::kSubnormal, Data::kOutliers, Data::kNonFinite,
                        Data::kHuge, Data::kFp6Grid}) {
        const Tensor w = random_tensor(rng, c.rows, c.cols, dt, kind);
        const FlatView flat = flatten_for_calibration(w.view(), "weight", c.args);
        const Tensor* gsp = c.args.get_strategy() == Strategy::kTensorGroup ? &gs_t : nullptr;
        for (int weighting : {0, 1, 2}) {
          const Tensor imp = random_importance(rng, c.rows, c.cols, weighting == 2);
          const FlatView wflat = flatten_for_calibration(imp.view(), "weight", c.args);
          LsqSearchConfig cfg;
          cfg.weighted = weighting > 0;
          expect_fast_equals_reference(flat, c.args, cfg, weighting > 0 ? &wflat : nullptr, gsp,
                                       c.name + " " + std::string(dtype_name(dt)) + " data " +
                                           std::to_string(static_cast<int>(kind)) + " weighting " +
                                           std::to_string(weighting));
        }
      }
}

// The negative control of FastSearchEqualsReference: the reference with one part of L1
// left out (detail::LsqRefOmit) differs from the fast search on some of that test's
// inputs, for every part, so the comparison can fail and its inputs reach each part.
TEST(LsqKernels, ComparisonFailsWithAnyPartOfTheSearchLeftOut) {
  using detail::LsqRefOmit;
  const Tensor gs_t = Tensor::from_values(DType::kF32, {1}, {448.0 * 6 / 0.3});
  for (LsqRefOmit omit : {LsqRefOmit::kLargestObserverCandidate, LsqRefOmit::kOutwardWalk, LsqRefOmit::kIdealGridPicks,
                          LsqRefOmit::kZeroPointNeighbours, LsqRefOmit::kRefits}) {
    std::mt19937 rng(61);
    std::optional<std::string> found;
    for (const SearchCase& c : search_cases())
      for (Data kind : {Data::kNormal, Data::kOutliers})
        for (int weighting : {0, 2}) {
          if (found) break;
          const Tensor w = random_tensor(rng, c.rows, c.cols, DType::kBF16, kind);
          const Tensor imp = random_importance(rng, c.rows, c.cols, true);
          const FlatView flat = flatten_for_calibration(w.view(), "weight", c.args);
          const FlatView wflat = flatten_for_calibration(imp.view(), "weight", c.args);
          const FlatView* wp = weighting > 0 ? &wflat : nullptr;
          const Tensor* gsp = c.args.get_strategy() == Strategy::kTensorGroup ? &gs_t : nullptr;
          LsqSearchConfig cfg;
          cfg.weighted = weighting > 0;
          const LsqSearchResult fast = lsq_search(flat, c.args, cfg, wp, gsp);
          ASSERT_EQ(qparams_mismatch(fast, ref::lsq_search(flat, c.args, cfg, wp, gsp)), std::nullopt) << c.name;
          const std::optional<std::string> m =
              qparams_mismatch(fast, detail::lsq_search_ref_omitting(flat, c.args, cfg, wp, gsp, omit));
          if (m)
            found = c.name + " data " + std::to_string(static_cast<int>(kind)) + " weighting " +
                    std::to_string(weighting) + ", " + *m;
        }
    EXPECT_TRUE(found.has_value()) << "omission " << static_cast<int>(omit) << " changes no result";
  }
}

}  // namespace
}  // namespace qobs::kernels
