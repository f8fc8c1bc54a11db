// The vector pow functions on arrays, for the tests: pow_replay against libm's powf
// bit for bit, pow_approx against its bound (pow-inl.h has the functions the kernels
// inline).
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/pow/pow_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "kernels/simd/lane_types-inl.h"  // DF, DU, DI, DH, DD, VF, VD, ...
#include "kernels/pow/pow-inl.h"          // pow_replay, pow_approx

#include <cmath>

#include "kernels/pow/pow_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Only the AVX2 and AVX-512 passes carry kernels (simd_targets.h); the baseline pass
// Highway always adds stays empty.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

void PowApprox(const float* x, int64_t n, float y, float* out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t j = 0; j < n; j += N) {
    const auto m = hn::FirstN(df, static_cast<size_t>(n - j));
    hn::BlendedStore(pow_approx(hn::MaskedLoad(m, df, x + j), y), m, df, out + j);
  }
}

void PowReplay(const float* x, int64_t n, float y, const PowfTables& t, float* out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t j = 0; j < n; j += N) {
    const auto m = hn::FirstN(df, static_cast<size_t>(n - j));
    const VF v = pow_replay(hn::MaskedLoad(m, df, x + j), y, t);
    hn::BlendedStore(v, m, df, out + j);
  }
}

inline constexpr PowSimd kPowSimd{&PowReplay, &PowApprox};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const PowSimd* pow_simd(SimdLevel level) { return QOBS_SIMD_TABLE(PowSimd, kPowSimd); }

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
