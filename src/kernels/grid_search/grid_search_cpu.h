// The fast kernels behind kernels.h: fused grid search and min-max, threaded, with the
// vector level chosen once per call. Private to src/kernels (dispatch.cc, tests).
//
// The grid search is split by idea under kernels/search: plan.h (everything resolved
// once per call), group_data.h (reading a group and its range), exact.h (the exact
// errors: the fused scalar loop and the vector block kernel), certified.h (certified
// approximate sums that decide most comparisons), batch.h (small groups one per vector
// lane), select.h (the reference's selection rule), grid_search.cc (the driver) and
// minmax.cc. The vector kernels they call live in kernels/simd, one file per idea.
#pragma once

#include "kernels/kernels.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels::fast {

/// Fused grid search: each group is loaded once and every candidate is evaluated on
/// it while it is in L1 (SimdLevel::kScalar runs the reference's per-element arithmetic
/// in the same fused loop); small f32 groups are decided one per vector lane
/// (batch.h, cfg.batch_groups). Bit-identical to ref::grid_search. Extra memory: per
/// thread one group (f32) or one batch of groups transposed, and O(S) scratch, plus
/// O(num_qparams * S / 64) improvement bits.
GridSearchResult grid_search(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                             const FlatView* weights, SimdLevel level, int num_threads);

/// Threaded, vectorized min-max; bit-identical to ref::minmax.
void minmax(const FlatView& flat, float* mins, float* maxs, SimdLevel level, int num_threads);
/// minmax with the results stored in the view's own dtype (f32, bf16 or f16), bit for
/// bit as Tensor::from_floats stores ref::minmax's floats: written once, no float copy.
/// With `extremes`, also sets their StatisticsExtremes (kernels.h) where the path
/// reads them as it goes (the groups laid end to end, at a vector level).
void minmax_stats(const FlatView& flat, void* mins, void* maxs, SimdLevel level, int num_threads,
                  std::optional<StatisticsExtremes>* extremes = nullptr);

}  // namespace qobs::kernels::fast
