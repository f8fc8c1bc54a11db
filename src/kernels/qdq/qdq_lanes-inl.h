// The R5.1 element steps on a vector of lanes, shared by the QDQ runs (qdq_simd.cc) and
// the least-squares scorer (lsq_error_simd.cc): each op rounded once, RNE, to its dtype
// by narrow_to, as Arith does. The scalar twins are quantize_elem / dequantize_elem (qparam_math.h).
//
// A per-target header (Highway's -inl.h convention): a unit includes it after
// <hwy/highway.h>, outside any namespace, and foreach_target.h re-reads it once per
// target, each time into that target's namespace (the include guard toggles with
// HWY_TARGET_TOGGLE). It carries code for the AVX2 and AVX-512 passes only
// (simd_targets.h).
#if defined(QOBS_KERNELS_QDQ_QDQ_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QOBS_KERNELS_QDQ_QDQ_LANES_INL_H_
#undef QOBS_KERNELS_QDQ_QDQ_LANES_INL_H_
#else
#define QOBS_KERNELS_QDQ_QDQ_LANES_INL_H_
#endif

#include <hwy/highway.h>
#include "kernels/simd/narrow.h"
#include "qparams/qparam_math.h"
#include "kernels/simd/lane_types-inl.h"
#include "kernels/simd/grid_round-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

/// R5.1.1 steps 2-4: the quantized value of x (x / s + z in y's dtype, clamped and
/// rounded to the grid). A NaN quotient sets `bad`: the vector clamp does not propagate
/// NaN as the reference's does (R0.4f), so the caller redoes such lanes with the scalar steps.
template <int kGrid>
HWY_INLINE VF quantize_lanes(VF x, VF s, VF zx, bool has_zp, Narrow ny, VF qmin, VF qmax, hn::Mask<DF>& bad) {
  constexpr auto grid = static_cast<qobs::detail::GridKind>(kGrid);
  const DF df;
  VF y = narrow_to(ny, hn::Div(x, s));  // a division, never a reciprocal multiply
  if (has_zp) y = narrow_to(ny, hn::Add(y, zx));
  bad = hn::Or(bad, hn::IsNaN(y));
  // R2.6: operand order as nan_max / nan_min (a > b ? a : b), which is what the x86
  // max / min instructions return for equal operands (+0 vs -0)
  const VF c = hn::Min(hn::Max(y, qmin), qmax);
  if constexpr (grid == qobs::detail::GridKind::kInt) {
    return hn::Round(c);  // half to even, as nearbyint
  } else if constexpr (grid == qobs::detail::GridKind::kFp8) {
    return fp8_round(c);
  } else if constexpr (grid == qobs::detail::GridKind::kFp6) {
    return fp6_round(c);  // copysign keeps every zero's sign, as the scalar fp6_round
  } else {
    // the scalar fp4_round maps -0.0 to +0.0 (sign(x) * m); the vector one keeps the
    // sign of every zero
    return hn::IfThenZeroElse(hn::Eq(c, hn::Zero(df)), fp4_round(c));
  }
}

/// R5.1.3 for the quantized values q: (q - z) x s in s's dtype.
HWY_INLINE VF dequantize_lanes(VF q, VF s, VF zs, bool has_zp, Narrow ns) {
  VF d = narrow_to(ns, q);
  if (has_zp) d = narrow_to(ns, hn::Sub(d, zs));
  return narrow_to(ns, hn::Mul(d, s));
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#endif  // QOBS_KERNELS_QDQ_QDQ_LANES_INL_H_
