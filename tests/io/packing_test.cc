// Packing for compressed-tensors (RULES §8.3, §8.5, §8.6) against the rules' literal
// examples, plus round trips over every code and bit width.
#include "qobs/packing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "qobs/error.h"
#include "qobs/formats.h"
#include "qparams/packing_rows.h"

namespace qobs {
namespace {

Tensor i8(Shape shape, std::initializer_list<double> v) { return Tensor::from_values(DType::kI8, std::move(shape), v); }

std::vector<uint32_t> words(const Tensor& t) {
  std::vector<uint32_t> w(static_cast<std::size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    w[static_cast<std::size_t>(i)] = static_cast<uint32_t>(t.data_as<int32_t>()[i]);
  return w;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = t.data_as<uint8_t>();
  return {p, p + t.nbytes()};
}

TEST(Packing, R8_3_1_Int4Examples) {
  Tensor a = pack_int_rows(i8({8}, {1, 2, 3, 4, 5, 6, 7, 0}), 4);
  EXPECT_EQ(a.dtype(), DType::kI32);
  EXPECT_EQ(a.shape(), Shape({1}));
  EXPECT_EQ(words(a)[0], 0x8FEDCBA9u);
  EXPECT_EQ(a.data_as<int32_t>()[0], -1880241239);  // stored as signed int32

  Tensor b = pack_int_rows(i8({8}, {-1, -2, -3, -4, -5, -6, -7, -8}), 4);
  EXPECT_EQ(b.data_as<int32_t>()[0], 19088743);  // 0x01234567

  Tensor c = pack_int_rows(i8({2, 2}, {1, 2, 3, 4}), 4);
  EXPECT_EQ(c.shape(), Shape({2, 1}));
  EXPECT_EQ(c.data_as<int32_t>()[0], 169);
  EXPECT_EQ(c.data_as<int32_t>()[1], 203);
}

TEST(Packing, R8_3_1_Int8Example) {
  Tensor p = pack_int_rows(i8({8}, {10, 15, 20, 25, 30, 35, 40, 45}), 8);
  EXPECT_EQ(words(p), (std::vector<uint32_t>{0x99948F8Au, 0xADA8A39Eu}));
}

TEST(Packing, R8_3_1_Int3StraddlesWords) {
  Tensor p = pack_int_rows(i8({11}, {-3, -2, -1, 0, 1, 2, 3, -4, 1, 1, 1}), 3);
  EXPECT_EQ(p.shape(), Shape({2}));  // ceil(11 * 3 / 32) = 2
  EXPECT_EQ(words(p), (std::vector<uint32_t>{0x6D1F58D1u, 0x00000001u}));
}

TEST(Packing, R8_3_1_RoundTripEveryBitWidthAndValue) {
  std::mt19937 gen(3);
  for (int b = 1; b <= 8; ++b) {
    const int lo = -(1 << (b - 1)), hi = (1 << (b - 1)) - 1;
    for (int64_t cols : {1, 2, 3, 7, 31, 32, 33, 65}) {
      std::uniform_int_distribution<int> d(lo, hi);
      std::vector<double> v(static_cast<std::size_t>(3 * cols));
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = i < static_cast<std::size_t>(hi - lo + 1) ? lo + int(i) : d(gen);
      const Tensor q = Tensor::from_values(DType::kI8, {3, cols}, v);
      const Tensor p = pack_int_rows(q, b);
      ASSERT_EQ(p.shape(), Shape({3, (cols * b + 31) / 32}));
      // unused high bits of the last word stay 0
      const int used = static_cast<int>((cols * b) % 32);
      if (used != 0) {
        EXPECT_EQ(words(p)[static_cast<std::size_t>(p.shape()[1] - 1)] >> used, 0u) << b << " " << cols;
      }
      EXPECT_TRUE(unpack_int_rows(p, b, cols).bit_equal(q)) << "bits " << b << " cols " << cols;
    }
  }
}

TEST(Packing, R8_3_6_RejectsBadInput) {
  EXPECT_THROW(pack_int_rows(i8({2}, {1, 2}), 9), InvalidArgument);
  EXPECT_THROW(pack_int_rows(i8({2}, {1, 2}), 0), InvalidArgument);
  EXPECT_THROW(pack_int_rows(Tensor::from_values(DType::kI32, {2}, {1, 2}), 4), InvalidArgument);
  EXPECT_THROW(pack_int_rows(i8({2}, {8, 0}), 4), InvalidArgument);  // 8 is outside int4
  EXPECT_THROW(unpack_int_rows(Tensor(DType::kI32, {2, 3}), 4, 8), ShapeError);
}

TEST(Packing, R8_3_4_ZeroPointsAlongDim0) {
  Tensor p = pack_zero_points(i8({3, 2}, {1, -1, 2, -2, 3, -3}), 4);
  EXPECT_EQ(p.shape(), Shape({1, 2}));
  EXPECT_EQ(p.data_as<int32_t>()[0], 2985);
  EXPECT_EQ(p.data_as<int32_t>()[1], 1383);
  EXPECT_TRUE(unpack_zero_points(p, 4, 3).bit_equal(i8({3, 2}, {1, -1, 2, -2, 3, -3})));
  // 9 rows of 4 bits need two words per column
  std::vector<double> v;
  for (int i = 0; i < 18; ++i) v.push_back((i % 16) - 8);
  const Tensor z = Tensor::from_values(DType::kI8, {9, 2}, v);
  const Tensor pz = pack_zero_points(z, 4);
  EXPECT_EQ(pz.shape(), Shape({2, 2}));
  EXPECT_TRUE(unpack_zero_points(pz, 4, 9).bit_equal(z));
}

TEST(Packing, R8_5_1_Fp4Examples) {
  const auto pack = [](std::initializer_list<double> v) {
    return bytes_of(pack_fp4(Tensor::from_values(DType::kF32, {static_cast<int64_t>(v.size())}, v)));
  };
  EXPECT_EQ(pack({0, 0.5, 1, 1.5, 2, 3, 4, 6}), (std::vector<uint8_t>{0x10, 0x32, 0x54, 0x76}));
  EXPECT_EQ(pack({-0.5, -1, -1.5, -2, -3, -4, -6, -0.0}), (std::vector<uint8_t>{0xA9, 0xCB, 0xED, 0x8F}));
  EXPECT_EQ(pack({0, -0.5, 1, -1.5, 2, -3, 4, -6}), (std::vector<uint8_t>{0x90, 0xB2, 0xD4, 0xF6}));
}

TEST(Packing, Q17_SignOfZeroIsTheSignBit) {
  // pack_fp4 encodes the sign bit as given: -0.0 -> code 8, +0.0 -> code 0. Which zeros
  // are negative is decided by quantize() (R8.5.6), checked in the round-trip tests.
  const Tensor q = Tensor::from_values(DType::kBF16, {2}, {-0.0, 0.0});
  EXPECT_EQ(bytes_of(pack_fp4(q)), (std::vector<uint8_t>{0x08}));
  const Tensor back = unpack_fp4(pack_fp4(q), DType::kBF16);
  EXPECT_TRUE(std::signbit(back.get(0)));
  EXPECT_FALSE(std::signbit(back.get(1)));
}

TEST(Packing, R8_5_1_AllSixteenCodesRoundTrip) {
  std::vector<double> v;
  for (int c = 0; c < 16; ++c) v.push_back(fp4_value(static_cast<uint8_t>(c)));
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tensor q = Tensor::from_values(dt, {2, 8}, v);
    const Tensor p = pack_fp4(q);
    ASSERT_EQ(p.shape(), Shape({2, 4}));
    for (int c = 0; c < 16; ++c) {
      const uint8_t byte = p.data_as<uint8_t>()[c / 2];
      EXPECT_EQ(c % 2 == 0 ? byte & 0xF : byte >> 4, c);
    }
    EXPECT_TRUE(unpack_fp4(p, dt).bit_equal(q));
  }
}

TEST(Packing, R8_5_1_RejectsOddColumnsAndOffGrid) {
  EXPECT_THROW(pack_fp4(Tensor::from_values(DType::kF32, {3}, {0, 1, 2})), InvalidArgument);
  EXPECT_THROW(pack_fp4(Tensor::from_values(DType::kF32, {2}, {0, 2.5})), InvalidArgument);
  EXPECT_THROW(pack_fp4(Tensor::from_values(DType::kF32, {2}, {0, NAN})), InvalidArgument);
  EXPECT_THROW(pack_fp4(Tensor::from_values(DType::kI8, {2}, {0, 1})), InvalidArgument);
}

TEST(Packing, R8_6_2_E8M0Example) {
  const Tensor codes = encode_e8m0(Tensor::from_values(DType::kBF16, {1, 2}, {0.25, 0.5}));
  EXPECT_EQ(codes.dtype(), DType::kU8);
  EXPECT_EQ(bytes_of(codes), (std::vector<uint8_t>{125, 126}));
  // decoder of the R8.6.2 example: packed [0.5, 1, 1.5, 2], group size 2
  const Tensor s = decode_e8m0(codes, DType::kF32);
  const std::vector<double> q = {0.5, 1, 1.5, 2};
  const std::vector<double> expect = {0.125, 0.25, 0.75, 1.0};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(q[i] * s.get(i / 2), expect[i]);
}

TEST(Packing, R8_6_2_E8M0EdgesAndTruncation) {
  const Tensor codes = encode_e8m0(Tensor::from_values(DType::kF32, {4}, {1.0, std::ldexp(1.0, -127), 3.0, 0.75}));
  // 1 -> 127; 2^-127 -> 0; 3 -> floor(log2 3) = 1 -> 128 (Q29 truncation); 0.75 -> 126
  EXPECT_EQ(bytes_of(codes), (std::vector<uint8_t>{127, 0, 128, 126}));
  EXPECT_THROW(encode_e8m0(Tensor::from_values(DType::kF32, {1}, {0.0})), InvalidArgument);
  EXPECT_THROW(encode_e8m0(Tensor::from_values(DType::kF32, {1}, {-1.0})), InvalidArgument);
  const Tensor d = decode_e8m0(Tensor::from_values(DType::kU8, {3}, {127, 130, 255}), DType::kF32);
  EXPECT_EQ(d.get(0), 1.0);
  EXPECT_EQ(d.get(1), 8.0);
  EXPECT_TRUE(std::isnan(d.get(2)));
}

}  // namespace
// Found by the checkpoint fuzzer: a hostile weight_shape gave a column count whose
// cols * num_bits overflowed (UBSan) before the packed width was checked.
TEST(Packing, R8_3_1_HugeOrNegativeColumnCountsAreErrorsNotOverflow) {
  const Tensor packed(DType::kI32, {2, 3});
  EXPECT_THROW(unpack_int_rows(packed, 4, std::numeric_limits<int64_t>::max() - 5), ShapeError);
  EXPECT_THROW(unpack_int_rows(packed, 8, int64_t{1} << 62), ShapeError);
  EXPECT_THROW(unpack_int_rows(packed, 4, -1), InvalidArgument);
  EXPECT_EQ(detail::packed_words(std::numeric_limits<int64_t>::max(), 8),
            (std::numeric_limits<int64_t>::max() / 32) * 8 + 8);
  for (int64_t n : {0, 1, 31, 32, 33, 1000})
    for (int b = 1; b <= 8; ++b) EXPECT_EQ(detail::packed_words(n, b), (n * b + 31) / 32) << n << " " << b;
}

}  // namespace qobs
