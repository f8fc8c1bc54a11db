// The least-squares observers' scorer (lsq_error_simd.h): per candidate, the QDQ of a
// group in lanes (qdq_lanes-inl.h, the steps of the QDQ runs) and the squared errors
// summed in f64 in the canonical order. One body compiled for AVX2 and AVX-512 (Highway
// foreach_target, the other targets disabled by simd_targets.h).
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/lsq/lsq_error_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "kernels/simd/lane_types-inl.h"  // DF, DU, DI, VF, ...
#include "kernels/simd/grid_round-inl.h"  // narrow_to, fp8_round, fp4_round, fp6_round
#include "kernels/qdq/qdq_lanes-inl.h"    // quantize_lanes, dequantize_lanes

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/lsq/lsq_error_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

/// The partial sums of the canonical order: kLsqPartials doubles in kAcc vectors
/// (AVX2: 2 x 4 lanes, AVX-512: 1 x 8). A float vector spans a whole number of
/// kLsqPartials blocks, so its k-th double half lands on accumulator k mod kAcc.
#if HWY_TARGET == HWY_AVX2
constexpr int kAcc = 2;
#else
constexpr int kAcc = 1;
#endif
static_assert(kLsqPartials == 8, "kAcc assumes 8 partial sums");

/// combine_partials (kernels.h) of the kAcc accumulators in the registers: the same
/// tree ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)). Each level adds a vector to
/// its lanes swapped in pairs, so a pair's sum lands in both of its lanes (a + b and
/// b + a are the same bits) and the next level reads it from the first.
HWY_INLINE double CombinePartials(const VD* acc) {
  const DD dd;
  VD a = hn::Add(acc[0], hn::Shuffle01(acc[0]));  // per 128-bit block: p0 + p1, p2 + p3, ...
  a = hn::Add(a, hn::SwapAdjacentBlocks(a));      // lane 0: (p0 + p1) + (p2 + p3), AVX-512 lane 4: the same of p4..p7
#if HWY_TARGET == HWY_AVX2
  VD b = hn::Add(acc[1], hn::Shuffle01(acc[1]));
  b = hn::Add(b, hn::SwapAdjacentBlocks(b));
  return hn::GetLane(a) + hn::GetLane(b);
#else
  const hn::Half<DD> dh;
  (void)dd;
  return hn::GetLane(hn::LowerHalf(dh, a)) + hn::GetLane(hn::UpperHalf(dh, a));
#endif
}

template <int kGrid, bool kWeighted>
HWY_NOINLINE bool LsqErrorsT(const LsqGroupArgs& G, const float* s, const float* zx, const float* zs, int64_t count,
                             double* err) {
  const DF df;
  const DH dh;
  const DD dd;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF qmin = hn::Set(df, G.q_min), qmax = hn::Set(df, G.q_max);
  // a partial vector goes through the same steps via zero-padded copies; its dead
  // lanes' terms are zeroed (x = 0 would give d = 0 anyway, but never rely on it)
  const int64_t full = G.n - G.n % N, rem = G.n - full;
  alignas(64) float xt[16] = {0}, wt[16] = {0};
  if (rem > 0) {
    std::memcpy(xt, G.x + full, static_cast<std::size_t>(rem) * sizeof(float));
    if (kWeighted) std::memcpy(wt, G.w + full, static_cast<std::size_t>(rem) * sizeof(float));
  }
  const auto live = hn::FirstN(df, static_cast<std::size_t>(rem));
  for (int64_t c = 0; c < count; ++c) {
    const VF sv = hn::Set(df, s[c]);
    const VF zxv = hn::Set(df, G.has_zp ? zx[c] : 0.0f), zsv = hn::Set(df, G.has_zp ? zs[c] : 0.0f);
    auto bad = hn::FirstN(df, 0);  // all false (MaskFalse is newer than Highway 1.0.3)
    VD acc[kAcc];
    for (VD& a : acc) a = hn::Zero(dd);
    auto add = [&](VF x, VF w, bool tail) {
      const VF q = quantize_lanes<kGrid>(x, sv, zxv, G.has_zp, G.y_narrow, qmin, qmax, bad);
      VF r = dequantize_lanes(q, sv, zsv, G.has_zp, G.s_narrow);
      if (tail) r = hn::IfThenElseZero(live, r);
      const VD d_lo = hn::Sub(hn::PromoteTo(dd, hn::LowerHalf(dh, x)), hn::PromoteTo(dd, hn::LowerHalf(dh, r)));
      const VD d_hi = hn::Sub(hn::PromoteTo(dd, hn::UpperHalf(dh, x)), hn::PromoteTo(dd, hn::UpperHalf(dh, r)));
      VD t_lo = d_lo, t_hi = d_hi;
      if constexpr (kWeighted) {
        t_lo = hn::Mul(hn::PromoteTo(dd, hn::LowerHalf(dh, w)), d_lo);
        t_hi = hn::Mul(hn::PromoteTo(dd, hn::UpperHalf(dh, w)), d_hi);
      }
      acc[0] = hn::Add(acc[0], hn::Mul(t_lo, d_lo));
      acc[1 % kAcc] = hn::Add(acc[1 % kAcc], hn::Mul(t_hi, d_hi));
    };
    for (int64_t j = 0; j < full; j += N)
      add(hn::LoadU(df, G.x + j), kWeighted ? hn::LoadU(df, G.w + j) : hn::Zero(df), false);
    if (rem > 0) add(hn::Load(df, xt), hn::Load(df, wt), true);
    HWY_DASSERT(kAcc * hn::Lanes(dd) == kLsqPartials);
    err[c] = CombinePartials(acc);
    if (!hn::AllFalse(df, bad) || !std::isfinite(err[c])) return false;
  }
  return true;
}

template <bool kWeighted>
HWY_INLINE bool LsqErrorsGrid(const LsqGroupArgs& G, const float* s, const float* zx, const float* zs, int64_t count,
                              double* err) {
  switch (G.grid) {
    case qobs::detail::GridKind::kInt:
      return LsqErrorsT<static_cast<int>(qobs::detail::GridKind::kInt), kWeighted>(G, s, zx, zs, count, err);
    case qobs::detail::GridKind::kFp8:
      return LsqErrorsT<static_cast<int>(qobs::detail::GridKind::kFp8), kWeighted>(G, s, zx, zs, count, err);
    case qobs::detail::GridKind::kFp6:
      return LsqErrorsT<static_cast<int>(qobs::detail::GridKind::kFp6), kWeighted>(G, s, zx, zs, count, err);
    default:
      return LsqErrorsT<static_cast<int>(qobs::detail::GridKind::kFp4), kWeighted>(G, s, zx, zs, count, err);
  }
}

bool LsqErrors(const LsqGroupArgs& G, const float* s, const float* zx, const float* zs, int64_t count, double* err) {
  return G.w ? LsqErrorsGrid<true>(G, s, zx, zs, count, err) : LsqErrorsGrid<false>(G, s, zx, zs, count, err);
}

/// kCodeSums: only Σ (w q) q and Σ (w q) x, all a symmetric refit reads (the others
/// NaN), each summed as in the full kernel, so the same bits.
template <int kGrid, bool kWeighted, bool kCodeSums>
HWY_NOINLINE bool LsqRefitSumsT(const LsqGroupArgs& G, float s, float zx, double* sums) {
  const DF df;
  const DH dh;
  const DD dd;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF qmin = hn::Set(df, G.q_min), qmax = hn::Set(df, G.q_max), sv = hn::Set(df, s), zxv = hn::Set(df, zx);
  auto bad = hn::FirstN(df, 0);
  VD acc[kLsqRefitSums][kAcc];
  for (auto& a : acc)
    for (VD& v : a) v = hn::Zero(dd);
  for (int64_t j = 0; j < G.n; j += N) {
    const auto live = hn::FirstN(df, static_cast<std::size_t>(G.n - j));
    // dead lanes: x = 0 and w = 0, so every term is +0
    const VF x = hn::MaskedLoad(live, df, G.x + j);
    const VF w = kWeighted ? hn::MaskedLoad(live, df, G.w + j) : hn::IfThenElseZero(live, hn::Set(df, 1.0f));
    const VF q = quantize_lanes<kGrid>(x, sv, zxv, G.has_zp, G.y_narrow, qmin, qmax, bad);
    for (int h = 0; h < 2; ++h) {
      const VD xd = hn::PromoteTo(dd, h ? hn::UpperHalf(dh, x) : hn::LowerHalf(dh, x));
      const VD wd = hn::PromoteTo(dd, h ? hn::UpperHalf(dh, w) : hn::LowerHalf(dh, w));
      const VD qd = hn::PromoteTo(dd, h ? hn::UpperHalf(dh, q) : hn::LowerHalf(dh, q));
      const VD wq = hn::Mul(wd, qd);
      const int k = h % kAcc;
      if constexpr (!kCodeSums) {
        acc[kSumW][k] = hn::Add(acc[kSumW][k], wd);
        acc[kSumWX][k] = hn::Add(acc[kSumWX][k], hn::Mul(wd, xd));
        acc[kSumWQ][k] = hn::Add(acc[kSumWQ][k], wq);
      }
      acc[kSumWQQ][k] = hn::Add(acc[kSumWQQ][k], hn::Mul(wq, qd));
      acc[kSumWQX][k] = hn::Add(acc[kSumWQX][k], hn::Mul(wq, xd));
    }
  }
  for (int i = 0; i < kLsqRefitSums; ++i)
    sums[i] = kCodeSums && i != kSumWQQ && i != kSumWQX ? std::nan("") : CombinePartials(acc[i]);
  return hn::AllFalse(df, bad);
}

template <bool kWeighted, bool kCodeSums>
bool LsqRefitSumsGrid(const LsqGroupArgs& G, float s, float zx, double* sums) {
  switch (G.grid) {
    case qobs::detail::GridKind::kInt:
      return LsqRefitSumsT<static_cast<int>(qobs::detail::GridKind::kInt), kWeighted, kCodeSums>(G, s, zx, sums);
    case qobs::detail::GridKind::kFp8:
      return LsqRefitSumsT<static_cast<int>(qobs::detail::GridKind::kFp8), kWeighted, kCodeSums>(G, s, zx, sums);
    case qobs::detail::GridKind::kFp6:
      return LsqRefitSumsT<static_cast<int>(qobs::detail::GridKind::kFp6), kWeighted, kCodeSums>(G, s, zx, sums);
    default:
      return LsqRefitSumsT<static_cast<int>(qobs::detail::GridKind::kFp4), kWeighted, kCodeSums>(G, s, zx, sums);
  }
}

bool LsqRefitSums(const LsqGroupArgs& G, float s, float zx, bool code_sums_only, double* sums) {
  if (code_sums_only)
    return G.w ? LsqRefitSumsGrid<true, true>(G, s, zx, sums) : LsqRefitSumsGrid<false, true>(G, s, zx, sums);
  return G.w ? LsqRefitSumsGrid<true, false>(G, s, zx, sums) : LsqRefitSumsGrid<false, false>(G, s, zx, sums);
}

/// lsq_bound_simd: element j's term into partial j mod kLsqPartials, as in LsqErrorsT;
/// the dead lanes of the last vector load x = 0 and w = 0, whose terms are +0 or
/// masked out.
template <bool kClipped, bool kWeighted>
HWY_NOINLINE double LsqBoundT(const float* x, const float* w, int64_t n, double t) {
  const DF df;
  const DH dh;
  const DD dd;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VD tv = hn::Set(dd, t), zero = hn::Zero(dd);
  VD acc[kAcc];
  for (VD& a : acc) a = zero;
  for (int64_t j = 0; j < n; j += N) {
    const auto live = hn::FirstN(df, static_cast<std::size_t>(n - j));
    const VF a = hn::Abs(hn::MaskedLoad(live, df, x + j));
    const VF wf = kWeighted ? hn::MaskedLoad(live, df, w + j) : hn::Zero(df);
    for (int h = 0; h < 2; ++h) {
      const VD ad = hn::PromoteTo(dd, h ? hn::UpperHalf(dh, a) : hn::LowerHalf(dh, a));
      const VD b = kClipped ? hn::Sub(ad, tv) : ad;
      const auto in = kClipped ? hn::Gt(b, zero) : hn::Lt(ad, tv);
      VD term = hn::Mul(b, b);
      if constexpr (kWeighted)
        term = hn::Mul(hn::Mul(hn::PromoteTo(dd, h ? hn::UpperHalf(dh, wf) : hn::LowerHalf(dh, wf)), b), b);
      const int k = h % kAcc;
      acc[k] = hn::Add(acc[k], hn::IfThenElseZero(in, term));
    }
  }
  return CombinePartials(acc);
}

double LsqBoundOf(LsqBound kind, const float* x, const float* w, int64_t n, double t) {
  if (kind == LsqBound::kClipped) return w ? LsqBoundT<true, true>(x, w, n, t) : LsqBoundT<true, false>(x, w, n, t);
  return w ? LsqBoundT<false, true>(x, w, n, t) : LsqBoundT<false, false>(x, w, n, t);
}

/// lsq_ideal_errors_simd and lsq_ideal_errors_asym_simd: kBlock vectors of candidates at
/// a time, so each element's broadcasts serve all of them and the sums stay in registers.
/// Symmetric: x holds |x| and lim each element's code limit. Asymmetric: x is signed and
/// the codes are clamped to [q_min, q_max] around each candidate's zero point z.
/// prune_above (symmetric callers; +inf: never): every eighth element, a block whose
/// sums all exceed it stops, its errors +inf (the sums never fall: each fused add of
/// a non-negative term rounds to at least the previous sum).
template <bool kWeighted, bool kAsym>
HWY_NOINLINE void LsqIdealErrorsT(const float* x, const float* lim, const float* w, int64_t n, const float* s,
                                  const float* z, int64_t count, float q_min, float q_max, float* err,
                                  float prune_above = HUGE_VALF) {
  const DF df;
  constexpr int kBlock = 4;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df)), per = kBlock * N;
  const VF one = hn::Set(df, 1.0f), lo = hn::Set(df, q_min), hi = hn::Set(df, q_max);
  const bool may_prune = prune_above < HUGE_VALF;
  const VF bound = hn::Set(df, prune_above);
  for (int64_t c0 = 0; c0 < count; c0 += per) {
    // a partial block repeats its last candidate in the dead lanes, whose sums are dropped
    alignas(64) float sb[kBlock * 16], zb[kBlock * 16], eb[kBlock * 16];
    for (int64_t i = 0; i < per; ++i) {
      const int64_t c = std::min(c0 + i, count - 1);
      sb[i] = s[c];
      zb[i] = kAsym ? z[c] : 0.0f;
    }
    VF sv[kBlock], zv[kBlock], inv[kBlock], acc[kBlock];
    for (int k = 0; k < kBlock; ++k) {
      sv[k] = hn::Load(df, sb + k * N);
      zv[k] = hn::Load(df, zb + k * N);
      inv[k] = hn::Div(one, sv[k]);
      acc[k] = hn::Zero(df);
    }
    bool pruned = false;
    for (int64_t j = 0; j < n; ++j) {
      if (may_prune && j % 8 == 7) {
        static_assert(kBlock == 4, "the test below reads four sums");
        const auto over = hn::And(hn::And(hn::Gt(acc[0], bound), hn::Gt(acc[1], bound)),
                                  hn::And(hn::Gt(acc[2], bound), hn::Gt(acc[3], bound)));
        if (hn::AllTrue(df, over)) {
          pruned = true;
          break;
        }
      }
      const VF a = hn::Set(df, x[j]);
      for (int k = 0; k < kBlock; ++k) {
        VF d;
        if constexpr (kAsym) {
          const VF q = hn::Min(hn::Max(hn::Round(hn::MulAdd(a, inv[k], zv[k])), lo), hi);
          d = hn::NegMulAdd(hn::Sub(q, zv[k]), sv[k], a);
        } else {
          const VF q = hn::Min(hn::Round(hn::Mul(a, inv[k])), hn::Set(df, lim[j]));
          d = hn::NegMulAdd(q, sv[k], a);
        }
        acc[k] = hn::MulAdd(kWeighted ? hn::Mul(hn::Set(df, w[j]), d) : d, d, acc[k]);
      }
    }
    for (int k = 0; k < kBlock; ++k) hn::Store(pruned ? hn::Set(df, HUGE_VALF) : acc[k], df, eb + k * N);
    for (int64_t i = 0; i < std::min(per, count - c0); ++i) err[c0 + i] = eb[i];
  }
}

void LsqIdealErrorsAsym(const float* x, const float* w, int64_t n, const float* s, const float* z, int64_t count,
                        float q_min, float q_max, float* err) {
  if (w) LsqIdealErrorsT<true, true>(x, nullptr, w, n, s, z, count, q_min, q_max, err);
  else LsqIdealErrorsT<false, true>(x, nullptr, w, n, s, z, count, q_min, q_max, err);
}

void LsqIdealErrors(const float* ax, const float* lim, const float* w, int64_t n, const float* s, int64_t count,
                    float* err, float prune_above) {
  if (w) LsqIdealErrorsT<true, false>(ax, lim, w, n, s, nullptr, count, 0.0f, 0.0f, err, prune_above);
  else LsqIdealErrorsT<false, false>(ax, lim, w, n, s, nullptr, count, 0.0f, 0.0f, err, prune_above);
}

inline constexpr LsqSimd kLsqSimd{&LsqErrors, &LsqRefitSums, &LsqBoundOf, &LsqIdealErrors, &LsqIdealErrorsAsym};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const LsqSimd* lsq_simd(SimdLevel level) { return QOBS_SIMD_TABLE(LsqSimd, kLsqSimd); }

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
