// The CUDA column sums and non-finite scan (stats_cuda.h) run on the CPU over every
// index (cuda/host_grid.h) against the plain references.
//
// Tolerance policy: none; the sums' bits and the index must be the reference's.
#include <gtest/gtest.h>

#include <random>

#include "kernels/cuda/host_grid.h"
#include "kernels/kernels.h"
#include "kernels/stats/stats_cuda.h"
#include "test_util.h"

namespace qobs::kernels {
namespace {

using cuda::testing::HostMinU64;
using qobs::testing::double_bits;

TEST(StatsCuda, ColumnSquareBodiesEqualTheReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t cols : {1, 7, 64, 257})
      for (int64_t rows : {1, 5, 300}) {
        std::vector<float> v(static_cast<std::size_t>(rows * cols));
        for (float& x : v) x = nd(rng);
        const Tensor t = Tensor::from_floats(dt, {rows, cols}, v);
        std::vector<double> want(static_cast<std::size_t>(cols), 0.25), got(want);
        ref::sum_squares_by_column(t.view(), cols, want.data());
        const cuda::ColumnSquaresArgs a{t.data(), dt, rows, cols, got.data()};
        for (int64_t c = 0; c < cols; ++c) cuda::column_squares(a, c);
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(double_bits(got[static_cast<std::size_t>(c)]), double_bits(want[static_cast<std::size_t>(c)]))
              << dtype_name(dt) << " " << rows << "x" << cols << " column " << c;
      }
}

TEST(StatsCuda, NonFiniteBodiesFindTheFirstIndex) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<double> v(1000, 1.5);
    const Tensor clean = Tensor::from_values(dt, {10, 100}, v);
    v[730] = INFINITY;
    v[512] = NAN;
    v[999] = -INFINITY;
    const Tensor dirty = Tensor::from_values(dt, {10, 100}, v);
    for (const Tensor* t : {&clean, &dirty}) {
      cuda::NonFiniteArgs a;
      a.x = t->data();
      a.dtype = dt;
      a.view.count = 2;
      a.view.size[0] = 10;
      a.view.size[1] = 100;
      a.view.stride[0] = 100;
      a.view.stride[1] = 1;
      a.n = 1000;
      unsigned long long first = ~0ull;
      a.first = &first;
      for (int64_t i = 1000; i-- > 0;) cuda::non_finite_elem(a, i, HostMinU64{});
      const int64_t want = first_non_finite(t->view(), 1);
      EXPECT_EQ(first == ~0ull ? int64_t{-1} : static_cast<int64_t>(first), want) << dtype_name(dt);
    }
  }
}

}  // namespace
}  // namespace qobs::kernels
