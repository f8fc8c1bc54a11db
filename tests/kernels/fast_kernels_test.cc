// Fast kernels against the scalar reference (the executable specification): every available
// SIMD level x thread counts {1, 2, 3}, many shapes (sizes around the vector widths and
// the 4096-element summation block), every format and strategy, both numeric modes.
//
// Tolerance policy: none. Min / max, chosen candidates, best min / max (and hence
// scales and zero points), and the number of evaluated candidates must be bit-identical:
// the reference fixes a canonical summation order for the error sums (ErrorSum) and
// the vector |e|^norm replays libm's powf exactly (libm_powf.h). NaN / Inf reach the
// min-max kernel only; the grid search's non-finite path is covered through observe_flat
// style direct calls, since observers reject non-finite input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/grid_search/exact.h"
#include "kernels/grid_search/plan.h"
#include "kernels/grid_search/grid_search_cpu.h"
#include "kernels/minmax/minmax_cpu.h"
#include "kernels/simd/convert_simd.h"
#include "kernels/simd/table_lookups_simd.h"
#include "kernels/kernels.h"
#include "kernels/parallel/thread_pool.h"
#include "kernels/qparams/qparams_cpu.h"
#include "kernels/grid_search/select.h"
#include "kernels/pow/libm_powf.h"
#include "kernels/grid_search/exact_batch_simd.h"  // split_narrowing_mismatches
#include "kernels/minmax/minmax_simd.h"  // narrow16_simd
#include "kernels/grid_search/poly_batch_simd.h"  // kPolyBatchMaxLen, fp4_round_nonneg_simd
#include "kernels/pow/pow_simd.h"
#include "kernels/simd/simd_level.h"
#include "kernels/simd/stream_store.h"
#include "qobs/qobs.h"
#include "test_util.h"

namespace qobs::kernels {
namespace {

using qobs::testing::double_bits;
using qobs::testing::float_bits;

/// Test data: N(0, sigma) with optional structure that stresses the edge cases.
enum class Pattern { kNormal, kZeroGroups, kEqualGroups, kHugeRange, kSubnormal, kSignedZeros, kPositive };

std::vector<float> make_data(int64_t n, Pattern p, uint32_t seed, int64_t group = 16) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = nd(rng);
  for (int64_t i = 0; i < n; ++i) {
    float& x = v[static_cast<std::size_t>(i)];
    const int64_t g = i / std::max<int64_t>(group, 1);
    switch (p) {
      case Pattern::kNormal: break;
      case Pattern::kZeroGroups: if (g % 3 == 1) x = 0.0f; break;
      case Pattern::kEqualGroups: if (g % 2 == 0) x = 0.375f * static_cast<float>(g % 5 - 2); break;
      case Pattern::kHugeRange: if (i % 7 == 3) x *= 1e30f; break;
      case Pattern::kSubnormal: x *= 1e-38f; break;
      case Pattern::kSignedZeros: if (i % 3 == 0) x = (i % 2) ? -0.0f : 0.0f; else x = std::fabs(x); break;
      case Pattern::kPositive: x = std::fabs(x) + 0.01f; break;
    }
  }
  return v;
}

QuantizationArgs make_args(int bits_, QuantType type, bool sym, Strategy st, std::optional<int64_t> gs = std::nullopt,
                           std::optional<DType> scale_dtype = std::nullopt,
                           std::optional<std::array<int64_t, 2>> block = std::nullopt) {
  QuantizationArgs a;
  a.num_bits = bits_;
  a.type = type;
  a.symmetric = sym;
  a.strategy = st;
  a.group_size = gs;
  a.scale_dtype = scale_dtype;
  a.block_structure = block;
  return a.validated();
}

struct Format {
  std::string name;
  QuantizationArgs args;
};

/// One representative of every format family and strategy.
std::vector<Format> formats_for(int64_t cols) {
  std::vector<Format> f;
  auto add = [&](std::string n, auto make) {
    try {
      f.push_back({std::move(n), make()});
    } catch (const std::exception&) {
      // a combination the args validation rejects (e.g. a group size that does not fit)
    }
  };
  add("int4_sym_channel", [&] { return make_args(4, QuantType::kInt, true, Strategy::kChannel); });
  add("int4_asym_channel", [&] { return make_args(4, QuantType::kInt, false, Strategy::kChannel); });
  add("int8_sym_tensor", [&] { return make_args(8, QuantType::kInt, true, Strategy::kTensor); });
  add("int8_asym_tensor", [&] { return make_args(8, QuantType::kInt, false, Strategy::kTensor); });
  add("fp8_channel", [&] { return make_args(8, QuantType::kFloat, true, Strategy::kChannel); });
  add("fp8_asym_tensor", [&] { return make_args(8, QuantType::kFloat, false, Strategy::kTensor); });
  if (cols % 16 == 0) {
    add("int4_sym_group16", [&] { return make_args(4, QuantType::kInt, true, Strategy::kGroup, 16); });
    add("int8_asym_group16", [&] { return make_args(8, QuantType::kInt, false, Strategy::kGroup, 16); });
    add("nvfp4_tensor_group16",
        [&] { return make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3); });
  }
  if (cols % 32 == 0)
    add("mxfp4_group32", [&] { return make_args(4, QuantType::kFloat, true, Strategy::kGroup, 32, DType::kU8); });
  add("int4_group1", [&] { return make_args(4, QuantType::kInt, false, Strategy::kGroup, 1); });
  add("int8_block_4x8", [&] {
    return make_args(8, QuantType::kInt, true, Strategy::kBlock, std::nullopt, std::nullopt, std::array<int64_t, 2>{4, 8});
  });
  return f;
}

QuantizationArgs search_args(QuantizationArgs a) {
  if (a.get_strategy() == Strategy::kTensorGroup) a.scale_dtype.reset();  // R6.6.2
  return a;
}

GridSearchConfig mse_cfg() { return GridSearchConfig{}; }
GridSearchConfig nvfp4_cfg() {
  GridSearchConfig c;
  c.maxshrink = 1.0 - 0.8 / 1.8;
  c.grid = 200.0;
  c.patience = 1000;
  c.expand = 1.8;
  return c;
}
GridSearchConfig imatrix_cfg() {
  GridSearchConfig c;
  c.imatrix = true;
  c.maxshrink = 0.95;
  c.grid = 20;
  c.norm = 3.0;
  return c;
}
/// nvfp4_expanded_imatrix (R6.12.1): 112 candidates from 1.8x the range down.
GridSearchConfig expanded_imatrix_cfg() {
  GridSearchConfig c = imatrix_cfg();
  c.maxshrink = 1.0 - 0.8 / 1.8;
  c.grid = 200;
  c.norm = 2.4;
  c.expand = 1.8;
  c.patience = 1000;
  return c;
}

std::string diff(const GridSearchResult& r, const GridSearchResult& f) {
  if (r.candidates_evaluated != f.candidates_evaluated)
    return "candidates_evaluated " + std::to_string(r.candidates_evaluated) + " vs " +
           std::to_string(f.candidates_evaluated);
  if (r.best_min.size() != f.best_min.size()) return "size";
  for (std::size_t q = 0; q < r.best_min.size(); ++q)
    if (float_bits(r.best_min[q]) != float_bits(f.best_min[q]) || float_bits(r.best_max[q]) != float_bits(f.best_max[q]))
      return "q=" + std::to_string(q) + " ref (" + std::to_string(r.best_min[q]) + ", " + std::to_string(r.best_max[q]) +
             ") fast (" + std::to_string(f.best_min[q]) + ", " + std::to_string(f.best_max[q]) + ")";
  return "";
}

/// Runs the fast grid search at every level and thread count against the reference.
void expect_search_matches(const std::string& what, const FlatView& flat, const QuantizationArgs& sargs,
                           GridSearchConfig cfg, const FlatView* w = nullptr) {
  const GridSearchResult ref = ref::grid_search(flat, sargs, cfg, w);
  for (SimdLevel level : available_simd_levels())
    for (int threads : {1, 2, 3}) {
      // the batch kernel where it applies, then the one-group path on the same input
      for (bool batch : {true, false}) {
        cfg.batch_groups = batch;
        const GridSearchResult fast = cpu::grid_search(flat, sargs, cfg, w, level, threads);
        const std::string d = diff(ref, fast);
        EXPECT_EQ(d, "") << what << " level=" << to_string(level) << " threads=" << threads << " batch=" << batch;
        if (!d.empty()) return;
        if (!batch) EXPECT_EQ(fast.groups_batched, 0);
        if (fast.groups_batched == 0) break;  // the batch kernel does not apply: one run is enough
      }
    }
}

// ---- libm powf replay --------------------------------------------------------------

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
      if (std::isfinite(x)) ASSERT_EQ(float_bits(detail::powf_replay(x, y, *t)), float_bits(std::pow(x, y))) << x << "^" << y;
    for (SimdLevel level : available_simd_levels()) {
      if (level == SimdLevel::kScalar) continue;
      std::vector<float> out(xs.size());
      detail::pow_simd(level)->replay(xs.data(), static_cast<int64_t>(xs.size()), y, *t, out.data());
      for (std::size_t i = 0; i < xs.size(); ++i)
        ASSERT_EQ(float_bits(out[i]), float_bits(std::pow(xs[i], y))) << xs[i] << "^" << y << " at " << to_string(level);
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

// ---- min-max ---------------------------------------------------------------------

/// cpu::minmax at every level and thread count against ref::minmax, bit for bit (NaN
/// results compare as NaN).
void expect_minmax_matches(const FlatView& flat, const std::string& what) {
  const int64_t nq = flat.layout.num_qparams();
  std::vector<float> rmin(nq), rmax(nq);
  ref::minmax(flat, rmin.data(), rmax.data());
  for (SimdLevel level : available_simd_levels())
    for (int threads : {1, 2, 3}) {
      std::vector<float> fmin(nq), fmax(nq);
      cpu::minmax(flat, fmin.data(), fmax.data(), level, threads);
      for (int64_t q = 0; q < nq; ++q) {
        const std::string at =
            what + " q=" + std::to_string(q) + " " + std::string(to_string(level)) + " t" + std::to_string(threads);
        ASSERT_EQ(std::isnan(rmin[q]), std::isnan(fmin[q])) << at;
        ASSERT_EQ(std::isnan(rmax[q]), std::isnan(fmax[q])) << at;
        if (!std::isnan(rmin[q])) ASSERT_EQ(float_bits(rmin[q]), float_bits(fmin[q])) << at;
        if (!std::isnan(rmax[q])) ASSERT_EQ(float_bits(rmax[q]), float_bits(fmax[q])) << at;
      }
    }
}

TEST(FastMinMax, MatchesReferenceEverywhere) {
  const QuantizationArgs tensor = make_args(8, QuantType::kInt, true, Strategy::kTensor);
  const QuantizationArgs channel = make_args(8, QuantType::kInt, true, Strategy::kChannel);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t n : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 4097})
      for (Pattern p : {Pattern::kNormal, Pattern::kSignedZeros, Pattern::kPositive, Pattern::kZeroGroups}) {
        const std::vector<float> v = make_data(3 * n, p, static_cast<uint32_t>(n), n);
        const Tensor t = Tensor::from_floats(dt, {3, n}, v);
        for (const QuantizationArgs* a : {&tensor, &channel})
          expect_minmax_matches(flatten_for_calibration(t.view(), "weight", *a),
                                std::string(dtype_name(dt)) + " n=" + std::to_string(n));
      }
}

TEST(FastMinMax, SmallGroupsEightAtATime) {
  // f32 / bf16 / f16 groups of 8..128 elements laid end to end go through
  // minmax_groups_simd, eight groups per pass: many groups (full passes, a task's
  // remainder, a short tail), zero signs, and NaN / Inf anywhere.
  struct Case {
    QuantizationArgs args;
    int64_t cols, group;
  };
  const std::vector<Case> cases = {
      {make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3), 64, 16},
      {make_args(4, QuantType::kInt, true, Strategy::kGroup, 8), 40, 8},
      {make_args(4, QuantType::kFloat, true, Strategy::kGroup, 32, DType::kU8), 96, 32},
      {make_args(8, QuantType::kInt, true, Strategy::kChannel), 64, 64},
      {make_args(8, QuantType::kInt, true, Strategy::kChannel), 24, 24},
      {make_args(4, QuantType::kInt, false, Strategy::kGroup, 128), 256, 128},
      {make_args(4, QuantType::kInt, true, Strategy::kGroup, 120), 240, 120},
      {make_args(8, QuantType::kInt, true, Strategy::kChannel), 128, 128},
      {make_args(4, QuantType::kInt, true, Strategy::kGroup, 136), 272, 136},  // one group at a time
  };
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const Case& c : cases)
      for (Pattern p : {Pattern::kNormal, Pattern::kSignedZeros, Pattern::kZeroGroups, Pattern::kPositive})
        for (int64_t rows : {1, 37, 130})
          for (int poison = 0; poison < 5; ++poison) {
            std::vector<float> v = make_data(rows * c.cols, p, static_cast<uint32_t>(rows + c.cols), c.group);
            if (poison == 1) v[v.size() / 3] = NAN;
            if (poison == 2) v[v.size() - 1] = -INFINITY;
            // a negative NaN (the 16-bit kernels see it as a key below -Inf's) and +Inf
            if (poison == 3) v[v.size() / 2] = -NAN;
            if (poison == 4) v[0] = INFINITY;
            const Tensor t = Tensor::from_floats(dt, {rows, c.cols}, v);
            expect_minmax_matches(flatten_for_calibration(t.view(), "weight", c.args),
                                  std::string(dtype_name(dt)) + " rows=" + std::to_string(rows) +
                                      " poison=" + std::to_string(poison));
          }
}

TEST(FastMinMax, GroupsOfSixteenBitPatternsEqualScalarMinMax) {
  // minmax_groups_simd on raw bf16 / f16 patterns (AVX-512: 32 groups per pass in int16
  // keys, the rest eight at a time) against nan_min / nan_max of the widened values, at
  // every level: any finite pattern (subnormals, both zeros, the largest values), +-Inf,
  // and NaN of either sign in any group, for group lengths the key kernel takes (16 and
  // multiples of 32) and ones it leaves to the eight-group kernel.
  std::mt19937 rng(11);
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    for (DType dt : {DType::kBF16, DType::kF16}) {
      const bool bf16 = dt == DType::kBF16;
      const uint16_t inf = bf16 ? 0x7F80 : 0x7C00;
      auto widen = [&](uint16_t b) { return bf16 ? bf16_to_float(b) : f16_to_float(b); };
      for (int64_t len : {16, 32, 64, 96, 128, 8, 24}) {
        for (int64_t groups : {32, 64, 40, 8, 96}) {
          for (int poison = 0; poison < 4; ++poison) {
            std::vector<uint16_t> x(static_cast<std::size_t>(groups * len));
            for (uint16_t& b : x) {
              do {
                b = static_cast<uint16_t>(rng());
              } while ((b & 0x7FFF) > inf);  // no NaN unless poisoned
            }
            // groups of one repeated value, and of only zeros of both signs
            std::fill(x.begin(), x.begin() + len, static_cast<uint16_t>(0x3F80));
            for (int64_t j = 0; j < len; ++j) x[static_cast<std::size_t>(len + j)] = j % 2 ? 0x8000 : 0x0000;
            const std::size_t at = static_cast<std::size_t>(rng() % x.size());
            if (poison == 1) x[at] = static_cast<uint16_t>(inf | 1);             // +NaN
            if (poison == 2) x[at] = static_cast<uint16_t>(inf | 0x8000 | 0x40);  // -NaN
            if (poison == 3) x[at] = static_cast<uint16_t>(inf | 0x8000);         // -Inf
            std::vector<float> mins(static_cast<std::size_t>(groups)), maxs(mins.size());
            bool zero_result = false;
            const bool finite =
                detail::minmax_simd(level)->groups(x.data(), dt, groups, len, mins.data(), maxs.data(), &zero_result);
            const std::string what = std::string(dtype_name(dt)) + " len=" + std::to_string(len) +
                                     " groups=" + std::to_string(groups) + " poison=" + std::to_string(poison);
            EXPECT_EQ(finite, poison == 0 || poison == 3) << what;
            if (!finite) continue;
            // group 1 is all zeros: its zero results must be flagged for the caller
            EXPECT_TRUE(zero_result) << what;
            for (int64_t g = 0; g < groups; ++g) {
              float lo = INFINITY, hi = -INFINITY;
              for (int64_t j = 0; j < len; ++j) {
                const float v = widen(x[static_cast<std::size_t>(g * len + j)]);
                lo = std::min(lo, v);
                hi = std::max(hi, v);
              }
              // the sign of a zero result is the caller's to settle: compare values
              ASSERT_EQ(mins[static_cast<std::size_t>(g)], lo) << what << " group " << g;
              ASSERT_EQ(maxs[static_cast<std::size_t>(g)], hi) << what << " group " << g;
            }
          }
        }
      }
    }
  }
}

TEST(FastMinMax, X86KeyPassesEqualPortableEightGroupPasses) {
  // The x86-only 16-bit key passes (minmax_keys16_x86-inl.h: AVX-512 32 groups per
  // pass, AVX2 16) against their portable twin, the Highway eight-group passes, on the
  // same raw patterns: the stored 16-bit statistics and their key ranges bit for bit,
  // the NaN answer, and the zero flag. Shapes the key passes take (len 16 or multiples
  // of 16 / 32, groups multiples of 16 / 32) and ones they leave to the portable passes
  // (the two must then agree trivially, and a key pass must not claim them: -1 only
  // where the portable passes refuse too).
  std::mt19937 rng(23);
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    const detail::MinmaxSimd& k = *detail::minmax_simd(level);
    for (bool bf16 : {true, false}) {
      const uint16_t inf = bf16 ? 0x7F80 : 0x7C00;
      for (int64_t len : {16, 32, 48, 64, 128, 8, 24}) {
        for (int64_t groups : {32, 64, 16, 48, 8, 96}) {
          for (int poison = 0; poison < 6; ++poison) {
            std::vector<uint16_t> x(static_cast<std::size_t>(groups * len));
            for (uint16_t& b : x) {
              do {
                b = static_cast<uint16_t>(rng());
              } while ((b & 0x7FFF) > inf);
            }
            // an all-equal group, an all-zero group of both signs (half the runs: a zero
            // result leaves the key ranges to the caller, so the others check them), a
            // group of subnormals
            const bool zero_group = poison % 2 == 1;
            std::fill(x.begin(), x.begin() + len, static_cast<uint16_t>(0x3F80));
            for (int64_t j = 0; j < len && zero_group; ++j)
              x[static_cast<std::size_t>(len + j)] = j % 2 ? 0x8000 : 0x0000;
            for (int64_t j = 0; j < len && groups > 2; ++j)
              x[static_cast<std::size_t>(2 * len + j)] = static_cast<uint16_t>((j % 3 ? 0x8000 : 0) | (1 + j % 5));
            const std::size_t at = static_cast<std::size_t>(rng() % x.size());
            if (poison == 1) x[at] = static_cast<uint16_t>(inf | 1);
            if (poison == 2) x[at] = static_cast<uint16_t>(inf | 0x8000 | 0x40);
            if (poison == 3) x[at] = static_cast<uint16_t>(inf | 0x8000);
            if (poison == 4) x[at] = inf;
            if (poison == 5) x[at] = static_cast<uint16_t>(inf | 0x8000 | 1);
            const auto n = static_cast<std::size_t>(groups);
            std::vector<uint16_t> mins_k(n, 0xAAAA), maxs_k(n, 0xAAAA), mins_p(n, 0x5555), maxs_p(n, 0x5555);
            bool zero_k = false, zero_p = false;
            detail::StoredKeyRanges r_k, r_p;
            const int got_k =
                k.groups_to16(x.data(), bf16, groups, len, mins_k.data(), maxs_k.data(), &zero_k, false, &r_k);
            const int got_p =
                k.groups_to16_portable(x.data(), bf16, groups, len, mins_p.data(), maxs_p.data(), &zero_p, false, &r_p);
            const std::string what = std::string(bf16 ? "bf16" : "f16") + " " + std::string(to_string(level)) +
                                     " len=" + std::to_string(len) + " groups=" + std::to_string(groups) +
                                     " poison=" + std::to_string(poison);
            ASSERT_EQ(got_k, got_p) << what;
            if (got_k != 1) continue;
            EXPECT_EQ(zero_k, zero_p) << what;
            if (zero_group) EXPECT_TRUE(zero_k) << what;
            if (!zero_k) {
              EXPECT_EQ(r_k.mins_lo, r_p.mins_lo) << what;
              EXPECT_EQ(r_k.mins_hi, r_p.mins_hi) << what;
              EXPECT_EQ(r_k.maxs_lo, r_p.maxs_lo) << what;
              EXPECT_EQ(r_k.maxs_hi, r_p.maxs_hi) << what;
            }
            for (std::size_t g = 0; g < n; ++g) {
              // a zero result's sign is unspecified (the caller settles it): compare values
              const auto value = [&](uint16_t b) { return bf16 ? bf16_to_float(b) : f16_to_float(b); };
              ASSERT_EQ(value(mins_k[g]), value(mins_p[g])) << what << " group " << g;
              ASSERT_EQ(value(maxs_k[g]), value(maxs_p[g])) << what << " group " << g;
              if ((mins_k[g] & 0x7FFF) != 0) ASSERT_EQ(mins_k[g], mins_p[g]) << what << " group " << g;
              if ((maxs_k[g] & 0x7FFF) != 0) ASSERT_EQ(maxs_k[g], maxs_p[g]) << what << " group " << g;
            }
          }
        }
      }
    }
  }
}

TEST(FastMinMax, StatisticsTensorsEqualFromFloatsOfReference) {
  // cpu::minmax_stats writes the observers' statistics tensors in the view's dtype
  // (bf16 / f16 narrowed a block of 1024 groups at a time): byte for byte what
  // Tensor::from_floats made of ref::minmax's floats, NaN patterns included. Many small
  // groups (eight per pass, several blocks and a tail per task), long groups, and one
  // huge group; zero signs, all-equal groups, subnormals, NaN / Inf anywhere.
  struct Case {
    QuantizationArgs args;
    int64_t cols;
    const char* base;
  };
  const std::vector<Case> cases = {
      {make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3), 64, "weight"},
      {make_args(4, QuantType::kInt, false, Strategy::kGroup, 8), 40, "weight"},
      {make_args(4, QuantType::kInt, true, Strategy::kGroup, 24), 72, "weight"},
      {make_args(4, QuantType::kInt, false, Strategy::kGroup, 128), 384, "weight"},
      {make_args(8, QuantType::kInt, true, Strategy::kChannel), 33, "weight"},
      {make_args(8, QuantType::kInt, true, Strategy::kTensor), 1031, "input"},
  };
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const Case& c : cases)
      for (Pattern p : {Pattern::kNormal, Pattern::kSignedZeros, Pattern::kEqualGroups, Pattern::kSubnormal})
        for (int64_t rows : {int64_t{3}, int64_t{700}})
          for (int poison = 0; poison < 5; ++poison) {
            std::vector<float> v = make_data(rows * c.cols, p, static_cast<uint32_t>(rows + c.cols), 16);
            if (dt == DType::kF16)
              for (float& x : v) x = std::clamp(x, -6e4f, 6e4f);
            if (poison == 1) v[v.size() / 3] = NAN;
            if (poison == 2) v[v.size() - 1] = -INFINITY;
            if (poison == 3) v[7] = -NAN;
            if (poison == 4) v[v.size() / 2] = INFINITY;
            const Tensor t = Tensor::from_floats(dt, {rows, c.cols}, v);
            const FlatView flat = flatten_for_calibration(t.view(), c.base, c.args);
            const std::size_t nq = static_cast<std::size_t>(flat.layout.num_qparams());
            std::vector<float> rmin(nq), rmax(nq);
            ref::minmax(flat, rmin.data(), rmax.data());
            const Tensor emin = Tensor::from_floats(dt, flat.layout.qparam_shape, rmin);
            const Tensor emax = Tensor::from_floats(dt, flat.layout.qparam_shape, rmax);
            // the extremes the kernel reads back: the least min and the greatest max,
            // both NaN when a statistic is NaN
            bool any_nan = false;
            double want_lo = INFINITY, want_hi = -INFINITY;
            for (int64_t i = 0; i < emin.numel(); ++i) {
              any_nan = any_nan || std::isnan(emin.get(i)) || std::isnan(emax.get(i));
              want_lo = std::min(want_lo, emin.get(i));
              want_hi = std::max(want_hi, emax.get(i));
            }
            const bool nvfp4 = c.args.get_strategy() == Strategy::kTensorGroup;
            // stream_min 0: every 16-bit pass writes by streaming stores and hands over
            // its key ranges from registers (stream_store.h), as large tensors do
            const int64_t stream_default = kernels::stream_store_min_bytes.load();
            for (SimdLevel level : available_simd_levels())
              for (int threads : {1, 2, 3})
                for (int64_t stream_min : {stream_default, int64_t{0}}) {
                  const kernels::ScopedStreamStoreMinBytes streaming(stream_min);
                  Tensor gmin(dt, flat.layout.qparam_shape), gmax(dt, flat.layout.qparam_shape);
                  std::optional<kernels::StatisticsExtremes> ext;
                  cpu::minmax_stats(flat, gmin.data(), gmax.data(), level, threads, &ext);
                  const std::string at = std::string(dtype_name(dt)) + " cols=" + std::to_string(c.cols) +
                                         " rows=" + std::to_string(rows) + " poison=" + std::to_string(poison) + " " +
                                         std::string(to_string(level)) + " t" + std::to_string(threads) +
                                         " stream_min=" + std::to_string(stream_min);
                  ASSERT_EQ(0, std::memcmp(gmin.data(), emin.data(), emin.nbytes())) << at;
                  ASSERT_EQ(0, std::memcmp(gmax.data(), emax.data(), emax.nbytes())) << at;
                  // NVFP4's groups of 16 end to end: read back at every vector level
                  if (nvfp4 && level != SimdLevel::kScalar) ASSERT_TRUE(ext.has_value()) << at;
                  if (!ext) continue;
                  if (any_nan) {
                    EXPECT_TRUE(std::isnan(ext->first) && std::isnan(ext->second)) << at;
                  } else {
                    EXPECT_EQ(ext->first, want_lo) << at;  // == : a zero's sign is unspecified
                    EXPECT_EQ(ext->second, want_hi) << at;
                  }
                }
          }
}

TEST(FastMinMax, ObserverTakesTheKernelsReadBackExtremes) {
  // memoryless_minmax on NVFP4 weights takes its finiteness check and R6.1.5's global
  // amax from the extremes the min-max kernel read back as it wrote the statistics.
  // static_minmax, after one observation, has the same statistics but scans them for
  // both: the two must give the same global scale, scales and zero points at every
  // level, dtype and thread count (at the scalar level neither reads back), with the
  // greatest magnitude a group's max and then a group's min, in the first and the last
  // group; the groups come in 32-group passes and a tail. A NaN / Inf anywhere is
  // still rejected, naming the element, with no statistics kept.
  const int64_t rows = 24, cols = 272;  // 408 groups of 16
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (float& x : v) x = nd(rng);
  const QuantizationArgs args = make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (float sign : {1.0f, -1.0f}) {
      v[5] = 0.375f * sign;
      v[v.size() - 3] = -0.75f * sign;
      const Tensor w = Tensor::from_floats(dt, {rows, cols}, v);
      for (SimdLevel level : available_simd_levels())
        for (int threads : {1, 2, 3}) {
          const ScopedSimdLevel scoped(level);
          const std::string at = std::string(dtype_name(dt)) + " " + std::string(to_string(level)) + " t" +
                                 std::to_string(threads) + " sign " + std::to_string(sign);
          ObserverOptions opt;
          opt.num_threads = threads;
          auto fused = load_observer("memoryless_minmax", "weight", args, {}, opt);
          auto scanned = load_observer("static_minmax", "weight", args, {}, opt);
          fused->observe(w.view());
          scanned->observe(w.view());
          const QParams a = fused->get_qparams(), b = scanned->get_qparams();
          ASSERT_TRUE(a.global_scale && b.global_scale) << at;
          EXPECT_TRUE(a.global_scale->bit_equal(*b.global_scale)) << at;
          EXPECT_TRUE(a.scale.bit_equal(b.scale)) << at;
          EXPECT_TRUE(a.zero_point.bit_equal(b.zero_point)) << at;
          for (float bad : {NAN, INFINITY, -INFINITY})
            for (std::size_t where : {std::size_t{0}, v.size() / 2, v.size() - 1}) {
              std::vector<float> p = v;
              p[where] = bad;
              const Tensor x = Tensor::from_floats(dt, {rows, cols}, p);
              auto o = load_observer("memoryless_minmax", "weight", args, {}, opt);
              testing::expect_error<InvalidArgument>([&] { o->observe(x.view()); },
                                                     {"non-finite", "flat index " + std::to_string(where)});
              EXPECT_FALSE(o->has_statistics()) << at;
            }
        }
    }
}

TEST(FastMinMax, Narrow16EqualsTensorStores) {
  // narrow16_simd against the scalar stores of Tensor::from_floats on values off the
  // 16-bit grids: ties to even, carries into the exponent, overflow to Inf, subnormals,
  // signed zeros, and NaN (from_floats' double path) in the body and the tail.
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> v;
  for (int i = 0; i < 4000; ++i) {
    float x;
    const uint32_t b = bits(rng);
    std::memcpy(&x, &b, 4);
    if (std::isnan(x) && i % 7 != 0) x = 1.0f;  // mostly numbers, some NaN payloads
    v.push_back(x);
  }
  for (float x : {0.0f, -0.0f, 1.00390625f, 1.01171875f, 65520.0f, 65519.0f, 3.4e38f, -3.4e38f, 1e-45f, 6e-8f,
                  3e-8f, INFINITY, -INFINITY, NAN, -NAN, 0x1.fffffep127f})
    v.push_back(x);
  for (bool bf16 : {true, false}) {
    const Tensor expect = Tensor::from_floats(bf16 ? DType::kBF16 : DType::kF16, {static_cast<int64_t>(v.size())}, v);
    for (SimdLevel level : available_simd_levels()) {
      if (level == SimdLevel::kScalar) continue;
      for (std::size_t n : {v.size(), v.size() - 3, std::size_t{5}}) {
        std::vector<uint16_t> got(n);
        detail::convert_simd(level)->narrow16(v.data(), static_cast<int64_t>(n), bf16, got.data());
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_EQ(got[i], expect.data_as<uint16_t>()[i]) << (bf16 ? "bf16" : "f16") << " i=" << i << " x=" << v[i]
                                                           << " " << to_string(level);
      }
    }
  }
}

TEST(FastMinMax, WholeTensorMinMaxForTheGlobalScale) {
  // kernels::nan_min_max (R6.1.5's amax over the statistics) against nan_min / nan_max
  // over the values: lengths around the vector widths and the 4096-element chunks of
  // bf16 / f16, and the threaded 16-bit key scan (2^18 and up), NaN anywhere of either
  // sign (propagates), +-Inf, equal values, all-negative values, zero extremes,
  // subnormals; magnitudes compared (a zero's sign is unspecified).
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t n : {1, 7, 16, 17, 4096, 4097, 10000, 1 << 18, (1 << 18) + 33})
      for (int poison = 0; poison < 9; ++poison) {
        std::vector<float> v = make_data(n, Pattern::kNormal, static_cast<uint32_t>(n + poison));
        if (poison == 1) v[static_cast<std::size_t>(n - 1)] = NAN;
        if (poison == 2) v[static_cast<std::size_t>(n / 2)] = -INFINITY;
        if (poison == 3) std::fill(v.begin(), v.end(), 0.75f);
        if (poison == 4) v[0] = INFINITY;
        if (poison == 5) v[static_cast<std::size_t>(n / 3)] = -NAN;
        if (poison == 6)
          for (float& x : v) x = -std::fabs(x) - 1e-3f;
        if (poison == 7)  // signed zeros as the least values: the zero-extreme fallback
          for (std::size_t i = 0; i < v.size(); ++i) v[i] = i % 5 ? std::fabs(v[i]) : (i % 2 ? 0.0f : -0.0f);
        if (poison == 8)
          for (std::size_t i = 0; i < v.size(); i += 3) v[i] *= 1e-40f;
        const Tensor t = Tensor::from_floats(dt, {n}, v);
        double lo = INFINITY, hi = -INFINITY;
        for (int64_t i = 0; i < n; ++i) {
          lo = qobs::detail::nan_min(lo, t.get(i));
          hi = qobs::detail::nan_max(hi, t.get(i));
        }
        for (SimdLevel level : available_simd_levels()) {
          const ScopedSimdLevel scoped(level);
          const auto got = nan_min_max(t.view());
          if (level == SimdLevel::kScalar) {
            EXPECT_FALSE(got);
            continue;
          }
          ASSERT_TRUE(got);
          const std::string at = std::string(dtype_name(dt)) + " n=" + std::to_string(n) +
                                 " p=" + std::to_string(poison) + " " + std::string(to_string(level));
          EXPECT_EQ(std::isnan(lo), std::isnan(got->first)) << at;
          EXPECT_EQ(std::isnan(hi), std::isnan(got->second)) << at;
          if (!std::isnan(lo)) EXPECT_EQ(std::fabs(lo), std::fabs(got->first)) << at;
          if (!std::isnan(hi)) EXPECT_EQ(std::fabs(hi), std::fabs(got->second)) << at;
          if (!std::isnan(lo) && lo != 0) EXPECT_EQ(lo, got->first) << at;
          if (!std::isnan(hi) && hi != 0) EXPECT_EQ(hi, got->second) << at;
        }
      }
}

TEST(FastMinMax, NanAndInfPropagateLikeReference) {
  const QuantizationArgs channel = make_args(8, QuantType::kInt, true, Strategy::kChannel);
  for (int64_t n : {5, 17, 70000}) {
    std::vector<float> v = make_data(2 * n, Pattern::kNormal, 3);
    v[static_cast<std::size_t>(n / 2)] = NAN;
    v[static_cast<std::size_t>(n + n / 3)] = -INFINITY;
    const Tensor t = Tensor::from_floats(DType::kF32, {2, n}, v);
    for (const QuantizationArgs& a : {channel, make_args(8, QuantType::kInt, true, Strategy::kTensor)}) {
      const FlatView flat = flatten_for_calibration(t.view(), "weight", a);
      const int64_t nq = flat.layout.num_qparams();
      std::vector<float> rmin(nq), rmax(nq), fmin(nq), fmax(nq);
      ref::minmax(flat, rmin.data(), rmax.data());
      for (SimdLevel level : available_simd_levels())
        for (int threads : {1, 3}) {
          cpu::minmax(flat, fmin.data(), fmax.data(), level, threads);
          for (int64_t q = 0; q < nq; ++q) {
            EXPECT_EQ(std::isnan(rmin[q]), std::isnan(fmin[q]));
            if (!std::isnan(rmin[q])) EXPECT_EQ(float_bits(rmin[q]), float_bits(fmin[q]));
            if (!std::isnan(rmax[q])) EXPECT_EQ(float_bits(rmax[q]), float_bits(fmax[q]));
          }
        }
    }
  }
}

TEST(FastMinMax, ActivationBatchAsOneGroup) {
  // A static activation scale (tensor strategy on an "input" view) is one group whose
  // observations are the tokens: the kernel reads it in place as one range split over
  // threads, bf16 / f16 widened chunk by chunk. Sizes around the split threshold
  // (2^16), the 4096-element chunk and the part boundaries; zero signs; NaN / Inf
  // anywhere, including a chunk's last element.
  for (const QuantizationArgs& a :
       {make_args(8, QuantType::kInt, true, Strategy::kTensor), make_args(8, QuantType::kFloat, false, Strategy::kTensor)})
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
      for (const Shape& shape :
           {Shape{16, 4096}, Shape{257, 255}, Shape{2, 3, 11001}, Shape{65, 1009}, Shape{64, 512}, Shape{3, 5, 7}})
        for (Pattern p : {Pattern::kNormal, Pattern::kSignedZeros, Pattern::kZeroGroups, Pattern::kPositive,
                          Pattern::kEqualGroups})
          for (int poison = 0; poison < 4; ++poison) {
            int64_t n = 1;
            for (int64_t d : shape) n *= d;
            std::vector<float> v = make_data(n, p, static_cast<uint32_t>(n + poison), 4096);
            if (poison == 1) v[static_cast<std::size_t>(n / 3)] = NAN;
            if (poison == 2) v[static_cast<std::size_t>(std::min<int64_t>(4095, n - 1))] = -INFINITY;
            if (poison == 3) {
              v[static_cast<std::size_t>(n - 1)] = INFINITY;
              v[7] = -INFINITY;
            }
            const Tensor t = Tensor::from_floats(dt, shape, v);
            const FlatView flat = flatten_for_calibration(t.view(), "input", a);
            ASSERT_EQ(flat.layout.num_qparams(), 1);
            expect_minmax_matches(flat, std::string(dtype_name(dt)) + " " + shape_str(shape) + " pattern=" +
                                            std::to_string(static_cast<int>(p)) + " poison=" + std::to_string(poison));
          }
}

TEST(FastMinMax, ActivationGroupsAcrossTokens) {
  // Group activation scales: several qparam elements, with every token an observation
  // of each group, whose values are then not contiguous (read by gathering).
  for (const QuantizationArgs& a : {make_args(8, QuantType::kInt, true, Strategy::kGroup, 8),
                                    make_args(8, QuantType::kInt, false, Strategy::kGroup, 16)})
    for (DType dt : {DType::kF32, DType::kBF16})
      for (const Shape& shape : {Shape{7, 32}, Shape{2, 9, 48}, Shape{1, 16}}) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        const Tensor t = Tensor::from_floats(dt, shape, make_data(n, Pattern::kSignedZeros, static_cast<uint32_t>(n)));
        expect_minmax_matches(flatten_for_calibration(t.view(), "input", a),
                              std::string(dtype_name(dt)) + " " + shape_str(shape));
      }
}

// ---- imatrix column sums -----------------------------------------------------------

/// sum_squares_by_column at every SIMD level and thread count against the reference
/// loop, bit for bit (NaN compares as NaN), starting from the same non-zero sums.
void expect_column_sums_match(const TensorView& x, int64_t cols, const std::string& what) {
  std::vector<double> want(static_cast<std::size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) want[static_cast<std::size_t>(c)] = 0.25 * static_cast<double>(c % 5);
  std::vector<double> start = want;
  ref::sum_squares_by_column(x, cols, want.data());
  for (SimdLevel level : available_simd_levels())
    for (int threads : {1, 2, 3}) {
      ScopedSimdLevel guard(level);
      std::vector<double> got = start;
      sum_squares_by_column(x, cols, got.data(), threads);
      for (int64_t c = 0; c < cols; ++c) {
        const double w = want[static_cast<std::size_t>(c)], g = got[static_cast<std::size_t>(c)];
        ASSERT_TRUE(std::isnan(w) ? std::isnan(g) : std::memcmp(&w, &g, sizeof w) == 0)
            << what << " c=" << c << " ref " << w << " fast " << g << " " << to_string(level) << " t" << threads;
      }
    }
}

TEST(ColumnSquares, MatchesReferenceLoopEverywhere) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t cols : {1, 7, 8, 9, 255, 256, 257, 513, 1000, 4099})
      for (int64_t rows : {1, 3, 17, 70})
        for (Pattern p : {Pattern::kNormal, Pattern::kHugeRange, Pattern::kSubnormal, Pattern::kEqualGroups}) {
          std::vector<float> v = make_data(rows * cols, p, static_cast<uint32_t>(rows * 31 + cols), 8);
          if (p == Pattern::kEqualGroups && rows > 2) {
            v[static_cast<std::size_t>(cols)] = NAN;  // column 0 of row 1
            v[static_cast<std::size_t>(rows * cols - 1)] = INFINITY;
          }
          const Tensor t = Tensor::from_floats(dt, {rows, cols}, v);
          expect_column_sums_match(t.view(), cols,
                                   std::string(dtype_name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
        }
}

TEST(ColumnSquares, BatchedAndStridedInputs) {
  // [batch, seq, hidden] inputs reduce over every leading dim; a transposed (strided)
  // view takes the reference loop and must give the same sums as its contiguous copy.
  const std::vector<float> v = make_data(4 * 33 * 300, Pattern::kNormal, 5);
  const Tensor t = Tensor::from_floats(DType::kBF16, {4, 33, 300}, v);
  expect_column_sums_match(t.view(), 300, "bf16 4x33x300");
  const Tensor m = Tensor::from_floats(DType::kF32, {300, 132}, v);
  const TensorView transposed(m.data(), DType::kF32, {132, 300}, {1, 132});
  std::vector<double> strided(300), copied(300);
  sum_squares_by_column(transposed, 300, strided.data(), 2);
  const Tensor copy = Tensor::copy_of(transposed);
  sum_squares_by_column(copy.view(), 300, copied.data(), 2);
  for (std::size_t c = 0; c < 300; ++c) ASSERT_EQ(strided[c], copied[c]) << c;
  expect_column_sums_match(transposed, 300, "transposed f32");
}

// ---- report error sums -------------------------------------------------------------

/// error_sums at every SIMD level against the reference loop, bit for bit (NaN as NaN).
void expect_error_sums_match(const TensorView& x, const TensorView& y, const std::string& what) {
  const ErrorSums want = ref::error_sums(x, y);
  for (SimdLevel level : available_simd_levels()) {
    ScopedSimdLevel guard(level);
    const ErrorSums got = error_sums(x, y);
    for (auto [w, g] : {std::pair{want.signal, got.signal}, std::pair{want.error, got.error}})
      ASSERT_TRUE(std::isnan(w) ? std::isnan(g) : std::memcmp(&w, &g, sizeof w) == 0)
          << what << " ref " << w << " fast " << g << " " << to_string(level);
  }
}

TEST(ErrorSums, MatchesReferenceLoopEverywhere) {
  for (DType xt : {DType::kF32, DType::kBF16, DType::kF16})
    for (DType yt : {DType::kF32, DType::kBF16, DType::kF16})
      for (int64_t n : {1, 7, 8, 9, 15, 4095, 4096, 4097, 8200, 12345})
        for (Pattern p : {Pattern::kNormal, Pattern::kHugeRange, Pattern::kSubnormal, Pattern::kEqualGroups}) {
          std::vector<float> v = make_data(n, p, static_cast<uint32_t>(n * 7 + 1), 8);
          std::vector<float> u = make_data(n, Pattern::kNormal, static_cast<uint32_t>(n * 3 + 2), 8);
          for (std::size_t i = 0; i < u.size(); ++i) u[i] = v[i] + 0.01f * u[i];  // a "dequantized" copy
          if (p == Pattern::kEqualGroups && n > 9) {
            v[static_cast<std::size_t>(n / 2)] = NAN;
            u[static_cast<std::size_t>(n - 1)] = INFINITY;
          }
          const Tensor x = Tensor::from_floats(xt, {n}, v), y = Tensor::from_floats(yt, {n}, u);
          expect_error_sums_match(x.view(), y.view(),
                                  std::string(dtype_name(xt)) + "/" + std::string(dtype_name(yt)) + " n=" +
                                      std::to_string(n));
        }
}

TEST(ErrorSums, ExactOnIntegersAndStridedViews) {
  // x = 1..n, y = x - 1: both sums are exact in f64, known in closed form.
  const int64_t n = 5001;
  std::vector<float> v(static_cast<std::size_t>(n)), u(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
    u[static_cast<std::size_t>(i)] = static_cast<float>(i);
  }
  const Tensor x = Tensor::from_floats(DType::kF32, {n}, v), y = Tensor::from_floats(DType::kF32, {n}, u);
  const ErrorSums s = error_sums(x.view(), y.view());
  EXPECT_EQ(s.signal, static_cast<double>(n) * (n + 1) * (2 * n + 1) / 6);
  EXPECT_EQ(s.error, static_cast<double>(n));
  // A transposed view takes the reference loop in row-major order of the view.
  const std::vector<float> m = make_data(40 * 33, Pattern::kNormal, 11);
  const Tensor a = Tensor::from_floats(DType::kBF16, {40, 33}, m);
  const TensorView at(a.data(), DType::kBF16, {33, 40}, {1, 33});
  const Tensor ac = Tensor::copy_of(at);
  const ErrorSums strided = error_sums(at, ac.view());
  EXPECT_EQ(strided.error, 0.0);
  EXPECT_EQ(strided.signal, error_sums(ac.view(), ac.view()).signal);
}

// ---- grid search -------------------------------------------------------------------

TEST(FastGridSearch, EveryFormatStrategyDtypeAndSize) {
  for (int64_t cols : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 96}) {
    for (const Format& fmt : formats_for(cols)) {
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
        const Pattern p = static_cast<Pattern>((cols + static_cast<int64_t>(dt)) % 7);
        const int64_t rows = fmt.args.get_strategy() == Strategy::kBlock ? 6 : 3;
        const Tensor t = Tensor::from_floats(dt, {rows, cols}, make_data(rows * cols, p, static_cast<uint32_t>(cols)));
        FlatView flat;
        try {
          flat = flatten_for_calibration(t.view(), "weight", fmt.args);
        } catch (const std::exception&) {
          continue;
        }
        const QuantizationArgs sargs = search_args(fmt.args);
        const std::string what = fmt.name + " cols=" + std::to_string(cols) + " " + std::string(dtype_name(dt));
        expect_search_matches(what + " mse", flat, sargs, mse_cfg());
        if (fmt.args.is_fp4()) expect_search_matches(what + " nvfp4_expanded", flat, sargs, nvfp4_cfg());
      }
    }
  }
}

TEST(FastGridSearch, ModesVariantsAndNorms) {
  const int64_t cols = 48;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const Format& fmt : formats_for(cols)) {
      const Tensor t = Tensor::from_floats(dt, {4, cols}, make_data(4 * cols, Pattern::kNormal, 11));
      const FlatView flat = flatten_for_calibration(t.view(), "weight", fmt.args);
      const QuantizationArgs sargs = search_args(fmt.args);
      const std::string what = fmt.name + " " + std::string(dtype_name(dt));
      for (NumericMode mode : {NumericMode::kParity, NumericMode::kWide})
        for (double norm : {2.4, 2.0, 3.0, 1.7})
          for (int variant = 0; variant < 4; ++variant) {
            GridSearchConfig c = mse_cfg();
            c.mode = mode;
            c.norm = norm;
            c.chunked = variant == 1;
            c.f32_errors = variant == 2;
            if (variant == 3) c.patience = 0;
            expect_search_matches(what + " norm=" + std::to_string(norm) + " variant=" + std::to_string(variant) +
                                      (mode == NumericMode::kWide ? " wide" : " parity"),
                                  flat, sargs, c);
          }
    }
}

TEST(FastGridSearch, EarlyStoppingAndPatienceAcrossGroups) {
  // few groups and small patience: the tensor-wide counter stops the search early, so
  // the fast path must replay the stop from the per-candidate improvement flags
  const QuantizationArgs a = make_args(4, QuantType::kInt, true, Strategy::kGroup, 8);
  for (Pattern p : {Pattern::kNormal, Pattern::kZeroGroups, Pattern::kEqualGroups})
    for (int64_t patience : {0, 1, 2, 5}) {
      const Tensor t = Tensor::from_floats(DType::kF32, {2, 16}, make_data(32, p, 5 + static_cast<uint32_t>(patience), 8));
      const FlatView flat = flatten_for_calibration(t.view(), "weight", a);
      for (bool chunked : {false, true})
        for (int64_t chunk : {1, 3, 5}) {
          GridSearchConfig c = mse_cfg();
          c.patience = patience;
          c.chunked = chunked;
          c.chunk_size = chunk;
          expect_search_matches("patience", flat, a, c);
        }
      GridSearchConfig im = imatrix_cfg();
      im.patience = patience;
      expect_search_matches("imatrix patience", flat, a, im);
    }
}

/// Many small groups for the batch kernels: groups of 1 to 256 (<= kPolyBatchMaxLen)
/// elements, with full and short batches at 3 and 37 rows.
struct ManyGroupCase {
  std::string name;
  QuantizationArgs args;
  int64_t cols, group;
};
std::vector<ManyGroupCase> many_group_cases() {
  return {
      {"nvfp4_g16", make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3), 64, 16},
      {"int4_sym_g16", make_args(4, QuantType::kInt, true, Strategy::kGroup, 16), 48, 16},
      {"int4_asym_g32", make_args(4, QuantType::kInt, false, Strategy::kGroup, 32), 96, 32},
      {"int2_asym_g8", make_args(2, QuantType::kInt, false, Strategy::kGroup, 8), 40, 8},
      {"int8_asym_g16", make_args(8, QuantType::kInt, false, Strategy::kGroup, 16), 48, 16},
      {"fp8_g16", make_args(8, QuantType::kFloat, true, Strategy::kGroup, 16), 32, 16},
      {"int8_sym_channel256", make_args(8, QuantType::kInt, true, Strategy::kChannel), 256, 256},
      {"int3_asym_channel255", make_args(3, QuantType::kInt, false, Strategy::kChannel), 255, 255},
      {"int4_sym_group1", make_args(4, QuantType::kInt, true, Strategy::kGroup, 1), 8, 1},
  };
}

TEST(FastGridSearch, BatchKernelMatchesReferenceOnManyGroups) {
  // Groups of up to kPolyBatchMaxLen f32 elements, unweighted, with a non-integer norm
  // are decided one group per vector lane (PolyBatchT): full batches, a short last
  // batch, lanes whose comparisons fall back to exact errors (equal and zero groups,
  // subnormal scales), and batches the kernel refuses (|range| >= 2^100) and hands to
  // the one-group path. Every result must equal the reference's.
  const std::vector<ManyGroupCase> cases = many_group_cases();
  const std::vector<SimdLevel> levels = available_simd_levels();
  const SimdLevel best = levels.back();
  int64_t batched = 0, exact = 0;
  for (const ManyGroupCase& c : cases)
    for (Pattern p : {Pattern::kNormal, Pattern::kZeroGroups, Pattern::kEqualGroups, Pattern::kHugeRange,
                      Pattern::kSubnormal, Pattern::kSignedZeros, Pattern::kPositive})
      for (int64_t rows : {3, 37}) {
        const uint32_t seed = static_cast<uint32_t>(rows + c.cols);
        const Tensor t = Tensor::from_floats(DType::kF32, {rows, c.cols}, make_data(rows * c.cols, p, seed, c.group));
        const FlatView flat = flatten_for_calibration(t.view(), "weight", c.args);
        const QuantizationArgs sargs = search_args(c.args);
        const std::string what = c.name + " rows=" + std::to_string(rows) + " pattern=" +
                                 std::to_string(static_cast<int>(p));
        for (double norm : {2.4, 1.7}) {
          GridSearchConfig cfg = mse_cfg();
          cfg.norm = norm;
          expect_search_matches(what + " mse norm=" + std::to_string(norm), flat, sargs, cfg);
        }
        if (c.args.is_fp4()) {
          GridSearchConfig cfg = nvfp4_cfg();
          expect_search_matches(what + " nvfp4_expanded", flat, sargs, cfg);
          cfg.norm = 3.3;
          expect_search_matches(what + " nvfp4_expanded norm=3.3", flat, sargs, cfg);
        }
        const GridSearchResult r = cpu::grid_search(flat, sargs, mse_cfg(), nullptr, best, 2);
        batched += r.groups_batched;
        exact += r.exact_evaluations;
      }
  if (best != SimdLevel::kScalar) {
    EXPECT_GT(batched, 0) << "the batch kernel never ran";
    EXPECT_GT(exact, 0) << "no comparison needed the exact fallback";
  }
}

TEST(FastGridSearch, BatchKernelFp4RoundingEqualsTheIntervalTable) {
  // fp4_round_nonneg rounds by adding and subtracting 2^22 x the binade; it must agree
  // with the R2.3.1 table on every float near each grid point and tie, and on a sample
  // of the rest of [0, 6].
  std::vector<float> xs;
  auto from_bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  for (float b : {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f})
    for (int64_t d = -4096; d <= 4096; ++d) {
      const int64_t u = static_cast<int64_t>(float_bits(b)) + d;
      if (u < 0) continue;
      const float f = from_bits(static_cast<uint32_t>(u));
      if (f <= 6.0f) xs.push_back(f);
    }
  for (uint32_t u = 0; u <= float_bits(6.0f); u += 4099) xs.push_back(from_bits(u));
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    std::vector<float> out(xs.size());
    detail::poly_batch_simd(level)->fp4_round_nonneg(xs.data(), static_cast<int64_t>(xs.size()), out.data());
    for (std::size_t i = 0; i < xs.size(); ++i)
      ASSERT_EQ(float_bits(out[i]), float_bits(fp4_round(xs[i]))) << xs[i] << " at " << to_string(level);
  }
}

TEST(FastGridSearch, BlockBoundaryOfCanonicalSum) {
  // groups longer than the 4096-element summation block, with a tail
  const QuantizationArgs tensor = make_args(8, QuantType::kInt, false, Strategy::kTensor);
  const QuantizationArgs channel = make_args(4, QuantType::kInt, true, Strategy::kChannel);
  for (int64_t n : {4095, 4096, 4097, 9001}) {
    const Tensor t = Tensor::from_floats(DType::kBF16, {2, n}, make_data(2 * n, Pattern::kNormal, 9));
    expect_search_matches("tensor n=" + std::to_string(n), flatten_for_calibration(t.view(), "weight", tensor), tensor,
                          mse_cfg());
    expect_search_matches("channel n=" + std::to_string(n), flatten_for_calibration(t.view(), "weight", channel),
                          channel, mse_cfg());
  }
}

TEST(FastGridSearch, ActivationLayoutsWithManyObservations) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const Tensor x = Tensor::from_floats(dt, {3, 5, 64}, make_data(3 * 5 * 64, Pattern::kNormal, 21));
    for (const QuantizationArgs& a : {make_args(8, QuantType::kInt, true, Strategy::kTensor),
                                      make_args(8, QuantType::kInt, false, Strategy::kGroup, 16),
                                      make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3),
                                      make_args(8, QuantType::kFloat, true, Strategy::kTensor)}) {
      const FlatView flat = flatten_for_calibration(x.view(), "input", a);
      ASSERT_GT(flat.layout.num_obs(), 1);
      expect_search_matches("input", flat, search_args(a), mse_cfg());
    }
  }
}

TEST(FastGridSearch, ImatrixWeighted) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const QuantizationArgs& a : {make_args(4, QuantType::kInt, true, Strategy::kGroup, 16),
                                      make_args(4, QuantType::kInt, false, Strategy::kChannel),
                                      make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3)}) {
      const int64_t rows = 5, cols = 64;
      const Tensor t = Tensor::from_floats(dt, {rows, cols}, make_data(rows * cols, Pattern::kNormal, 31));
      std::vector<float> wv(static_cast<std::size_t>(rows * cols));
      std::mt19937 rng(3);
      std::uniform_real_distribution<float> u(0.0f, 3.0f);
      for (int64_t c = 0; c < cols; ++c) {
        const float imp = c % 9 == 0 ? 0.0f : u(rng);
        for (int64_t r = 0; r < rows; ++r) wv[static_cast<std::size_t>(r * cols + c)] = imp;
      }
      const Tensor w = Tensor::from_floats(DType::kF32, {rows, cols}, wv);
      const FlatView flat = flatten_for_calibration(t.view(), "weight", a);
      const FlatView wf = flatten_for_calibration(w.view(), "weight", a);
      for (double norm : {3.0, 2.4, 2.0}) {
        GridSearchConfig c = imatrix_cfg();
        c.norm = norm;
        expect_search_matches("imatrix norm=" + std::to_string(norm), flat, search_args(a), c, &wf);
        expect_search_matches("imatrix uniform", flat, search_args(a), c, nullptr);
      }
      expect_search_matches("expanded imatrix", flat, search_args(a), expanded_imatrix_cfg(), &wf);
      expect_search_matches("expanded imatrix uniform", flat, search_args(a), expanded_imatrix_cfg(), nullptr);
    }
}

TEST(FastGridSearch, VectorTermsEqualTheReferenceTermsBitForBit) {
  // The raw (unrounded) f64 sums of the exact vector kernel against ErrorSum over
  // ErrorModel::term, one candidate at a time: a single term off shows in the sum.
  // Regression: with bf16 errors and norm 3 the kernel cubed in f32 where
  // Arith::pow_abs rounds the square to bf16 first (about 1 |e| in 5 differed).
  // The scales include bf16 values near amax / q_top and below it (some elements
  // clamped at either end), where bf16 data on a symmetric INT / FP4 grid takes the
  // magnitude chain (exact_diff_of_magnitude), and the lengths give tails of every size
  // and a second summation block.
  struct Case {
    std::string name;
    QuantizationArgs args;
  };
  const std::vector<Case> cases = {
      {"int4_asym", make_args(4, QuantType::kInt, false, Strategy::kChannel)},
      {"int8_sym", make_args(8, QuantType::kInt, true, Strategy::kChannel)},
      {"int4_sym", make_args(4, QuantType::kInt, true, Strategy::kChannel)},
      {"fp8", make_args(8, QuantType::kFloat, true, Strategy::kChannel)},
      {"fp4", make_args(4, QuantType::kFloat, true, Strategy::kChannel)},
  };
  for (int64_t n : {int64_t{203}, int64_t{7}, int64_t{16}, int64_t{4099}}) {
    std::vector<float> wv(static_cast<std::size_t>(n));
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> u(0.0f, 3.0f);
    for (float& v : wv) v = u(rng);
    const Tensor wt = Tensor::from_floats(DType::kF32, {1, n}, wv);
    for (SimdLevel level : available_simd_levels()) {
      if (level == SimdLevel::kScalar) continue;
      for (DType dt : {DType::kBF16, DType::kF16, DType::kF32})
        for (const Case& c : cases) {
          const Tensor t = Tensor::from_floats(dt, {1, n}, make_data(n, Pattern::kNormal, 23));
          const FlatView flat = flatten_for_calibration(t.view(), "weight", c.args);
          const FlatView wf = flatten_for_calibration(wt.view(), "weight", c.args);
          std::vector<float> x(static_cast<std::size_t>(n));
          flat.gather(0, x.data());
          float amax = 0;
          for (float v : x) amax = std::max(amax, std::fabs(v));
          for (double norm : {2.0, 3.0, 2.4, 1.7})
            for (bool weighted : {false, true}) {
              GridSearchConfig cfg = weighted ? imatrix_cfg() : mse_cfg();
              cfg.norm = norm;
              const cpu::Plan P = cpu::make_plan(flat, c.args, cfg, weighted ? &wf : nullptr, level);
              if (!P.vec.simd) continue;
              cpu::Scratch sc;
              const float q_top = std::min(P.vec.proto.q_max, -P.vec.proto.q_min);
              std::vector<float> scales = {0.001f, 0.0123f, 0.031f, 0.2f};
              for (float f : {1.0f, 0.93f, 0.81f, 0.6f}) scales.push_back(bf16_to_float(float_to_bf16(amax * f / q_top)));
              for (float scale : scales) {
                const float zp = c.args.symmetric ? 0.0f : 3.0f;
                double fast_sum;
                cpu::vector_sums(P, P.vec.proto.norm_kind, x.data(), weighted ? wv.data() : nullptr, &scale, &zp, 1,
                                  true, sc, &fast_sum);
                qobs::detail::ErrorSum ref_sum;
                for (int64_t j = 0; j < n; ++j) {
                  const float xj = x[static_cast<std::size_t>(j)];
                  ref_sum.add(P.em.term(qobs::detail::qdq_elem(xj, scale, zp, P.dplan), xj,
                                        weighted ? wv[static_cast<std::size_t>(j)] : 1.0f));
                }
                ASSERT_EQ(fast_sum, ref_sum.total())
                    << c.name << " " << dtype_name(dt) << " n=" << n << " norm=" << norm << " weighted=" << weighted
                    << " scale=" << scale << " level=" << to_string(level);
              }
            }
        }
    }
  }
}

TEST(FastGridSearch, ExactBatchKernelMatchesReferenceOn16BitData) {
  // bf16 / f16 groups of up to kPolyBatchMaxLen elements are decided one group per
  // vector lane with exact errors (exact_batch_simd.h): full and short batches, every
  // grid, sym and asym, norms 2 / 3 / 2.4 (the 16-bit table), f32 errors, the wide mode,
  // imatrix weights, zero / equal / subnormal / signed-zero groups and sums that
  // overflow the error dtype. Every result must equal the reference's.
  const std::vector<ManyGroupCase> cases = many_group_cases();
  const SimdLevel best = available_simd_levels().back();
  int64_t batched = 0;
  for (DType dt : {DType::kBF16, DType::kF16})
    for (const ManyGroupCase& c : cases)
      for (int p = 0; p < 8; ++p)
        for (int64_t rows : {3, 37}) {
          const uint32_t seed = static_cast<uint32_t>(rows + c.cols + p);
          std::vector<float> v = make_data(rows * c.cols, static_cast<Pattern>(std::min(p, 6)), seed, c.group);
          // pattern 7: magnitudes whose error sums overflow the error dtype (f16: 65504)
          if (p == 7)
            for (float& x : v) x *= dt == DType::kF16 ? 4.0e4f : 1.0e17f;
          // f16 subnormals: the f32 pattern's 1e-38 would flush them to zero
          if (p == static_cast<int>(Pattern::kSubnormal) && dt == DType::kF16)
            v = make_data(rows * c.cols, Pattern::kNormal, seed, c.group);
          if (p == static_cast<int>(Pattern::kSubnormal) && dt == DType::kF16)
            for (float& x : v) x *= 1e-4f;
          const Tensor t = Tensor::from_floats(dt, {rows, c.cols}, v);
          const FlatView flat = flatten_for_calibration(t.view(), "weight", c.args);
          const QuantizationArgs sargs = search_args(c.args);
          const std::string what = c.name + " " + std::string(dtype_name(dt)) + " rows=" + std::to_string(rows) +
                                   " pattern=" + std::to_string(p);
          for (double norm : {2.4, 2.0, 3.0}) {
            GridSearchConfig cfg = mse_cfg();
            cfg.norm = norm;
            expect_search_matches(what + " mse norm=" + std::to_string(norm), flat, sargs, cfg);
          }
          GridSearchConfig f32e = mse_cfg();
          f32e.f32_errors = true;
          expect_search_matches(what + " f32_errors", flat, sargs, f32e);
          GridSearchConfig wide = mse_cfg();
          wide.mode = NumericMode::kWide;
          expect_search_matches(what + " wide", flat, sargs, wide);
          if (c.args.is_fp4()) expect_search_matches(what + " nvfp4_expanded", flat, sargs, nvfp4_cfg());
          std::vector<float> wv(static_cast<std::size_t>(rows * c.cols));
          std::mt19937 rng(seed);
          std::uniform_real_distribution<float> u(0.0f, 3.0f);
          for (int64_t col = 0; col < c.cols; ++col) {
            const float imp = col % 7 == 0 ? 0.0f : u(rng);
            for (int64_t r = 0; r < rows; ++r) wv[static_cast<std::size_t>(r * c.cols + col)] = imp;
          }
          const Tensor w = Tensor::from_floats(DType::kF32, {rows, c.cols}, wv);
          const FlatView wf = flatten_for_calibration(w.view(), "weight", c.args);
          expect_search_matches(what + " imatrix", flat, sargs, imatrix_cfg(), &wf);
          if (c.args.is_fp4()) expect_search_matches(what + " expanded imatrix", flat, sargs, expanded_imatrix_cfg(), &wf);
          batched += cpu::grid_search(flat, sargs, mse_cfg(), nullptr, best, 2).groups_batched;
        }
  if (best != SimdLevel::kScalar) EXPECT_GT(batched, 0) << "the exact batch kernel never ran";
}

TEST(FastGridSearch, SplitNarrowingEqualsIntegerRneOnEveryNormalFloat) {
  // The exact kernels round to bf16 by Veltkamp's splitting where their guard holds (every
  // value rounded is 0 or normal below 2^110): every such float, both signs, must round
  // as the integer RNE does. Outside the range it may not, which the guard is for
  // (and this shows the check can fail).
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    EXPECT_EQ(detail::exact_batch_simd(level)->split_narrowing_mismatches(0, 1), 0) << "zero, " << to_string(level);
    EXPECT_EQ(detail::exact_batch_simd(level)->split_narrowing_mismatches(0x00800000u, (127u + 110u) << 23), 0) << to_string(level);
    EXPECT_GT(detail::exact_batch_simd(level)->split_narrowing_mismatches(1, 0x00800000u), 0) << "subnormals, " << to_string(level);
  }
}

/// ExactBatchSimd::split_division_mismatches at one s exponent.
int64_t split_division_one(SimdLevel level, int x_lo, int x_hi, int s_exp, bool rounded) {
  return detail::exact_batch_simd(level)->split_division_mismatches(x_lo, x_hi, &s_exp, 1, rounded);
}

TEST(FastGridSearch, SplitQuotientEqualsRoundedDivisionOnBf16Operands) {
  // Where the bf16 split guard holds, the exact kernels round x / s to bf16 from the
  // product x (1 / s). For every bf16 x of the guard's range (2^-100..2^100, both signs)
  // and every bf16 significand of s at exponents across the guard's range
  // (2^-100..2^90), it must round to the f32 division's bf16 value wherever the quotient
  // is normal. The product itself is not the f32 division (the check can fail).
  const std::vector<int> s_exps = {127 - 100, 127 - 40, 127 - 3, 127, 127 + 1, 127 + 7, 127 + 40, 127 + 90};
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    EXPECT_EQ(detail::exact_batch_simd(level)->split_division_mismatches(127 - 100, 127 + 100, s_exps.data(), static_cast<int>(s_exps.size()), true), 0) << to_string(level);
    EXPECT_GT(split_division_one(level, 127 - 3, 127 + 3, 127, false), 0) << to_string(level);
  }
}

/// The exact batch kernel's shortened chains on every symmetric grid it takes them on:
/// `expect(level, args, name)` for INT2 / INT4 / INT8 / FP4 at each SIMD level.
template <typename Expect>
void for_each_exact_diff_grid(Expect expect) {
  struct GridCase {
    const char* name;
    qobs::detail::GridKind grid;
    float q_min, q_max;
  };
  const GridCase grids[] = {{"int2", qobs::detail::GridKind::kInt, -2, 1},
                            {"int4", qobs::detail::GridKind::kInt, -8, 7},
                            {"int8", qobs::detail::GridKind::kInt, -128, 127},
                            {"fp4", qobs::detail::GridKind::kFp4, -6, 6}};
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    for (const GridCase& g : grids) {
      detail::BlockKernelArgs A;
      A.grid = g.grid;
      A.q_min = g.q_min;
      A.q_max = g.q_max;
      expect(level, A, std::string(to_string(level)) + " " + g.name);
    }
  }
}

/// ExactBatchSimd::exact_diff_mismatches over a list of s exponents.
int64_t exact_diff_mismatches(SimdLevel level, const detail::BlockKernelArgs& A, int x_lo, int x_hi,
                              const std::vector<int>& s_exps, detail::ExactDiffChain chain) {
  return detail::exact_batch_simd(level)->exact_diff_mismatches(A, x_lo, x_hi, s_exps.data(),
                                                                 static_cast<int>(s_exps.size()), chain);
}

// s across the split guard's exponent range
const std::vector<int> kExactDiffScaleExps = {127 - 100, 127 - 40, 127 - 3, 127, 127 + 1, 127 + 7, 127 + 40, 127 + 90};

TEST(FastGridSearch, ExactDiffSkipsOnlyIdentityRoundings) {
  // Where exact_diff_ok holds, the exact batch kernel leaves out the rounding of r - x
  // to bf16 (Sterbenz's lemma, exact_term-inl.h). For every bf16 x of the split
  // guard's range and every bf16 significand of s at exponents across it, on the
  // symmetric INT2 / INT4 / INT8 and the FP4 grids, |r - x| must equal the
  // integer-rounding chain's wherever |x| <= 2 bf16(q_top s). Without that bound
  // (clamped elements far above the top code) it does not: the check can fail.
  for_each_exact_diff_grid([](SimdLevel level, const detail::BlockKernelArgs& A, const std::string& what) {
    EXPECT_EQ(exact_diff_mismatches(level, A, 127 - 100, 127 + 100, kExactDiffScaleExps,
                                            detail::ExactDiffChain::kSkipRounding),
              0)
        << what;
    EXPECT_GT(exact_diff_mismatches(level, A, 127 - 3, 127 + 12, {127},
                                            detail::ExactDiffChain::kSkipRoundingUnbounded),
              0)
        << what;
  });
}

TEST(FastGridSearch, MagnitudeChainEqualsExactDiffChain) {
  // Where the exact batch kernel skips r - x's rounding and looks its terms up in the
  // table's f64 copy, it runs the chain on |x| (exact_diff_of_magnitude,
  // exact_term-inl.h): |r' - |x|| must equal the integer-rounding chain's |r - x| for
  // every bf16 x of the split guard's range and every bf16 significand of s at exponents
  // across it, on the symmetric INT2 / INT4 / INT8 and FP4 grids. Clamping both signs at
  // q_max (forgetting that INT grids reach one code further below zero) must fail.
  for_each_exact_diff_grid([](SimdLevel level, const detail::BlockKernelArgs& A, const std::string& what) {
    EXPECT_EQ(exact_diff_mismatches(level, A, 127 - 100, 127 + 100, kExactDiffScaleExps,
                                            detail::ExactDiffChain::kMagnitudes),
              0)
        << what;
    if (A.grid == qobs::detail::GridKind::kInt)
      EXPECT_GT(exact_diff_mismatches(level, A, 127 - 3, 127 + 12, {127},
                                              detail::ExactDiffChain::kMagnitudesOneBound),
                0)
          << what;
  });
}

TEST(FastGridSearch, ExactBatchKernelDecidesTiesAndOneUlpGaps) {
  // With bf16 errors (8 significant bits) candidates often tie, or differ by one ulp of
  // the sum. The data below must contain both at the reference's decisions (counted
  // from the reference's own errors), and the batch kernel must decide them as the
  // reference does.
  const QuantizationArgs a = make_args(4, QuantType::kInt, false, Strategy::kGroup, 16);
  const int64_t rows = 64, cols = 64;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    int64_t ties = 0, one_ulp = 0;
    for (uint32_t seed = 0; seed < 4; ++seed) {
      const Tensor t = Tensor::from_floats(dt, {rows, cols}, make_data(rows * cols, Pattern::kNormal, 100 + seed, 16));
      const FlatView flat = flatten_for_calibration(t.view(), "weight", a);
      GridSearchConfig cfg = mse_cfg();
      cfg.grid = 400.0;  // close candidates: many near-equal errors
      expect_search_matches("ties " + std::string(dtype_name(dt)), flat, a, cfg);
      // count the reference's close decisions
      const cpu::Plan P = cpu::make_plan(flat, a, cfg, nullptr, SimdLevel::kScalar);
      cpu::Scratch sc;
      for (auto* v : {&sc.m_scale, &sc.m_zp}) v->resize(static_cast<std::size_t>(P.S));
      std::vector<float> x(static_cast<std::size_t>(P.len)), scale(static_cast<std::size_t>(P.S)),
          zp(static_cast<std::size_t>(P.S));
      std::vector<double> errs(static_cast<std::size_t>(P.S));
      for (int64_t q = 0; q < flat.layout.num_qparams(); ++q) {
        flat.gather(q, x.data());
        double lo = INFINITY, hi = -INFINITY;
        for (float xv : x) {
          lo = qobs::detail::nan_min(lo, xv);
          hi = qobs::detail::nan_max(hi, xv);
        }
        P.shrunk.compute(static_cast<float>(P.a.mul(lo, cfg.expand)), static_cast<float>(P.a.mul(hi, cfg.expand)),
                         P.shrink_f32.data(), P.S, scale.data(), zp.data());
        std::copy(scale.begin(), scale.end(), sc.m_scale.begin());
        std::copy(zp.begin(), zp.end(), sc.m_zp.begin());
        cpu::scalar_errors(P, x.data(), nullptr, sc, errs.data());
        double best_err = P.em.initial_best();
        for (double e : errs) {
          ties += e == best_err;
          // the error dtype's next value below the best (positive, finite: pattern - 1)
          const double below = dt == DType::kBF16 ? bf16_to_float(static_cast<uint16_t>(double_to_bf16(best_err) - 1))
                                                  : f16_to_float(static_cast<uint16_t>(double_to_f16(best_err) - 1));
          one_ulp += best_err > 0 && e == below;
          best_err = std::min(best_err, e);
        }
      }
    }
    EXPECT_GT(ties, 0) << dtype_name(dt);
    EXPECT_GT(one_ulp, 0) << dtype_name(dt);
  }
}

TEST(FastGridSearch, ExactBatchKernelHandsNonFiniteGroupsBack) {
  // NaN / Inf anywhere in a batch: the batch is refused and its groups take the
  // one-group path, which follows the reference's arithmetic.
  const QuantizationArgs a = make_args(8, QuantType::kInt, false, Strategy::kGroup, 8);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    std::vector<float> v = make_data(37 * 32, Pattern::kNormal, 2);
    v[3] = NAN;
    v[200] = INFINITY;
    v[401] = -INFINITY;
    const Tensor t = Tensor::from_floats(dt, {37, 32}, v);
    const FlatView flat = flatten_for_calibration(t.view(), "weight", a);
    expect_search_matches("non-finite " + std::string(dtype_name(dt)), flat, a, mse_cfg());
    const SimdLevel best = available_simd_levels().back();
    if (best == SimdLevel::kScalar) continue;
    const GridSearchResult r = cpu::grid_search(flat, a, mse_cfg(), nullptr, best, 1);
    EXPECT_GT(r.groups_batched, 0) << dtype_name(dt);
    EXPECT_LT(r.groups_batched, flat.layout.num_qparams()) << dtype_name(dt);
  }
}

TEST(FastGridSearch, NonFiniteGroupsTakeTheReferencePath) {
  const QuantizationArgs a = make_args(8, QuantType::kInt, false, Strategy::kGroup, 8);
  std::vector<float> v = make_data(64, Pattern::kNormal, 2);
  v[3] = NAN;
  v[20] = INFINITY;
  v[41] = -3.0e38f;
  v[42] = 3.0e38f;
  const Tensor t = Tensor::from_floats(DType::kF32, {2, 32}, v);
  expect_search_matches("non-finite", flatten_for_calibration(t.view(), "weight", a), a, mse_cfg());
}

// ---- dispatch and threads -------------------------------------------------------------

TEST(SimdLevel, ScopedOverrideAndPublicEntryPoint) {
  const QuantizationArgs a = make_args(4, QuantType::kInt, true, Strategy::kGroup, 16);
  const Tensor t = Tensor::from_floats(DType::kF32, {8, 64}, make_data(512, Pattern::kNormal, 1));
  const FlatView flat = flatten_for_calibration(t.view(), "weight", a);
  const GridSearchResult ref = ref::grid_search(flat, a, mse_cfg());
  for (SimdLevel level : available_simd_levels()) {
    ScopedSimdLevel guard(level);
    EXPECT_EQ(active_simd_level(), level);
    EXPECT_EQ(diff(ref, grid_search(flat, a, mse_cfg())), "");
  }
}

TEST(ThreadPool, RethrowsTheLowestFailingTaskOnTheCaller) {
  for (int threads : {1, 2, 3}) {
    try {
      parallel_for(100, threads, [](int64_t task, int) {
        if (task == 17 || task == 60) throw std::runtime_error("task " + std::to_string(task));
      });
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "task 17");
    }
  }
  std::vector<int> hits(1000, 0);
  parallel_for(1000, 3, [&](int64_t t, int) { hits[static_cast<std::size_t>(t)] += 1; });
  for (int h : hits) EXPECT_EQ(h, 1);
  EXPECT_EQ(resolve_num_threads(5), 5);
  EXPECT_GE(resolve_num_threads(0), 1);
}

TEST(FirstNonFinite, FindsTheFirstInfOrNanInEveryFloatDtype) {
  // f32 / bf16 / f16 bit patterns: finite maxima and the largest exponent's neighbours
  // must not trigger, +-inf and NaNs must, at the lowest index, on 1 and 2 threads.
  struct Case {
    DType dt;
    std::vector<uint32_t> finite, bad;
  };
  const std::vector<Case> cases{
      {DType::kF32, {0x7F7FFFFFu, 0xFF7FFFFFu, 0x00000001u, 0x80000000u, 0x3F800000u}, {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFFFFFFFu, 0x7F800001u}},
      {DType::kBF16, {0x7F7Fu, 0xFF7Fu, 0x0001u, 0x8000u}, {0x7F80u, 0xFF80u, 0x7FC0u, 0xFFFFu}},
      {DType::kF16, {0x7BFFu, 0xFBFFu, 0x0001u, 0x8000u}, {0x7C00u, 0xFC00u, 0x7E00u, 0xFFFFu}}};
  for (const Case& c : cases)
    for (int64_t n : {int64_t{1}, int64_t{300}, int64_t{1} << 19}) {
      const std::size_t es = dtype_size(c.dt);
      std::vector<unsigned char> buf(static_cast<std::size_t>(n) * es);
      auto put = [&](int64_t i, uint32_t bits) { std::memcpy(buf.data() + static_cast<std::size_t>(i) * es, &bits, es); };
      for (int64_t i = 0; i < n; ++i) put(i, c.finite[static_cast<std::size_t>(i) % c.finite.size()]);
      const TensorView v(buf.data(), c.dt, {n});
      for (int threads : {1, 2}) EXPECT_EQ(first_non_finite(v, threads), -1) << dtype_name(c.dt) << " n=" << n;
      for (uint32_t bad : c.bad)
        for (int64_t at : {n - 1, n / 2, int64_t{0}}) {
          put(at, bad);
          if (at != n - 1) put(n - 1, bad);
          for (int threads : {1, 2}) EXPECT_EQ(first_non_finite(v, threads), at) << dtype_name(c.dt) << " n=" << n;
          for (int64_t i = 0; i < n; ++i) put(i, c.finite[static_cast<std::size_t>(i) % c.finite.size()]);
        }
    }
}

TEST(ThreadedQParams, EqualCalculateQParamsForAnyThreadCount) {
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
      {"mxfp4", make_args(4, QuantType::kFloat, true, Strategy::kGroup, 32, DType::kU8), nullptr, DType::kF32}};
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

TEST(VectorQParams, EqualScalarR41BitForBitAtEveryLevel) {
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
        case 0: a = b = 0.0f; break;                                   // zero range
        case 1: a = std::fabs(a), b = std::fabs(b); break;             // positive only
        case 2: a = -std::fabs(a), b = -std::fabs(b); break;           // negative only
        case 3: a = special[i % 9], b = special[(i / 9) % 9]; break;   // the edges
        case 4: b = a; break;                                          // min == max
        default: break;
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
  EXPECT_FALSE(cpu::calculate_qparams_simd(mn, mx, a, nullptr, NumericMode::kParity, available_simd_levels().back(), 1));
  EXPECT_THROW(calculate_qparams(mn, mx, a, nullptr, NumericMode::kParity, 1), InvalidArgument);
}

TEST(VectorQParams, NonFiniteStatisticAnywhereIsTheScalarPathsError) {
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

TEST(TableLookups, X86LookupsEqualPortableGathers) {
  // The x86 forms of the search kernels' table lookups (table_lookups_x86-inl.h: the
  // 16-entry permute lookup, and the f64 terms by scalar loads / a gather split) against
  // their portable Highway gathers, bit for bit: every 4-bit index in every lane
  // position (and indices whose higher bits are set, which both must ignore), and every
  // bf16 pattern of an error value as the f64 table's index, both signs.
  alignas(64) float table[16];
  for (int i = 0; i < 16; ++i) table[i] = std::ldexp(1.0f + 0.0625f * static_cast<float>(i), i - 7);
  std::vector<double> table64(65536);
  for (std::size_t i = 0; i < table64.size(); ++i) table64[i] = static_cast<double>(i) * 0.5 + 1.0 / (1.0 + static_cast<double>(i));
  int levels = 0;
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    ++levels;
    const detail::TableLookupsSimd& k = *detail::table_lookups_simd(level);
    const int64_t N = k.lanes();
    std::vector<int32_t> ef;
    for (int32_t hi : {0, 16, 0x7FF0, -16})
      for (int32_t i = 0; i < 16; ++i)
        for (int64_t l = 0; l < N; ++l) ef.push_back(hi + static_cast<int32_t>((i + l) % 16));
    std::vector<float> a(ef.size()), b(ef.size());
    k.exp_table16(table, ef.data(), static_cast<int64_t>(ef.size()), a.data(), false);
    k.exp_table16(table, ef.data(), static_cast<int64_t>(ef.size()), b.data(), true);
    for (std::size_t j = 0; j < ef.size(); ++j) {
      ASSERT_EQ(float_bits(a[j]), float_bits(b[j])) << to_string(level) << " ef=" << ef[j];
      ASSERT_EQ(float_bits(a[j]), float_bits(table[ef[j] & 15])) << to_string(level) << " ef=" << ef[j];
    }
    std::vector<float> e;
    for (uint32_t p = 0; p < 65536; ++p) e.push_back(bf16_to_float(static_cast<uint16_t>(p)));
    std::vector<double> x(e.size()), y(e.size());
    k.terms_f64(table64.data(), e.data(), static_cast<int64_t>(e.size()), x.data(), false);
    k.terms_f64(table64.data(), e.data(), static_cast<int64_t>(e.size()), y.data(), true);
    for (std::size_t j = 0; j < e.size(); ++j) {
      ASSERT_EQ(double_bits(x[j]), double_bits(y[j])) << to_string(level) << " j=" << j;
      // lane j of a vector holds the pattern of element j: its table entry
      ASSERT_EQ(double_bits(x[j]), double_bits(table64[j])) << to_string(level) << " j=" << j;
    }
  }
  if (levels == 0) GTEST_SKIP() << "no vector level on this machine";
}

}  // namespace
}  // namespace qobs::kernels
