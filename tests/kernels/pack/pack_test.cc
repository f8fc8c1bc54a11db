// The row packing kernels (kernels/pack: R8.3.1 INT rows, R8.5.1 FP4) against their
// plain references, bit for bit, at every SIMD level x thread counts {1, 2, 3}: every
// width and shape, range errors that name the first bad value, and the vector FP4
// packer against the code table on every 16-bit pattern.
//
// Tolerance policy: none. Results must have the reference's dtype, shape and bytes;
// errors must carry the reference's message.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/pack/pack_simd.h"
#include "kernels/simd/simd_level.h"
#include "qobs/qobs.h"
#include "test_util.h"

namespace qobs::kernels {
namespace {

using qobs::testing::describe_difference;
using qobs::testing::expect_error;

void expect_same_tensor(const Tensor& expected, const Tensor& got, const std::string& what) {
  ASSERT_EQ(describe_difference(expected, got), "") << what;
}

TEST(PackingKernels, IntRowsEveryWidthAndShape) {
  std::mt19937 rng(51);
  for (int bits = 1; bits <= 8; ++bits)
    for (int64_t cols : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 4097})
      for (int64_t rows : {1, 3, 37}) {
        if (cols > 1000 && rows > 3) continue;
        std::uniform_int_distribution<int> u(-(1 << (bits - 1)), (1 << (bits - 1)) - 1);
        std::vector<double> v(static_cast<std::size_t>(rows * cols));
        for (double& x : v) x = u(rng);
        const Tensor q = Tensor::from_values(DType::kI8, {rows, cols}, v);
        const Tensor packed = ref::pack_int_rows(q, bits, "w");
        const std::string what =
            "bits " + std::to_string(bits) + " shape " + std::to_string(rows) + "x" + std::to_string(cols);
        for (int threads : {1, 2, 3}) {
          expect_same_tensor(packed, pack_int_rows(q, bits, "w", threads), "pack " + what);
          expect_same_tensor(ref::unpack_int_rows(packed, bits, cols, "w"),
                             unpack_int_rows(packed, bits, cols, "w", threads), "unpack " + what);
        }
      }
  // many rows: more than one parallel task
  std::uniform_int_distribution<int> u(-8, 7);
  std::vector<double> v(300 * 1000);
  for (double& x : v) x = u(rng);
  const Tensor q = Tensor::from_values(DType::kI8, {3, 100, 1000}, v);
  for (int threads : {1, 2, 3})
    expect_same_tensor(ref::pack_int_rows(q, 4, "w"), pack_int_rows(q, 4, "w", threads), "3-D");
}

TEST(PackingKernels, IntRowsRangeErrorNamesFirstBadValue) {
  // two bad values in different tasks: the first one (row 70) is reported, as by the
  // reference, whatever the thread count
  std::vector<double> v(200 * 1000, 1.0);
  v[70 * 1000 + 5] = 9;
  v[150 * 1000 + 1] = -9;
  const Tensor q = Tensor::from_values(DType::kI8, {200, 1000}, v);
  for (int bits : {3, 4})
    for (int threads : {1, 2, 3})
      expect_error<InvalidArgument>([&] { pack_int_rows(q, bits, "layer.w", threads); },
                                    {"layer.w", "value 9", "row 70", "index 5", "R8.3.1"});
  expect_error<InvalidArgument>([&] { pack_int_rows(q, 9, "layer.w", 2); }, {"layer.w", "1..8 bits"});
  expect_error<ShapeError>([&] { unpack_int_rows(Tensor(DType::kI32, {2, 3}), 4, 8, "p", 2); }, {"p", "expected 1"});
}

TEST(PackingKernels, Fp4RoundTripAndErrors) {
  static constexpr double kGrid[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  std::mt19937 rng(61);
  std::uniform_int_distribution<int> u(0, 15);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64})
    for (int64_t cols : {2, 16, 18, 64, 4098})
      for (int64_t rows : {1, 5, 40}) {
        if (cols > 1000 && rows > 5) continue;
        std::vector<double> v(static_cast<std::size_t>(rows * cols));
        for (double& x : v) {
          const int c = u(rng);
          x = (c & 8 ? -1.0 : 1.0) * kGrid[c & 7];  // -0.0 included
        }
        const Tensor q = Tensor::from_values(dt, {rows, cols}, v);
        const Tensor packed = ref::pack_fp4(q, "w");
        for (int threads : {1, 2, 3}) {
          expect_same_tensor(packed, pack_fp4(q, "w", threads), "pack_fp4 " + std::string(dtype_name(dt)));
          for (DType od : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64})
            expect_same_tensor(ref::unpack_fp4(packed, od, "w"), unpack_fp4(packed, od, "w", threads),
                               "unpack_fp4 " + std::string(dtype_name(od)));
        }
      }
  std::vector<double> v(100 * 2000, 1.0);
  v[60 * 2000 + 3] = 2.5;
  v[90 * 2000] = NAN;
  v[60 * 2000 + 2] = 0.25;  // on the bf16 / f16 grids, not on E2M1's
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64}) {
    const Tensor bad = Tensor::from_values(dt, {100, 2000}, v);
    for (int threads : {1, 2, 3})
      expect_error<InvalidArgument>([&] { pack_fp4(bad, "layer.w", threads); },
                                    {"layer.w", "element 120002", "0.25", "R8.5.1"});
  }
}

TEST(PackingKernels, Fp4VectorPackingEqualsTheCodeTableOnEveryPattern) {
  // pack_fp4_16_simd against ref::pack_fp4 on every bf16 / f16 pattern: each one sits in
  // a row of E2M1 values, at an even and an odd position and in the vector body and the
  // tail; an E2M1 value packs to the reference's bytes, anything else (off-grid values,
  // subnormals, NaN, Inf) makes the call return false.
  std::vector<SimdLevel> levels;
  for (SimdLevel level : available_simd_levels())
    if (level != SimdLevel::kScalar) levels.push_back(level);
  if (levels.empty()) GTEST_SKIP() << "no vector level on this machine";
  static constexpr double kGrid[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (DType dt : {DType::kBF16, DType::kF16}) {
    const bool bf16 = dt == DType::kBF16;
    // a row of all 16 codes twice, then 38 more (a tail after 64 lanes)
    constexpr int64_t kLen = 70;
    std::vector<double> base(kLen);
    for (int64_t i = 0; i < kLen; ++i)
      base[static_cast<std::size_t>(i)] = ((i * 7) & 8 ? -1.0 : 1.0) * kGrid[(i * 5) & 7];
    const Tensor row = Tensor::from_values(dt, {kLen}, base);
    int64_t valid = 0;
    for (uint32_t p = 0; p < 65536; ++p)
      for (int64_t at : {int64_t{3}, int64_t{40}, kLen - 2}) {
        Tensor t = Tensor::copy_of(row.view());
        t.data_as<uint16_t>()[at] = static_cast<uint16_t>(p);
        std::optional<Tensor> expect;
        try {
          expect = ref::pack_fp4(t, "w");
        } catch (const InvalidArgument&) {
        }
        valid += expect.has_value();
        for (SimdLevel level : levels) {
          std::vector<uint8_t> got(kLen / 2);
          const bool ok = detail::pack_simd(level)->fp4_16(t.data_as<uint16_t>(), kLen, bf16, got.data());
          ASSERT_EQ(ok, expect.has_value())
              << std::string(dtype_name(dt)) << " pattern " << p << " at " << at << " " << to_string(level);
          if (ok)
            ASSERT_EQ(0, std::memcmp(got.data(), expect->data(), got.size()))
                << std::string(dtype_name(dt)) << " pattern " << p << " at " << at << " " << to_string(level);
        }
      }
    EXPECT_EQ(valid, 3 * 16) << std::string(dtype_name(dt));  // exactly the 16 codes (both zeros) pack
  }
}

}  // namespace
}  // namespace qobs::kernels
