// The exact errors of one group's candidates: the fused scalar loop (the reference's
// per-element arithmetic, also the path for non-finite data and the scalar level) and
// the vector block kernel (block_errors_simd.h), whose scalar twin that loop is; and
// the reference's improvement rule over exact errors.
#pragma once

#include <cstdint>

#include "kernels/grid_search/plan.h"

namespace qobs::kernels::cpu {

/// errs[i] for the S candidates whose qparams are s.m_scale / s.m_zp, by the
/// reference's own per-element arithmetic on the cached group x (weights w).
void scalar_errors(const Plan& P, const float* x, const float* w, const Scratch& s, double* errs);

/// Canonical sums of `count` candidates (scales `scale`, zero points `zp`) on one group
/// with the vector kernel; rounded to the error dtype unless `raw`.
void vector_sums(const Plan& P, detail::NormKind nk, const float* x, const float* w, const float* scale,
                 const float* zp, int64_t count, bool raw, Scratch& s, double* out);

/// The reference's improvement rule over one group's errors: improved[i] = errs[i] <
/// (best of the earlier candidates), best starting at the error dtype's max (R6.6.4).
void improvements_from_errors(const Plan& P, const double* errs, uint8_t* improved);

}  // namespace qobs::kernels::cpu
