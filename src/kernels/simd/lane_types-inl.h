// The vector types of the kernel files, per Highway target, the exact widening of 16-bit
// float patterns into them and the RNE narrowing to bf16 patterns.
//
// A per-target header (Highway's -inl.h convention): a unit includes it after
// <hwy/highway.h>, outside any namespace, and foreach_target.h re-reads it once per
// target, each time into that target's namespace (the include guard toggles with
// HWY_TARGET_TOGGLE). It carries code for the AVX2 and AVX-512 passes only
// (simd_targets.h).
#if defined(QOBS_KERNELS_SIMD_LANE_TYPES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QOBS_KERNELS_SIMD_LANE_TYPES_INL_H_
#undef QOBS_KERNELS_SIMD_LANE_TYPES_INL_H_
#else
#define QOBS_KERNELS_SIMD_LANE_TYPES_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using DH = hn::Half<DF>;                 // half a float vector
using DD = hn::Repartition<double, DF>;  // doubles: Lanes(DF) / 2
using DI64 = hn::RebindToSigned<DD>;
using DU64 = hn::RebindToUnsigned<DD>;
using VF = hn::Vec<DF>;
using VD = hn::Vec<DD>;

/// Lanes(DF) bf16 (bf16) or f16 patterns at p, widened exactly to floats.
HWY_INLINE VF load_widen16(const uint16_t* p, bool bf16) {
  const hn::Rebind<uint16_t, DF> d16;
  const auto raw = hn::LoadU(d16, p);
  if (bf16) return hn::BitCast(DF(), hn::ShiftLeft<16>(hn::PromoteTo(DU(), raw)));
  return hn::PromoteTo(DF(), hn::BitCast(hn::Rebind<hwy::float16_t, DF>(), raw));
}

/// Lanes(DF) floats rounded to nearest even bf16, as the bf16 patterns: float_to_bf16 for
/// every non-NaN lane (a NaN lane is the caller's to fix).
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> bf16_bits(VF v) {
  const DU du;
  auto u = hn::BitCast(du, v);
  u = hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u)))));
  return hn::DemoteTo(hn::Rebind<uint16_t, DF>(), hn::BitCast(DI(), u));
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#endif  // QOBS_KERNELS_SIMD_LANE_TYPES_INL_H_
