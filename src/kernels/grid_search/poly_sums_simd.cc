// The certified polynomial sums (poly_sums_simd.h), compiled for AVX2 and AVX-512.
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/grid_search/poly_sums_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "kernels/simd/lane_types-inl.h"         // DF, DU, DI, DH, DD, VF, VD, ...
#include "kernels/simd/grid_round-inl.h"         // fp4_round
#include "kernels/grid_search/poly_terms-inl.h"  // exp_table16, eval_poly, poly_dispatch

#include <cmath>

#include "kernels/simd/narrow.h"
#include "kernels/grid_search/poly_sums_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Only the AVX2 and AVX-512 passes carry kernels (simd_targets.h); the baseline pass
// Highway always adds stays empty.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

/// kPowPoly sums (pow_poly.h). The quantization steps are the reference's (as in
/// BlockErrorsT; the division stays: a reciprocal multiply measured no faster), so q is
/// exact; the error is taken as r = q - y, within poly_r_error of the reference's
/// e / s, and its power as 2^(p k) * P(m).
template <bool kZp, bool kFp4, int kDeg>
HWY_NOINLINE void PolySumsT(const PolySumArgs& A) {
  const DF df;
  const DI di;
  const DD dd;
  const DH dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const PowPoly& P = *A.poly;
  const VF qmin = hn::Set(df, A.q_min), qmax = hn::Set(df, A.q_max);
  const VF floor_v = hn::Set(df, P.floor);
  const VF mant = hn::BitCast(df, hn::Set(di, 0x007FFFFF)), one = hn::Set(df, 1.0f);
  VF c[kDeg + 1];
  for (int d = 0; d <= kDeg; ++d) c[d] = hn::Set(df, P.coef[d]);
  const int64_t n_main = A.n - A.n % N;
  for (int64_t i = 0; i < A.num_candidates; ++i) {
    const VF s = hn::Set(df, A.scale[i]);
    const VF z = hn::Set(df, kZp ? A.zp[i] : 0.0f);
    VF amax = hn::Zero(df);
    auto term = [&](VF x) HWY_ATTR {
      VF y = hn::Div(x, s);
      if constexpr (kZp) y = hn::Add(y, z);
      const VF clamped = hn::Min(hn::Max(y, qmin), qmax);
      const VF q = kFp4 ? fp4_round(clamped) : hn::Round(clamped);
      // r = q - y stands for the reference's e / s (poly_r_error bounds the difference)
      const VF a = hn::Max(hn::Abs(hn::Sub(q, y)), floor_v);
      amax = hn::Max(amax, a);
      const VF m = hn::Or(hn::And(a, mant), one);
      return hn::Mul(eval_poly<kDeg>(c, m), exp_table16(P.table, hn::ShiftRight<23>(hn::BitCast(di, a))));
    };
    VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
    int64_t j = 0;
    for (; j + 2 * N <= n_main; j += 2 * N) {
      acc0 = hn::Add(acc0, term(hn::LoadU(df, A.x + j)));
      acc1 = hn::Add(acc1, term(hn::LoadU(df, A.x + j + N)));
    }
    if (j < n_main) acc0 = hn::Add(acc0, term(hn::LoadU(df, A.x + j)));
    if (n_main < A.n) {
      const auto m = hn::FirstN(df, static_cast<size_t>(A.n - n_main));
      acc1 = hn::Add(acc1, hn::IfThenElseZero(m, term(hn::MaskedLoad(m, df, A.x + n_main))));
    }
    if (!hn::AllTrue(df, hn::Lt(amax, hn::Set(df, P.limit)))) {
      A.sums[i] = HUGE_VAL;
      continue;
    }
    VD t = hn::Add(hn::Add(hn::PromoteTo(dd, hn::LowerHalf(dh, acc0)), hn::PromoteTo(dd, hn::UpperHalf(dh, acc0))),
                   hn::Add(hn::PromoteTo(dd, hn::LowerHalf(dh, acc1)), hn::PromoteTo(dd, hn::UpperHalf(dh, acc1))));
    A.sums[i] = hn::GetLane(hn::SumOfLanes(dd, t));
  }
}

struct PolySumsKernel {
  template <bool kZp, bool kFp4, int kDeg>
  static void Run(const PolySumArgs& A) {
    PolySumsT<kZp, kFp4, kDeg>(A);
  }
};

void PolySums(const PolySumArgs& A) { poly_dispatch<PolySumsKernel>(A, A.has_zp); }

inline constexpr PolySumsSimd kPolySumsSimd{&PolySums};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const PolySumsSimd* poly_sums_simd(SimdLevel level) { return QOBS_SIMD_TABLE(PolySumsSimd, kPolySumsSimd); }

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
