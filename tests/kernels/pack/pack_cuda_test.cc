// The CUDA row packing's bodies (pack_cuda.h) run on the CPU over every output word /
// byte (cuda/host_grid.h) against the plain references: every width 1..8 and shape
// around the word boundaries, FP4 in every float dtype with -0, and the first bad
// value found as the reference finds it.
//
// Tolerance policy: none; the packed bytes must be the reference's.
#include <gtest/gtest.h>

#include <random>

#include "kernels/cuda/host_grid.h"
#include "kernels/kernels.h"
#include "kernels/pack/pack_cuda.h"
#include "qparams/packing_rows.h"
#include "test_util.h"

namespace qobs::kernels {
namespace {

using cuda::testing::HostMinU64;
using qobs::testing::describe_difference;

TEST(PackCuda, IntRowBodiesEqualTheReference) {
  std::mt19937 rng(51);
  for (int bits = 1; bits <= 8; ++bits)
    for (int64_t cols : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 129})
      for (int64_t rows : {1, 3}) {
        std::uniform_int_distribution<int> u(-(1 << (bits - 1)), (1 << (bits - 1)) - 1);
        std::vector<double> v(static_cast<std::size_t>(rows * cols));
        for (double& x : v) x = u(rng);
        const Tensor q = Tensor::from_values(DType::kI8, {rows, cols}, v);
        const Tensor want = ref::pack_int_rows(q, bits, "w");
        cuda::PackIntArgs a;
        a.q = q.data_as<int8_t>();
        a.rows = rows;
        a.cols = cols;
        a.bits = bits;
        a.words = qobs::detail::packed_words(cols, bits);
        Tensor got = Tensor::uninitialized(DType::kI32, want.shape());
        a.out = got.data_as<uint32_t>();
        unsigned long long bad = ~0ull;
        a.first_bad = &bad;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t w = 0; w < a.words; ++w) cuda::pack_int_word(a, r, w, HostMinU64{});
        const std::string what =
            "bits " + std::to_string(bits) + " " + std::to_string(rows) + "x" + std::to_string(cols);
        EXPECT_EQ(bad, ~0ull) << what;
        ASSERT_EQ(describe_difference(want, got), "") << what;
      }
}

TEST(PackCuda, IntRowBodiesReportTheFirstBadValue) {
  std::vector<double> v(4 * 40, 1.0);
  v[2 * 40 + 5] = 9;
  v[3 * 40 + 1] = -9;
  const Tensor q = Tensor::from_values(DType::kI8, {4, 40}, v);
  cuda::PackIntArgs a;
  a.q = q.data_as<int8_t>();
  a.rows = 4;
  a.cols = 40;
  a.bits = 4;
  a.words = qobs::detail::packed_words(40, 4);
  std::vector<uint32_t> out(static_cast<std::size_t>(4 * a.words));
  a.out = out.data();
  unsigned long long bad = ~0ull;
  a.first_bad = &bad;
  for (int64_t t = a.rows * a.words; t-- > 0;) cuda::pack_int_word(a, t / a.words, t % a.words, HostMinU64{});
  EXPECT_EQ(bad, 2u * 40 + 5);
}

TEST(PackCuda, Fp4ByteBodiesEqualTheReference) {
  static constexpr double kGrid[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  std::mt19937 rng(61);
  std::uniform_int_distribution<int> u(0, 15);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64})
    for (int64_t n : {2, 16, 18, 64, 4098}) {
      std::vector<double> v(static_cast<std::size_t>(n));
      for (double& x : v) {
        const int c = u(rng);
        x = (c & 8 ? -1.0 : 1.0) * kGrid[c & 7];  // -0.0 included
      }
      const Tensor q = Tensor::from_values(dt, {n}, v);
      const Tensor want = ref::pack_fp4(q, "w");
      Tensor got = Tensor::uninitialized(DType::kU8, want.shape());
      unsigned long long bad = ~0ull;
      cuda::PackFp4Args a{q.data(), dt, n, got.data_as<uint8_t>(), &bad};
      for (int64_t b = 0; b < n / 2; ++b) cuda::pack_fp4_byte(a, b, HostMinU64{});
      EXPECT_EQ(bad, ~0ull);
      ASSERT_EQ(describe_difference(want, got), "") << dtype_name(dt) << " n=" << n;
    }
  // off the grid: 0.7, NaN, 7
  for (double off : {0.7, static_cast<double>(NAN), 7.0}) {
    const Tensor q = Tensor::from_values(DType::kF32, {6}, {0.5, 1.0, -2.0, off, 6.0, off});
    EXPECT_THROW(ref::pack_fp4(q, "w"), InvalidArgument);
    std::vector<uint8_t> out(3);
    unsigned long long bad = ~0ull;
    cuda::PackFp4Args a{q.data(), DType::kF32, 6, out.data(), &bad};
    for (int64_t b = 3; b-- > 0;) cuda::pack_fp4_byte(a, b, HostMinU64{});
    EXPECT_EQ(bad, 3u) << off;
  }
}

}  // namespace
}  // namespace qobs::kernels
