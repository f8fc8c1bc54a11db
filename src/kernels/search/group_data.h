// Reading one group of the flattened view and its R6.3.1 range, as the reference's
// sequential loop computes it (vector min-max: minmax_simd.h; scalar twin: the nan_min
// / nan_max loop of ref::minmax).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels::fast {

/// The len values of qparam element q as floats: in place for contiguous f32, else
/// widened / gathered into buf.
const float* load_group(const FlatView& f, bool contiguous, int64_t q, int64_t len, SimdLevel level,
                        std::vector<float>& buf);

/// A vector min / max of zero does not say which zero: the reference's sequential loop
/// keeps the later of two equal values, so a zero result takes the last zero's sign.
void settle_zero_signs(const float* x, int64_t n, float* lo, float* hi);

/// R6.3.1 min / max of one group, equal to the reference's sequential nan_min /
/// nan_max loop: NaN wins, and for a zero result the sign of the last zero in index
/// order (the loop keeps the later of two equal values).
void group_minmax(const float* x, int64_t n, SimdLevel level, double* lo, double* hi);

}  // namespace qobs::kernels::fast
