// Chooses the implementation of each kernel once per call (STYLE habit 8): the fused,
// threaded fast paths at the active SIMD level (QOBS_SIMD / ScopedSimdLevel; "scalar"
// is the fused loop with the reference's per-element arithmetic). The unfused scalar
// references in kernels/ref are only called by tests and benchmarks.
#include <cmath>

#include "kernels/kernels.h"
#if QOBS_HAVE_FAST_KERNELS
#include "kernels/fused_search.h"
#include "kernels/simd/simd_level.h"
#endif

namespace qobs::kernels {

std::vector<double> grid_candidates(const GridSearchConfig& cfg) {
  std::vector<double> out;
  // R6.6.5: S = trunc(maxshrink * grid) in double; candidates p_i = 1 - i/grid.
  const double prod = std::trunc(cfg.maxshrink * cfg.grid);
  if (cfg.imatrix) {
    // R6.8.6: max(1, S) steps and S + 1 candidates, i = 0..S inclusive (Q7)
    const int64_t S = std::max<int64_t>(1, static_cast<int64_t>(prod));
    for (int64_t i = 0; i <= S; ++i) out.push_back(1.0 - static_cast<double>(i) / cfg.grid);
    return out;
  }
  const int64_t S = prod > 0 ? static_cast<int64_t>(prod) : 0;
  for (int64_t i = 0; i < S; ++i) out.push_back(1.0 - static_cast<double>(i) / cfg.grid);
  return out;
}

#if QOBS_HAVE_FAST_KERNELS
void minmax(const FlatView& flat, float* mins, float* maxs, int num_threads) {
  fast::minmax(flat, mins, maxs, active_simd_level(), num_threads);
}

GridSearchResult grid_search(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                             const FlatView* weights) {
  return fast::grid_search(flat, search_args, cfg, weights, active_simd_level(), cfg.num_threads);
}
#else
// Built with QOBS_FAST_KERNELS=OFF: the scalar references (single-threaded).
void minmax(const FlatView& flat, float* mins, float* maxs, int) { ref::minmax(flat, mins, maxs); }

GridSearchResult grid_search(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                             const FlatView* weights) {
  return ref::grid_search(flat, search_args, cfg, weights);
}
#endif

}  // namespace qobs::kernels
