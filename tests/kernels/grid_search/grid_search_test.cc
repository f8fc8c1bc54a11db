// The MSE grid search (kernels/grid_search): the CPU path at every SIMD level x thread
// counts {1, 2, 3} against the plain reference, every format, strategy, dtype, numeric
// mode and search variant; the exact and certified kernels' building blocks checked
// exhaustively where their proofs need it. Observers reject non-finite input, so the
// non-finite paths are reached by direct calls.
//
// Tolerance policy: none. Every implementation must give the plain reference's bits
// (the reference fixes a canonical summation order where one is needed; the vector
// |e|^norm replays libm's powf exactly, libm_powf.h).
#include <gtest/gtest.h>

#include "kernels/kernel_test_data.h"

namespace qobs::kernels {
namespace {

using namespace qobs::kernels::testdata;

// ---- grid search -------------------------------------------------------------------

TEST(GridSearchKernels, EveryFormatStrategyDtypeAndSize) {
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

TEST(GridSearchKernels, ModesVariantsAndNorms) {
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

TEST(GridSearchKernels, EarlyStoppingAndPatienceAcrossGroups) {
  // few groups and small patience: the tensor-wide counter stops the search early, so
  // the fast path must replay the stop from the per-candidate improvement flags
  const QuantizationArgs a = make_args(4, QuantType::kInt, true, Strategy::kGroup, 8);
  for (Pattern p : {Pattern::kNormal, Pattern::kZeroGroups, Pattern::kEqualGroups})
    for (int64_t patience : {0, 1, 2, 5}) {
      const Tensor t =
          Tensor::from_floats(DType::kF32, {2, 16}, make_data(32, p, 5 + static_cast<uint32_t>(patience), 8));
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

/// memoryless_mse / mse on FP6 (MXFP6 groups of 32, FP6 per channel and in groups of
/// 16): the CPU path (every SIMD level, 1-3 threads, batched or not) against the plain
/// reference on tails, the E2M3 grid's ties and saturation, all-zero and all-equal
/// groups, subnormals and huge ranges, and (direct calls: observers reject them) NaN
/// and Inf. FP6 must take the vector kernels, not fall back to the scalar loop.
TEST(GridSearchKernels, Fp6EdgeDataEqualsReference) {
  auto fp6_grid_floats = [](int64_t n, uint32_t seed) {
    const std::vector<double> d = qobs::testing::fp6_grid_values(n, seed);
    return std::vector<float>(d.begin(), d.end());
  };
  const std::vector<Format> fmts = {
      {"mxfp6_group32", make_args(6, QuantType::kFloat, true, Strategy::kGroup, 32, DType::kU8)},
      {"fp6_channel", make_args(6, QuantType::kFloat, true, Strategy::kChannel)},
      {"fp6_group16", make_args(6, QuantType::kFloat, true, Strategy::kGroup, 16)}};
  const SimdLevel best = available_simd_levels().back();
  int64_t batched = 0;
  for (const Format& fmt : fmts)
    for (int64_t cols : {16, 32, 96, 160, 1, 7, 17, 33, 131}) {
      if (fmt.args.group_size && cols % *fmt.args.group_size != 0) continue;
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
        for (int kind = 0; kind < 8; ++kind) {
          const int64_t rows = 3, n = rows * cols;
          std::vector<float> v = kind < 7 ? make_data(n, static_cast<Pattern>(kind), static_cast<uint32_t>(cols + kind))
                                          : fp6_grid_floats(n, static_cast<uint32_t>(cols));
          if (kind == static_cast<int>(Pattern::kHugeRange) && dt == DType::kF16)
            for (float& x : v) x = std::clamp(x, -6e4f, 6e4f);
          const Tensor t = Tensor::from_floats(dt, {rows, cols}, v);
          const FlatView flat = flatten_for_calibration(t.view(), "weight", fmt.args);
          const std::string what = fmt.name + " cols=" + std::to_string(cols) + " " + std::string(dtype_name(dt)) +
                                   " kind=" + std::to_string(kind);
          expect_search_matches(what, flat, fmt.args, mse_cfg());
          GridSearchConfig c = mse_cfg();
          c.norm = 2.0;
          expect_search_matches(what + " norm=2", flat, fmt.args, c);
          if (best != SimdLevel::kScalar) {
            EXPECT_TRUE(cpu::make_plan(flat, fmt.args, mse_cfg(), nullptr, best).vec.simd) << what;
            batched += cpu::grid_search(flat, fmt.args, mse_cfg(), nullptr, best, 1).groups_batched;
          }
        }
    }
  // NaN and +-Inf in a group, at the start, the middle and a vector tail
  for (const Format& fmt : fmts)
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
      for (float bad : {NAN, INFINITY, -INFINITY})
        for (int64_t at : {0, 13, 95}) {
          std::vector<float> v = fp6_grid_floats(3 * 96, 5);
          v[static_cast<std::size_t>(96 + at)] = bad;
          const Tensor t = Tensor::from_floats(dt, {3, 96}, v);
          const FlatView flat = flatten_for_calibration(t.view(), "weight", fmt.args);
          expect_search_matches(fmt.name + " " + std::string(dtype_name(dt)) + " non-finite " + std::to_string(bad) +
                                    " at " + std::to_string(at),
                                flat, fmt.args, mse_cfg());
        }
  // bf16 / f16 FP6 without MX scales is decided one group per lane (the exact batch)
  if (best != SimdLevel::kScalar) EXPECT_GT(batched, 0);
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
      {"fp6_g16", make_args(6, QuantType::kFloat, true, Strategy::kGroup, 16), 48, 16},
  };
}

TEST(GridSearchKernels, BatchKernelMatchesReferenceOnManyGroups) {
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
        const std::string what =
            c.name + " rows=" + std::to_string(rows) + " pattern=" + std::to_string(static_cast<int>(p));
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

TEST(GridSearchKernels, BatchKernelFp4RoundingEqualsTheIntervalTable) {
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

TEST(GridSearchKernels, BlockBoundaryOfCanonicalSum) {
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

TEST(GridSearchKernels, ActivationLayoutsWithManyObservations) {
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

TEST(GridSearchKernels, ImatrixWeighted) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const QuantizationArgs& a :
         {make_args(4, QuantType::kInt, true, Strategy::kGroup, 16),
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

TEST(GridSearchKernels, VectorTermsEqualTheReferenceTermsBitForBit) {
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
      {"fp6", make_args(6, QuantType::kFloat, true, Strategy::kChannel)},
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
              for (float f : {1.0f, 0.93f, 0.81f, 0.6f})
                scales.push_back(bf16_to_float(float_to_bf16(amax * f / q_top)));
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

TEST(GridSearchKernels, ExactBatchKernelMatchesReferenceOn16BitData) {
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
          if (c.args.is_fp4())
            expect_search_matches(what + " expanded imatrix", flat, sargs, expanded_imatrix_cfg(), &wf);
          batched += cpu::grid_search(flat, sargs, mse_cfg(), nullptr, best, 2).groups_batched;
        }
  if (best != SimdLevel::kScalar) EXPECT_GT(batched, 0) << "the exact batch kernel never ran";
}

TEST(GridSearchKernels, SplitNarrowingEqualsIntegerRneOnEveryNormalFloat) {
  // The exact kernels round to bf16 by Veltkamp's splitting where their guard holds (every
  // value rounded is 0 or normal below 2^110): every such float, both signs, must round
  // as the integer RNE does. Outside the range it may not, which the guard is for
  // (and this shows the check can fail).
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    EXPECT_EQ(detail::exact_batch_simd(level)->split_narrowing_mismatches(0, 1), 0) << "zero, " << to_string(level);
    EXPECT_EQ(detail::exact_batch_simd(level)->split_narrowing_mismatches(0x00800000u, (127u + 110u) << 23), 0)
        << to_string(level);
    EXPECT_GT(detail::exact_batch_simd(level)->split_narrowing_mismatches(1, 0x00800000u), 0)
        << "subnormals, " << to_string(level);
  }
}

/// ExactBatchSimd::split_division_mismatches at one s exponent.
int64_t split_division_one(SimdLevel level, int x_lo, int x_hi, int s_exp, bool rounded) {
  return detail::exact_batch_simd(level)->split_division_mismatches(x_lo, x_hi, &s_exp, 1, rounded);
}

TEST(GridSearchKernels, SplitQuotientEqualsRoundedDivisionOnBf16Operands) {
  // Where the bf16 split guard holds, the exact kernels round x / s to bf16 from the
  // product x (1 / s). For every bf16 x of the guard's range (2^-100..2^100, both signs)
  // and every bf16 significand of s at exponents across the guard's range
  // (2^-100..2^90), it must round to the f32 division's bf16 value wherever the quotient
  // is normal. The product itself is not the f32 division (the check can fail).
  const std::vector<int> s_exps = {127 - 100, 127 - 40, 127 - 3, 127, 127 + 1, 127 + 7, 127 + 40, 127 + 90};
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    EXPECT_EQ(detail::exact_batch_simd(level)->split_division_mismatches(127 - 100, 127 + 100, s_exps.data(),
                                                                         static_cast<int>(s_exps.size()), true),
              0)
        << to_string(level);
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

TEST(GridSearchKernels, ExactDiffSkipsOnlyIdentityRoundings) {
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
    EXPECT_GT(exact_diff_mismatches(level, A, 127 - 3, 127 + 12, {127}, detail::ExactDiffChain::kSkipRoundingUnbounded),
              0)
        << what;
  });
}

TEST(GridSearchKernels, MagnitudeChainEqualsExactDiffChain) {
  // Where the exact batch kernel skips r - x's rounding and looks its terms up in the
  // table's f64 copy, it runs the chain on |x| (exact_diff_of_magnitude,
  // exact_term-inl.h): |r' - |x|| must equal the integer-rounding chain's |r - x| for
  // every bf16 x of the split guard's range and every bf16 significand of s at exponents
  // across it, on the symmetric INT2 / INT4 / INT8 and FP4 grids. Clamping both signs at
  // q_max (forgetting that INT grids reach one code further below zero) must fail.
  for_each_exact_diff_grid([](SimdLevel level, const detail::BlockKernelArgs& A, const std::string& what) {
    EXPECT_EQ(
        exact_diff_mismatches(level, A, 127 - 100, 127 + 100, kExactDiffScaleExps, detail::ExactDiffChain::kMagnitudes),
        0)
        << what;
    if (A.grid == qobs::detail::GridKind::kInt)
      EXPECT_GT(exact_diff_mismatches(level, A, 127 - 3, 127 + 12, {127}, detail::ExactDiffChain::kMagnitudesOneBound),
                0)
          << what;
  });
}

TEST(GridSearchKernels, ExactBatchKernelDecidesTiesAndOneUlpGaps) {
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

TEST(GridSearchKernels, ExactBatchKernelHandsNonFiniteGroupsBack) {
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

TEST(GridSearchKernels, NonFiniteGroupsTakeTheReferencePath) {
  const QuantizationArgs a = make_args(8, QuantType::kInt, false, Strategy::kGroup, 8);
  std::vector<float> v = make_data(64, Pattern::kNormal, 2);
  v[3] = NAN;
  v[20] = INFINITY;
  v[41] = -3.0e38f;
  v[42] = 3.0e38f;
  const Tensor t = Tensor::from_floats(DType::kF32, {2, 32}, v);
  expect_search_matches("non-finite", flatten_for_calibration(t.view(), "weight", a), a, mse_cfg());
}

}  // namespace
}  // namespace qobs::kernels
