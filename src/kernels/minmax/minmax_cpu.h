// The CPU path of min-max behind kernels.h: threaded, with its vector kernels picked
// once per call. Private to src/kernels (the driver minmax.cc, tests, benchmarks).
#pragma once

#include <optional>

#include "kernels/kernels.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels::cpu {

/// Threaded, vectorized min-max; bit-identical to ref::minmax.
void minmax(const FlatView& flat, float* mins, float* maxs, SimdLevel level, int num_threads);
/// minmax with the results stored in the view's own dtype (f32, bf16 or f16), bit for
/// bit as Tensor::from_floats stores ref::minmax's floats: written once, no float copy.
/// With `extremes`, also sets their StatisticsExtremes (kernels.h) where the path
/// reads them as it goes (the groups laid end to end, at a vector level).
void minmax_stats(const FlatView& flat, void* mins, void* maxs, SimdLevel level, int num_threads,
                  std::optional<StatisticsExtremes>* extremes = nullptr);

}  // namespace qobs::kernels::cpu
