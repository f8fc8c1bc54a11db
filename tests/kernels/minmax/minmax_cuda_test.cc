// The CUDA min-max's arithmetic (minmax_cuda.h) run on the CPU over every (group,
// chunk) and group of its launch grid (cuda/host_grid.h) against ref::minmax, stored as
// the statistics tensors store it: every strategy, f32 / bf16 / f16, NaN / Inf, signed
// zeros, subnormals, and chunk sizes that split groups anywhere. The running statistics
// of the activation observers (running_minmax_elem) over batches of such statistics
// against the CPU observers' own.
//
// Tolerance policy: none; the statistics' bytes must be the reference's.
#include <gtest/gtest.h>

#include "kernels/cuda/host_grid.h"
#include "kernels/kernel_test_data.h"
#include "kernels/minmax/minmax_cuda.h"
#include "qobs/observer.h"

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
            const std::string what = std::string(dtype_name(dt)) + " cols=" + std::to_string(c.cols) +
                                     " pattern=" + std::to_string(static_cast<int>(p)) +
                                     " poison=" + std::to_string(poison) + " chunk=" + std::to_string(chunk);
            ASSERT_EQ(testing::describe_difference(emin, mn), "") << what;
            ASSERT_EQ(testing::describe_difference(emax, mx), "") << what;
          }
        }
}

/// The activation observers' running statistics, emulated batch by batch (each batch's
/// statistics by the emulated min-max, then running_minmax_elem over every element), equal
/// the CPU observers' after every batch: memoryless_minmax, static_minmax and minmax with
/// several averaging constants (its blend rounds each operation in the statistics' dtype).
TEST(MinMaxCuda, RunningBodiesEqualTheActivationObservers) {
  struct Obs {
    const char* name;
    double c;  ///< minmax's averaging constant
    cuda::RunningOp op;
  };
  const Obs observers[] = {{"memoryless_minmax", 0.0, cuda::RunningOp::kSet},
                           {"static_minmax", 0.0, cuda::RunningOp::kExtremes},
                           {"minmax", 0.01, cuda::RunningOp::kBlend},
                           {"minmax", 0.3, cuda::RunningOp::kBlend},
                           {"minmax", 0.0, cuda::RunningOp::kBlend}};
  const QuantizationArgs formats[] = {make_args(8, QuantType::kInt, true, Strategy::kTensor),
                                      make_args(8, QuantType::kInt, false, Strategy::kGroup, 16),
                                      make_args(4, QuantType::kInt, true, Strategy::kGroup, 16)};
  const Pattern patterns[] = {Pattern::kNormal,     Pattern::kSignedZeros, Pattern::kEqualGroups,
                              Pattern::kZeroGroups, Pattern::kSubnormal,   Pattern::kHugeRange};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const QuantizationArgs& fmt : formats)
      for (const Obs& o : observers) {
        QuantizationArgs args = fmt;
        if (o.op == cuda::RunningOp::kBlend) args.observer_kwargs["averaging_constant"] = o.c;
        auto cpu = load_observer(o.name, "input", args);
        const std::string what0 = std::string(o.name) + " c=" + std::to_string(o.c) + " " +
                                  std::string(dtype_name(dt)) + " " + std::string(to_string(fmt.get_strategy()));
        Tensor run_min, run_max;
        int batch = 0;
        for (Pattern p : patterns) {
          // 3 x 5 x 48: tails in every dimension for chunks of 7; f16 clamped to stay finite
          std::vector<float> v = make_data(3 * 5 * 48, p, static_cast<uint32_t>(11 + batch), 16);
          if (dt == DType::kF16)
            for (float& x : v) x = std::clamp(x, -6e4f, 6e4f);
          const Tensor t = Tensor::from_floats(dt, {3, 5, 48}, v);
          const auto flat = flatten_in_place(t.view(), "input", args);
          ASSERT_TRUE(flat.has_value()) << what0;
          const auto [bmin, bmax] = emulate(*flat, 7);
          if (batch == 0) {
            run_min = Tensor::uninitialized(dt, bmin.shape());
            run_max = Tensor::uninitialized(dt, bmax.shape());
          }
          cuda::RunningMinmaxArgs a;
          a.batch_min = bmin.data();
          a.batch_max = bmax.data();
          a.dtype = dt;
          a.n = bmin.numel();
          a.op = batch == 0 ? cuda::RunningOp::kSet : o.op;
          a.c = o.c;
          a.run_min = run_min.data();
          a.run_max = run_max.data();
          for (int64_t i = a.n; i-- > 0;) cuda::running_minmax_elem(a, i);
          cpu->observe(t.view());
          const Statistics st = cpu->export_statistics();
          const std::string what = what0 + " batch " + std::to_string(batch);
          ASSERT_NE(st.find("min_vals"), nullptr) << what;
          ASSERT_EQ(testing::describe_difference(*st.find("min_vals"), run_min), "") << what;
          ASSERT_EQ(testing::describe_difference(*st.find("max_vals"), run_max), "") << what;
          ++batch;
        }
      }
}

/// A set skip flag (a non-finite batch recorded) leaves the running statistics as they are.
TEST(MinMaxCuda, RunningBodiesSkipAfterANonFiniteBatch) {
  const Tensor bmin = Tensor::from_floats(DType::kBF16, {4}, std::vector<float>{-1.0f, -2.0f, 0.0f, -0.5f});
  const Tensor bmax = Tensor::from_floats(DType::kBF16, {4}, std::vector<float>{1.0f, 2.0f, 0.0f, 0.5f});
  const Tensor before_min = Tensor::from_floats(DType::kBF16, {4}, std::vector<float>{-3.0f, -0.25f, -1.0f, -0.75f});
  const Tensor before_max = Tensor::from_floats(DType::kBF16, {4}, std::vector<float>{3.0f, 0.25f, 1.0f, 0.75f});
  for (cuda::RunningOp op : {cuda::RunningOp::kSet, cuda::RunningOp::kExtremes, cuda::RunningOp::kBlend})
    for (uint32_t state : {0u, 2u}) {
      Tensor run_min = before_min, run_max = before_max;
      cuda::RunningMinmaxArgs a;
      a.batch_min = bmin.data();
      a.batch_max = bmax.data();
      a.dtype = DType::kBF16;
      a.n = 4;
      a.op = op;
      a.c = 0.5;
      a.run_min = run_min.data();
      a.run_max = run_max.data();
      a.skip = &state;
      for (int64_t i = 0; i < 4; ++i) cuda::running_minmax_elem(a, i);
      if (state != 0) {
        EXPECT_EQ(testing::describe_difference(before_min, run_min), "");
        EXPECT_EQ(testing::describe_difference(before_max, run_max), "");
      } else {
        EXPECT_NE(testing::describe_difference(before_min, run_min), "") << static_cast<int>(op);
      }
    }
}

}  // namespace
}  // namespace qobs::kernels
