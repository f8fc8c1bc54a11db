// The batch kernel (poly_batch_simd.h) and its input transpose, compiled for AVX2 and
// AVX-512.
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/grid_search/poly_batch_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "kernels/simd/lane_types-inl.h"         // DF, DU, DI, DH, DD, VF, VD, ...
#include "kernels/simd/grid_round-inl.h"         // narrow_to, fp8_round, fp4_round_nonneg
#include "kernels/grid_search/poly_terms-inl.h"  // exp_table16, eval_poly, poly_dispatch
#include "kernels/qparams/qparams_lanes-inl.h"   // shrunk_qparams_lanes
#include "kernels/simd/transpose8-inl.h"         // D8, V8, transpose8x8

#include <algorithm>
#include <cmath>

#include "kernels/simd/narrow.h"
#include "kernels/grid_search/poly_batch_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Only the AVX2 and AVX-512 passes carry kernels (simd_targets.h); the baseline pass
// Highway always adds stays empty.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

/// The batch kernel (PolyBatchArgs): one group per lane, so a candidate's scale, sum,
/// interval and decision are lane-wise and nothing is reduced across lanes. The
/// per-candidate bookkeeping of the one-group path (qparams, s^p, the bound, the
/// comparison) runs here once per lanes groups instead of once per group.
template <bool kZp, bool kFp4, int kDeg>
HWY_NOINLINE void PolyBatchT(const PolyBatchArgs& A) {
  const DF df;
  const DI di;
  constexpr size_t N = HWY_LANES(float);
  const PowPoly& P = *A.poly;
  const qobs::detail::ShrunkQParams& Q = A.qparams;
  const VF zero = hn::Zero(df), one = hn::Set(df, 1.0f);
  const VF qmin = hn::Set(df, A.q_min), qmax = hn::Set(df, A.q_max);
  const VF floor_v = hn::Set(df, P.floor), limit = hn::Set(df, P.limit);
  const VF mant = hn::BitCast(df, hn::Set(di, 0x007FFFFF));
  VF c[kDeg + 1];
  for (int d = 0; d <= kDeg; ++d) c[d] = hn::Set(df, P.coef[d]);
  const VF m0 = hn::LoadU(df, A.m0), M0 = hn::LoadU(df, A.M0), xmax = hn::LoadU(df, A.xmax);
  // R6.6.6 steps 1-2 lane-wise
  auto candidate_qparams = [&](int64_t i, VF& s, VF& z) HWY_ATTR {
    const VF p = hn::Set(df, A.shrink[i]);
    shrunk_qparams_lanes<kZp>(Q, hn::Mul(m0, p), hn::Mul(M0, p), s, z);
  };
  // The bookkeeping runs in f32, each lane in units of its own C = s_0^p (rounded to
  // the binade: 2^(p k0), k0 the exponent of the first candidate's scale): a lane's
  // comparisons are all between its own candidates, and a positive factor changes
  // none of them. s^p / C = rel_table[k - k0 + 8] * P(m) keeps every quantity normal;
  // the margins below cover the f32 roundings. Exact errors stay unscaled (b_exact).
  alignas(64) int32_t k0[16];
  alignas(64) float abs_v[16], lim_v[16], init_lo[16], init_hi[16];
  double inv_c[16], b_exact[16];
  auto down = [](double v) {
    float f = static_cast<float>(v);
    return static_cast<double>(f) > v ? std::nextafter(f, -HUGE_VALF) : f;
  };
  auto up = [](double v) {
    float f = static_cast<float>(v);
    return static_cast<double>(f) < v ? std::nextafter(f, HUGE_VALF) : f;
  };
  {
    VF s0, z0;
    candidate_qparams(0, s0, z0);
    hn::Store(hn::ShiftRight<23>(hn::BitCast(di, s0)), di, k0);  // s0 > 0
    for (size_t l = 0; l < N; ++l) {
      inv_c[l] = 1.0 / P.exp_table[k0[l]];
      abs_v[l] = up(A.bound.abs * inv_c[l] * (1 + 0x1p-40));
      lim_v[l] = down(0x1p100 * inv_c[l] * (1 - 0x1p-40));
      init_lo[l] = down(A.initial_best * inv_c[l] * (1 - 0x1p-40));
      init_hi[l] = up(A.initial_best * inv_c[l] * (1 + 0x1p-40));
      b_exact[l] = A.initial_best;
    }
  }
  const auto k0v = hn::Load(di, k0);
  const VF abs_s = hn::Load(df, abs_v), lim_s = hn::Load(df, lim_v);
  // the best so far: its interval (scaled), its qparams, whether it is exact
  VF best_lo = hn::Load(df, init_lo), best_hi = hn::Load(df, init_hi), best_sc = zero, best_z = zero;
  VF best_is_exact = one;
  // rel: the one-group bound with s^p taken in f32 like a term (P.rel_err instead of
  // scale_pow's), + the rounding of A and of lo / hi; the slack's f32 chain (~10
  // roundings) is covered by its factor
  const double rel = A.bound.rel - P.scale_pow_rel_err + P.rel_err + 0x1p-19;
  const VF rel_lo = hn::Set(df, static_cast<float>(1.0 - rel)), rel_hi = hn::Set(df, static_cast<float>(1.0 + rel));
  const VF slack_factor = hn::Set(df, 1.0f + 0x1p-17f);
  // poly_r_error's 2^-24 (1 + 2^-20), with room for its four f32 roundings
  const VF rho_unit = hn::Set(df, 0x1p-24f * (1.0f + 0x1p-19f));
  const VF five_q = hn::Set(df, static_cast<float>(5.0 * A.q_abs_max) * (1.0f + 0x1p-22f));
  const VF eight = hn::Set(df, 8.0f), eleven = hn::Set(df, 11.0f), n_f = hn::Set(df, static_cast<float>(A.n));
  const VF y_factor = hn::Set(df, static_cast<float>(P.young_factor * P.p));
  const VF y_count = hn::Set(df, static_cast<float>(P.young_count));
  const VF y_sum = hn::Set(df, static_cast<float>(P.young_sum));
  const VF abs_units = hn::Set(df, static_cast<float>(A.bound.abs_units));
  auto decide = [&](VF s, VF z, VF tot) HWY_ATTR -> uint32_t {
    // s^p / C
    const auto ef = hn::ShiftRight<23>(hn::BitCast(di, s));
    const auto idx = hn::Add(hn::Sub(ef, k0v), hn::Set(di, 8));
    const auto in_table = hn::Eq(hn::And(idx, hn::Set(di, ~15)), hn::Zero(di));  // 0 <= idx < 16
    const VF sm = hn::Or(hn::And(s, mant), one);
    const VF sp = hn::Mul(eval_poly<kDeg>(c, sm), exp_table16(P.rel_table, idx));
    const VF Aval = hn::Mul(tot, sp);
    // poly_r_error and poly_r_slack
    // poly_r_error's 4 X / s + 4 |z| + 3 Q bounds |r' - e / s| for r' = fl(q' - y'),
    // y' the reference's own y and q' its code. This kernel's y = fl(fl(x (1 / s)) (+ z))
    // (element loop) and r = fl(q - y) differ: ||r| - |r'|| <= |g(y) - g(y')| + the
    // roundings of q - y and q' - y', g the distance to the nearest code (what |q - y|
    // is, whichever code a tie takes), so |g(y) - g(y')| <= |y - y'| <= 2^-24 (3 X / s
    // + 2 (X / s + |z|)), and each rounding <= 2^-24 (X / s + |z| + Q):
    // 11 X / s + 8 |z| + 5 Q in all
    const VF rho = hn::Mul(rho_unit, hn::MulAdd(eleven, hn::Div(xmax, s), hn::MulAdd(eight, hn::Abs(z), five_q)));
    VF rho_pm1 = one;
    for (int k = 0; k < P.rho_exponent; ++k) rho_pm1 = hn::Mul(rho_pm1, rho);
    rho_pm1 = hn::IfThenElse(hn::Gt(rho, one), hn::Set(df, HUGE_VALF), rho_pm1);
    const VF per_term = hn::MulAdd(y_factor, rho_pm1, y_count);
    const VF slack_units = hn::Mul(rho, hn::MulAdd(y_sum, tot, hn::Mul(n_f, per_term)));
    const VF slack = hn::Mul(hn::MulAdd(hn::Add(abs_units, slack_units), sp, abs_s), slack_factor);
    const VF lo_raw = hn::Sub(hn::Mul(Aval, rel_lo), slack), hi_raw = hn::MulAdd(Aval, rel_hi, slack);
    // normal s (poly_r_error, the table), a sum the table covered, A normal (relative
    // roundings), and the reference's error below 2^100 (no f32 overflow near it)
    const auto known = hn::And(hn::And(hn::And(hn::Ge(s, hn::Set(df, 0x1p-125f)), hn::Le(s, hn::Set(df, 0x1p125f))),
                                       hn::RebindMask(df, in_table)),
                               hn::And(hn::Ge(Aval, hn::Set(df, 0x1p-100f)), hn::Lt(hi_raw, lim_s)));
    const VF lo = hn::IfThenElse(known, lo_raw, hn::Set(df, NAN));
    const VF hi = hn::IfThenElse(known, hi_raw, hn::Set(df, NAN));
    const auto imp = hn::Lt(hi, best_lo);
    const auto certain = hn::Or(imp, hn::Ge(lo, best_hi));  // NaN bounds: neither
    if (HWY_LIKELY(hn::AllTrue(df, certain))) {
      best_lo = hn::IfThenElse(imp, lo, best_lo);
      best_hi = hn::IfThenElse(imp, hi, best_hi);
      best_sc = hn::IfThenElse(imp, s, best_sc);
      best_z = hn::IfThenElse(imp, z, best_z);
      best_is_exact = hn::IfThenZeroElse(imp, best_is_exact);
      alignas(64) uint8_t bits[8] = {0};
      hn::StoreMaskBits(df, imp, bits);
      return static_cast<uint32_t>(bits[0]) | static_cast<uint32_t>(bits[1]) << 8;
    }
    // Some lane's comparison is open: that lane settles it with exact errors, as the
    // one-group path does (certified.cc certified_improvements).
    alignas(64) float l_lo[16], l_hi[16], l_sc[16], l_z[16], b_lo[16], b_hi[16], b_sc[16], b_z[16], b_ex[16];
    hn::Store(lo, df, l_lo);
    hn::Store(hi, df, l_hi);
    hn::Store(s, df, l_sc);
    hn::Store(z, df, l_z);
    hn::Store(best_lo, df, b_lo);
    hn::Store(best_hi, df, b_hi);
    hn::Store(best_sc, df, b_sc);
    hn::Store(best_z, df, b_z);
    hn::Store(best_is_exact, df, b_ex);
    uint32_t imp_bits = 0;
    for (size_t l = 0; l < N; ++l) {
      bool improved;
      if (!(l_hi[l] < b_lo[l] || l_lo[l] >= b_hi[l])) {
        const double e = A.exact(A.ctx, static_cast<int>(l), l_sc[l], l_z[l]);
        if (b_ex[l] == 0.0f) {
          b_exact[l] = A.exact(A.ctx, static_cast<int>(l), b_sc[l], b_z[l]);
          b_ex[l] = 1.0f;
          b_lo[l] = down(b_exact[l] * inv_c[l] * (1 - 0x1p-40));
          b_hi[l] = up(b_exact[l] * inv_c[l] * (1 + 0x1p-40));
        }
        improved = e < b_exact[l];  // strict; NaN never improves
        if (improved) {
          b_exact[l] = e;
          b_lo[l] = down(e * inv_c[l] * (1 - 0x1p-40));
          b_hi[l] = up(e * inv_c[l] * (1 + 0x1p-40));
        }
      } else {
        improved = l_hi[l] < b_lo[l];
        if (improved) {
          b_lo[l] = l_lo[l];
          b_hi[l] = l_hi[l];
          b_ex[l] = 0.0f;
        }
      }
      if (improved) {
        b_sc[l] = l_sc[l];
        b_z[l] = l_z[l];
        imp_bits |= 1u << l;
      }
    }
    best_lo = hn::Load(df, b_lo);
    best_hi = hn::Load(df, b_hi);
    best_sc = hn::Load(df, b_sc);
    best_z = hn::Load(df, b_z);
    best_is_exact = hn::Load(df, b_ex);
    return imp_bits;
  };
  // Two candidates per pass over the elements: one term's ops form a ~50-cycle chain
  // (division, rounding, polynomial), and two independent chains side by side keep
  // the FP units busy where one stalls on latency.
  constexpr int kK = 2;
  hn::Vec<DU> words = hn::Zero(DU());  // the improvement bits of 32 candidates, per lane
  for (int64_t i0 = 0; i0 < A.num_candidates; i0 += kK) {
    VF sk[kK], zk[kK], inv_sk[kK], acck[kK], amaxk[kK];
    for (int k = 0; k < kK; ++k) {
      candidate_qparams(std::min<int64_t>(i0 + k, A.num_candidates - 1), sk[k], zk[k]);
      inv_sk[k] = hn::Div(one, sk[k]);
      acck[k] = amaxk[k] = zero;
    }
    // the lane sums of the certified terms (PolySumsT's, one lane per group)
    for (int64_t j = 0; j < A.n; ++j) {
      const VF x = hn::LoadU(df, A.xt + j * static_cast<int64_t>(N));
      VF y[kK], q[kK], a[kK], m[kK], t[kK], v[kK];
      // y = x (1 / s), not x / s: a division issues once per ~16 cycles at 512 bits on
      // some x86 cores and bounded this loop there. y is then within
      // 3 2^-24 |x / s| of the reference's fl(x / s), its code may differ where the two
      // straddle a rounding tie, and the term sees only |q - y|, the distance of y to
      // the nearest code, which moves no more than y does: decide's rho counts it.
      for (int k = 0; k < kK; ++k) y[k] = hn::Mul(x, inv_sk[k]);
      if constexpr (kFp4) {
        // x = |x|: q and y share the sign dropped
        for (int k = 0; k < kK; ++k) q[k] = fp4_round_nonneg(hn::Min(y[k], qmax));
      } else {
        if constexpr (kZp)
          for (int k = 0; k < kK; ++k) y[k] = hn::Add(y[k], zk[k]);
        for (int k = 0; k < kK; ++k) q[k] = hn::Round(hn::Min(hn::Max(y[k], qmin), qmax));
      }
      for (int k = 0; k < kK; ++k) a[k] = hn::Max(hn::Abs(hn::Sub(q[k], y[k])), floor_v);
      for (int k = 0; k < kK; ++k) amaxk[k] = hn::Max(amaxk[k], a[k]);
      for (int k = 0; k < kK; ++k) m[k] = hn::Or(hn::And(a[k], mant), one);
      for (int k = 0; k < kK; ++k) t[k] = exp_table16(P.table, hn::ShiftRight<23>(hn::BitCast(di, a[k])));
      for (int k = 0; k < kK; ++k) v[k] = c[kDeg];
      for (int d = kDeg - 1; d >= 0; --d)
        for (int k = 0; k < kK; ++k) v[k] = hn::MulAdd(v[k], m[k], c[d]);
      for (int k = 0; k < kK; ++k) acck[k] = hn::Add(acck[k], hn::Mul(v[k], t[k]));
    }
    for (int k = 0; k < kK && i0 + k < A.num_candidates; ++k) {
      const int64_t i = i0 + k;
      const VF s = sk[k], z = zk[k];
      // a term that left the table makes the sum unknown: the exact path decides
      const VF acc = hn::IfThenElse(hn::Lt(amaxk[k], limit), acck[k], hn::Set(df, HUGE_VALF));
      const uint32_t imp_bits = decide(s, z, acc);
      // candidate i's bit of each lane's word (lanes <= 16 fit the low bits)
      const hn::Vec<DU> bit = hn::Set(DU(), 1u << (i % 32));
      alignas(8) uint8_t mask_bytes[8] = {static_cast<uint8_t>(imp_bits), static_cast<uint8_t>(imp_bits >> 8)};
      words = hn::Or(words, hn::IfThenElseZero(hn::LoadMaskBits(DU(), mask_bytes), bit));
      if (i % 32 == 31 || i + 1 == A.num_candidates) {
        hn::StoreU(words, DU(), A.improved + (i / 32) * static_cast<int64_t>(N));
        words = hn::Zero(DU());
      }
    }
  }
}

struct PolyBatchKernel {
  template <bool kZp, bool kFp4, int kDeg>
  static void Run(const PolyBatchArgs& A) {
    PolyBatchT<kZp, kFp4, kDeg>(A);
  }
};

void PolyBatch(const PolyBatchArgs& A) { poly_dispatch<PolyBatchKernel>(A, !A.qparams.symmetric); }

/// BatchTranspose: 8 x 8 blocks (256-bit vectors on either target; AVX-512 does its 16
/// lanes as two blocks of 8 groups) with each group's min / max on the way.
bool BatchTranspose(const float* const* groups, int64_t n, bool abs_values, float* xt, float* lo_out, float* hi_out) {
  const D8 d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t n_main = n - n % 8;
  auto nan = hn::FirstN(d8, 0);
  const V8 sign = hn::Set(d8, -0.0f);
  for (int64_t lb = 0; lb < N; lb += 8) {
    const float* const* g = groups + lb;
    V8 lo[8], hi[8];
    for (int l = 0; l < 8; ++l) lo[l] = hi[l] = hn::Set(d8, g[l][0]);
    for (int64_t j0 = 0; j0 < n_main; j0 += 8) {
      V8 r[8];
      for (int l = 0; l < 8; ++l) {
        r[l] = hn::LoadU(d8, g[l] + j0);
        lo[l] = hn::Min(lo[l], r[l]);
        hi[l] = hn::Max(hi[l], r[l]);
        nan = hn::Or(nan, hn::IsNaN(r[l]));
        if (abs_values) r[l] = hn::AndNot(sign, r[l]);
      }
      V8 col[8];
      transpose8x8(d8, r, col);
      for (int k = 0; k < 8; ++k) hn::StoreU(col[k], d8, xt + (j0 + k) * N + lb);
    }
    for (int l = 0; l < 8; ++l) {
      float vlo = hn::GetLane(hn::MinOfLanes(d8, lo[l])), vhi = hn::GetLane(hn::MaxOfLanes(d8, hi[l]));
      for (int64_t j = n_main; j < n; ++j) {
        const float v = g[l][j];
        vlo = v < vlo ? v : vlo;
        vhi = v > vhi ? v : vhi;
        if (v != v) return false;
        xt[j * N + lb + l] = abs_values ? std::fabs(v) : v;
      }
      lo_out[lb + l] = vlo;
      hi_out[lb + l] = vhi;
    }
  }
  return hn::AllFalse(d8, nan);
}

int PolyBatchLanes() { return static_cast<int>(hn::Lanes(DF())); }

void Fp4RoundNonneg(const float* x, int64_t n, float* out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t j = 0; j < n; j += N) {
    const auto m = hn::FirstN(df, static_cast<size_t>(n - j));
    hn::BlendedStore(fp4_round_nonneg(hn::MaskedLoad(m, df, x + j)), m, df, out + j);
  }
}

inline constexpr PolyBatchSimd kPolyBatchSimd{&PolyBatchLanes, &PolyBatch, &BatchTranspose, &Fp4RoundNonneg};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const PolyBatchSimd* poly_batch_simd(SimdLevel level) { return QOBS_SIMD_TABLE(PolyBatchSimd, kPolyBatchSimd); }

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
