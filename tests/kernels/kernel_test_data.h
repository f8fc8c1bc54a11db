// Test data and comparison helpers shared by the kernel tests (tests/kernels/<concept>/):
// the data patterns that stress edge cases, one representative of every format family
// and strategy, the observers' search configurations, and the grid search compared at
// every level and thread count with its plain reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/grid_search/exact.h"
#include "kernels/grid_search/plan.h"
#include "kernels/grid_search/grid_search_cpu.h"
#include "kernels/minmax/minmax_cpu.h"
#include "kernels/simd/convert_simd.h"
#include "kernels/simd/table_lookups_simd.h"
#include "kernels/kernels.h"
#include "kernels/parallel/thread_pool.h"
#include "kernels/qparams/qparams_cpu.h"
#include "kernels/grid_search/select.h"
#include "kernels/pow/libm_powf.h"
#include "kernels/grid_search/exact_batch_simd.h"  // split_narrowing_mismatches
#include "kernels/minmax/minmax_simd.h"            // narrow16_simd
#include "kernels/grid_search/poly_batch_simd.h"   // kPolyBatchMaxLen, fp4_round_nonneg_simd
#include "kernels/pow/pow_simd.h"
#include "kernels/simd/simd_level.h"
#include "kernels/simd/stream_store.h"
#include "qobs/qobs.h"
#include "test_util.h"

namespace qobs::kernels::testdata {

using qobs::testing::double_bits;
using qobs::testing::float_bits;

/// Test data: N(0, sigma) with optional structure that stresses the edge cases.
enum class Pattern { kNormal, kZeroGroups, kEqualGroups, kHugeRange, kSubnormal, kSignedZeros, kPositive };

inline std::vector<float> make_data(int64_t n, Pattern p, uint32_t seed, int64_t group = 16) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = nd(rng);
  for (int64_t i = 0; i < n; ++i) {
    float& x = v[static_cast<std::size_t>(i)];
    const int64_t g = i / std::max<int64_t>(group, 1);
    switch (p) {
      case Pattern::kNormal:
        break;
      case Pattern::kZeroGroups:
        if (g % 3 == 1) x = 0.0f;
        break;
      case Pattern::kEqualGroups:
        if (g % 2 == 0) x = 0.375f * static_cast<float>(g % 5 - 2);
        break;
      case Pattern::kHugeRange:
        if (i % 7 == 3) x *= 1e30f;
        break;
      case Pattern::kSubnormal:
        x *= 1e-38f;
        break;
      case Pattern::kSignedZeros:
        if (i % 3 == 0) x = (i % 2) ? -0.0f : 0.0f;
        else x = std::fabs(x);
        break;
      case Pattern::kPositive:
        x = std::fabs(x) + 0.01f;
        break;
    }
  }
  return v;
}

inline QuantizationArgs make_args(int bits_, QuantType type, bool sym, Strategy st,
                                  std::optional<int64_t> gs = std::nullopt,
                                  std::optional<DType> scale_dtype = std::nullopt,
                                  std::optional<std::array<int64_t, 2>> block = std::nullopt) {
  QuantizationArgs a;
  a.num_bits = bits_;
  a.type = type;
  a.symmetric = sym;
  a.strategy = st;
  a.group_size = gs;
  a.scale_dtype = scale_dtype;
  a.block_structure = block;
  return a.validated();
}

struct Format {
  std::string name;
  QuantizationArgs args;
};

/// One representative of every format family and strategy.
inline std::vector<Format> formats_for(int64_t cols) {
  std::vector<Format> f;
  auto add = [&](std::string n, auto make) {
    try {
      f.push_back({std::move(n), make()});
    } catch (const std::exception&) {
      // a combination the args validation rejects (e.g. a group size that does not fit)
    }
  };
  add("int4_sym_channel", [&] { return make_args(4, QuantType::kInt, true, Strategy::kChannel); });
  add("int4_asym_channel", [&] { return make_args(4, QuantType::kInt, false, Strategy::kChannel); });
  add("int8_sym_tensor", [&] { return make_args(8, QuantType::kInt, true, Strategy::kTensor); });
  add("int8_asym_tensor", [&] { return make_args(8, QuantType::kInt, false, Strategy::kTensor); });
  add("fp8_channel", [&] { return make_args(8, QuantType::kFloat, true, Strategy::kChannel); });
  add("fp8_asym_tensor", [&] { return make_args(8, QuantType::kFloat, false, Strategy::kTensor); });
  if (cols % 16 == 0) {
    add("int4_sym_group16", [&] { return make_args(4, QuantType::kInt, true, Strategy::kGroup, 16); });
    add("int8_asym_group16", [&] { return make_args(8, QuantType::kInt, false, Strategy::kGroup, 16); });
    add("nvfp4_tensor_group16",
        [&] { return make_args(4, QuantType::kFloat, true, Strategy::kTensorGroup, 16, DType::kF8E4M3); });
  }
  if (cols % 32 == 0) {
    add("mxfp4_group32", [&] { return make_args(4, QuantType::kFloat, true, Strategy::kGroup, 32, DType::kU8); });
    add("mxfp6_group32", [&] { return make_args(6, QuantType::kFloat, true, Strategy::kGroup, 32, DType::kU8); });
  }
  // FP6 without MX scales: the common plans' fast paths (R2.8)
  add("fp6_channel", [&] { return make_args(6, QuantType::kFloat, true, Strategy::kChannel); });
  add("int4_group1", [&] { return make_args(4, QuantType::kInt, false, Strategy::kGroup, 1); });
  add("int8_block_4x8", [&] {
    return make_args(8, QuantType::kInt, true, Strategy::kBlock, std::nullopt, std::nullopt,
                     std::array<int64_t, 2>{4, 8});
  });
  return f;
}

inline QuantizationArgs search_args(QuantizationArgs a) {
  if (a.get_strategy() == Strategy::kTensorGroup) a.scale_dtype.reset();  // R6.6.2
  return a;
}

inline GridSearchConfig mse_cfg() { return GridSearchConfig{}; }
inline GridSearchConfig nvfp4_cfg() {
  GridSearchConfig c;
  c.maxshrink = 1.0 - 0.8 / 1.8;
  c.grid = 200.0;
  c.patience = 1000;
  c.expand = 1.8;
  return c;
}
inline GridSearchConfig imatrix_cfg() {
  GridSearchConfig c;
  c.imatrix = true;
  c.maxshrink = 0.95;
  c.grid = 20;
  c.norm = 3.0;
  return c;
}
/// nvfp4_expanded_imatrix (R6.12.1): 112 candidates from 1.8x the range down.
inline GridSearchConfig expanded_imatrix_cfg() {
  GridSearchConfig c = imatrix_cfg();
  c.maxshrink = 1.0 - 0.8 / 1.8;
  c.grid = 200;
  c.norm = 2.4;
  c.expand = 1.8;
  c.patience = 1000;
  return c;
}

inline std::string diff(const GridSearchResult& r, const GridSearchResult& f) {
  if (r.candidates_evaluated != f.candidates_evaluated)
    return "candidates_evaluated " + std::to_string(r.candidates_evaluated) + " vs " +
           std::to_string(f.candidates_evaluated);
  if (r.best_min.size() != f.best_min.size()) return "size";
  for (std::size_t q = 0; q < r.best_min.size(); ++q)
    if (float_bits(r.best_min[q]) != float_bits(f.best_min[q]) ||
        float_bits(r.best_max[q]) != float_bits(f.best_max[q]))
      return "q=" + std::to_string(q) + " ref (" + std::to_string(r.best_min[q]) + ", " +
             std::to_string(r.best_max[q]) + ") fast (" + std::to_string(f.best_min[q]) + ", " +
             std::to_string(f.best_max[q]) + ")";
  return "";
}

/// Runs the fast grid search at every level and thread count against the reference.
inline void expect_search_matches(const std::string& what, const FlatView& flat, const QuantizationArgs& sargs,
                                  GridSearchConfig cfg, const FlatView* w = nullptr) {
  const GridSearchResult ref = ref::grid_search(flat, sargs, cfg, w);
  for (SimdLevel level : available_simd_levels())
    for (int threads : {1, 2, 3}) {
      // the batch kernel where it applies, then the one-group path on the same input
      for (bool batch : {true, false}) {
        cfg.batch_groups = batch;
        const GridSearchResult fast = cpu::grid_search(flat, sargs, cfg, w, level, threads);
        const std::string d = diff(ref, fast);
        EXPECT_EQ(d, "") << what << " level=" << to_string(level) << " threads=" << threads << " batch=" << batch;
        if (!d.empty()) return;
        if (!batch) EXPECT_EQ(fast.groups_batched, 0);
        if (fast.groups_batched == 0) break;  // the batch kernel does not apply: one run is enough
      }
    }
}

}  // namespace qobs::kernels::testdata
