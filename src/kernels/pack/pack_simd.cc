// FP4 packing (pack_simd.h), compiled for AVX2 and AVX-512.
//
// Every E2M1 value is sign, exponent and at most the top mantissa bit of a bf16 / f16
// pattern. With m the magnitude bits and t = (m >> shift) - base (shift: 6 for bf16, 9
// for f16; base: the code of 0.5 on that scale), the magnitudes 0.5, 1, 1.5, 2, 3, 4, 6
// are t = 0, 2, 3, 4, 5, 6, 7, and their E2M1 magnitude codes 1, 2, ..., 7 are max(t, 1);
// m = 0 is code 0. Anything with bits below `shift`, t = 1 (0.75) or t > 7 is not an
// E2M1 value.
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/pack/pack_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/pack/pack_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

template <int kShift, uint16_t kBase>
bool PackFp4T(const uint16_t* src, int64_t n, uint8_t* dst) {
  const hn::ScalableTag<uint16_t> d16;
  const hn::Repartition<uint32_t, decltype(d16)> d32;
  const hn::Repartition<int32_t, decltype(d16)> di32;
  const hn::Rebind<uint8_t, decltype(di32)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d16));
  const auto low = hn::Set(d16, static_cast<uint16_t>((1u << kShift) - 1));
  const auto one = hn::Set(d16, 1), seven = hn::Set(d16, 7), zero = hn::Zero(d16);
  auto bad = hn::FirstN(d16, 0);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto v = hn::LoadU(d16, src + j);
    const auto m = hn::And(v, hn::Set(d16, 0x7FFF));
    const auto t = hn::Sub(hn::ShiftRight<kShift>(m), hn::Set(d16, kBase));  // wraps below 0.5
    const auto is_zero = hn::Eq(m, zero);
    const auto off_grid = hn::Or(hn::Gt(t, seven), hn::Eq(t, one));  // unsigned compare
    bad = hn::Or(bad, hn::Or(hn::Ne(hn::And(v, low), zero), hn::AndNot(is_zero, off_grid)));
    const auto mag = hn::IfThenZeroElse(is_zero, hn::Max(t, one));
    const auto code = hn::Or(mag, hn::And(hn::ShiftRight<12>(v), hn::Set(d16, 8)));  // the sign to bit 3
    // two codes per 32-bit lane (element 2i low, 2i + 1 high): one byte each
    const auto w = hn::BitCast(d32, code);
    const auto byte = hn::Or(hn::And(w, hn::Set(d32, 0xFu)), hn::And(hn::ShiftRight<12>(w), hn::Set(d32, 0xF0u)));
    hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di32, byte)), d8, dst + j / 2);
  }
  if (!hn::AllFalse(d16, bad)) return false;
  for (; j < n; j += 2) {  // the last pairs, the same arithmetic
    uint8_t b = 0;
    for (int k = 0; k < 2; ++k) {
      const uint16_t v = src[j + k], m = v & 0x7FFF;
      const auto t = static_cast<uint16_t>((m >> kShift) - kBase);
      if (m != 0 && ((v & ((1u << kShift) - 1)) != 0 || t > 7 || t == 1)) return false;
      const int mag = m == 0 ? 0 : (t > 1 ? t : 1);
      b = static_cast<uint8_t>(b | ((mag | ((v >> 12) & 8)) << (4 * k)));
    }
    dst[j / 2] = b;
  }
  return true;
}

bool PackFp4(const uint16_t* src, int64_t n, bool is_bf16, uint8_t* dst) {
  // 0.5 is 0x3F00 in bf16 (>> 6: 0xFC) and 0x3800 in f16 (>> 9: 0x1C)
  return is_bf16 ? PackFp4T<6, 0xFC>(src, n, dst) : PackFp4T<9, 0x1C>(src, n, dst);
}

inline constexpr PackSimd kPackSimd{&PackFp4};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const PackSimd* pack_simd(SimdLevel level) { return QOBS_SIMD_TABLE(PackSimd, kPackSimd); }

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
