// Sizes computed from user-given shapes, strides, group_size and block_structure never
// wrap: each overflow is an InvalidArgument naming the value and the int64 limit.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "core/sizes.h"
#include "qobs/args.h"
#include "qobs/error.h"
#include "qobs/layout.h"
#include "qobs/tensor.h"
#include "test_util.h"

namespace qobs {
namespace {

using testing::expect_error;

constexpr int64_t kBig = int64_t{1} << 31;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(CheckedSizes, HelpersThrowOnOverflowOnly) {
  EXPECT_EQ(detail::mul_size(kBig, kBig, "x"), int64_t{1} << 62);
  EXPECT_EQ(detail::add_size(kMax - 1, 1, "x"), kMax);
  EXPECT_EQ(detail::round_up_size(5, 4, "x"), 8);
  EXPECT_EQ(detail::round_up_size(8, 4, "x"), 8);
  expect_error<InvalidArgument>([] { detail::mul_size(int64_t{1} << 32, int64_t{1} << 31, "opt"); },
                                {"opt", "4294967296 * 2147483648", "9223372036854775807"});
  expect_error<InvalidArgument>([] { detail::add_size(kMax, 1, "opt"); }, {"opt", "9223372036854775807 + 1"});
  expect_error<InvalidArgument>([] { detail::round_up_size(kMax - 1, kMax - 3, "opt"); }, {"opt"});
}

TEST(CheckedSizes, ShapeNumelOverflowThrows) {
  EXPECT_EQ(shape_numel({kBig, kBig}), int64_t{1} << 62);
  expect_error<InvalidArgument>(
      [] {
        shape_numel({kBig, kBig, kBig});
      },
      {"element count of shape (2147483648, 2147483648, 2147483648)", "9223372036854775807"});
  expect_error<InvalidArgument>([] { contiguous_strides({4, kBig, kBig, kBig}); }, {"strides of shape"});
  // the outermost dim is no stride: strides of a shape whose total fits only just
  EXPECT_EQ(contiguous_strides({4, int64_t{1} << 61}), (Shape{int64_t{1} << 61, 1}));
}

TEST(CheckedSizes, TensorByteSizeOverflowThrows) {
  // 2^62 elements fit in int64, 2^62 * 4 bytes do not: formerly the byte count wrapped
  // to 0 and the zero-sized buffer was written through.
  expect_error<InvalidArgument>(
      [] {
        Tensor t(DType::kF32, {kBig, kBig});
      },
      {"bytes of a float32 tensor of shape (2147483648, 2147483648)", "9223372036854775807"});
  expect_error<InvalidArgument>([] { Tensor t(DType::kF32, {kBig, kBig, kBig}); }, {"element count"});
}

TEST(CheckedSizes, TensorViewOffsetsMustFit) {
  const float one = 1.0f;
  // broadcast views (stride 0) of any size are fine as long as the element count fits
  EXPECT_NO_THROW(TensorView(&one, DType::kF32, {kBig, kBig}, {0, 0}));
  expect_error<InvalidArgument>(
      [&] {
        TensorView(&one, DType::kF32, {kBig, kBig, kBig}, {0, 0, 0});
      },
      {"element count"});
  expect_error<InvalidArgument>([&] { TensorView(&one, DType::kF32, {2, 2}, {kMax, 1}); }, {"offsets of shape (2, 2)"});
  expect_error<InvalidArgument>(
      [&] {
        TensorView(&one, DType::kF32, {2, 2}, {int64_t{1} << 62, 1});
      },
      {"byte offsets of shape (2, 2) strides (4611686018427387904, 1)"});
  expect_error<InvalidArgument>(
      [&] {
        TensorView(&one, DType::kF32, {2, 2}, {-(int64_t{1} << 62), 1});
      },
      {"byte offsets"});
}

TEST(CheckedSizes, ReshapeToOverflowingShapeThrows) {
  const Tensor t(DType::kF32, {4});
  expect_error<InvalidArgument>([&] { (void)t.reshaped({kBig, kBig, kBig}); }, {"element count"});
}

}  // namespace
}  // namespace qobs
