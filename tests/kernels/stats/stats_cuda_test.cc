// The CUDA column sums and non-finite scan (stats_cuda.h) run on the CPU over every
// index (cuda/host_grid.h) against the plain references; the importance statistic
// against the imatrix observer's own, and the non-finite record over batches.
//
// Tolerance policy: none; the sums' bits and the index must be the reference's.
#include <gtest/gtest.h>

#include <random>

#include "core/arith.h"
#include "kernels/cuda/host_grid.h"
#include "kernels/kernels.h"
#include "kernels/stats/stats_cuda.h"
#include "qobs/observer.h"
#include "test_util.h"

namespace qobs::kernels {
namespace {

using cuda::testing::HostMinU64;
using cuda::testing::HostOrU32;
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

/// importance_column over every column, batch after batch, gives the imatrix observer's
/// importance_sum bit for bit (f64 column sums rounded once per batch into f32).
TEST(StatsCuda, ImportanceBodiesEqualTheImatrixObserver) {
  const QuantizationArgs a = QuantizationArgs::from_json(R"({"num_bits": 4, "strategy": "group", "group_size": 16})");
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t cols : {1, 16, 129}) {
      auto obs = load_observer("imatrix_mse", "weight", a);
      obs->attach(cols);
      std::vector<float> imp(static_cast<std::size_t>(cols), 0.0f);
      std::vector<double> scratch(static_cast<std::size_t>(cols));
      int batch = 0;
      for (const Shape& shape : {Shape{3, 7, cols}, Shape{1, cols}, Shape{300, cols}, Shape{2, 0, cols}}) {
        std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
        for (std::size_t i = 0; i < v.size(); ++i) {
          v[i] = nd(rng);
          if (batch == 1) v[i] *= 1e-39f;  // subnormal squares
          if (batch == 2 && i % 5 == 0) v[i] = (i % 2) ? -0.0f : 0.0f;
        }
        const Tensor t = Tensor::from_floats(dt, shape, v);
        obs->accumulate_input(t.view());
        cuda::ImportanceArgs ia{cuda::ColumnSquaresArgs{t.data(), dt, t.numel() / cols, cols, scratch.data()},
                                imp.data()};
        for (int64_t c = cols; c-- > 0;) cuda::importance_column(ia, c);
        const Tensor got = Tensor::from_floats(DType::kF32, {cols}, imp);
        const Statistics st = obs->export_statistics();
        ASSERT_EQ(testing::describe_difference(*st.find("importance_sum"), got), "")
            << dtype_name(dt) << " cols=" << cols << " batch " << batch;
        ++batch;
      }
    }
}

/// The non-finite record over a sequence of batches: clean batches leave it empty, the
/// first batch whose statistics are not finite is recorded with its least non-finite
/// flat index (the host scan's), its value, number and shape, and later batches, finite
/// or not, change nothing.
TEST(StatsCuda, NonFiniteRecordKeepsTheFirstBadBatch) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<double> clean(60, -0.75);
    std::vector<double> nan_batch = clean, inf_batch = clean;
    nan_batch[41] = NAN;
    nan_batch[17] = -INFINITY;
    inf_batch[3] = INFINITY;
    const std::vector<double>* batches[] = {&clean, &clean, &nan_batch, &clean, &inf_batch};
    cuda::NonFiniteRecord r;
    for (int64_t k = 0; k < 5; ++k) {
      const Tensor t = Tensor::from_values(dt, {4, 15}, *batches[k]);
      // the batch's statistics: per row, as a token observer holds them
      std::vector<float> mins(4), maxs(4);
      for (int64_t row = 0; row < 4; ++row) {
        double lo = INFINITY, hi = -INFINITY;
        for (int64_t j = 0; j < 15; ++j) {
          lo = qobs::detail::nan_min(lo, t.get(row * 15 + j));
          hi = qobs::detail::nan_max(hi, t.get(row * 15 + j));
        }
        mins[static_cast<std::size_t>(row)] = static_cast<float>(lo);
        maxs[static_cast<std::size_t>(row)] = static_cast<float>(hi);
      }
      const Tensor mn = Tensor::from_floats(dt, {4}, mins), mx = Tensor::from_floats(dt, {4}, maxs);
      const cuda::FlagNonFiniteArgs f{mn.data(), mx.data(), dt, 4, &r};
      for (int64_t i = 0; i < 4; ++i) cuda::flag_non_finite_elem(f, i, HostOrU32{});
      cuda::RecordNonFiniteArgs a;
      a.scan.x = t.data();
      a.scan.dtype = dt;
      a.scan.n = 60;
      a.scan.view.count = 2;
      a.scan.view.size[0] = 4;
      a.scan.view.size[1] = 15;
      a.scan.view.stride[0] = 15;
      a.scan.view.stride[1] = 1;
      a.scan.first = &r.index;
      a.record = &r;
      a.batch = k;
      for (int64_t i = 60; i-- > 0;) cuda::record_scan_elem(a, i, HostMinU64{});
      cuda::record_finish(a);
      const std::string what = std::string(dtype_name(dt)) + " after batch " + std::to_string(k);
      if (k < 2) {
        EXPECT_EQ(r.state, 0u) << what;
        EXPECT_EQ(r.index, ~0ull) << what;
        continue;
      }
      EXPECT_EQ(r.state, 2u) << what;
      EXPECT_EQ(r.batch, 2) << what;
      EXPECT_EQ(static_cast<int64_t>(r.index), first_non_finite(Tensor::from_values(dt, {4, 15}, nan_batch).view(), 1))
          << what;
      EXPECT_EQ(r.index, 17ull) << what;
      EXPECT_EQ(r.value, -INFINITY) << what;
      EXPECT_EQ(r.ndim, 2u) << what;
      EXPECT_EQ(r.shape[0], 4) << what;
      EXPECT_EQ(r.shape[1], 15) << what;
    }
  }
}

}  // namespace
}  // namespace qobs::kernels
