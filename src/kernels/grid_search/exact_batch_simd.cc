// The exact batch kernel (exact_batch_simd.h), compiled for AVX2 and AVX-512.
//
// Numerics: the terms are exact_term's (the block kernel's, bit for bit); the sums are
// ErrorSum's, lane by lane: term j goes to f64 lane sum j % 8, the block value is
// ((l0+l4) + (l1+l5)) + ((l2+l6) + (l3+l7)) and the total 0 + block. Rounding the total
// to bf16 / f16 (round_to_float_dtype) is RNE on the f64 bits in the dtype's normal
// range; subnormal, NaN results take the scalar rounding.
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/grid_search/exact_batch_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "kernels/simd/lane_types-inl.h"         // DF, DU, DI, DH, DD, VF, VD, ...
#include "kernels/simd/grid_round-inl.h"         // narrow_to, fp8_round, fp4_round
#include "kernels/pow/pow-inl.h"                 // pow_replay
#include "kernels/grid_search/exact_term-inl.h"  // exact_term
#include "kernels/qparams/qparams_lanes-inl.h"   // shrunk_qparams_lanes

#include <cmath>
#include <type_traits>
#include <utility>

#include "kernels/grid_search/exact_batch_simd.h"
#include "kernels/grid_search/poly_batch_simd.h"  // kPolyBatchMaxLen
#include "qobs/formats.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Only the AVX2 and AVX-512 passes carry kernels (simd_targets.h); the baseline pass
// Highway always adds stays empty.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

/// round_to_float_dtype(dt, v) for half a vector of non-negative sums: RNE to the
/// dtype's significand (kDrop low bits of the f64 mantissa) where v is zero or at least
/// the dtype's smallest normal (tiny); the rest (subnormal results, NaN) lane by lane.
template <int kDrop>
HWY_INLINE VD round_sums(VD v, double tiny, double max_finite, DType dt) {
  const DD dd;
  const DU64 du;
  auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<kDrop>(u), hn::Set(du, 1u));
  u = hn::And(hn::Add(u, hn::Add(hn::Set(du, (uint64_t{1} << (kDrop - 1)) - 1), lsb)),
              hn::Set(du, ~((uint64_t{1} << kDrop) - 1)));
  VD r = hn::BitCast(dd, u);
  // past the largest finite value (f16: 65520 and up rounds to 2^16): infinity
  r = hn::IfThenElse(hn::Gt(r, hn::Set(dd, max_finite)), hn::Set(dd, HUGE_VAL), r);
  const auto plain = hn::Or(hn::Ge(v, hn::Set(dd, tiny)), hn::Eq(v, hn::Zero(dd)));
  if (HWY_UNLIKELY(!hn::AllTrue(dd, plain))) {
    alignas(64) double vl[8], rl[8];
    hn::Store(v, dd, vl);
    hn::Store(r, dd, rl);
    for (size_t l = 0; l < hn::Lanes(dd); ++l)
      if (!(vl[l] >= tiny || vl[l] == 0.0)) rl[l] = round_to_float_dtype(dt, vl[l]);
    r = hn::Load(dd, rl);
  }
  return r;
}

/// The kernel. Template arguments: fixed Narrow / GridKind / NormKind values or -1
/// (read A) as in the block kernel; kQExact as exact_abs_error's; kZp and kW fix
/// whether there is a zero point and weights (0 / 1) or read them (-1).
template <int kDN, int kEN, int kG, int kNK, bool kQExact, int kZp, int kW>
HWY_NOINLINE bool ExactBatchT(const ExactBatchArgs& A) {
  static_assert(HWY_LANES(float) == 8 || HWY_LANES(float) == 16, "lane layout assumes AVX2 or AVX-512");
  const DF df;
  const DD dd;
  const DH dh;
  constexpr int64_t N = HWY_LANES(float);
  const BlockKernelArgs& T = A.term;
  const bool weighted = kW >= 0 ? kW == 1 : A.wt != nullptr;
  const bool zp = !A.qparams.symmetric;
  const Narrow stat_narrow = A.qparams.stat_round == DType::kBF16  ? Narrow::kBF16
                             : A.qparams.stat_round == DType::kF16 ? Narrow::kF16
                                                                   : Narrow::kNone;
  const VF m0 = hn::LoadU(df, A.m0), M0 = hn::LoadU(df, A.M0);
  const VF zero = hn::Zero(df), one = hn::Set(df, 1.0f), inf = hn::Set(df, HUGE_VALF);
  // The split bf16 rounding where SplitGuard allows: the data once (one group per lane,
  // so the guard's max |x| is each lane's own), each candidate below
  constexpr bool kCanSplit = split_instantiation(kDN, kEN);
  // |r - x| without its rounding where exact_diff_ok allows (per candidate, below)
  constexpr bool kCanExactDiff =
      kCanSplit && kEN == static_cast<int>(Narrow::kBF16) && kZp == 0 && kQExact &&
      (kG == static_cast<int>(qobs::detail::GridKind::kInt) || kG == static_cast<int>(qobs::detail::GridKind::kFp4));
  // unweighted bf16 table terms: from the table's f64 copy (add_table_terms_f64)
  constexpr bool kTable64 =
      kEN == static_cast<int>(Narrow::kBF16) && kNK == static_cast<int>(NormKind::kTable16) && kW == 0;
  // and then on magnitudes (exact_diff_of_magnitude) where the terms come from the
  // table's f64 copy, which holds both signs
  constexpr bool kMagnitude = magnitude_instantiation(kDN, kEN, kG, kNK) && kZp == 0 && kQExact && kW == 0;
  // FP4 clamps at -q_max and q_max (ExactBatch instantiates kFp4 only then): one bound
  // for both signs, a constant in place of the per-element copy and its load
  constexpr bool kOneBound = kMagnitude && kG == static_cast<int>(qobs::detail::GridKind::kFp4);
  const VF one_bound = hn::Set(df, T.q_max);
  // The data once per batch: the split guard, and with kMagnitude |x| and (unless
  // kOneBound) the clamp's bound on x's side (read only on the exact-diff branch, which
  // needs the guard)
  SplitGuard g = split_guard();
  alignas(64) float abs_x[kMagnitude ? kPolyBatchMaxLen * N : 1];
  alignas(64) float top[kMagnitude && !kOneBound ? kPolyBatchMaxLen * N : 1];
  if constexpr (kCanSplit) {
    for (int64_t j = 0; j < A.n; ++j) {
      const VF x = hn::LoadU(df, A.xt + j * N);
      split_data_add(g, x);
      if constexpr (kMagnitude) {
        hn::Store(hn::Abs(x), df, abs_x + j * N);
        if constexpr (!kOneBound) hn::Store(clamp_bound_of_side(T, x), df, top + j * N);
      }
    }
  }
  const bool data_splits = kCanSplit && split_data_ok(g);
  VF best = hn::Set(df, A.initial_best);
  hn::Vec<DU> words = hn::Zero(DU());  // the improvement bits of 32 candidates, per lane
  for (int64_t i = 0; i < A.num_candidates; ++i) {
    // R6.6.6 steps 1-2 lane-wise (ShrunkQParams's f32 operations)
    // (the shrunk range is rounded to the statistics' dtype, as Arith::mul does)
    const VF p = hn::Set(df, A.shrink[i]);
    const VF cm = narrow_to(stat_narrow, hn::Mul(m0, p)), cM = narrow_to(stat_narrow, hn::Mul(M0, p));
    VF s, z;
    if (zp) shrunk_qparams_lanes<true>(A.qparams, cm, cM, s, z);
    else shrunk_qparams_lanes<false>(A.qparams, cm, cM, s, z);
    if (HWY_UNLIKELY(!hn::AllTrue(df, hn::And(hn::Gt(s, zero), hn::Lt(s, inf))))) return false;
    // ErrorSum's eight f64 lane sums of each group: acc[k][h] holds lane sum k of the
    // groups in half h of the vector. Every access is by constant indices, the zeroing
    // and the reduction below too, so they stay in registers: one variable index kept
    // the whole array in memory, and GCC stored each sum after each add.
    VD acc[8][2];
    [&]<size_t... K>(std::index_sequence<K...>) HWY_ATTR { ((acc[K / 2][K % 2] = hn::Zero(dd)), ...); }
    (std::make_index_sequence<16>{});
    const VF inv_s = hn::Div(one, s);  // quotient_bf16_split's reciprocal
    auto sums = [&]<bool kSplit, bool kExactDiff>(std::bool_constant<kSplit>, std::bool_constant<kExactDiff>) HWY_ATTR {
      // (on magnitudes: r' - |x|, which the table turns into the term of |r - x|)
      auto abs_error = [&](int64_t j) HWY_ATTR {
        if constexpr (kMagnitude && kExactDiff) {
          VF bound = one_bound;
          if constexpr (!kOneBound) bound = hn::Load(df, top + j * N);
          return exact_diff_of_magnitude<kG>(T, hn::Load(df, abs_x + j * N), bound, s, inv_s);
        } else
          return exact_abs_error<kDN, kEN, kG, kQExact, kZp, kSplit, kExactDiff>(T, hn::LoadU(df, A.xt + j * N), s,
                                                                                 inv_s, z);
      };
      auto add_term = [&]<size_t k>(int64_t j, VF e, std::integral_constant<size_t, k>) HWY_ATTR {
        if constexpr (kTable64) {
          add_table_terms_f64(acc[k][0], acc[k][1], e, T.pow_table64);
        } else {
          const VF w = weighted ? hn::LoadU(df, A.wt + j * N) : one;
          const VF t = exact_term_of<kEN, kNK>(T, e, w, weighted);
          acc[k][0] = hn::Add(acc[k][0], hn::PromoteTo(dd, hn::LowerHalf(dh, t)));
          acc[k][1] = hn::Add(acc[k][1], hn::PromoteTo(dd, hn::UpperHalf(dh, t)));
        }
      };
      // Whole rows of eight without exits (the sums stay in registers), each row stage
      // by stage: its eight |r - x| first, then their terms and sums. Issued in that
      // order, each term's input is ready or nearly so when it reaches the scheduler,
      // instead of waiting behind the ~100-cycle chain of its own element (division,
      // roundings, gather): ~10% on an x86 core whose 512-bit division issues once per
      // ~16 cycles (docs/history/PERFORMANCE-log.md).
      int64_t j = 0;
      for (; j + 8 <= A.n; j += 8) [&]<size_t... K>(std::index_sequence<K...>) HWY_ATTR {
          VF e[8];
          ((e[K] = abs_error(j + static_cast<int64_t>(K))), ...);
          (add_term(j + static_cast<int64_t>(K), e[K], std::integral_constant<size_t, K>{}), ...);
        }
      (std::make_index_sequence<8>{});
      // then the tail
      const int64_t rem = A.n - j;
      [&]<size_t... K>(std::index_sequence<K...>) HWY_ATTR {
        ((static_cast<int64_t>(K) < rem ? add_term(j + static_cast<int64_t>(K), abs_error(j + static_cast<int64_t>(K)),
                                                   std::integral_constant<size_t, K>{})
                                        : void()),
         ...);
      }
      (std::make_index_sequence<7>{});
    };
    bool split = false, exact_diff = false;
    if constexpr (kCanSplit) split = data_splits && split_candidate_ok(s, g.xmax);
    if constexpr (kCanExactDiff) exact_diff = split && exact_diff_ok(T, s, g.xmax);
    if (kCanExactDiff && exact_diff) sums(std::true_type{}, std::true_type{});
    else if (kCanSplit && split) sums(std::true_type{}, std::false_type{});
    else sums(std::false_type{}, std::false_type{});
    hn::Vec<DH> err[2];
    auto half_error = [&]<size_t h>(std::integral_constant<size_t, h>) HWY_ATTR {
      const VD blk = hn::Add(hn::Add(hn::Add(acc[0][h], acc[4][h]), hn::Add(acc[1][h], acc[5][h])),
                             hn::Add(hn::Add(acc[2][h], acc[6][h]), hn::Add(acc[3][h], acc[7][h])));
      const VD tot = hn::Add(hn::Zero(dd), blk);
      VD r;
      switch (A.err_dt) {
        case DType::kBF16:
          r = round_sums<45>(tot, 0x1p-126, 0x1.FEp127, DType::kBF16);
          break;
        case DType::kF16:
          r = round_sums<42>(tot, 0x1p-14, 65504.0, DType::kF16);
          break;
        default:
          r = tot;
          break;  // f32: the conversion below rounds it
      }
      err[h] = hn::DemoteTo(dh, r);
    };
    half_error(std::integral_constant<size_t, 0>{});
    half_error(std::integral_constant<size_t, 1>{});
    const VF e = hn::Combine(df, err[1], err[0]);
    // the reference's rule: strict <, NaN never improves
    const auto imp = hn::Lt(e, best);
    best = hn::IfThenElse(imp, e, best);
    alignas(8) uint8_t mask_bytes[8] = {0};
    hn::StoreMaskBits(df, imp, mask_bytes);
    const hn::Vec<DU> bit = hn::Set(DU(), 1u << (i % 32));
    words = hn::Or(words, hn::IfThenElseZero(hn::LoadMaskBits(DU(), mask_bytes), bit));
    if (i % 32 == 31 || i + 1 == A.num_candidates) {
      hn::StoreU(words, DU(), A.improved + (i / 32) * N);
      words = hn::Zero(DU());
    }
  }
  return true;
}

/// ExactBatchT with the zero point fixed: the benchmarked searches have either.
template <int kDN, int kEN, int kG, int kNK, bool kQExact, int kW>
HWY_INLINE bool ExactBatchZp(const ExactBatchArgs& A) {
  return A.term.has_zp ? ExactBatchT<kDN, kEN, kG, kNK, kQExact, 1, kW>(A)
                       : ExactBatchT<kDN, kEN, kG, kNK, kQExact, 0, kW>(A);
}

/// Specialized kernels for the benchmarked bf16 searches (memoryless_mse / mse on INT
/// grids, nvfp4_expanded_mse: unweighted bf16 terms from the table; imatrix_mse:
/// weighted f32 cubes); everything else runs the generic instantiation.
bool ExactBatch(const ExactBatchArgs& A) {
  constexpr int kNone = static_cast<int>(Narrow::kNone), kBF16 = static_cast<int>(Narrow::kBF16);
  constexpr int kInt = static_cast<int>(qobs::detail::GridKind::kInt);
  constexpr int kFp4 = static_cast<int>(qobs::detail::GridKind::kFp4);
  constexpr int kTable = static_cast<int>(NormKind::kTable16), kThree = static_cast<int>(NormKind::kThree);
  const BlockKernelArgs& T = A.term;
  const bool weighted = A.wt != nullptr;
  if (T.data_narrow == Narrow::kBF16 && T.err_narrow == Narrow::kBF16 && T.norm_kind == NormKind::kTable16 &&
      !weighted) {
    if (T.grid == qobs::detail::GridKind::kInt && A.q_exact)
      return ExactBatchZp<kBF16, kBF16, kInt, kTable, true, 0>(A);
    if (T.grid == qobs::detail::GridKind::kFp4 && !T.has_zp && A.q_exact && T.q_min == -T.q_max)
      return ExactBatchT<kBF16, kBF16, kFp4, kTable, true, 0, 0>(A);
  }
  if (T.data_narrow == Narrow::kBF16 && T.err_narrow == Narrow::kNone && T.norm_kind == NormKind::kThree &&
      T.grid == qobs::detail::GridKind::kInt && A.q_exact && weighted)
    return ExactBatchZp<kBF16, kNone, kInt, kThree, true, 1>(A);
  return ExactBatchT<-1, -1, -1, -1, false, -1, -1>(A);
}

int ExactBatchLanes() { return static_cast<int>(hn::Lanes(DF())); }

/// How many float patterns in [lo_bits, hi_bits), with either sign, narrow_bf16_split
/// rounds differently from narrow_to (the test of the split's range).
int64_t SplitNarrowingMismatches(uint32_t lo_bits, uint32_t hi_bits) {
  const DF df;
  const DU du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto iota = hn::Iota(du, 0u);
  int64_t bad = 0;
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint64_t b = lo_bits; b < hi_bits; b += static_cast<uint64_t>(N)) {
      const auto u = hn::Or(hn::Add(hn::Set(du, static_cast<uint32_t>(b)), iota), hn::Set(du, sign));
      const VF v = hn::BitCast(df, u);
      const auto in_range =
          hn::Lt(hn::And(hn::Add(hn::Set(du, static_cast<uint32_t>(b)), iota), hn::Set(du, 0x7FFFFFFFu)),
                 hn::Set(du, hi_bits));
      const auto ne = hn::Ne(hn::BitCast(du, narrow_bf16_split(v)), hn::BitCast(du, narrow_to(Narrow::kBF16, v)));
      bad += static_cast<int64_t>(hn::CountTrue(du, hn::And(ne, in_range)));
    }
  return bad;
}

/// How many (x, s) pairs quotient_bf16_split rounds differently from the f32 division
/// rounded to bf16 (or, with !rounded, its product x (1 / s) differs from the f32
/// division before any rounding): x every bf16 value of either sign with a biased
/// exponent in [x_exp_lo, x_exp_hi], s every bf16 significand at each biased exponent of
/// s_exps, where |x| <= 2^99 s (SplitGuard) and the quotient is normal (smaller
/// quotients round to a zero code either way).
int64_t SplitDivisionMismatches(int x_exp_lo, int x_exp_hi, const int* s_exps, int num_s_exps, bool rounded) {
  const DF df;
  const DU du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto iota = hn::Iota(du, 0u);
  const uint32_t lo = static_cast<uint32_t>(x_exp_lo) << 7, hi = (static_cast<uint32_t>(x_exp_hi) + 1) << 7;
  int64_t bad = 0;
  for (int e = 0; e < num_s_exps; ++e)
    for (uint32_t sm = 0; sm < 128; ++sm) {
      const VF s = hn::BitCast(df, hn::Set(du, ((static_cast<uint32_t>(s_exps[e]) << 7) | sm) << 16));
      const VF inv = hn::Div(hn::Set(df, 1.0f), s);
      for (uint32_t sign : {0u, 0x8000u})
        for (uint32_t b = lo; b < hi; b += static_cast<uint32_t>(N)) {
          const auto pattern = hn::Add(hn::Set(du, b), iota);
          const VF x = hn::BitCast(df, hn::ShiftLeft<16>(hn::Or(pattern, hn::Set(du, sign))));
          const VF q = hn::Div(x, s);
          const VF fast = rounded ? quotient_bf16_split(x, inv) : hn::Mul(x, inv);
          const VF want = rounded ? narrow_to(Narrow::kBF16, q) : q;
          const auto in_guard =
              hn::And(hn::Ge(hn::Abs(q), hn::Set(df, 0x1p-126f)), hn::Le(hn::Abs(x), hn::Mul(s, hn::Set(df, 0x1p99f))));
          const auto counted = hn::And(hn::Lt(pattern, hn::Set(du, hi)), hn::RebindMask(du, in_guard));
          const auto ne = hn::Ne(hn::BitCast(du, fast), hn::BitCast(du, want));
          bad += static_cast<int64_t>(hn::CountTrue(du, hn::And(ne, counted)));
        }
    }
  return bad;
}

/// How many elements a shortened chain of the exact batch kernel gives another |r - x|
/// than the integer-rounding chain, for bf16 data and errors on the grid of A (INT or
/// FP4, no zero point): x every bf16 value of either sign with a biased exponent in
/// [x_exp_lo, x_exp_hi], s every bf16 significand at each biased exponent of s_exps,
/// counting the elements that SplitGuard and (but for kSkipRoundingUnbounded)
/// exact_diff_ok's element bound admit (|x| <= 2^99 s, |x| <= 2 bf16(q_top s)). The
/// chains: exact_abs_error with kExactDiff, or exact_diff_of_magnitude on |x| (with the
/// clamp's bound of x's side, or q_max for both: the negative control).
int64_t ExactDiffMismatches(const BlockKernelArgs& grid_args, int x_exp_lo, int x_exp_hi, const int* s_exps,
                            int num_s_exps, ExactDiffChain chain) {
  const DF df;
  const DU du;
  BlockKernelArgs A = grid_args;
  A.has_zp = false;
  A.data_narrow = A.err_narrow = Narrow::kBF16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto iota = hn::Iota(du, 0u);
  const uint32_t lo = static_cast<uint32_t>(x_exp_lo) << 7, hi = (static_cast<uint32_t>(x_exp_hi) + 1) << 7;
  const VF zero = hn::Zero(df);
  const bool bounded = chain != ExactDiffChain::kSkipRoundingUnbounded;
  const VF upper = hn::Set(df, A.q_max);
  const VF lower = hn::Set(df, chain == ExactDiffChain::kMagnitudesOneBound ? A.q_max : -A.q_min);
  int64_t bad = 0;
  for (int e = 0; e < num_s_exps; ++e)
    for (uint32_t sm = 0; sm < 128; ++sm) {
      const VF s = hn::BitCast(df, hn::Set(du, ((static_cast<uint32_t>(s_exps[e]) << 7) | sm) << 16));
      const VF inv = hn::Div(hn::Set(df, 1.0f), s);
      const VF r_top = narrow_to(Narrow::kBF16, hn::Mul(hn::Min(hn::Set(df, A.q_max), hn::Set(df, -A.q_min)), s));
      for (uint32_t sign : {0u, 0x8000u})
        for (uint32_t b = lo; b < hi; b += static_cast<uint32_t>(N)) {
          const auto pattern = hn::Add(hn::Set(du, b), iota);
          const VF x = hn::BitCast(df, hn::ShiftLeft<16>(hn::Or(pattern, hn::Set(du, sign))));
          const VF top = hn::IfThenElse(hn::Lt(x, zero), lower, upper);
          const VF fast = chain == ExactDiffChain::kMagnitudes || chain == ExactDiffChain::kMagnitudesOneBound
                              ? hn::Abs(exact_diff_of_magnitude<-1>(A, hn::Abs(x), top, s, inv))
                              : exact_abs_error<-1, -1, -1, true, 0, true, true>(A, x, s, inv, zero);
          const VF full = exact_abs_error<-1, -1, -1, true, 0, false, false>(A, x, s, inv, zero);
          const auto within_bound =
              bounded ? hn::Le(hn::Abs(x), hn::Add(r_top, r_top)) : hn::FirstN(df, static_cast<size_t>(N));
          const auto admitted = hn::And(hn::Le(hn::Abs(x), hn::Mul(s, hn::Set(df, 0x1p99f))), within_bound);
          const auto counted = hn::And(hn::Lt(pattern, hn::Set(du, hi)), hn::RebindMask(du, admitted));
          const auto ne = hn::Ne(hn::BitCast(du, fast), hn::BitCast(du, full));
          bad += static_cast<int64_t>(hn::CountTrue(du, hn::And(ne, counted)));
        }
    }
  return bad;
}

inline constexpr ExactBatchSimd kExactBatchSimd{&ExactBatchLanes, &ExactBatch, &SplitNarrowingMismatches,
                                                &SplitDivisionMismatches, &ExactDiffMismatches};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const ExactBatchSimd* exact_batch_simd(SimdLevel level) { return QOBS_SIMD_TABLE(ExactBatchSimd, kExactBatchSimd); }

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
