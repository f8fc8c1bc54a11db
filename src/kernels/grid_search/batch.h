// Small groups one per vector lane: f32 groups with the certified polynomial decisions
// of a whole batch at once (poly_batch_simd.h; scalar twin: certified_improvements,
// certified.h), bf16 / f16 groups with exact errors (exact_batch_simd.h; scalar twin:
// scalar_errors, exact.h). The tests run both paths (cfg.batch_groups) and compare.
#pragma once

#include <cstdint>

#include "kernels/grid_search/plan.h"

namespace qobs::kernels::cpu {

/// Groups [q0, q0 + count) (count <= P.batch.lanes) with the batch kernel, one group per
/// lane: their base ranges into m0 / M0, their improvement bits into bits (W words a
/// group) and any. False, with nothing written, when some group's range is outside
/// what the kernel takes (non-finite, or |m| >= 2^100): the caller runs those groups
/// one at a time. The exact batch also hands back groups with NaN or Inf and batches
/// where some candidate's scale is not finite and positive.
bool batch_improvements(const Plan& P, int64_t q0, int64_t count, Scratch& s, double* m0, double* M0, uint64_t* bits,
                        int64_t W, uint8_t* any);

}  // namespace qobs::kernels::cpu
