// The exact error term of one vector of elements (R5.1.1 fake quantization, then R6.6.6
// step 4 / R6.8.6), shared by the block kernel (block_errors_simd.cc, one group, a
// candidate's (s, z) broadcast) and the exact batch kernel (exact_batch_simd.cc, one
// group per lane, (s, z) per lane): the same ops in the same order, so both equal the
// scalar twin scalar_errors (kernels/grid_search/exact.cc).
//
// A per-target header (Highway's -inl.h convention): a unit includes it after
// <hwy/highway.h>, outside any namespace, and foreach_target.h re-reads it once per
// target, each time into that target's namespace (the include guard toggles with
// HWY_TARGET_TOGGLE). It carries code for the AVX2 and AVX-512 passes only
// (simd_targets.h).
#if defined(QOBS_KERNELS_GRID_SEARCH_EXACT_TERM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QOBS_KERNELS_GRID_SEARCH_EXACT_TERM_INL_H_
#undef QOBS_KERNELS_GRID_SEARCH_EXACT_TERM_INL_H_
#else
#define QOBS_KERNELS_GRID_SEARCH_EXACT_TERM_INL_H_
#endif

#include <hwy/highway.h>
#include <cmath>
#include "kernels/grid_search/block_errors_simd.h"
#include "kernels/simd/lane_types-inl.h"
#include "kernels/simd/grid_round-inl.h"
#include "kernels/pow/pow-inl.h"
#include "kernels/simd/table_lookups_x86-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

/// RNE to bf16 by Veltkamp's splitting: c = v (2^16 + 1), then c - (c - v) keeps the
/// top 8 significant bits, rounded to nearest even. Three FP ops against narrow_to's
/// five integer ones, and equal to it on zeros and on every normal |v| < 2^110 (checked
/// exhaustively, both signs, by tests/kernels/grid_search/grid_search_test.cc
/// "SplitNarrowingEqualsIntegerRneOnEveryNormalFloat"). It needs unfused FP operations
/// (the kernels are built with -ffp-contract=off) and a range the caller guarantees
/// (SplitGuard, below); below the normal range it may differ.
HWY_INLINE VF narrow_bf16_split(VF v) {
  const VF c = hn::Mul(v, hn::Set(DF(), 65537.0f));
  return hn::Sub(c, hn::Sub(c, v));
}

/// bf16(x / s) for bf16 x and s, as bf16(x (1 / s)): inv = 1 / s rounded once per
/// candidate, then one product and the split rounding. The product is not the f32
/// quotient (it can be one unit off), but it rounds to the same bf16 value. Write x = X
/// 2^a and s = S 2^b with X, S in [128, 255], and a bf16 midpoint m = M 2^c with M odd in
/// [257, 511]. x / s = m would need odd(X) = M odd(S) >= 257, so the exact quotient is
/// never a midpoint; and x / s - m = (X 2^a - M S 2^(b+c)) / (S 2^b) is a nonzero
/// multiple of 2^min(a, b+c) / (S 2^b), at least 1 / (M S) > 2^-17 of m. Both x inv and
/// the f32 quotient lie within 2^-23 of x / s, on the same side of every midpoint, so
/// bf16 rounding decides both as it decides x / s. Checked for every bf16 x against every
/// bf16 significand of s over the guard's exponent range by
/// tests/kernels/grid_search/grid_search_test.cc "SplitQuotientEqualsRoundedDivisionOnBf16Operands".
/// One multiply in place of a division, which issues once per ~16 cycles at 512 bits on
/// some x86 cores (and in place of a Markstein correction of the product, two more
/// fused multiply-adds). Callers hold SplitGuard's range; a
/// quotient below the normal range may differ, but rounds to a zero code either way
/// (as narrow_bf16_split's remark).
HWY_INLINE VF quotient_bf16_split(VF x, VF inv) { return narrow_bf16_split(hn::Mul(x, inv)); }

/// Whether an exact kernel instantiated for data / error Narrow values kDN / kEN (-1:
/// read at run time) may take the split roundings: bf16 data, whose values the split
/// rounds, with bf16 error terms (split too) or f32 ones (imatrix_mse's weighted cubes,
/// not rounded). The range guard below is about the data alone.
constexpr bool split_instantiation(int kDN, int kEN) {
  return kDN == static_cast<int>(Narrow::kBF16) &&
         (kEN == static_cast<int>(Narrow::kBF16) || kEN == static_cast<int>(Narrow::kNone));
}

/// Whether an exact kernel instantiated for data / error Narrow, grid and NormKind values
/// kDN / kEN / kG / kNK (-1: read at run time) may take exact_diff_of_magnitude (below)
/// with its terms from the table's f64 copy (add_table_terms_f64): bf16 data and bf16
/// table terms on an INT or FP4 grid. The rest is the caller's to fix or check: no zero
/// point, no weights, exact codes (codes_exact_in_data_dtype), and per candidate the
/// split guard and exact_diff_ok.
constexpr bool magnitude_instantiation(int kDN, int kEN, int kG, int kNK) {
  return split_instantiation(kDN, kEN) && kEN == static_cast<int>(Narrow::kBF16) &&
         kNK == static_cast<int>(NormKind::kTable16) &&
         (kG == static_cast<int>(qobs::detail::GridKind::kInt) || kG == static_cast<int>(qobs::detail::GridKind::kFp4));
}

/// The split rounding's range guard (narrow_bf16_split), shared by the exact kernels.
/// Data: every |x| in {0} u [2^-100, 2^100] (split_data_add over the values, then
/// split_data_ok); per candidate: s in [2^-100, 2^90] and max |x| <= 2^99 s
/// (split_candidate_ok). Then |x / s| < 2^99 (+ |z| <= 256), |d s| <= 512 s < 2^100,
/// and, as d s and x are bf16 values of at least 2^-101 or 0, r - x is 0 or a multiple
/// of 2^-108 below 2^101: every value the split rounds is 0 or normal below 2^110,
/// except a quotient that underflows, which rounds to a zero code either way.
struct SplitGuard {
  VF xmax;            ///< max |x| so far
  hn::Mask<DF> tiny;  ///< some nonzero |x| below 2^-100 so far
};
/// (a function rather than member initializers: those would lack the target's attributes)
HWY_INLINE SplitGuard split_guard() { return SplitGuard{hn::Zero(DF()), hn::FirstN(DF(), 0)}; }
HWY_INLINE void split_data_add(SplitGuard& g, VF x) {
  const DF df;
  const VF ax = hn::Abs(x);
  g.xmax = hn::Max(g.xmax, ax);
  g.tiny = hn::Or(g.tiny, hn::And(hn::Gt(ax, hn::Zero(df)), hn::Lt(ax, hn::Set(df, 0x1p-100f))));
}
HWY_INLINE bool split_data_ok(const SplitGuard& g) {
  return hn::AllFalse(DF(), g.tiny) && hn::AllTrue(DF(), hn::Le(g.xmax, hn::Set(DF(), 0x1p100f)));
}
/// xmax: the max |x| the candidate's scale s divides (per lane, or broadcast)
HWY_INLINE bool split_candidate_ok(VF s, VF xmax) {
  const DF df;
  return hn::AllTrue(df, hn::And(hn::And(hn::Ge(s, hn::Set(df, 0x1p-100f)), hn::Le(s, hn::Set(df, 0x1p90f))),
                                 hn::Le(xmax, hn::Mul(s, hn::Set(df, 0x1p99f)))));
}

/// |r - x| in the error dtype for x (on the data dtype's grid), scale s > 0 and zero
/// point z (used when A.has_zp). Each template argument is a fixed Narrow / GridKind
/// value or -1 (read A). kQExact: the caller knows that q and q - z are values the data
/// dtype holds exactly (an INT grid with an integer zero point in [q_min, q_max] and
/// q_max - q_min at most 256 for bf16, 2048 for f16; FP4 / FP8 without a zero point),
/// so their narrowing, the identity, is skipped. kZp: 0 / 1 fixes A.has_zp, -1 reads
/// it. kSplit: the bf16 roundings by narrow_bf16_split and the rounded quotient by
/// quotient_bf16_split (inv_s = 1 / s; unused otherwise), for x, s and z that pass
/// SplitGuard (the quotient may then fall below the normal range, where the split can
/// differ, but it rounds to a zero code either way, and a zero code's sign does not
/// reach |r - x|). kExactDiff: the caller knows r - x to be a bf16 value (exact_diff_ok,
/// below), so its rounding to the error dtype, the identity, is skipped.
template <int kDN, int kEN, int kG, bool kQExact = false, int kZp = -1, bool kSplit = false, bool kExactDiff = false>
HWY_INLINE VF exact_abs_error(const BlockKernelArgs& A, VF x, VF s, VF inv_s, VF z) {
  const DF df;
  const bool has_zp = kZp >= 0 ? kZp == 1 : A.has_zp;
  const Narrow dn = kDN >= 0 ? static_cast<Narrow>(kDN) : A.data_narrow;
  const Narrow en = kEN >= 0 ? static_cast<Narrow>(kEN) : A.err_narrow;
  const auto grid = kG >= 0 ? static_cast<qobs::detail::GridKind>(kG) : A.grid;
  auto narrow_data = [&](VF v)
                         HWY_ATTR { return kSplit && dn == Narrow::kBF16 ? narrow_bf16_split(v) : narrow_to(dn, v); };
  auto narrow_err = [&](VF v)
                        HWY_ATTR { return kSplit && en == Narrow::kBF16 ? narrow_bf16_split(v) : narrow_to(en, v); };
  // R5.1.1: y = x / s (+ z), clamp, round to the grid, dequantize, * s
  VF y = kSplit && dn == Narrow::kBF16 ? quotient_bf16_split(x, inv_s) : narrow_to(dn, hn::Div(x, s));
  if (has_zp) y = narrow_data(hn::Add(y, z));
  const VF c = hn::Min(hn::Max(y, hn::Set(df, A.q_min)), hn::Set(df, A.q_max));
  VF q;
  switch (grid) {
    case qobs::detail::GridKind::kInt:
      q = hn::Round(c);
      break;
    case qobs::detail::GridKind::kFp8:
      q = fp8_round(c);
      break;
    case qobs::detail::GridKind::kFp6:
      q = fp6_round(c);
      break;
    // fp4_round's table by the five-op rounding of |c| (equal on [0, 6]: c is clamped),
    // the sign put back as fp4_round does
    default:
      q = hn::CopySign(fp4_round_nonneg(hn::Abs(c)), c);
      break;
  }
  VF d = kQExact ? q : narrow_to(dn, q);
  if (has_zp) d = kQExact ? hn::Sub(d, z) : narrow_to(dn, hn::Sub(d, z));
  const VF r = narrow_data(hn::Mul(d, s));
  // R6.6.6 step 4 / R6.8.6: |r - x| in the error dtype
  if constexpr (kExactDiff) return hn::Abs(hn::Sub(r, x));
  return hn::Abs(narrow_err(hn::Sub(r, x)));
}

/// When r - x needs no rounding to bf16 (exact_abs_error's kExactDiff), for bf16 data
/// and errors without a zero point on the INT or FP4 grid, under SplitGuard. By
/// Sterbenz's lemma (which holds at any precision) the difference of two bf16 values r
/// and x with x / 2 <= r <= 2 x is itself a bf16 value, and r = 0 gives -x; the f32
/// subtraction is then exact and bf16 rounding is the identity. Every element meets one
/// of the two when, for the candidate, s is a bf16 value and max |x| <= 2 bf16(q_top s),
/// q_top = min(q_max, -q_min):
/// - a code q != 0 has x's sign, and needs |y| above the grid's smallest nonzero code
///   c1 (INT 1, FP4 0.5) by half of it, y = bf16(x / s) rounded to nearest even: so
///   |x / s| > c1 / 2 and r / x < 2, since r = c1 s exactly (a bf16 s times a power of
///   two). Larger codes keep q / y in [2/3, 4/3] (INT) or [0.8, 1.2] (FP4), far inside
///   [1/2, 2] after the two roundings (2^-8 each);
/// - a clamped code has |x| <= max |x| <= 2 |r|, as r = bf16(q_top s) at the nearer end.
/// Checked for every bf16 x against every bf16 significand of s over the guard's range
/// by tests/kernels/grid_search/grid_search_test.cc "ExactDiffSkipsOnlyIdentityRoundings".
HWY_INLINE bool exact_diff_ok(const BlockKernelArgs& A, VF s, VF xmax) {
  const DF df;
  const VF q_top = hn::Min(hn::Set(df, A.q_max), hn::Set(df, -A.q_min));
  const VF r_top = narrow_bf16_split(hn::Mul(q_top, s));
  return hn::AllTrue(df, hn::And(hn::Eq(narrow_bf16_split(s), s), hn::Le(xmax, hn::Add(r_top, r_top))));
}

/// exact_abs_error's kExactDiff chain (symmetric INT or FP4 grid, bf16 data, under
/// SplitGuard and exact_diff_ok) run on |x|: returns r' - |x|, whose magnitude is
/// |r - x| and whose sign says nothing. Every step of the chain is odd in x: the split
/// roundings and the product with 1 / s > 0 are sign-symmetric (RNE), the grid roundings
/// are too, and y = bf16(x / s) has x's sign (or is a zero, whose code 0 gives |r - x| =
/// |x| either way). The clamp is not symmetric on INT grids ([q_min, q_max] = [-8, 7]
/// for INT4), so it takes the bound of x's side, `top` = -q_min for x < 0 and q_max
/// otherwise (the caller's per-element copy). Then |q| = round(min(|y|, top)), |r| =
/// bf16(|q| s), and r - x = sign(x) (|r| - |x|). Two to four vector ops fewer than
/// exact_abs_error (the lower clamp, FP4's |c| and sign copy, the final |.|), for a
/// caller that only looks |r - x| up in a table that holds both signs. Checked against
/// exact_abs_error for every bf16 x and s of the guard's range by
/// tests/kernels/grid_search/grid_search_test.cc "MagnitudeChainEqualsExactDiffChain".
template <int kG>
HWY_INLINE VF exact_diff_of_magnitude(const BlockKernelArgs& A, VF ax, VF top, VF s, VF inv_s) {
  const VF c = hn::Min(quotient_bf16_split(ax, inv_s), top);
  const auto grid = kG >= 0 ? static_cast<qobs::detail::GridKind>(kG) : A.grid;
  const VF q = grid == qobs::detail::GridKind::kInt ? hn::Round(c) : fp4_round_nonneg(c);
  return hn::Sub(narrow_bf16_split(hn::Mul(q, s)), ax);
}

/// The clamp's bound on x's side for exact_diff_of_magnitude: -q_min for x < 0, q_max
/// otherwise (x = -0 takes q_max; its code is 0 either way).
HWY_INLINE VF clamp_bound_of_side(const BlockKernelArgs& A, VF x) {
  const DF df;
  return hn::IfThenElse(hn::Lt(x, hn::Zero(df)), hn::Set(df, -A.q_min), hn::Set(df, A.q_max));
}

/// |e|^norm in the error dtype (Arith::pow_abs) for e = exact_abs_error(...).
template <int kEN, int kNK>
HWY_INLINE VF exact_pow(const BlockKernelArgs& A, VF e) {
  const DF df;
  const Narrow en = kEN >= 0 ? static_cast<Narrow>(kEN) : A.err_narrow;
  const NormKind norm_kind = kNK >= 0 ? static_cast<NormKind>(kNK) : A.norm_kind;
  switch (norm_kind) {
    case NormKind::kTwo:
      return narrow_to(en, hn::Mul(e, e));
    // Arith::pow_abs: bf16 rounds the intermediate square, f16 and f32 do not
    case NormKind::kThree:
      return narrow_to(en, hn::Mul(en == Narrow::kBF16 ? narrow_to(en, hn::Mul(e, e)) : hn::Mul(e, e), e));
    case NormKind::kPowReplay:
      return narrow_to(en, pow_replay(e, A.norm, *A.tables));
    case NormKind::kPowApprox:
      return pow_approx(e, A.norm);
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
      return hn::GatherIndex(df, A.pow_table, hn::BitCast(DI(), idx));
    }
    default: {
      alignas(64) float lane_buf[16];
      hn::Store(e, df, lane_buf);
      for (size_t l = 0; l < hn::Lanes(df); ++l) lane_buf[l] = std::pow(lane_buf[l], A.norm);
      return narrow_to(en, hn::Load(df, lane_buf));
    }
  }
}

/// The term of e = exact_abs_error(...): |e|^norm (x w when `weighted`) in the error
/// dtype.
template <int kEN, int kNK>
HWY_INLINE VF exact_term_of(const BlockKernelArgs& A, VF e, VF w, bool weighted) {
  const Narrow en = kEN >= 0 ? static_cast<Narrow>(kEN) : A.err_narrow;
  VF t = exact_pow<kEN, kNK>(A, e);
  if (weighted) t = narrow_to(en, hn::Mul(w, t));
  return t;
}

/// The whole term: |r - x|^norm (x w when `weighted`) in the error dtype.
template <int kDN, int kEN, int kG, int kNK, bool kQExact = false, int kZp = -1, bool kSplit = false>
HWY_INLINE VF exact_term(const BlockKernelArgs& A, VF x, VF w, bool weighted, VF s, VF inv_s, VF z) {
  return exact_term_of<kEN, kNK>(A, exact_abs_error<kDN, kEN, kG, kQExact, kZp, kSplit>(A, x, s, inv_s, z), w,
                                 weighted);
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#endif  // QOBS_KERNELS_GRID_SEARCH_EXACT_TERM_INL_H_
