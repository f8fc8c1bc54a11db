// The grid search driver (kernels.h): the candidate list of R6.6.5 / R6.8.6, and the
// search itself, whose implementation is picked once per call -- the fused, threaded
// CPU path at the active SIMD level (grid_search_cpu.cc). The plain reference is
// grid_search_ref.cc.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/grid_search/grid_search_cpu.h"
#include "kernels/kernels.h"
#include "kernels/simd/simd_level.h"

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

GridSearchResult grid_search(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                             const FlatView* weights) {
  return cpu::grid_search(flat, search_args, cfg, weights, active_simd_level(), cfg.num_threads);
}

}  // namespace qobs::kernels
