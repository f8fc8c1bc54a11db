// The CPU path of the grid search behind kernels.h: fused, threaded, with its vector
// kernels picked once per call. Private to src/kernels (the driver grid_search.cc,
// tests, benchmarks).
//
// Split by idea: plan.h (everything resolved once per call), exact.h (the exact
// errors: the fused scalar loop and the vector block kernel), certified.h (certified
// approximate sums that decide most comparisons), batch.h (small groups one per vector
// lane), select.h (the reference's selection rule), grid_search_cpu.cc (the threaded
// loop over groups); groups are read by minmax/group_minmax.h. The Highway units they
// call are the *_simd.cc files of this folder.
#pragma once

#include "kernels/kernels.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels::cpu {

/// Fused grid search: each group is loaded once and every candidate is evaluated on
/// it while it is in L1 (SimdLevel::kScalar runs the reference's per-element arithmetic
/// in the same fused loop); small f32 groups are decided one per vector lane
/// (batch.h, cfg.batch_groups). Bit-identical to ref::grid_search. Extra memory: per
/// thread one group (f32) or one batch of groups transposed, and O(S) scratch, plus
/// O(num_qparams * S / 64) improvement bits.
GridSearchResult grid_search(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                             const FlatView* weights, SimdLevel level, int num_threads);

}  // namespace qobs::kernels::cpu
