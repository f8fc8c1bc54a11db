// Per-target |e|^norm shared by the vector kernels (block_errors_simd.cc, pow_simd.cc):
// pow_replay, the bit-exact replay of libm's powf (scalar twin: powf_replay in
// libm_powf.cc), and pow_approx, the certified path's cheap pow (kPowApproxRelErr).
//
//
// A per-target header (Highway's -inl.h convention): a unit includes it after
// <hwy/highway.h>, outside any namespace, and foreach_target.h re-reads it once per
// target, each time into that target's namespace (the include guard toggles with
// HWY_TARGET_TOGGLE). It carries code for the AVX2 and AVX-512 passes only
// (simd_targets.h).
#if defined(QOBS_KERNELS_POW_POW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QOBS_KERNELS_POW_POW_INL_H_
#undef QOBS_KERNELS_POW_POW_INL_H_
#else
#define QOBS_KERNELS_POW_POW_INL_H_
#endif

#include <hwy/highway.h>
#include "kernels/pow/libm_powf.h"
#include "kernels/simd/lane_types-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

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
  const VF two_n = hn::BitCast(df, hn::ShiftLeft<23>(hn::BitCast(di, hn::Add(n, hn::Set(df, 0x1.8p23f + 127.0f)))));
  VF r = hn::Mul(e, two_n);
  r = hn::IfThenElse(hn::Gt(n, hn::Set(df, 126.0f)), hn::Set(df, HUGE_VALF), r);
  r = hn::IfThenZeroElse(hn::Lt(z, hn::Set(df, -125.0f)), r);
  return hn::IfThenZeroElse(hn::Lt(a, hn::Set(df, 0x1p-125f)), r);
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#endif  // QOBS_KERNELS_POW_POW_INL_H_
