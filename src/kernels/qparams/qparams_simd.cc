// R4.1 on arrays of f32 statistics (qparams_simd.h), compiled for AVX2 and
// AVX-512.
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/qparams/qparams_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "kernels/simd/lane_types-inl.h"        // DF, DU, DI, DH, DD, VF, VD, ...
#include "kernels/simd/grid_round-inl.h"        // narrow_to, fp8_round
#include "kernels/qparams/qparams_lanes-inl.h"  // shrunk_qparams_lanes

#include "kernels/simd/narrow.h"
#include "kernels/qparams/qparams_simd.h"
#include "qobs/formats.h"  // bf16_to_float, float_to_bf16, ...

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Only the AVX2 and AVX-512 passes carry kernels (simd_targets.h); the baseline pass
// Highway always adds stays empty.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

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

/// ShrunkQParamsT on 16-bit statistics, widened in the lanes, with the scales stored in
/// scale_dt (f32, or narrowed in the lanes to bf16 / f16: narrow16_simd's RNE, which
/// is all it does for the finite or +inf scales of finite statistics). The last
/// n % lanes statistics go through ShrunkQParamsT from a stack buffer.
template <bool kZp>
bool ShrunkQParams16T(const qobs::detail::ShrunkQParams& Q, const uint16_t* lo, const uint16_t* hi, bool in_bf16,
                      int64_t n, DType scale_dt, void* scale_out, float* zp) {
  const DF df;
  const hn::Rebind<uint16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto store = [&](VF s, int64_t j) HWY_ATTR {
    if (scale_dt == DType::kF32) {
      hn::StoreU(s, df, static_cast<float*>(scale_out) + j);
    } else if (scale_dt == DType::kBF16) {
      hn::StoreU(bf16_bits(s), d16, static_cast<uint16_t*>(scale_out) + j);
    } else {
      hn::StoreU(hn::BitCast(d16, hn::DemoteTo(dh16, s)), d16, static_cast<uint16_t*>(scale_out) + j);
    }
  };
  // A local copy: the stores below could alias Q for all the compiler knows, which made
  // it reload and re-test Q's fields in every iteration. Two vectors per iteration give
  // the out-of-order core two independent chains (division, roundings, FP8) to overlap.
  const qobs::detail::ShrunkQParams q = Q;
  VF s, z, s2, z2;
  auto finite = hn::FirstN(df, static_cast<size_t>(N));
  int64_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    const VF a = load_widen16(lo + j, in_bf16), b = load_widen16(hi + j, in_bf16);
    const VF a2 = load_widen16(lo + j + N, in_bf16), b2 = load_widen16(hi + j + N, in_bf16);
    finite = hn::And(finite,
                     hn::And(hn::And(hn::IsFinite(a), hn::IsFinite(b)), hn::And(hn::IsFinite(a2), hn::IsFinite(b2))));
    shrunk_qparams_lanes<kZp>(q, a, b, s, z);
    shrunk_qparams_lanes<kZp>(q, a2, b2, s2, z2);
    store(s, j);
    store(s2, j + N);
    hn::StoreU(z, df, zp + j);
    hn::StoreU(z2, df, zp + j + N);
  }
  for (; j + N <= n; j += N) {
    const VF a = load_widen16(lo + j, in_bf16), b = load_widen16(hi + j, in_bf16);
    finite = hn::And(finite, hn::And(hn::IsFinite(a), hn::IsFinite(b)));
    shrunk_qparams_lanes<kZp>(q, a, b, s, z);
    store(s, j);
    hn::StoreU(z, df, zp + j);
  }
  if (!hn::AllTrue(df, finite)) return false;
  if (j == n) return true;
  alignas(64) float tl[16], th[16], ts[16];
  const int64_t rest = n - j;
  for (int64_t i = 0; i < rest; ++i) {
    tl[i] = in_bf16 ? bf16_to_float(lo[j + i]) : f16_to_float(lo[j + i]);
    th[i] = in_bf16 ? bf16_to_float(hi[j + i]) : f16_to_float(hi[j + i]);
  }
  if (!ShrunkQParamsT<kZp>(Q, tl, th, rest, ts, zp + j)) return false;
  for (int64_t i = 0; i < rest; ++i) {
    if (scale_dt == DType::kF32) static_cast<float*>(scale_out)[j + i] = ts[i];
    else if (scale_dt == DType::kBF16) static_cast<uint16_t*>(scale_out)[j + i] = float_to_bf16(ts[i]);
    else static_cast<uint16_t*>(scale_out)[j + i] = float_to_f16(ts[i]);
  }
  return true;
}

bool ShrunkQParams16N(const qobs::detail::ShrunkQParams& Q, const uint16_t* lo, const uint16_t* hi, bool in_bf16,
                      int64_t n, DType scale_dt, void* scale, float* zp) {
  if (Q.symmetric) return ShrunkQParams16T<false>(Q, lo, hi, in_bf16, n, scale_dt, scale, zp);
  return ShrunkQParams16T<true>(Q, lo, hi, in_bf16, n, scale_dt, scale, zp);
}

inline constexpr QParamsSimd kQParamsSimd{&ShrunkQParamsN, &ShrunkQParams16N};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const QParamsSimd* qparams_simd(SimdLevel level) { return QOBS_SIMD_TABLE(QParamsSimd, kQParamsSimd); }

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
