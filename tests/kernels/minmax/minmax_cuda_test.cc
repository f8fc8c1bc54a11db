// The CUDA min-max's arithmetic (minmax_cuda.h) run on the CPU over every (group,
// chunk) and group of its launch grid (cuda/host_grid.h) against ref::minmax, stored as
// the statistics tensors store it: every strategy, f32 / bf16 / f16, NaN / Inf, signed
// zeros, subnormals, and chunk sizes that split groups anywhere.
//
// Tolerance policy: none; the statistics' bytes must be the reference's.
#include <gtest/gtest.h>

#include "kernels/cuda/host_grid.h"
#include "kernels/kernel_test_data.h"
#include "kernels/minmax/minmax_cuda.h"

namespace qobs::kernels {
namespace {

using namespace qobs::kernels::testdata;

std::pair<Tensor, Tensor> emulate(const FlatView& flat, int64_t chunk) {
  const auto x = cuda::flat_map_of(flat);
  EXPECT_TRUE(x.has_value());
  cuda::MinmaxArgs a;
  a.x = *x;
  a.chunk = chunk;
  a.chunks = std::max<int64_t>(1, (a.x.len + chunk - 1) / chunk);
  std::vector<double> lo(static_cast<std::size_t>(a.x.num_qparams * a.chunks)), hi(lo.size());
  a.part_lo = lo.data();
  a.part_hi = hi.data();
  a.out_dtype = flat.dtype;
  Tensor mn = Tensor::uninitialized(flat.dtype, flat.layout.qparam_shape);
  Tensor mx = Tensor::uninitialized(flat.dtype, flat.layout.qparam_shape);
  a.mins = mn.data();
  a.maxs = mx.data();
  for (int64_t q = 0; q < a.x.num_qparams; ++q)
    for (int64_t c = 0; c < a.chunks; ++c) cuda::minmax_chunk(a, q, c);
  for (int64_t q = 0; q < a.x.num_qparams; ++q) cuda::minmax_fold(a, q);
  return {std::move(mn), std::move(mx)};
}

TEST(MinMaxCuda, BodiesEqualTheReferenceStatistics) {
  struct Case {
    QuantizationArgs args;
    int64_t cols;
    const char* base;
  };
  const Case cases[] = {
      {make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3), 64, "weight"},
      {make_args(4, QuantType::kInt, false, Strategy::kGroup, 8), 40, "weight"},
      {make_args(4, QuantType::kInt, true, Strategy::kGroup, 128), 384, "weight"},
      {make_args(8, QuantType::kInt, true, Strategy::kChannel), 33, "weight"},
      {make_args(8, QuantType::kInt, true, Strategy::kTensor), 1031, "input"},
      {make_args(8, QuantType::kInt, true, Strategy::kBlock, std::nullopt, std::nullopt, std::array<int64_t, 2>{4, 8}),
       64, "weight"},
  };
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const Case& c : cases)
      for (Pattern p : {Pattern::kNormal, Pattern::kSignedZeros, Pattern::kEqualGroups, Pattern::kSubnormal})
        for (int poison = 0; poison < 5; ++poison) {
          const int64_t rows = 12;
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
          for (int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{16}, int64_t{1} << 20}) {
            const auto [mn, mx] = emulate(flat, chunk);
            const std::string what = std::string(dtype_name(dt)) + " cols=" + std::to_string(c.cols) + " pattern=" +
                                     std::to_string(static_cast<int>(p)) + " poison=" + std::to_string(poison) +
                                     " chunk=" + std::to_string(chunk);
            ASSERT_EQ(testing::describe_difference(emin, mn), "") << what;
            ASSERT_EQ(testing::describe_difference(emax, mx), "") << what;
          }
        }
}

}  // namespace
}  // namespace qobs::kernels
