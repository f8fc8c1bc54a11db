// Per-target vector rounding shared by the SIMD kernels (the search kernels,
// qdq_simd.cc): narrowing an f32 vector to bf16 / f16 (R0.4b), and rounding to the FP8
// E4M3, FP4 E2M1 and FP6 E2M3 grids (R2.2.1, R2.3.1, R2.8.1). Each has a scalar twin in
// qparam_math.h / formats.h / core/arith.h.
//
// A per-target header (Highway's -inl.h convention): a unit includes it after
// <hwy/highway.h>, outside any namespace, and foreach_target.h re-reads it once per
// target, each time into that target's namespace (the include guard toggles with
// HWY_TARGET_TOGGLE). It carries code for the AVX2 and AVX-512 passes only
// (simd_targets.h).
#if defined(QOBS_KERNELS_SIMD_GRID_ROUND_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QOBS_KERNELS_SIMD_GRID_ROUND_INL_H_
#undef QOBS_KERNELS_SIMD_GRID_ROUND_INL_H_
#else
#define QOBS_KERNELS_SIMD_GRID_ROUND_INL_H_
#endif

#include <hwy/highway.h>
#include "kernels/simd/narrow.h"
#include "qobs/formats.h"
#include "kernels/simd/lane_types-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

/// RNE of an f32 vector to bf16 / f16, kept in f32 containers (finite or inf input).
HWY_INLINE VF narrow_to(Narrow kind, VF v) {
  const DF df;
  if (kind == Narrow::kBF16) {
    const DU du;
    auto u = hn::BitCast(du, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
    u = hn::And(hn::Add(u, hn::Add(hn::Set(du, 0x7FFFu), lsb)), hn::Set(du, 0xFFFF0000u));
    return hn::BitCast(df, u);
  }
  if (kind == Narrow::kF16) {
    const hn::Rebind<hwy::float16_t, DF> dh16;
    return hn::PromoteTo(df, hn::DemoteTo(dh16, v));
  }
  return v;
}

/// R2.6 for FP8 E4M3 on a clamped value: RNE to 3 mantissa bits, or to multiples of
/// 2^-9 below the smallest normal 2^-6.
HWY_INLINE VF fp8_round(VF c) {
  const DF df;
  const DU du;
  const VF a = hn::Abs(c);
  const VF sub = hn::Mul(hn::Round(hn::Mul(a, hn::Set(df, static_cast<float>(1.0 / min_subnormal(kFp8E4M3Spec))))),
                         hn::Set(df, static_cast<float>(min_subnormal(kFp8E4M3Spec))));
  auto u = hn::BitCast(du, a);
  const auto lsb = hn::And(hn::ShiftRight<20>(u), hn::Set(du, 1u));
  u = hn::And(hn::Add(u, hn::Add(hn::Set(du, 0x7FFFFu), lsb)), hn::Set(du, 0xFFF00000u));
  const VF nrm = hn::BitCast(df, u);
  const VF mag = hn::IfThenElse(hn::Lt(a, hn::Set(df, static_cast<float>(min_normal(kFp8E4M3Spec)))), sub, nrm);
  return hn::CopySign(mag, c);
}

/// R2.3.1 FP4 rounding by the interval table (closed ends = ties to even mantissa).
HWY_INLINE VF fp4_round(VF c) {
  const DF df;
  const VF a = hn::Abs(c);
  VF m = hn::Zero(df);
  m = hn::IfThenElse(hn::Gt(a, hn::Set(df, 0.25f)), hn::Set(df, 0.5f), m);
  m = hn::IfThenElse(hn::Ge(a, hn::Set(df, 0.75f)), hn::Set(df, 1.0f), m);
  m = hn::IfThenElse(hn::Gt(a, hn::Set(df, 1.25f)), hn::Set(df, 1.5f), m);
  m = hn::IfThenElse(hn::Ge(a, hn::Set(df, 1.75f)), hn::Set(df, 2.0f), m);
  m = hn::IfThenElse(hn::Gt(a, hn::Set(df, 2.5f)), hn::Set(df, 3.0f), m);
  m = hn::IfThenElse(hn::Ge(a, hn::Set(df, 3.5f)), hn::Set(df, 4.0f), m);
  m = hn::IfThenElse(hn::Gt(a, hn::Set(df, 5.0f)), hn::Set(df, kFp4E2M1Max), m);
  return hn::CopySign(m, c);  // the sign of a zero never reaches an error term
}

/// fp4_round for 0 <= c <= 6, in five ops: the FP4 values are the multiples of 1/2
/// below 2, of 1 in [2, 4) and of 2 from 4, and the table's closed ends are ties to
/// even, so adding and subtracting 2^22 times c's binade (at least 1) rounds RNE to
/// exactly that step.
HWY_INLINE VF fp4_round_nonneg(VF c) {
  const DF df;
  const DU du;
  const VF binade = hn::BitCast(df, hn::And(hn::BitCast(du, c), hn::Set(du, 0x7F800000u)));
  const VF big = hn::Mul(hn::Max(binade, hn::Set(df, 1.0f)), hn::Set(df, 0x1p22f));
  return hn::Sub(hn::Add(c, big), big);
}

/// R2.8.1 FP6 rounding (formats.h fp6_round) for |c| <= 7.5, i.e. after the clamp of
/// R2.6: the FP6 values are the multiples of 1/8 below 2, of 1/4 in [2, 4) and of 1/2
/// from 4, the step being 2^-3 times c's binade (at least 1), so adding and subtracting
/// 2^20 times that binade rounds |c| RNE to exactly that step, as the scalar
/// division by the step and RNE does; a rounding up to the next binade lands on a grid
/// value too. The sign is copied back (copysign: -0.0 stays -0.0, as the scalar's). A
/// NaN stays NaN.
HWY_INLINE VF fp6_round(VF c) {
  const DF df;
  const DU du;
  const VF a = hn::Abs(c);
  const VF binade = hn::BitCast(df, hn::And(hn::BitCast(du, a), hn::Set(du, 0x7F800000u)));
  const VF big = hn::Mul(hn::Max(binade, hn::Set(df, 1.0f)), hn::Set(df, 0x1p20f));
  return hn::CopySign(hn::Sub(hn::Add(a, big), big), c);
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#endif  // QOBS_KERNELS_SIMD_GRID_ROUND_INL_H_
