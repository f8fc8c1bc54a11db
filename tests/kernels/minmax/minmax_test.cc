// Min-max (kernels/minmax): the CPU path at every SIMD level x thread counts {1, 2, 3}
// against the plain reference, on many shapes, dtypes, NaN / Inf and zero signs; the
// x86 key passes against their portable twin; the statistics tensors and extremes.
//
// Tolerance policy: none. Every implementation must give the plain reference's bits
// (the reference fixes a canonical summation order where one is needed; the vector
// |e|^norm replays libm's powf exactly, libm_powf.h).
#include <gtest/gtest.h>

#include "kernels/kernel_test_data.h"

namespace qobs::kernels {
namespace {

using namespace qobs::kernels::testdata;

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

TEST(MinMaxKernels, MatchesReferenceEverywhere) {
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

TEST(MinMaxKernels, SmallGroupsEightAtATime) {
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
            expect_minmax_matches(
                flatten_for_calibration(t.view(), "weight", c.args),
                std::string(dtype_name(dt)) + " rows=" + std::to_string(rows) + " poison=" + std::to_string(poison));
          }
}

TEST(MinMaxKernels, GroupsOfSixteenBitPatternsEqualScalarMinMax) {
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
            if (poison == 1) x[at] = static_cast<uint16_t>(inf | 1);              // +NaN
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

TEST(MinMaxKernels, X86KeyPassesEqualPortableEightGroupPasses) {
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

TEST(MinMaxKernels, StatisticsTensorsEqualFromFloatsOfReference) {
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

TEST(MinMaxKernels, ObserverTakesTheKernelsReadBackExtremes) {
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

TEST(MinMaxKernels, Narrow16EqualsTensorStores) {
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
  for (float x : {0.0f, -0.0f, 1.00390625f, 1.01171875f, 65520.0f, 65519.0f, 3.4e38f, -3.4e38f, 1e-45f, 6e-8f, 3e-8f,
                  INFINITY, -INFINITY, NAN, -NAN, 0x1.fffffep127f})
    v.push_back(x);
  for (bool bf16 : {true, false}) {
    const Tensor expect = Tensor::from_floats(bf16 ? DType::kBF16 : DType::kF16, {static_cast<int64_t>(v.size())}, v);
    for (SimdLevel level : available_simd_levels()) {
      if (level == SimdLevel::kScalar) continue;
      for (std::size_t n : {v.size(), v.size() - 3, std::size_t{5}}) {
        std::vector<uint16_t> got(n);
        detail::convert_simd(level)->narrow16(v.data(), static_cast<int64_t>(n), bf16, got.data());
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_EQ(got[i], expect.data_as<uint16_t>()[i])
              << (bf16 ? "bf16" : "f16") << " i=" << i << " x=" << v[i] << " " << to_string(level);
      }
    }
  }
}

TEST(MinMaxKernels, WholeTensorMinMaxForTheGlobalScale) {
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

TEST(MinMaxKernels, NanAndInfPropagateLikeReference) {
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

TEST(MinMaxKernels, ActivationBatchAsOneGroup) {
  // A static activation scale (tensor strategy on an "input" view) is one group whose
  // observations are the tokens: the kernel reads it in place as one range split over
  // threads, bf16 / f16 widened chunk by chunk. Sizes around the split threshold
  // (2^16), the 4096-element chunk and the part boundaries; zero signs; NaN / Inf
  // anywhere, including a chunk's last element.
  for (const QuantizationArgs& a : {make_args(8, QuantType::kInt, true, Strategy::kTensor),
                                    make_args(8, QuantType::kFloat, false, Strategy::kTensor)})
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
      for (const Shape& shape :
           {Shape{16, 4096}, Shape{257, 255}, Shape{2, 3, 11001}, Shape{65, 1009}, Shape{64, 512}, Shape{3, 5, 7}})
        for (Pattern p :
             {Pattern::kNormal, Pattern::kSignedZeros, Pattern::kZeroGroups, Pattern::kPositive, Pattern::kEqualGroups})
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

TEST(MinMaxKernels, ActivationGroupsAcrossTokens) {
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

}  // namespace
}  // namespace qobs::kernels
