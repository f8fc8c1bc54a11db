// The least-squares observers' observer candidates in lanes (lsq_candidates_simd.h):
// the shrunk statistics rounded as Arith::mul rounds them, then R4.1 by
// shrunk_qparams_lanes. Compiled for AVX2 and AVX-512.
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/lsq/lsq_candidates_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "kernels/simd/lane_types-inl.h"        // DF, DU, DI, VF, ...
#include "kernels/simd/grid_round-inl.h"        // narrow_to, fp8_round
#include "kernels/qparams/qparams_lanes-inl.h"  // shrunk_qparams_lanes

#include "kernels/lsq/lsq_candidates_simd.h"
#include "kernels/simd/narrow.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

template <bool kZp>
void LsqCandidatesT(const qobs::detail::ShrunkQParams& Q, float m0, float M0, const float* shrink, int64_t n,
                    float* scale, float* zp) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  // Arith::mul of the statistics' dtype (ShrunkQParams::compute's rnd)
  const Narrow nr = Q.stat_round == DType::kBF16  ? Narrow::kBF16
                    : Q.stat_round == DType::kF16 ? Narrow::kF16
                                                  : Narrow::kNone;
  const VF vm = hn::Set(df, m0), vM = hn::Set(df, M0);
  VF s, z;
  for (int64_t j = 0; j < n; j += N) {
    const auto live = hn::FirstN(df, static_cast<std::size_t>(n - j));
    // dead lanes compute on a zero shrink (a zero range: eps, no NaN escapes), not stored
    const VF p = hn::MaskedLoad(live, df, shrink + j);
    shrunk_qparams_lanes<kZp>(Q, narrow_to(nr, hn::Mul(vm, p)), narrow_to(nr, hn::Mul(vM, p)), s, z);
    hn::BlendedStore(s, live, df, scale + j);
    hn::BlendedStore(z, live, df, zp + j);
  }
}

void LsqCandidates(const qobs::detail::ShrunkQParams& Q, float m0, float M0, const float* shrink, int64_t n,
                   float* scale, float* zp) {
  if (Q.symmetric) LsqCandidatesT<false>(Q, m0, M0, shrink, n, scale, zp);
  else LsqCandidatesT<true>(Q, m0, M0, shrink, n, scale, zp);
}

inline constexpr LsqCandidatesSimd kLsqCandidatesSimd{&LsqCandidates};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const LsqCandidatesSimd* lsq_candidates_simd(SimdLevel level) {
  return QOBS_SIMD_TABLE(LsqCandidatesSimd, kLsqCandidatesSimd);
}

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
