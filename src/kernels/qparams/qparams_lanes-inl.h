// Per-target R4.1 for candidate statistics (shrunk_qparams_lanes), shared by the array
// form (qparams_simd.cc) and the batch kernel (poly_batch_simd.cc). Scalar twin:
// ShrunkQParams::compute (qparam_math.h).
//
// A per-target header (Highway's -inl.h convention): a unit includes it after
// <hwy/highway.h>, outside any namespace, and foreach_target.h re-reads it once per
// target, each time into that target's namespace (the include guard toggles with
// HWY_TARGET_TOGGLE). It carries code for the AVX2 and AVX-512 passes only
// (simd_targets.h).
#if defined(QOBS_KERNELS_QPARAMS_QPARAMS_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QOBS_KERNELS_QPARAMS_QPARAMS_LANES_INL_H_
#undef QOBS_KERNELS_QPARAMS_QPARAMS_LANES_INL_H_
#else
#define QOBS_KERNELS_QPARAMS_QPARAMS_LANES_INL_H_
#endif

#include <hwy/highway.h>
#include "kernels/simd/narrow.h"
#include "qobs/formats.h"
#include "qparams/qparam_math.h"
#include "kernels/simd/lane_types-inl.h"
#include "kernels/simd/grid_round-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

/// R4.1 lane-wise for f32 statistics under a ShrunkQParams-usable plan: the same f32
/// operations, in the same order, as ShrunkQParams::compute (tested bit for bit against
/// compute_qparams_elem). z stays 0 for symmetric plans.
template <bool kZp>
HWY_INLINE void shrunk_qparams_lanes(const qobs::detail::ShrunkQParams& Q, VF cm, VF cM, VF& s, VF& z) {
  const DF df;
  const VF zero = hn::Zero(df);
  // Arith::narrow of the statistics' dtype (bf16 / f16 in parity mode)
  const Narrow nr = Q.stat_round == DType::kBF16  ? Narrow::kBF16
                    : Q.stat_round == DType::kF16 ? Narrow::kF16
                                                  : Narrow::kNone;
  z = zero;
  if constexpr (!kZp) {
    // max(|min(cm, 0)|, |max(cM, 0)|) as max(max(cM, 0), max(-cm, 0)): four ops instead
    // of eight. x86 max returns its second operand when either is NaN, so a NaN
    // statistic counts as 0 here exactly as in the compare-and-select form, and a
    // zero's sign cannot matter (a zero amax becomes eps below).
    s = narrow_to(nr, hn::Div(hn::Max(hn::Max(cM, zero), hn::Max(hn::Neg(cm), zero)), hn::Set(df, Q.half_range)));
  } else {
    const VF mn = hn::IfThenElse(hn::Lt(cm, zero), cm, zero), mx = hn::IfThenElse(hn::Gt(cM, zero), cM, zero);
    s = narrow_to(nr, hn::Div(narrow_to(nr, hn::Sub(mx, mn)), hn::Set(df, Q.range)));
    z = narrow_to(nr, hn::Sub(hn::Set(df, Q.q_min), narrow_to(nr, hn::Div(mn, s))));
    const auto zero_range = hn::IsNaN(z);  // 0 / 0: the zero point is 0 (Q23)
    z = hn::IfThenElse(hn::Gt(z, hn::Set(df, Q.q_min)), z, hn::Set(df, Q.q_min));
    z = hn::IfThenElse(hn::Lt(z, hn::Set(df, Q.q_max)), z, hn::Set(df, Q.q_max));
    z = hn::IfThenElse(hn::Gt(z, hn::Set(df, Q.zp_lo)), z, hn::Set(df, Q.zp_lo));
    z = hn::IfThenElse(hn::Lt(z, hn::Set(df, Q.zp_hi)), z, hn::Set(df, Q.zp_hi));
    z = hn::IfThenZeroElse(zero_range, hn::Round(z));  // RNE to the integer zero-point dtype
  }
  if (Q.has_global) s = hn::Mul(hn::Set(df, Q.global_scale), s);
  if (Q.fp8_scale) s = fp8_round(hn::Min(s, hn::Set(df, qobs::kFp8E4M3Max)));
  s = hn::IfThenElse(hn::Eq(s, zero), hn::Set(df, Q.eps), s);
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#endif  // QOBS_KERNELS_QPARAMS_QPARAMS_LANES_INL_H_
