// Tensor storage (include/qobs/storage.h): the zero-filled constructor still zeroes a
// recycled block, uninitialized tensors skip the fill, large freed blocks are reused for
// the same size class, and the cache stays within its bounds.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "qobs/storage.h"
#include "qobs/tensor.h"

namespace qobs {
namespace {

TEST(TensorStorage, ZeroFilledTensorIsZeroOnARecycledDirtyBlock) {
  detail::storage_release_cached();
  const Shape shape{1024, 1024};  // 4 MiB of f32: a cached size
  const void* first = nullptr;
  {
    Tensor dirty = Tensor::uninitialized(DType::kF32, shape);
    first = dirty.data();
    std::fill(dirty.data_as<uint32_t>(), dirty.data_as<uint32_t>() + dirty.numel(), 0xDEADBEEFu);
  }
  EXPECT_GE(detail::storage_cached_bytes(), std::size_t{4} << 20);
  const Tensor zeros(DType::kF32, shape);
  EXPECT_EQ(zeros.data(), first) << "the freed block of the same size class was not reused";
  for (int64_t i = 0; i < zeros.numel(); ++i) ASSERT_EQ(zeros.data_as<uint32_t>()[i], 0u) << i;
  EXPECT_EQ(detail::storage_cached_bytes(), 0u);
}

TEST(TensorStorage, FactoriesWriteEveryByteOfARecycledBlock) {
  // from_bytes / from_floats / copy_of / to() skip the zero fill: what they return must
  // still be exactly their input, with no byte of the block's previous tensor left
  detail::storage_release_cached();
  const int64_t n = 512 * 1024;  // 2 MiB of f32, 1 MiB of bf16
  std::vector<float> values(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    values[static_cast<std::size_t>(i)] = static_cast<float>(i % 200) * 0.25f - 3.0f;  // exact in bf16
  for (int round = 0; round < 2; ++round) {
    {
      Tensor junk = Tensor::uninitialized(DType::kF32, {n});
      std::fill(junk.data_as<uint32_t>(), junk.data_as<uint32_t>() + n, 0xFFFFFFFFu);
      Tensor junk16 = Tensor::uninitialized(DType::kBF16, {n});
      std::fill(junk16.data_as<uint16_t>(), junk16.data_as<uint16_t>() + n, uint16_t{0xFFFF});
    }
    const Tensor f = Tensor::from_floats(DType::kF32, {n}, values);
    const Tensor b = Tensor::from_bytes(DType::kF32, {n}, values.data(), values.size() * sizeof(float));
    EXPECT_TRUE(f.bit_equal(b));
    const Tensor c = Tensor::copy_of(f.view());
    EXPECT_TRUE(c.bit_equal(f));
    const Tensor h = f.to(DType::kBF16);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h.get(i), static_cast<double>(values[static_cast<std::size_t>(i)])) << i;
  }
}

TEST(TensorStorage, CacheStaysWithinItsBounds) {
  detail::storage_release_cached();
  {
    // twelve live blocks of 32 MiB, freed together: the cache keeps at most 256 MiB
    std::vector<Tensor> many;
    for (int i = 0; i < 12; ++i) many.push_back(Tensor::uninitialized(DType::kU8, {int64_t{32} << 20}));
  }
  EXPECT_LE(detail::storage_cached_bytes(), std::size_t{256} << 20);
  EXPECT_GT(detail::storage_cached_bytes(), 0u);
  {
    Tensor small = Tensor::uninitialized(DType::kU8, {int64_t{1} << 19});  // below 1 MiB: never cached
  }
  const std::size_t before = detail::storage_cached_bytes();
  { Tensor small = Tensor::uninitialized(DType::kU8, {int64_t{1} << 19}); }
  EXPECT_EQ(detail::storage_cached_bytes(), before);
  detail::storage_release_cached();
  EXPECT_EQ(detail::storage_cached_bytes(), 0u);
}

}  // namespace
}  // namespace qobs
