// The CUDA grid search's arithmetic (grid_search_cuda.h) run on the CPU over every index
// of its launch grid (cuda/host_grid.h) against ref::grid_search: every format,
// strategy, dtype, numeric mode, norm, variant and the importance-weighted searches.
//
// Tolerance policy: none. best_min, best_max and the number of evaluated candidates
// must be the reference's bits.
#include <gtest/gtest.h>

#include <random>

#include "kernels/cuda/host_grid.h"
#include "kernels/grid_search/grid_search_cuda.h"
#include "kernels/kernel_test_data.h"
#include "kernels/minmax/minmax_cuda.h"
#include "kernels/pow/libm_powf.h"

namespace qobs::kernels {
namespace {

using namespace qobs::kernels::testdata;
using cuda::testing::HostOrU32;

/// The device pipeline of cuda::grid_search, step by step on host buffers: the
/// min-max bodies (chunks of `chunk` values), then the search's. nullopt when the plan
/// keeps the call on the CPU.
std::optional<GridSearchResult> emulate(const FlatView& flat, const QuantizationArgs& sargs,
                                        const GridSearchConfig& cfg, const FlatView* weights, int64_t chunk) {
  cuda::CudaSearchPlan p = cuda::cuda_search_plan(flat, sargs, cfg, weights);
  if (!p.unsupported.empty()) return std::nullopt;
  cuda::GridSearchArgs& g = p.args;
  const int64_t nq = g.x.num_qparams;
  std::vector<float> lo(static_cast<std::size_t>(nq)), hi(lo.size());
  cuda::MinmaxArgs m;
  m.x = g.x;
  m.chunk = chunk;
  m.chunks = std::max<int64_t>(1, (g.x.len + chunk - 1) / chunk);
  std::vector<double> plo(static_cast<std::size_t>(nq * m.chunks)), phi(plo.size());
  m.part_lo = plo.data();
  m.part_hi = phi.data();
  m.out_dtype = DType::kF32;
  m.mins = lo.data();
  m.maxs = hi.data();
  for (int64_t q = 0; q < nq; ++q)
    for (int64_t c = 0; c < m.chunks; ++c) cuda::minmax_chunk(m, q, c);
  for (int64_t q = 0; q < nq; ++q) cuda::minmax_fold(m, q);
  std::vector<double> m0(lo.size()), M0(lo.size()), errs(static_cast<std::size_t>(g.S));
  std::vector<uint32_t> bits(static_cast<std::size_t>(nq * g.words())), any(static_cast<std::size_t>(g.words()), 0);
  int64_t evaluated = -1;
  GridSearchResult r;
  r.best_min.resize(lo.size());
  r.best_max.resize(lo.size());
  g.lo = lo.data();
  g.hi = hi.data();
  g.shrink = p.shrink.data();
  g.term.table = p.pow_table.data();
  if (g.term.pow == cuda::DevicePow::kReplay) g.term.powf = *detail::libm_powf_tables();
  g.m0 = m0.data();
  g.M0 = M0.data();
  g.bits = bits.data();
  g.any = any.data();
  g.evaluated = &evaluated;
  g.best_min = r.best_min.data();
  g.best_max = r.best_max.data();
  for (int64_t q = 0; q < nq; ++q) cuda::group_range(g, q);
  for (int64_t q = 0; q < nq; ++q) {
    for (int64_t i = 0; i < g.S; ++i) errs[static_cast<std::size_t>(i)] = cuda::candidate_error(g, q, i);
    cuda::group_improvements(g, q, errs.data(), HostOrU32{});
  }
  cuda::stop_of(g);
  for (int64_t q = 0; q < nq; ++q) cuda::choose(g, q);
  r.candidates_evaluated = evaluated;
  return r;
}

int expect_emulation_matches(const std::string& what, const FlatView& flat, const QuantizationArgs& sargs,
                             const GridSearchConfig& cfg, const FlatView* w = nullptr) {
  const auto got = emulate(flat, sargs, cfg, w, 5);
  if (!got) return 0;
  EXPECT_EQ(diff(ref::grid_search(flat, sargs, cfg, w), *got), "") << what;
  return 1;
}

TEST(GridSearchCuda, BodiesEqualTheReferenceOnEveryFormatStrategyAndDtype) {
  int run = 0;
  for (int64_t cols : {1, 7, 16, 17, 32, 33, 64, 96}) {
    for (const Format& fmt : formats_for(cols)) {
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
        const Pattern p = static_cast<Pattern>((cols + static_cast<int64_t>(dt)) % 7);
        const int64_t rows = fmt.args.get_strategy() == Strategy::kBlock ? 6 : 3;
        const Tensor t = Tensor::from_floats(dt, {rows, cols}, make_data(rows * cols, p, static_cast<uint32_t>(cols)));
        FlatView flat;
        try {
          flat = flatten_for_calibration(t.view(), "weight", fmt.args);
        } catch (const std::exception&) {
          continue;
        }
        const QuantizationArgs sargs = search_args(fmt.args);
        const std::string what = fmt.name + " cols=" + std::to_string(cols) + " " + std::string(dtype_name(dt));
        run += expect_emulation_matches(what + " mse", flat, sargs, mse_cfg());
        if (fmt.args.is_fp4()) run += expect_emulation_matches(what + " nvfp4_expanded", flat, sargs, nvfp4_cfg());
      }
    }
  }
  EXPECT_GT(run, 100);  // the plan must not send the common cases back to the CPU
}

TEST(GridSearchCuda, BodiesEqualTheReferenceInEveryModeNormAndVariant) {
  const int64_t cols = 48;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const Format& fmt : formats_for(cols)) {
      const Tensor t = Tensor::from_floats(dt, {4, cols}, make_data(4 * cols, Pattern::kNormal, 11));
      const FlatView flat = flatten_for_calibration(t.view(), "weight", fmt.args);
      const QuantizationArgs sargs = search_args(fmt.args);
      for (NumericMode mode : {NumericMode::kParity, NumericMode::kWide})
        for (double norm : {2.4, 2.0, 3.0, 1.7})
          for (int variant = 0; variant < 5; ++variant) {
            GridSearchConfig c = mse_cfg();
            c.mode = mode;
            c.norm = norm;
            c.chunked = variant == 1;
            c.f32_errors = variant == 2;
            if (variant == 3) c.patience = 0;
            if (variant == 4) c.patience = 1;
            expect_emulation_matches(fmt.name + " " + std::string(dtype_name(dt)) + " norm=" + std::to_string(norm) +
                                         " variant=" + std::to_string(variant),
                                     flat, sargs, c);
          }
    }
}

TEST(GridSearchCuda, BodiesEqualTheReferenceOnImportanceWeightedSearches) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const QuantizationArgs& a :
         {make_args(4, QuantType::kInt, true, Strategy::kGroup, 16),
          make_args(4, QuantType::kInt, false, Strategy::kChannel),
          make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3)}) {
      const int64_t rows = 5, cols = 64;
      const Tensor t = Tensor::from_floats(dt, {rows, cols}, make_data(rows * cols, Pattern::kNormal, 31));
      std::vector<float> wv(static_cast<std::size_t>(rows * cols));
      std::mt19937 rng(3);
      std::uniform_real_distribution<float> u(0.0f, 3.0f);
      for (int64_t c = 0; c < cols; ++c) {
        const float imp = c % 9 == 0 ? 0.0f : u(rng);
        for (int64_t r = 0; r < rows; ++r) wv[static_cast<std::size_t>(r * cols + c)] = imp;
      }
      const Tensor w = Tensor::from_floats(DType::kF32, {rows, cols}, wv);
      const FlatView flat = flatten_for_calibration(t.view(), "weight", a);
      const FlatView wf = flatten_for_calibration(w.view(), "weight", a);
      for (double norm : {3.0, 2.4, 2.0}) {
        GridSearchConfig c = imatrix_cfg();
        c.norm = norm;
        expect_emulation_matches("imatrix norm=" + std::to_string(norm), flat, search_args(a), c, &wf);
      }
      expect_emulation_matches("expanded imatrix", flat, search_args(a), expanded_imatrix_cfg(), &wf);
    }
}

TEST(GridSearchCuda, PlanKeepsWhatTheDeviceCannotReproduceOnTheCpu) {
  // f64 data, and a norm whose f32 power needs the libm replay when this host's libm is
  // not one the replay reproduces: the plan says why instead of computing other bits.
  const QuantizationArgs a = make_args(4, QuantType::kInt, true, Strategy::kGroup, 16);
  const Tensor t64 = Tensor::from_values(DType::kF64, {2, 32}, std::vector<double>(64, 0.5));
  const FlatView f64 = flatten_for_calibration(t64.view(), "weight", a);
  EXPECT_NE(cuda::cuda_search_plan(f64, a, mse_cfg(), nullptr).unsupported, "");
  const Tensor t32 = Tensor::from_floats(DType::kF32, {2, 32}, make_data(64, Pattern::kNormal, 1));
  const FlatView f32 = flatten_for_calibration(t32.view(), "weight", a);
  detail::force_libm_powf_for_testing(true);
  const std::string why = cuda::cuda_search_plan(f32, a, mse_cfg(), nullptr).unsupported;
  detail::force_libm_powf_for_testing(false);
  EXPECT_NE(why.find("powf"), std::string::npos) << why;
  // norm 2 needs no power function: the device takes it
  GridSearchConfig two = mse_cfg();
  two.norm = 2.0;
  detail::force_libm_powf_for_testing(true);
  EXPECT_EQ(cuda::cuda_search_plan(f32, a, two, nullptr).unsupported, "");
  detail::force_libm_powf_for_testing(false);
}

}  // namespace
}  // namespace qobs::kernels
