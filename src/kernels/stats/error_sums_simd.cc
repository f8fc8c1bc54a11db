// The report's error sums (error_sums_simd.h), compiled for AVX2 and AVX-512.
//
// Numerics: the eight partials live in the lanes of one vector of eight doubles
// (AVX-512) or two of four (AVX2), so lane c adds exactly the elements i = c mod 8, in
// increasing i, each as a rounded multiply then a rounded add (no FMA: the scalar loop
// is compiled with -ffp-contract=off): the partials equal ref::error_sums' bit for bit.
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/stats/error_sums_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "kernels/simd/transpose8-inl.h"  // D8, V8, load8

#include "kernels/stats/error_sums_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

template <typename TX, typename TY>
int64_t ErrorSumsT(const TX* x, bool x_bf16, const TY* y, bool y_bf16, int64_t n, double* sig, double* err) {
  const int64_t full = n / 8 * 8;
#if HWY_TARGET == HWY_AVX3
  const hn::Rebind<double, D8> d8d;  // eight doubles: the eight partials
  auto s = hn::LoadU(d8d, sig), e = hn::LoadU(d8d, err);
  for (int64_t r = 0; r < full; r += 8) {
    const auto a = hn::PromoteTo(d8d, load8(x + r, x_bf16));
    const auto d = hn::Sub(a, hn::PromoteTo(d8d, load8(y + r, y_bf16)));
    s = hn::Add(s, hn::Mul(a, a));
    e = hn::Add(e, hn::Mul(d, d));
  }
  hn::StoreU(s, d8d, sig);
  hn::StoreU(e, d8d, err);
#else
  const hn::FixedTag<double, 4> d4;  // partials 0-3 and 4-7
  const hn::Half<D8> dh;
  auto s0 = hn::LoadU(d4, sig), s1 = hn::LoadU(d4, sig + 4);
  auto e0 = hn::LoadU(d4, err), e1 = hn::LoadU(d4, err + 4);
  for (int64_t r = 0; r < full; r += 8) {
    const V8 xf = load8(x + r, x_bf16), yf = load8(y + r, y_bf16);
    const auto a0 = hn::PromoteTo(d4, hn::LowerHalf(dh, xf)), a1 = hn::PromoteTo(d4, hn::UpperHalf(dh, xf));
    const auto d0 = hn::Sub(a0, hn::PromoteTo(d4, hn::LowerHalf(dh, yf)));
    const auto d1 = hn::Sub(a1, hn::PromoteTo(d4, hn::UpperHalf(dh, yf)));
    s0 = hn::Add(s0, hn::Mul(a0, a0));
    s1 = hn::Add(s1, hn::Mul(a1, a1));
    e0 = hn::Add(e0, hn::Mul(d0, d0));
    e1 = hn::Add(e1, hn::Mul(d1, d1));
  }
  hn::StoreU(s0, d4, sig);
  hn::StoreU(s1, d4, sig + 4);
  hn::StoreU(e0, d4, err);
  hn::StoreU(e1, d4, err + 4);
#endif
  return full;
}

int64_t ErrorSums(const void* x, DType xdt, const void* y, DType ydt, int64_t n, double* sig, double* err) {
  const bool xb = xdt == DType::kBF16, yb = ydt == DType::kBF16;
  const auto* xf = static_cast<const float*>(x);
  const auto* yf = static_cast<const float*>(y);
  const auto* xh = static_cast<const uint16_t*>(x);
  const auto* yh = static_cast<const uint16_t*>(y);
  if (xdt == DType::kF32)
    return ydt == DType::kF32 ? ErrorSumsT(xf, false, yf, false, n, sig, err)
                              : ErrorSumsT(xf, false, yh, yb, n, sig, err);
  return ydt == DType::kF32 ? ErrorSumsT(xh, xb, yf, false, n, sig, err) : ErrorSumsT(xh, xb, yh, yb, n, sig, err);
}

inline constexpr ErrorSumsSimd kErrorSumsSimd{&ErrorSums};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const ErrorSumsSimd* error_sums_simd(SimdLevel level) { return QOBS_SIMD_TABLE(ErrorSumsSimd, kErrorSumsSimd); }

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
