// The plain reference's seam for the negative control of the fast-vs-reference tests
// (tests/kernels/lsq/lsq_test.cc): ref::lsq_search with one part of docs/LSQ.md#L1
// left out. Each omission must make the comparison fail on the tests' inputs, which
// shows that those inputs reach every part of the search. Nothing else calls it.
#pragma once

#include "kernels/kernels.h"

namespace qobs::kernels::detail {

enum class LsqRefOmit {
  kNothing,                   ///< ref::lsq_search itself
  kLargestObserverCandidate,  ///< the observer candidate of the largest (scale, zero point)
  kOutwardWalk,               ///< block scales: the codes / exponents outside the window
  kIdealGridPicks,            ///< integer grids: the ideal-quantizer proxies' picks
  kZeroPointNeighbours,       ///< asymmetric integer grids: z - 1 and z + 1 of the best
  kRefits,                    ///< the least-squares refits
};

LsqSearchResult lsq_search_ref_omitting(const FlatView& flat, const QuantizationArgs& args, const LsqSearchConfig& cfg,
                                        const FlatView* weights, const Tensor* global_scale, LsqRefOmit omit);

}  // namespace qobs::kernels::detail
