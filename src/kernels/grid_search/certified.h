// The certified path of the one-group search (f32 errors, unweighted, non-integer
// norm): approximate sums A_i with a rigorous bound |err_i - A_i| <= c A_i + abs_i
// decide every comparison whose intervals do not overlap; an overlapping one is
// settled with the exact sums of the two candidates involved (exact.h). Each decision
// therefore equals the reference's. The approximate sums are the polynomial terms of
// pow_poly.h (poly_sums_simd.h; INT / FP4 grids on f32 data) or kPowApprox terms of
// the block kernel. Its vector twin for small groups is the batch kernel (batch.h).
#pragma once

#include <cstdint>

#include "kernels/grid_search/plan.h"

namespace qobs::kernels::cpu {

/// improved[i] for all S candidates of one group whose values are x (weights w) and
/// whose qparams are s.scale / s.zp, as the reference decides them; xmax = max |x|.
void certified_improvements(const Plan& P, const float* x, const float* w, double xmax, Scratch& s, uint8_t* improved);

}  // namespace qobs::kernels::cpu
