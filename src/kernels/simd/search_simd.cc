// Vectorized kernels, one body compiled for AVX2 and AVX-512 (Highway foreach_target;
// the other targets are disabled to keep the build short -- machines without AVX2 run
// the fused scalar path). Every function here has a scalar twin in fused_search.cc /
// kernels/ref and is tested against it bit for bit at every level.
//
// Numerics (R0.4, qparam_math.h): all lanes hold f32 containers of values that lie
// on the data dtype's grid; after each element-wise op a bf16/f16 result is rounded
// once, RNE, exactly as Arith::narrow does. Error terms are accumulated in double in
// the canonical order of ErrorSum (search/select.h): 8 lane sums per block (term j goes to lane j % 8),
// block = ((l0+l4) + (l1+l5)) + ((l2+l6) + (l3+l7)).
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/search_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>
#include <cstring>

#include "kernels/simd/search_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Only the AVX2 and AVX-512 passes carry kernels (the lane layout of the canonical sum
// assumes 8 or 16 float lanes); the baseline pass Highway always adds stays empty.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

#include "kernels/simd/lane_types-inl.h"  // DF, DU, DI, DH, DD, VF, VD, ...

#include "kernels/simd/grid_round-inl.h"  // narrow_to, fp8_round, fp4_round

/// The libm powf replay (libm_powf.cc powf_replay) on half a vector, in double.
/// ix: the (normalized) bit patterns, as int32 lanes of the half.
HWY_INLINE VD pow_half(hn::Vec<hn::Rebind<int32_t, DD>> ix, double y, const PowfTables& t) {
  const DD dd;
  const DI64 di64;
  const DU64 du64;
  const hn::Rebind<int32_t, DD> di32;
  const hn::Rebind<float, DD> df32;
  const auto tmp = hn::Sub(ix, hn::Set(di32, static_cast<int32_t>(0x3f330000)));
  const auto idx = hn::And(hn::ShiftRight<19>(tmp), hn::Set(di32, 15));  // logical on the low bits
  const auto top = hn::And(tmp, hn::Set(di32, static_cast<int32_t>(0xff800000u)));
  const auto iz = hn::Sub(ix, top);
  const auto k = hn::ShiftRight<23>(top);  // arithmetic shift of a signed lane
  const auto idx2 = hn::ShiftLeft<1>(hn::PromoteTo(di64, idx));
  const VD invc = hn::GatherIndex(dd, t.log2_tab, idx2);
  const VD logc = hn::GatherIndex(dd, t.log2_tab + 1, idx2);
  const VD z = hn::PromoteTo(dd, hn::BitCast(df32, iz));
  const double* A = t.log2_poly;
  const VD r = hn::MulAdd(z, invc, hn::Set(dd, -1.0));
  const VD y0 = hn::Add(logc, hn::PromoteTo(dd, k));
  const VD r2 = hn::Mul(r, r);
  const VD p1 = hn::MulAdd(hn::Set(dd, A[0]), r, hn::Set(dd, A[1]));
  const VD p2 = hn::MulAdd(hn::Set(dd, A[2]), r, hn::Set(dd, A[3]));
  const VD r4 = hn::Mul(r2, r2);
  VD q = hn::MulAdd(hn::Set(dd, A[4]), r, y0);
  q = hn::MulAdd(p2, r2, q);
  const VD logx = hn::MulAdd(p1, r4, q);
  const VD ylogx = hn::Mul(hn::Set(dd, y), logx);
  const VD shift = hn::Set(dd, t.exp2_shift);
  VD kd = hn::Add(ylogx, shift);
  const auto ki = hn::BitCast(du64, kd);
  kd = hn::Sub(kd, shift);
  const VD rr = hn::Sub(ylogx, kd);
  const auto tw = hn::GatherIndex(du64, t.exp2_tab, hn::BitCast(di64, hn::And(ki, hn::Set(du64, 31))));
  const VD s = hn::BitCast(dd, hn::Add(tw, hn::ShiftLeft<47>(ki)));
  const double* C = t.exp2_poly;
  const VD zz = hn::MulAdd(hn::Set(dd, C[0]), rr, hn::Set(dd, C[1]));
  const VD rr2 = hn::Mul(rr, rr);
  VD v = hn::MulAdd(hn::Set(dd, C[2]), rr, hn::Set(dd, 1.0));
  v = hn::MulAdd(zz, rr2, v);
  v = hn::Mul(v, s);
  // overflow -> inf, underflow -> 0, as libm's special returns
  v = hn::IfThenElse(hn::Gt(ylogx, hn::Set(dd, 0x1.fffffffd1d571p+6)), hn::Set(dd, HUGE_VAL), v);
  v = hn::IfThenZeroElse(hn::Le(ylogx, hn::Set(dd, -150.0)), v);
  return v;
}

/// |a|^y (a >= 0, finite) with the libm replay; 0 -> 0.
HWY_INLINE VF pow_replay(VF a, float y, const PowfTables& t) {
  const DF df;
  const DI di;
  const DH dh;
  const DD dd;
  auto ix = hn::BitCast(di, a);
  // subnormal: scale by 2^23 and take 23 off the exponent
  const auto ixn = hn::Sub(hn::BitCast(di, hn::Mul(a, hn::Set(df, 0x1p23f))), hn::Set(di, 23 << 23));
  ix = hn::IfThenElse(hn::Lt(ix, hn::Set(di, 0x00800000)), ixn, ix);
  const hn::Half<DI> dih;
  const VD lo = pow_half(hn::LowerHalf(dih, ix), y, t);
  const VD hi = pow_half(hn::UpperHalf(dih, ix), y, t);
  const VF res = hn::Combine(df, hn::DemoteTo(dh, hi), hn::DemoteTo(dh, lo));
  (void)dd;
  // libm's special cases: 0^y = 0 and inf^y = inf for y > 0 (an error term can be
  // inf when r - x overflows f32)
  const VF inf_or_res = hn::IfThenElse(hn::Eq(a, hn::Set(df, HUGE_VALF)), a, res);
  return hn::IfThenZeroElse(hn::Eq(a, hn::Zero(df)), inf_or_res);
}

/// Approximate |a|^y for the certified path (kPowApprox), ~35 f32 ops per vector and
/// no division: log2 a = k + log2 m with m in [sqrt(1/2), sqrt(2)), log2 m = u P(u),
/// u = m - 1, P a degree-7 least-squares fit (max error 6.4e-8 with f32 coefficients),
/// then 2^(y log2 a) = 2^n 2^f with |f| <= 1/2 by a degree-6 Taylor polynomial
/// (truncation < 3e-8). Both polynomials use Estrin's scheme: the kernel is bound by
/// the latency of its dependency chain, not by issue width. The error is dominated by
/// the f32 rounding of y log2 a (<= 128 * 2^-22 absolute), i.e. ~1e-5 relative, ten
/// times below kPowApproxRelErr. Results below 2^-125 (and inputs below 2^-125, y >= 1)
/// count as 0 within kPowApproxAbsErr; results of 2^127 and more (n > 126) become
/// +inf, which sends the caller to the exact path.
HWY_INLINE VF pow_approx(VF a, float y) {
  const DF df;
  const DI di;
  const auto ix = hn::BitCast(di, a);
  // k and m with m in [sqrt(1/2), sqrt(2)) in four integer ops (glibc's offset trick):
  // subtracting the bits of sqrt(1/2) moves mantissas above sqrt(2)'s (0x3504F3) into
  // the next binade. Equal, for every non-negative float, to splitting m in [1, 2) and
  // halving m > 1.41421356f (checked exhaustively when this replaced that split).
  const auto tmp = hn::Sub(ix, hn::Set(di, 0x3f3504f4));
  const auto k = hn::ShiftRight<23>(tmp);  // arithmetic shift
  const VF m = hn::BitCast(df, hn::Sub(ix, hn::And(tmp, hn::Set(di, static_cast<int32_t>(0xff800000u)))));
  const VF u = hn::Sub(m, hn::Set(df, 1.0f));
  const VF u2 = hn::Mul(u, u);
  const VF u4 = hn::Mul(u2, u2);
  const VF q0 = hn::MulAdd(u, hn::Set(df, -0.72135758f), hn::Set(df, 1.44269478f));
  const VF q1 = hn::MulAdd(u, hn::Set(df, -0.36006466f), hn::Set(df, 0.48093233f));
  const VF q2 = hn::MulAdd(u, hn::Set(df, -0.25049734f), hn::Set(df, 0.28688511f));
  const VF q3 = hn::MulAdd(u, hn::Set(df, -0.14302382f), hn::Set(df, 0.23571554f));
  const VF r0 = hn::MulAdd(q1, u2, q0);
  const VF r1 = hn::MulAdd(q3, u2, q2);
  const VF log2m = hn::Mul(u, hn::MulAdd(r1, u4, r0));
  const VF z = hn::Mul(hn::Set(df, y), hn::Add(hn::ConvertTo(df, k), log2m));
  const VF n = hn::Round(z);
  const VF f = hn::Sub(z, n);
  const VF f2 = hn::Mul(f, f);
  const VF f4 = hn::Mul(f2, f2);
  const VF a0 = hn::MulAdd(f, hn::Set(df, 0.69314718f), hn::Set(df, 1.0f));
  const VF a1 = hn::MulAdd(f, hn::Set(df, 5.5504109e-2f), hn::Set(df, 0.24022651f));
  const VF a2 = hn::MulAdd(f, hn::Set(df, 1.3333558e-3f), hn::Set(df, 9.6181291e-3f));
  const VF b0 = hn::MulAdd(a1, f2, a0);
  const VF b1 = hn::MulAdd(hn::Set(df, 1.5403530e-4f), f2, a2);
  const VF e = hn::MulAdd(b1, f4, b0);
  // 2^n for n in [-125, 126] by building the exponent field: n + 1.5 * 2^23 + 127 is
  // exact and holds n + 127 in its low mantissa bits (no float -> int conversion, whose
  // overflow fix-up Highway adds). Lanes with n outside [-125, 126] are garbage here and
  // overwritten below: n > 126 by +inf, n <= -126 (so z <= -125.5) by 0. The results
  // are bit for bit those of the former clamp-and-convert (checked exhaustively).
  const VF two_n =
      hn::BitCast(df, hn::ShiftLeft<23>(hn::BitCast(di, hn::Add(n, hn::Set(df, 0x1.8p23f + 127.0f)))));
  VF r = hn::Mul(e, two_n);
  r = hn::IfThenElse(hn::Gt(n, hn::Set(df, 126.0f)), hn::Set(df, HUGE_VALF), r);
  r = hn::IfThenZeroElse(hn::Lt(z, hn::Set(df, -125.0f)), r);
  return hn::IfThenZeroElse(hn::Lt(a, hn::Set(df, 0x1p-125f)), r);
}

/// Accumulates an f32 vector of terms into the 8 canonical lane sums.
struct LaneSums {
  VD a0, a1;  // AVX2: lanes 0-3 and 4-7; AVX-512: a0 holds lanes 0-7, a1 unused
  HWY_INLINE void reset() {
    const DD dd;
    a0 = hn::Zero(dd);
    a1 = hn::Zero(dd);
  }
  HWY_INLINE void add(VF terms) {
    const DD dd;
    const DH dh;
    const VD lo = hn::PromoteTo(dd, hn::LowerHalf(dh, terms));
    const VD hi = hn::PromoteTo(dd, hn::UpperHalf(dh, terms));
    if constexpr (HWY_LANES(float) == 16) {
      a0 = hn::Add(a0, lo);  // terms j..j+7
      a0 = hn::Add(a0, hi);  // then j+8..j+15: same lane j % 8, later in order
    } else {
      a0 = hn::Add(a0, lo);
      a1 = hn::Add(a1, hi);
    }
  }
  /// ((l0+l4) + (l1+l5)) + ((l2+l6) + (l3+l7))
  HWY_INLINE double total() const {
    const DD dd;
    alignas(64) double l[16] = {0};
    hn::Store(a0, dd, l);
    if constexpr (HWY_LANES(float) != 16) hn::Store(a1, dd, l + 4);
    const double s0 = l[0] + l[4], s1 = l[1] + l[5], s2 = l[2] + l[6], s3 = l[3] + l[7];
    return (s0 + s1) + (s2 + s3);
  }
};

/// The block kernel. Each template argument is either a fixed Narrow / GridKind /
/// NormKind value, so the compiler drops the per-vector branches of the hot
/// combinations, or -1 for "read it from A at run time" (the generic instantiation).
template <int kDN, int kEN, int kG, int kNK>
HWY_NOINLINE void BlockErrorsT(const BlockKernelArgs& A) {
  static_assert(HWY_LANES(float) == 8 || HWY_LANES(float) == 16, "lane layout assumes AVX2 or AVX-512");
  const DF df;
  const size_t N = hn::Lanes(df);
  const Narrow dn = kDN >= 0 ? static_cast<Narrow>(kDN) : A.data_narrow;
  const Narrow en = kEN >= 0 ? static_cast<Narrow>(kEN) : A.err_narrow;
  const auto grid = kG >= 0 ? static_cast<qobs::detail::GridKind>(kG) : A.grid;
  const NormKind norm_kind = kNK >= 0 ? static_cast<NormKind>(kNK) : A.norm_kind;
  const VF qmin = hn::Set(df, A.q_min), qmax = hn::Set(df, A.q_max);
  alignas(64) float lane_buf[16];
  for (int64_t i = 0; i < A.num_candidates; ++i) {
    const VF s = hn::Set(df, A.scale[i]);
    const VF z = hn::Set(df, A.has_zp ? A.zp[i] : 0.0f);
    LaneSums acc;
    acc.reset();
    // kPowApprox sums only need to stay inside the certified bound: f32 lane sums
    // (<= 512 terms each per block, relative error <= 2^-15, part of the caller's
    // bound) save the two f64 conversions and adds per vector
    constexpr bool kF32Sum = kNK == static_cast<int>(NormKind::kPowApprox);
    VF acc32 = hn::Zero(df);
    // the error term of one vector of x (and weights w, when given)
    auto term = [&](VF x, VF w) HWY_ATTR {
      // R5.1.1: y = x / s (+ z), clamp, round to the grid, dequantize, * s
      VF y = narrow_to(dn, hn::Div(x, s));
      if (A.has_zp) y = narrow_to(dn, hn::Add(y, z));
      const VF c = hn::Min(hn::Max(y, qmin), qmax);
      VF q;
      switch (grid) {
        case qobs::detail::GridKind::kInt: q = hn::Round(c); break;
        case qobs::detail::GridKind::kFp8: q = fp8_round(c); break;
        default: q = fp4_round(c); break;
      }
      VF d = narrow_to(dn, q);
      if (A.has_zp) d = narrow_to(dn, hn::Sub(d, z));
      const VF r = narrow_to(dn, hn::Mul(d, s));
      // R6.6.6 step 4 / R6.8.6: |r - x|^norm (x w) in the error dtype
      const VF e = hn::Abs(narrow_to(en, hn::Sub(r, x)));
      VF t;
      switch (norm_kind) {
        case NormKind::kTwo: t = narrow_to(en, hn::Mul(e, e)); break;
        case NormKind::kThree: t = narrow_to(en, hn::Mul(hn::Mul(e, e), e)); break;
        case NormKind::kPowReplay: t = narrow_to(en, pow_replay(e, A.norm, *A.tables)); break;
        case NormKind::kPowApprox: t = pow_approx(e, A.norm); break;
        case NormKind::kTable16: {
          // e >= 0 holds a bf16 / f16 value: its 16-bit pattern (sign 0) indexes the table
          const DU du;
          hn::Vec<DU> idx;
          if (en == Narrow::kBF16) {
            idx = hn::ShiftRight<16>(hn::BitCast(du, e));
          } else {
            const hn::Rebind<hwy::float16_t, DF> dh16;
            const hn::Rebind<uint16_t, DF> d16;
            idx = hn::PromoteTo(du, hn::BitCast(d16, hn::DemoteTo(dh16, e)));
          }
          t = hn::GatherIndex(df, A.pow_table, hn::BitCast(DI(), idx));
          break;
        }
        default: {
          hn::Store(e, df, lane_buf);
          for (size_t l = 0; l < N; ++l) lane_buf[l] = std::pow(lane_buf[l], A.norm);
          t = narrow_to(en, hn::Load(df, lane_buf));
          break;
        }
      }
      if (A.w) t = narrow_to(en, hn::Mul(w, t));
      return t;
    };
    auto accumulate = [&](VF t) HWY_ATTR {
      if constexpr (kF32Sum) acc32 = hn::Add(acc32, t);
      else acc.add(t);
    };
    // full vectors without masks, then one masked tail whose dead lanes are zeroed
    const int64_t n_main = A.n - A.n % static_cast<int64_t>(N);
    const VF one = hn::Set(df, 1.0f);
    for (int64_t j = 0; j < n_main; j += static_cast<int64_t>(N))
      accumulate(term(hn::LoadU(df, A.x + j), A.w ? hn::LoadU(df, A.w + j) : one));
    if (n_main < A.n) {
      const auto m = hn::FirstN(df, static_cast<size_t>(A.n - n_main));
      const VF t = term(hn::MaskedLoad(m, df, A.x + n_main), A.w ? hn::MaskedLoad(m, df, A.w + n_main) : one);
      accumulate(hn::IfThenElseZero(m, t));
    }
    if constexpr (kF32Sum) acc.add(acc32);
    A.sums[i] = acc.total();
  }
}

/// 2^(p k) for the exponent fields `ef` (only their low 4 bits are read): one 16-lane
/// permute on AVX-512; two 8-lane permutes and a blend on bit 3 on AVX2 (Highway 1.0.3
/// has no two-table lookup).
HWY_INLINE VF exp_table16(const float* table, hn::Vec<DI> ef) {
#if HWY_TARGET == HWY_AVX3
  return VF{_mm512_permutexvar_ps(ef.raw, _mm512_load_ps(table))};
#else
  const __m256 lo = _mm256_permutevar8x32_ps(_mm256_load_ps(table), ef.raw);
  const __m256 hi = _mm256_permutevar8x32_ps(_mm256_load_ps(table + 8), ef.raw);
  return VF{_mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(ef.raw, 28)))};
#endif
}

/// sum c[i] m^i by Horner's rule: fewest ops. (Estrin's scheme, one op more for a
/// shorter dependency chain, measured slower: the kernel is bound by issue, not latency.)
template <int kDeg>
HWY_INLINE VF eval_poly(const VF* c, VF m) {
  VF v = c[kDeg];
  for (int k = kDeg - 1; k >= 0; --k) v = hn::MulAdd(v, m, c[k]);
  return v;
}

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

/// Runs K::Run<kZp, kFp4, kDeg> for the grid, zero point and polynomial degree at hand
/// (the poly kernels are instantiated per combination so the hot loops carry no branch).
template <class K, bool kZp, bool kFp4, class Args>
void poly_degree_dispatch(const Args& A) {
  switch (A.poly->degree) {
    case 2: return K::template Run<kZp, kFp4, 2>(A);
    case 3: return K::template Run<kZp, kFp4, 3>(A);
    case 4: return K::template Run<kZp, kFp4, 4>(A);
    case 5: return K::template Run<kZp, kFp4, 5>(A);
    default: return K::template Run<kZp, kFp4, 6>(A);
  }
}

template <class K, class Args>
void poly_dispatch(const Args& A, bool has_zp) {
  if (A.grid == qobs::detail::GridKind::kFp4) return poly_degree_dispatch<K, false, true>(A);  // symmetric (R4.1)
  return has_zp ? poly_degree_dispatch<K, true, false>(A) : poly_degree_dispatch<K, false, false>(A);
}

struct PolySumsKernel {
  template <bool kZp, bool kFp4, int kDeg>
  static void Run(const PolySumArgs& A) {
    PolySumsT<kZp, kFp4, kDeg>(A);
  }
};

void PolySums(const PolySumArgs& A) { poly_dispatch<PolySumsKernel>(A, A.has_zp); }

/// R4.1 lane-wise for f32 statistics under a ShrunkQParams-usable plan: the same f32
/// operations, in the same order, as ShrunkQParams::compute (tested bit for bit against
/// compute_qparams_elem). z stays 0 for symmetric plans.
template <bool kZp>
HWY_INLINE void shrunk_qparams_lanes(const qobs::detail::ShrunkQParams& Q, VF cm, VF cM, VF& s, VF& z) {
  const DF df;
  const VF zero = hn::Zero(df);
  // Arith::narrow of the statistics' dtype (bf16 / f16 in parity mode)
  const Narrow nr = Q.stat_round == DType::kBF16  ? Narrow::kBF16
                    : Q.stat_round == DType::kF16 ? Narrow::kF16
                                                  : Narrow::kNone;
  const VF mn = hn::IfThenElse(hn::Lt(cm, zero), cm, zero), mx = hn::IfThenElse(hn::Gt(cM, zero), cM, zero);
  z = zero;
  if constexpr (!kZp) {
    const VF am = hn::Abs(mn), aM = hn::Abs(mx);
    s = narrow_to(nr, hn::Div(hn::IfThenElse(hn::Gt(am, aM), am, aM), hn::Set(df, Q.half_range)));
  } else {
    s = narrow_to(nr, hn::Div(narrow_to(nr, hn::Sub(mx, mn)), hn::Set(df, Q.range)));
    z = narrow_to(nr, hn::Sub(hn::Set(df, Q.q_min), narrow_to(nr, hn::Div(mn, s))));
    const auto zero_range = hn::IsNaN(z);  // 0 / 0: the zero point is 0 (Q23)
    z = hn::IfThenElse(hn::Gt(z, hn::Set(df, Q.q_min)), z, hn::Set(df, Q.q_min));
    z = hn::IfThenElse(hn::Lt(z, hn::Set(df, Q.q_max)), z, hn::Set(df, Q.q_max));
    z = hn::IfThenElse(hn::Gt(z, hn::Set(df, Q.zp_lo)), z, hn::Set(df, Q.zp_lo));
    z = hn::IfThenElse(hn::Lt(z, hn::Set(df, Q.zp_hi)), z, hn::Set(df, Q.zp_hi));
    z = hn::IfThenZeroElse(zero_range, hn::Round(z));  // RNE to the integer zero-point dtype
  }
  if (Q.has_global) s = hn::Mul(hn::Set(df, Q.global_scale), s);
  if (Q.fp8_scale) s = fp8_round(hn::Min(s, hn::Set(df, 448.0f)));
  s = hn::IfThenElse(hn::Eq(s, zero), hn::Set(df, Q.eps), s);
}

template <bool kZp>
void ShrunkQParamsT(const qobs::detail::ShrunkQParams& Q, const float* lo, const float* hi, int64_t n, float* scale,
                    float* zp) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF s, z;
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    shrunk_qparams_lanes<kZp>(Q, hn::LoadU(df, lo + j), hn::LoadU(df, hi + j), s, z);
    hn::StoreU(s, df, scale + j);
    hn::StoreU(z, df, zp + j);
  }
  if (j < n) {
    const auto m = hn::FirstN(df, static_cast<size_t>(n - j));
    // dead lanes compute on zeros (a zero range: eps, no NaN escapes) and are not stored
    shrunk_qparams_lanes<kZp>(Q, hn::MaskedLoad(m, df, lo + j), hn::MaskedLoad(m, df, hi + j), s, z);
    hn::BlendedStore(s, m, df, scale + j);
    hn::BlendedStore(z, m, df, zp + j);
  }
}

void ShrunkQParamsN(const qobs::detail::ShrunkQParams& Q, const float* lo, const float* hi, int64_t n, float* scale,
                    float* zp) {
  if (Q.symmetric) ShrunkQParamsT<false>(Q, lo, hi, n, scale, zp);
  else ShrunkQParamsT<true>(Q, lo, hi, n, scale, zp);
}

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
  const VF three_q = hn::Set(df, static_cast<float>(3.0 * A.q_abs_max) * (1.0f + 0x1p-22f));
  const VF four = hn::Set(df, 4.0f), n_f = hn::Set(df, static_cast<float>(A.n));
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
    const VF rho = hn::Mul(rho_unit, hn::MulAdd(four, hn::Add(hn::Div(xmax, s), hn::Abs(z)), three_q));
    VF rho_pm1 = one;
    for (int k = 0; k < P.rho_exponent; ++k) rho_pm1 = hn::Mul(rho_pm1, rho);
    rho_pm1 = hn::IfThenElse(hn::Gt(rho, one), hn::Set(df, HUGE_VALF), rho_pm1);
    const VF per_term = hn::MulAdd(y_factor, rho_pm1, y_count);
    const VF slack_units = hn::Mul(rho, hn::MulAdd(y_sum, tot, hn::Mul(n_f, per_term)));
    const VF slack = hn::Mul(hn::MulAdd(hn::Add(abs_units, slack_units), sp, abs_s), slack_factor);
    const VF lo_raw = hn::Sub(hn::Mul(Aval, rel_lo), slack), hi_raw = hn::MulAdd(Aval, rel_hi, slack);
    // normal s (poly_r_error, the table), a sum the table covered, A normal (relative
    // roundings), and the reference's error below 2^100 (no f32 overflow near it)
    const auto known = hn::And(
        hn::And(hn::And(hn::Ge(s, hn::Set(df, 0x1p-125f)), hn::Le(s, hn::Set(df, 0x1p125f))),
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
    // one-group path does (fused_search.cc group_improvements).
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
    VF sk[kK], zk[kK], acck[kK], amaxk[kK];
    for (int k = 0; k < kK; ++k) {
      candidate_qparams(std::min<int64_t>(i0 + k, A.num_candidates - 1), sk[k], zk[k]);
      acck[k] = amaxk[k] = zero;
    }
    // the lane sums of the certified terms (PolySumsT's, one lane per group)
    for (int64_t j = 0; j < A.n; ++j) {
      const VF x = hn::LoadU(df, A.xt + j * static_cast<int64_t>(N));
      VF y[kK], q[kK], a[kK], m[kK], t[kK], v[kK];
      for (int k = 0; k < kK; ++k) y[k] = hn::Div(x, sk[k]);
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

using D8 = hn::FixedTag<float, 8>;  // 256-bit vectors, on AVX-512 too
using V8 = hn::Vec<D8>;

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

/// MinMaxGroups: num_groups (a multiple of 8) consecutive groups of len (a multiple of
/// 8) values; per group min and max, eight groups per pass, reduced by a transpose.
template <typename T>
bool MinMaxGroupsT(const T* x, bool bf16, int64_t num_groups, int64_t len, float* mins, float* maxs) {
  const D8 d8;
  auto nan = hn::FirstN(d8, 0);
  for (int64_t g0 = 0; g0 < num_groups; g0 += 8) {
    V8 lo[8], hi[8];
    for (int l = 0; l < 8; ++l) {
      const T* p = x + (g0 + l) * len;
      lo[l] = hi[l] = load8(p, bf16);
      nan = hn::Or(nan, hn::IsNaN(lo[l]));
      for (int64_t j = 8; j < len; j += 8) {
        const V8 r = load8(p + j, bf16);
        lo[l] = hn::Min(lo[l], r);
        hi[l] = hn::Max(hi[l], r);
        nan = hn::Or(nan, hn::IsNaN(r));
      }
    }
    V8 clo[8], chi[8];
    transpose8x8(d8, lo, clo);
    transpose8x8(d8, hi, chi);
    for (int k = 1; k < 8; ++k) {
      clo[0] = hn::Min(clo[0], clo[k]);
      chi[0] = hn::Max(chi[0], chi[k]);
    }
    hn::StoreU(clo[0], d8, mins + g0);
    hn::StoreU(chi[0], d8, maxs + g0);
  }
  return hn::AllFalse(d8, nan);
}

bool MinMaxGroups(const void* x, DType dt, int64_t num_groups, int64_t len, float* mins, float* maxs) {
  if (dt == DType::kF32) return MinMaxGroupsT(static_cast<const float*>(x), false, num_groups, len, mins, maxs);
  return MinMaxGroupsT(static_cast<const uint16_t*>(x), dt == DType::kBF16, num_groups, len, mins, maxs);
}

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

template <int kDN, int kEN, int kG>
HWY_INLINE void BlockErrorsNorm(const BlockKernelArgs& A) {
  switch (A.norm_kind) {
    case NormKind::kTwo: return BlockErrorsT<kDN, kEN, kG, static_cast<int>(NormKind::kTwo)>(A);
    case NormKind::kThree: return BlockErrorsT<kDN, kEN, kG, static_cast<int>(NormKind::kThree)>(A);
    case NormKind::kPowReplay: return BlockErrorsT<kDN, kEN, kG, static_cast<int>(NormKind::kPowReplay)>(A);
    case NormKind::kPowApprox: return BlockErrorsT<kDN, kEN, kG, static_cast<int>(NormKind::kPowApprox)>(A);
    case NormKind::kTable16: return BlockErrorsT<kDN, kEN, kG, static_cast<int>(NormKind::kTable16)>(A);
    default: return BlockErrorsT<-1, -1, -1, -1>(A);
  }
}

template <int kDN, int kEN>
HWY_INLINE void BlockErrorsGrid(const BlockKernelArgs& A) {
  switch (A.grid) {
    case qobs::detail::GridKind::kInt:
      return BlockErrorsNorm<kDN, kEN, static_cast<int>(qobs::detail::GridKind::kInt)>(A);
    case qobs::detail::GridKind::kFp8:
      return BlockErrorsNorm<kDN, kEN, static_cast<int>(qobs::detail::GridKind::kFp8)>(A);
    default: return BlockErrorsNorm<kDN, kEN, static_cast<int>(qobs::detail::GridKind::kFp4)>(A);
  }
}

/// Specialized kernels for f32 and bf16 data with errors in the data dtype or in f32
/// (imatrix, f32_errors): the benchmarked cases; everything else (f16 data) runs the
/// generic instantiation.
void BlockErrors(const BlockKernelArgs& A) {
  constexpr int kNone = static_cast<int>(Narrow::kNone), kBF16 = static_cast<int>(Narrow::kBF16);
  if (A.data_narrow == Narrow::kNone && A.err_narrow == Narrow::kNone) return BlockErrorsGrid<kNone, kNone>(A);
  if (A.data_narrow == Narrow::kBF16 && A.err_narrow == Narrow::kBF16) return BlockErrorsGrid<kBF16, kBF16>(A);
  if (A.data_narrow == Narrow::kBF16 && A.err_narrow == Narrow::kNone) return BlockErrorsGrid<kBF16, kNone>(A);
  return BlockErrorsT<-1, -1, -1, -1>(A);
}

void MinMax(const float* x, int64_t n, float* lo_out, float* hi_out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF lo = hn::Set(df, INFINITY), hi = hn::Set(df, -INFINITY);
  auto nan = hn::FirstN(df, 0);  // all false (MaskFalse is newer than Highway 1.0.3)
  // four independent chains keep the loads streaming
  VF lo1 = lo, hi1 = hi, lo2 = lo, hi2 = hi, lo3 = lo, hi3 = hi;
  int64_t j = 0;
  for (; j + 4 * N <= n; j += 4 * N) {
    const VF a = hn::LoadU(df, x + j), b = hn::LoadU(df, x + j + N), c = hn::LoadU(df, x + j + 2 * N),
             d = hn::LoadU(df, x + j + 3 * N);
    lo = hn::Min(lo, a); hi = hn::Max(hi, a);
    lo1 = hn::Min(lo1, b); hi1 = hn::Max(hi1, b);
    lo2 = hn::Min(lo2, c); hi2 = hn::Max(hi2, c);
    lo3 = hn::Min(lo3, d); hi3 = hn::Max(hi3, d);
    nan = hn::Or(nan, hn::Or(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), hn::Or(hn::IsNaN(c), hn::IsNaN(d))));
  }
  for (; j < n; j += N) {
    const auto m = hn::FirstN(df, static_cast<size_t>(n - j));
    const VF a = hn::MaskedLoad(m, df, x + j);
    lo = hn::IfThenElse(m, hn::Min(lo, a), lo);
    hi = hn::IfThenElse(m, hn::Max(hi, a), hi);
    nan = hn::Or(nan, hn::And(m, hn::IsNaN(a)));
  }
  lo = hn::Min(hn::Min(lo, lo1), hn::Min(lo2, lo3));
  hi = hn::Max(hn::Max(hi, hi1), hn::Max(hi2, hi3));
  if (!hn::AllFalse(df, nan)) {
    *lo_out = *hi_out = NAN;  // torch.amin/amax propagate NaN
    return;
  }
  *lo_out = hn::GetLane(hn::MinOfLanes(df, lo));
  *hi_out = hn::GetLane(hn::MaxOfLanes(df, hi));
}

void Widen(const uint16_t* src, int64_t n, bool is_bf16, float* dst) {
  const DF df;
  const DU du;
  const hn::Rebind<uint16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto raw = hn::LoadU(d16, src + j);
    VF v;
    if (is_bf16) v = hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, raw)));
    else v = hn::PromoteTo(df, hn::BitCast(dh16, raw));
    hn::StoreU(v, df, dst + j);
  }
  for (; j < n; ++j) {
    if (is_bf16) {
      const uint32_t u = static_cast<uint32_t>(src[j]) << 16;
      std::memcpy(dst + j, &u, 4);
    } else {
      dst[j] = f16_to_float(src[j]);
    }
  }
}

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

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"  // QOBS_SIMD_DISPATCH

namespace qobs::kernels::detail {

void block_errors_simd(SimdLevel level, const BlockKernelArgs& args) { QOBS_SIMD_DISPATCH(BlockErrors(args)); }
void poly_sums_simd(SimdLevel level, const PolySumArgs& args) { QOBS_SIMD_DISPATCH(PolySums(args)); }
int poly_batch_lanes(SimdLevel level) { QOBS_SIMD_DISPATCH(PolyBatchLanes()); }
void shrunk_qparams_simd(SimdLevel level, const qobs::detail::ShrunkQParams& q, const float* lo, const float* hi,
                         int64_t n, float* scale, float* zp) {
  QOBS_SIMD_DISPATCH(ShrunkQParamsN(q, lo, hi, n, scale, zp));
}
bool batch_transpose_simd(SimdLevel level, const float* const* groups, int64_t n, bool abs_values, float* xt,
                          float* lo, float* hi) {
  QOBS_SIMD_DISPATCH(BatchTranspose(groups, n, abs_values, xt, lo, hi));
}
void poly_batch_simd(SimdLevel level, const PolyBatchArgs& args) { QOBS_SIMD_DISPATCH(PolyBatch(args)); }
void fp4_round_nonneg_simd(SimdLevel level, const float* x, int64_t n, float* out) {
  QOBS_SIMD_DISPATCH(Fp4RoundNonneg(x, n, out));
}
bool minmax_groups_simd(SimdLevel level, const void* x, DType dt, int64_t num_groups, int64_t len, float* mins,
                        float* maxs) {
  QOBS_SIMD_DISPATCH(MinMaxGroups(x, dt, num_groups, len, mins, maxs));
}
void minmax_simd(SimdLevel level, const float* x, int64_t n, float* lo, float* hi) {
  QOBS_SIMD_DISPATCH(MinMax(x, n, lo, hi));
}
void widen_simd(SimdLevel level, const uint16_t* src, int64_t n, bool is_bf16, float* dst) {
  QOBS_SIMD_DISPATCH(Widen(src, n, is_bf16, dst));
}
void pow_replay_simd(SimdLevel level, const float* x, int64_t n, float y, const PowfTables& t, float* out) {
  QOBS_SIMD_DISPATCH(PowReplay(x, n, y, t, out));
}
void pow_approx_simd(SimdLevel level, const float* x, int64_t n, float y, float* out) {
  QOBS_SIMD_DISPATCH(PowApprox(x, n, y, out));
}

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
