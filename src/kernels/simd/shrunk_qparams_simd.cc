// R4.1 on arrays of f32 statistics (shrunk_qparams_simd.h), compiled for AVX2 and
// AVX-512.
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/shrunk_qparams_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/simd/narrow.h"
#include "kernels/simd/shrunk_qparams_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Only the AVX2 and AVX-512 passes carry kernels (simd_targets.h); the baseline pass
// Highway always adds stays empty.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

#include "kernels/simd/lane_types-inl.h"  // DF, DU, DI, DH, DD, VF, VD, ...
#include "kernels/simd/grid_round-inl.h"  // narrow_to, fp8_round
#include "kernels/simd/qparams_lanes-inl.h"  // shrunk_qparams_lanes

template <bool kZp>
bool ShrunkQParamsT(const qobs::detail::ShrunkQParams& Q, const float* lo, const float* hi, int64_t n, float* scale,
                    float* zp) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF s, z;
  auto finite = hn::FirstN(df, static_cast<size_t>(N));
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const VF a = hn::LoadU(df, lo + j), b = hn::LoadU(df, hi + j);
    finite = hn::And(finite, hn::And(hn::IsFinite(a), hn::IsFinite(b)));
    shrunk_qparams_lanes<kZp>(Q, a, b, s, z);
    hn::StoreU(s, df, scale + j);
    hn::StoreU(z, df, zp + j);
  }
  if (j < n) {
    const auto m = hn::FirstN(df, static_cast<size_t>(n - j));
    // dead lanes compute on zeros (a zero range: eps, no NaN escapes) and are not stored
    const VF a = hn::MaskedLoad(m, df, lo + j), b = hn::MaskedLoad(m, df, hi + j);
    finite = hn::And(finite, hn::And(hn::IsFinite(a), hn::IsFinite(b)));
    shrunk_qparams_lanes<kZp>(Q, a, b, s, z);
    hn::BlendedStore(s, m, df, scale + j);
    hn::BlendedStore(z, m, df, zp + j);
  }
  return hn::AllTrue(df, finite);
}

bool ShrunkQParamsN(const qobs::detail::ShrunkQParams& Q, const float* lo, const float* hi, int64_t n, float* scale,
                    float* zp) {
  if (Q.symmetric) return ShrunkQParamsT<false>(Q, lo, hi, n, scale, zp);
  return ShrunkQParamsT<true>(Q, lo, hi, n, scale, zp);
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"  // QOBS_SIMD_DISPATCH

namespace qobs::kernels::detail {

bool shrunk_qparams_simd(SimdLevel level, const qobs::detail::ShrunkQParams& q, const float* lo, const float* hi,
                         int64_t n, float* scale, float* zp) {
  QOBS_SIMD_DISPATCH(ShrunkQParamsN(q, lo, hi, n, scale, zp));
}

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
