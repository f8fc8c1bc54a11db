// Per-target eight-float vectors (256 bits, on AVX-512 too): the load of eight f32 /
// bf16 / f16 values as floats and the 8 x 8 transpose, shared by the batch kernel's
// input (poly_batch_simd.cc BatchTranspose), the eight-groups-per-pass min-max
// (minmax_simd.cc) and the report's error sums (error_sums_simd.cc).
//
// A per-target header (Highway's -inl.h convention): a unit includes it after
// <hwy/highway.h>, outside any namespace, and foreach_target.h re-reads it once per
// target, each time into that target's namespace (the include guard toggles with
// HWY_TARGET_TOGGLE). It carries code for the AVX2 and AVX-512 passes only
// (simd_targets.h).
#if defined(QOBS_KERNELS_SIMD_TRANSPOSE8_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QOBS_KERNELS_SIMD_TRANSPOSE8_INL_H_
#undef QOBS_KERNELS_SIMD_TRANSPOSE8_INL_H_
#else
#define QOBS_KERNELS_SIMD_TRANSPOSE8_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

using D8 = hn::FixedTag<float, 8>;  // 256-bit vectors, on AVX-512 too
using V8 = hn::Vec<D8>;

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

/// col[k] lane l = row[l] lane k: pairs of floats, pairs of pairs (as doubles), then
/// 128-bit halves.
HWY_INLINE void transpose8x8(D8 d8, const V8* row, V8* col) {
  const hn::Repartition<double, D8> d8d;
  V8 t[8], u[8];
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = hn::InterleaveLower(d8, row[2 * k], row[2 * k + 1]);
    t[2 * k + 1] = hn::InterleaveUpper(d8, row[2 * k], row[2 * k + 1]);
  }
  for (int k = 0; k < 2; ++k)
    for (int h = 0; h < 2; ++h) {
      const auto a = hn::BitCast(d8d, t[4 * k + h]), b = hn::BitCast(d8d, t[4 * k + 2 + h]);
      u[4 * k + 2 * h] = hn::BitCast(d8, hn::InterleaveLower(d8d, a, b));
      u[4 * k + 2 * h + 1] = hn::BitCast(d8, hn::InterleaveUpper(d8d, a, b));
    }
  // u[0..3]: elements 0-3 of rows 0-3 (low half) and 4-7 (high half); u[4..7] rows 4-7
  for (int k = 0; k < 4; ++k) {
    col[k] = hn::ConcatLowerLower(d8, u[4 + k], u[k]);
    col[k + 4] = hn::ConcatUpperUpper(d8, u[4 + k], u[k]);
  }
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#endif  // QOBS_KERNELS_SIMD_TRANSPOSE8_INL_H_
