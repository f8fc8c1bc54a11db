// The CPU path of the least-squares search behind kernels.h (docs/LSQ.md#L4): groups
// spread over the thread pool, candidates scored in SIMD lanes where the level allows
// it, the observer candidates pruned by proven lower bounds, refits that look up what
// the group's search holds. Private to src/kernels (the driver lsq.cc, tests,
// benchmarks); bit-identical to the plain reference ref::lsq_search (lsq_ref.cc).
#pragma once

#include "kernels/kernels.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels::cpu {

/// kernels::lsq_search at SIMD level `level` (kScalar: the scalar twins of every vector
/// kernel) on `num_threads` threads (0: QOBS_NUM_THREADS, the pool or the hardware).
LsqSearchResult lsq_search(const FlatView& flat, const QuantizationArgs& args, const LsqSearchConfig& cfg,
                           const FlatView* weights, const Tensor* global_scale, SimdLevel level, int num_threads);

}  // namespace qobs::kernels::cpu
