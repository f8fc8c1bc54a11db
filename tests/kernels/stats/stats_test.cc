// The imatrix column sums, the report's error sums and the non-finite scan
// (kernels/stats) against their plain references at every level and thread count.
//
// Tolerance policy: none. Every implementation must give the plain reference's bits
// (the reference fixes a canonical summation order where one is needed; the vector
// |e|^norm replays libm's powf exactly, libm_powf.h).
#include <gtest/gtest.h>

#include "kernels/kernel_test_data.h"

namespace qobs::kernels {
namespace {

using namespace qobs::kernels::testdata;

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
          expect_column_sums_match(
              t.view(), cols, std::string(dtype_name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
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
          expect_error_sums_match(
              x.view(), y.view(),
              std::string(dtype_name(xt)) + "/" + std::string(dtype_name(yt)) + " n=" + std::to_string(n));
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

TEST(FirstNonFinite, FindsTheFirstInfOrNanInEveryFloatDtype) {
  // f32 / bf16 / f16 bit patterns: finite maxima and the largest exponent's neighbours
  // must not trigger, +-inf and NaNs must, at the lowest index, on 1 and 2 threads.
  struct Case {
    DType dt;
    std::vector<uint32_t> finite, bad;
  };
  const std::vector<Case> cases{
      {DType::kF32,
       {0x7F7FFFFFu, 0xFF7FFFFFu, 0x00000001u, 0x80000000u, 0x3F800000u},
       {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFFFFFFFu, 0x7F800001u}},
      {DType::kBF16, {0x7F7Fu, 0xFF7Fu, 0x0001u, 0x8000u}, {0x7F80u, 0xFF80u, 0x7FC0u, 0xFFFFu}},
      {DType::kF16, {0x7BFFu, 0xFBFFu, 0x0001u, 0x8000u}, {0x7C00u, 0xFC00u, 0x7E00u, 0xFFFFu}}};
  for (const Case& c : cases)
    for (int64_t n : {int64_t{1}, int64_t{300}, int64_t{1} << 19}) {
      const std::size_t es = dtype_size(c.dt);
      std::vector<unsigned char> buf(static_cast<std::size_t>(n) * es);
      auto put = [&](int64_t i, uint32_t bits) {
        std::memcpy(buf.data() + static_cast<std::size_t>(i) * es, &bits, es);
      };
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

}  // namespace
}  // namespace qobs::kernels
