// Private interface of the least-squares observers' observer candidates in lanes
// (lsq_candidates_simd.cc, compiled once per instruction set by Highway): R4.1 for the
// shrunk ranges (m0 p_i, M0 p_i) of one group (docs/LSQ.md#L1 step 1). Scalar twin:
// ShrunkQParams::compute (qparam_math.h), whose steps shrunk_qparams_lanes repeats.
#pragma once

#include <cstdint>

#include "kernels/simd/simd_level.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::detail {

/// The lsq search's candidate qparams in lanes (simd_dispatch.h).
struct LsqCandidatesSimd {
  /// scale[i], zp[i] of ShrunkQParams::compute(m0, M0, shrink, n) for a usable plan,
  /// bit for bit.
  void (*run)(const qobs::detail::ShrunkQParams& q, float m0, float M0, const float* shrink, int64_t n, float* scale,
              float* zp);
};
/// The table for a vector level; nullptr for kScalar (the scalar twin:
/// ShrunkQParams::compute).
const LsqCandidatesSimd* lsq_candidates_simd(SimdLevel level);

}  // namespace qobs::kernels::detail
