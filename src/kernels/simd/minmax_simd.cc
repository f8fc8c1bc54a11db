// Min-max and widening (minmax_simd.h), compiled for AVX2 and AVX-512.
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/minmax_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <cstring>

#include "kernels/simd/minmax_simd.h"
#include "qobs/formats.h"  // f16_to_float, float_to_bf16, double_to_bf16, ...

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Only the AVX2 and AVX-512 passes carry kernels (simd_targets.h); the baseline pass
// Highway always adds stays empty.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

#include "kernels/simd/lane_types-inl.h"  // DF, DU, DI, DH, DD, VF, VD, ...
#include "kernels/simd/transpose8-inl.h"  // D8, V8, transpose8x8

/// Eight f32 / bf16 / f16 values at p, as floats (16-bit ones widen exactly).
template <typename T>
HWY_INLINE V8 load8(const T* p, bool bf16) {
  const D8 d8;
  if constexpr (sizeof(T) == 4) {
    return hn::LoadU(d8, p);
  } else {
    const hn::Rebind<uint16_t, D8> d16;
    const auto raw = hn::LoadU(d16, p);
    if (bf16) return hn::BitCast(d8, hn::ShiftLeft<16>(hn::PromoteTo(hn::RebindToUnsigned<D8>(), raw)));
    return hn::PromoteTo(d8, hn::BitCast(hn::Rebind<hwy::float16_t, D8>(), raw));
  }
}

/// MinMaxGroups: num_groups (a multiple of 8) consecutive groups of len (a multiple of
/// 8) values; per group min and max, eight groups per pass, reduced by a transpose.
template <typename T>
bool MinMaxGroupsT(const T* x, bool bf16, int64_t num_groups, int64_t len, float* mins, float* maxs) {
  const D8 d8;
  auto nan = hn::FirstN(d8, 0);
  for (int64_t g0 = 0; g0 < num_groups; g0 += 8) {
    V8 lo[8], hi[8];
    for (int l = 0; l < 8; ++l) {
      const T* p = x + (g0 + l) * len;
      lo[l] = hi[l] = load8(p, bf16);
      nan = hn::Or(nan, hn::IsNaN(lo[l]));
      for (int64_t j = 8; j < len; j += 8) {
        const V8 r = load8(p + j, bf16);
        lo[l] = hn::Min(lo[l], r);
        hi[l] = hn::Max(hi[l], r);
        nan = hn::Or(nan, hn::IsNaN(r));
      }
    }
    V8 clo[8], chi[8];
    transpose8x8(d8, lo, clo);
    transpose8x8(d8, hi, chi);
    for (int k = 1; k < 8; ++k) {
      clo[0] = hn::Min(clo[0], clo[k]);
      chi[0] = hn::Max(chi[0], chi[k]);
    }
    hn::StoreU(clo[0], d8, mins + g0);
    hn::StoreU(chi[0], d8, maxs + g0);
  }
  return hn::AllFalse(d8, nan);
}

bool MinMaxGroups(const void* x, DType dt, int64_t num_groups, int64_t len, float* mins, float* maxs) {
  if (dt == DType::kF32) return MinMaxGroupsT(static_cast<const float*>(x), false, num_groups, len, mins, maxs);
  return MinMaxGroupsT(static_cast<const uint16_t*>(x), dt == DType::kBF16, num_groups, len, mins, maxs);
}

void MinMax(const float* x, int64_t n, float* lo_out, float* hi_out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF lo = hn::Set(df, INFINITY), hi = hn::Set(df, -INFINITY);
  auto nan = hn::FirstN(df, 0);  // all false (MaskFalse is newer than Highway 1.0.3)
  // four independent chains keep the loads streaming
  VF lo1 = lo, hi1 = hi, lo2 = lo, hi2 = hi, lo3 = lo, hi3 = hi;
  int64_t j = 0;
  for (; j + 4 * N <= n; j += 4 * N) {
    const VF a = hn::LoadU(df, x + j), b = hn::LoadU(df, x + j + N), c = hn::LoadU(df, x + j + 2 * N),
             d = hn::LoadU(df, x + j + 3 * N);
    lo = hn::Min(lo, a); hi = hn::Max(hi, a);
    lo1 = hn::Min(lo1, b); hi1 = hn::Max(hi1, b);
    lo2 = hn::Min(lo2, c); hi2 = hn::Max(hi2, c);
    lo3 = hn::Min(lo3, d); hi3 = hn::Max(hi3, d);
    nan = hn::Or(nan, hn::Or(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), hn::Or(hn::IsNaN(c), hn::IsNaN(d))));
  }
  for (; j < n; j += N) {
    const auto m = hn::FirstN(df, static_cast<size_t>(n - j));
    const VF a = hn::MaskedLoad(m, df, x + j);
    lo = hn::IfThenElse(m, hn::Min(lo, a), lo);
    hi = hn::IfThenElse(m, hn::Max(hi, a), hi);
    nan = hn::Or(nan, hn::And(m, hn::IsNaN(a)));
  }
  lo = hn::Min(hn::Min(lo, lo1), hn::Min(lo2, lo3));
  hi = hn::Max(hn::Max(hi, hi1), hn::Max(hi2, hi3));
  if (!hn::AllFalse(df, nan)) {
    *lo_out = *hi_out = NAN;  // torch.amin/amax propagate NaN
    return;
  }
  *lo_out = hn::GetLane(hn::MinOfLanes(df, lo));
  *hi_out = hn::GetLane(hn::MaxOfLanes(df, hi));
}

void Widen(const uint16_t* src, int64_t n, bool is_bf16, float* dst) {
  const DF df;
  const DU du;
  const hn::Rebind<uint16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto raw = hn::LoadU(d16, src + j);
    VF v;
    if (is_bf16) v = hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, raw)));
    else v = hn::PromoteTo(df, hn::BitCast(dh16, raw));
    hn::StoreU(v, df, dst + j);
  }
  for (; j < n; ++j) {
    if (is_bf16) {
      const uint32_t u = static_cast<uint32_t>(src[j]) << 16;
      std::memcpy(dst + j, &u, 4);
    } else {
      dst[j] = f16_to_float(src[j]);
    }
  }
}

void Narrow16(const float* src, int64_t n, bool is_bf16, uint16_t* dst) {
  const DF df;
  const hn::Rebind<uint16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto nan = hn::FirstN(df, 0);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const VF v = hn::LoadU(df, src + j);
    nan = hn::Or(nan, hn::IsNaN(v));
    if (is_bf16) {  // float_to_bf16's RNE: add 0x7FFF plus the lowest kept bit, truncate
      const DU du;
      auto u = hn::BitCast(du, v);
      u = hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u)))));
      hn::StoreU(hn::DemoteTo(d16, hn::BitCast(DI(), u)), d16, dst + j);
    } else {
      hn::StoreU(hn::BitCast(d16, hn::DemoteTo(dh16, v)), d16, dst + j);  // the hardware's RNE
    }
  }
  for (; j < n; ++j) dst[j] = is_bf16 ? float_to_bf16(src[j]) : float_to_f16(src[j]);
  if (hn::AllFalse(df, nan)) return;
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(src[i])) dst[i] = is_bf16 ? double_to_bf16(src[i]) : double_to_f16(src[i]);
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"  // QOBS_SIMD_DISPATCH

namespace qobs::kernels::detail {

void minmax_simd(SimdLevel level, const float* x, int64_t n, float* lo, float* hi) {
  QOBS_SIMD_DISPATCH(MinMax(x, n, lo, hi));
}
bool minmax_groups_simd(SimdLevel level, const void* x, DType dt, int64_t num_groups, int64_t len, float* mins,
                        float* maxs) {
  QOBS_SIMD_DISPATCH(MinMaxGroups(x, dt, num_groups, len, mins, maxs));
}
void widen_simd(SimdLevel level, const uint16_t* src, int64_t n, bool is_bf16, float* dst) {
  if (level == SimdLevel::kScalar) {  // the scalar twin, so that callers need no fallback of their own
    for (int64_t j = 0; j < n; ++j) dst[j] = is_bf16 ? bf16_to_float(src[j]) : f16_to_float(src[j]);
    return;
  }
  QOBS_SIMD_DISPATCH(Widen(src, n, is_bf16, dst));
}
void narrow16_simd(SimdLevel level, const float* src, int64_t n, bool is_bf16, uint16_t* dst) {
  QOBS_SIMD_DISPATCH(Narrow16(src, n, is_bf16, dst));
}

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
