// Vectorized quantize / dequantize / fake_quantize runs, one body compiled for AVX2 and
// AVX-512 (Highway foreach_target, the other targets disabled by simd_targets.h).
// The scalar twin is qdq_element (kernels/qdq/qdq_call.h) over qparam_math.h, and the
// tests compare both bit for bit at every level.
//
// Numerics (R0.4, R5.1): every lane holds an f32 container of a value on its
// dtype's grid; each element-wise op is rounded once, RNE, to its dtype by narrow_to,
// as Arith does. clamp is NaN-propagating in the reference but not in vector Min / Max,
// and NaN encodings differ between the two, so a run that meets a non-finite x or a
// NaN quotient reports it and the caller redoes it with the scalar steps.
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/qdq/qdq_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "kernels/simd/lane_types-inl.h"  // DF, DU, DI, VF, ...
#include "kernels/simd/grid_round-inl.h"  // narrow_to, fp8_round, fp4_round, fp6_round
#include "kernels/qdq/qdq_lanes-inl.h"    // quantize_lanes, dequantize_lanes

#include <algorithm>
#include <cstring>

#include "kernels/qdq/qdq_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

HWY_INLINE VF load_x(QdqStorage st, const void* p, int64_t j) {
  const DF df;
  switch (st) {
    case QdqStorage::kF32:
      return hn::LoadU(df, static_cast<const float*>(p) + j);
    case QdqStorage::kBF16: {
      const hn::Rebind<uint16_t, DF> d16;
      const auto raw = hn::LoadU(d16, static_cast<const uint16_t*>(p) + j);
      return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(DU(), raw)));
    }
    case QdqStorage::kF16: {
      const hn::Rebind<hwy::float16_t, DF> dh;
      return hn::PromoteTo(df, hn::LoadU(dh, static_cast<const hwy::float16_t*>(p) + j));
    }
    case QdqStorage::kI8: {
      const hn::Rebind<int8_t, DF> d8;
      return hn::ConvertTo(df, hn::PromoteTo(DI(), hn::LoadU(d8, static_cast<const int8_t*>(p) + j)));
    }
  }
  return hn::Zero(df);
}

/// Stores v with the narrowing of Tensor::set: RNE to bf16 / f16, and for int8
/// round-half-even then saturation (v is never NaN here).
HWY_INLINE void store_out(QdqStorage st, VF v, void* p, int64_t j) {
  const DF df;
  switch (st) {
    case QdqStorage::kF32:
      hn::StoreU(v, df, static_cast<float*>(p) + j);
      return;
    case QdqStorage::kBF16: {
      const hn::Rebind<uint16_t, DF> d16;
      const auto hi = hn::ShiftRight<16>(hn::BitCast(DU(), narrow_to(Narrow::kBF16, v)));
      hn::StoreU(hn::DemoteTo(d16, hn::BitCast(DI(), hi)), d16, static_cast<uint16_t*>(p) + j);
      return;
    }
    case QdqStorage::kF16: {
      const hn::Rebind<hwy::float16_t, DF> dh;
      hn::StoreU(hn::DemoteTo(dh, v), dh, static_cast<hwy::float16_t*>(p) + j);
      return;
    }
    case QdqStorage::kI8: {
      const hn::Rebind<int8_t, DF> d8;
      const VF r = hn::Min(hn::Max(hn::Round(v), hn::Set(df, -128.0f)), hn::Set(df, 127.0f));
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(DI(), r)), d8, static_cast<int8_t*>(p) + j);
      return;
    }
  }
}

int64_t storage_size(QdqStorage st) {
  switch (st) {
    case QdqStorage::kF32:
      return 4;
    case QdqStorage::kI8:
      return 1;
    default:
      return 2;
  }
}

/// kOp / kGrid fixed so that the per-vector switches fold away; the narrowing kinds
/// and the zero point stay run-time (a predictable branch next to a division).
template <int kOp, int kGrid>
HWY_NOINLINE bool QdqRunT(const QdqRunArgs& A) {
  constexpr auto op = static_cast<QdqOp>(kOp);
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF qmin = hn::Set(df, A.q_min), qmax = hn::Set(df, A.q_max);
  const Narrow ny = A.y_narrow, ns = A.s_narrow;
  auto bad = hn::FirstN(df, 0);  // all false (MaskFalse is newer than Highway 1.0.3)

  auto body = [&](VF x, VF s, VF zx, VF zs) -> VF {
    bad = hn::Or(bad, hn::Not(hn::IsFinite(x)));
    if constexpr (op == QdqOp::kDequantize) {
      // R5.1.3: the code cast to s_dt
      return dequantize_lanes(x, s, zs, A.has_zp, ns);
    } else {
      const VF q = quantize_lanes<kGrid>(x, s, zx, A.has_zp, ny, qmin, qmax, bad);
      if constexpr (op == QdqOp::kQuantize) return q;
      return dequantize_lanes(q, s, zs, A.has_zp, ns);
    }
  };

  const int64_t xs = storage_size(A.x_storage), os = storage_size(A.out_storage);
  auto x_at = [&](int64_t j) { return static_cast<const unsigned char*>(A.x) + j * xs; };
  auto out_at = [&](int64_t j) { return static_cast<unsigned char*>(A.out) + j * os; };
  // A partial vector goes through the same body via zero-padded copies (x = 0 and
  // s = 1 in the dead lanes, which never flag a special value).
  auto tail = [&](int64_t j, int64_t rem, VF s, VF zx, VF zs) {
    alignas(64) unsigned char xbuf[64] = {0}, obuf[64] = {0};
    std::memcpy(xbuf, x_at(j), static_cast<std::size_t>(rem * xs));
    store_out(A.out_storage, body(load_x(A.x_storage, xbuf, 0), s, zx, zs), obuf, 0);
    std::memcpy(out_at(j), obuf, static_cast<std::size_t>(rem * os));
  };
  if (A.group == 1) {
    // one scale per element: the scales stream beside x
    const VF zero = hn::Zero(df);
    int64_t j = 0;
    for (; j + N <= A.n; j += N) {
      const VF zx = A.has_zp ? hn::LoadU(df, A.z_x + j) : zero, zs = A.has_zp ? hn::LoadU(df, A.z_s + j) : zero;
      store_out(A.out_storage, body(load_x(A.x_storage, A.x, j), hn::LoadU(df, A.s + j), zx, zs), A.out, j);
    }
    if (j < A.n) {
      const int64_t rem = A.n - j;
      alignas(64) float sbuf[16], zxbuf[16] = {0}, zsbuf[16] = {0};
      for (int64_t l = 0; l < N; ++l) sbuf[l] = l < rem ? A.s[j + l] : 1.0f;
      if (A.has_zp)
        for (int64_t l = 0; l < rem; ++l) {
          zxbuf[l] = A.z_x[j + l];
          zsbuf[l] = A.z_s[j + l];
        }
      tail(j, rem, hn::Load(df, sbuf), hn::Load(df, zxbuf), hn::Load(df, zsbuf));
    }
    return hn::AllFalse(df, bad);
  }
  // one scale per group of consecutive elements
  int64_t len = A.head;
  for (int64_t j = 0, k = 0; j < A.n; j += len, len = A.group, ++k) {
    const int64_t e = std::min(A.n, j + len);
    const VF s = hn::Set(df, A.s[k]);
    const VF zx = hn::Set(df, A.has_zp ? A.z_x[k] : 0.0f), zs = hn::Set(df, A.has_zp ? A.z_s[k] : 0.0f);
    int64_t i = j;
    for (; i + N <= e; i += N) store_out(A.out_storage, body(load_x(A.x_storage, A.x, i), s, zx, zs), A.out, i);
    if (i < e) tail(i, e - i, s, zx, zs);
  }
  return hn::AllFalse(df, bad);
}

template <int kOp>
HWY_INLINE bool QdqRunGrid(const QdqRunArgs& A) {
  switch (A.grid) {
    case qobs::detail::GridKind::kInt:
      return QdqRunT<kOp, static_cast<int>(qobs::detail::GridKind::kInt)>(A);
    case qobs::detail::GridKind::kFp8:
      return QdqRunT<kOp, static_cast<int>(qobs::detail::GridKind::kFp8)>(A);
    case qobs::detail::GridKind::kFp6:
      return QdqRunT<kOp, static_cast<int>(qobs::detail::GridKind::kFp6)>(A);
    default:
      return QdqRunT<kOp, static_cast<int>(qobs::detail::GridKind::kFp4)>(A);
  }
}

bool QdqRun(const QdqRunArgs& A) {
  switch (A.op) {
    case QdqOp::kFakeQuantize:
      return QdqRunGrid<static_cast<int>(QdqOp::kFakeQuantize)>(A);
    case QdqOp::kQuantize:
      return QdqRunGrid<static_cast<int>(QdqOp::kQuantize)>(A);
    default:
      // the grid plays no part in dequantization
      return QdqRunT<static_cast<int>(QdqOp::kDequantize), static_cast<int>(qobs::detail::GridKind::kInt)>(A);
  }
}

inline constexpr QdqSimd kQdqSimd{&QdqRun};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const QdqSimd* qdq_simd(SimdLevel level) { return QOBS_SIMD_TABLE(QdqSimd, kQdqSimd); }

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
