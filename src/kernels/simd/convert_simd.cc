// bf16 / f16 widening and narrowing (convert_simd.h), compiled for AVX2 and AVX-512.
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/convert_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "kernels/simd/lane_types-inl.h"  // DF, DU, VF, load_widen16, bf16_bits

#include <cmath>
#include <cstring>

#include "kernels/simd/convert_simd.h"
#include "qobs/formats.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Only the AVX2 and AVX-512 passes carry kernels (simd_targets.h); the baseline pass
// Highway always adds stays empty.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

void Widen(const uint16_t* src, int64_t n, bool is_bf16, float* dst) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(load_widen16(src + j, is_bf16), df, dst + j);
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
    if (is_bf16) {
      hn::StoreU(bf16_bits(v), d16, dst + j);  // float_to_bf16's RNE
    } else {
      hn::StoreU(hn::BitCast(d16, hn::DemoteTo(dh16, v)), d16, dst + j);  // the hardware's RNE
    }
  }
  for (; j < n; ++j) dst[j] = is_bf16 ? float_to_bf16(src[j]) : float_to_f16(src[j]);
  if (hn::AllFalse(df, nan)) return;
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(src[i])) dst[i] = is_bf16 ? double_to_bf16(src[i]) : double_to_f16(src[i]);
}

inline constexpr ConvertSimd kConvertSimd{&Widen, &Narrow16};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const ConvertSimd* convert_simd(SimdLevel level) { return QOBS_SIMD_TABLE(ConvertSimd, kConvertSimd); }

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
