// The exact block kernel (block_errors_simd.h), one body compiled for AVX2 and AVX-512
// (Highway foreach_target; machines without AVX2 run the fused scalar path). Scalar
// twin: scalar_errors (kernels/grid_search/exact.cc), tested bit for bit at every level.
//
// Numerics (R0.4, qparam_math.h): all lanes hold f32 containers of values that lie
// on the data dtype's grid; after each element-wise op a bf16/f16 result is rounded
// once, RNE, exactly as Arith::narrow does. Error terms are accumulated in double in
// the canonical order of ErrorSum (select.h): 8 lane sums per block (term j goes
// to lane j % 8), block = ((l0+l4) + (l1+l5)) + ((l2+l6) + (l3+l7)).
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/grid_search/block_errors_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "kernels/simd/lane_types-inl.h"         // DF, DU, DI, DH, DD, VF, VD, ...
#include "kernels/simd/grid_round-inl.h"         // narrow_to, fp8_round, fp4_round
#include "kernels/pow/pow-inl.h"                 // pow_replay, pow_approx
#include "kernels/grid_search/exact_term-inl.h"  // exact_term

#include <cmath>
#include <type_traits>

#include "kernels/grid_search/block_errors_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Only the AVX2 and AVX-512 passes carry kernels (simd_targets.h); the baseline pass
// Highway always adds stays empty.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

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
  constexpr int64_t N = HWY_LANES(float);
  const bool weighted = A.w != nullptr;
  // full vectors without masks, then one masked tail whose dead lanes are zeroed
  const int64_t n_main = A.n - A.n % N;
  // The split bf16 rounding where SplitGuard allows: the block's values once (a masked
  // tail reads zeros), each candidate below
  constexpr bool kCanSplit = split_instantiation(kDN, kEN);
  // Unweighted bf16 table terms on a symmetric INT or FP4 grid: where exact_diff_ok
  // allows (per candidate, below), r - x needs no rounding, the chain runs on |x|
  // (exact_diff_of_magnitude) and the terms come from the table's f64 copy
  // (add_table_terms_f64), as in the exact batch kernel
  constexpr bool kCanMagnitude = magnitude_instantiation(kDN, kEN, kG, kNK);
  const bool magnitude_data =
      kCanMagnitude && !weighted && !A.has_zp && A.pow_table64 != nullptr && codes_exact_in_data_dtype(A, false);
  // |x| and the clamp's bound on x's side, read by every candidate that takes the
  // magnitude chain; the last vector is padded with zeros, whose term is 0
  alignas(64) float abs_x[kCanMagnitude ? kSumBlock : 1];
  alignas(64) float top[kCanMagnitude ? kSumBlock : 1];
  bool data_splits = false;
  VF xmax = hn::Zero(df);
  if constexpr (kCanSplit) {
    SplitGuard g = split_guard();
    auto add = [&](int64_t j, VF x) HWY_ATTR {
      split_data_add(g, x);
      if constexpr (kCanMagnitude) {
        if (magnitude_data) {
          hn::Store(hn::Abs(x), df, abs_x + j);
          hn::Store(clamp_bound_of_side(A, x), df, top + j);
        }
      }
    };
    for (int64_t j = 0; j < n_main; j += N) add(j, hn::LoadU(df, A.x + j));
    if (n_main < A.n) add(n_main, hn::MaskedLoad(hn::FirstN(df, static_cast<size_t>(A.n - n_main)), df, A.x + n_main));
    data_splits = split_data_ok(g);
    xmax = hn::MaxOfLanes(df, g.xmax);  // the block's max |x| in every lane
  }
  const VF one = hn::Set(df, 1.0f);
  for (int64_t i = 0; i < A.num_candidates; ++i) {
    const VF s = hn::Set(df, A.scale[i]);
    const VF z = hn::Set(df, A.has_zp ? A.zp[i] : 0.0f);
    // quotient_bf16_split's reciprocal, once per candidate (unused without the split)
    const VF inv_s = kCanSplit ? hn::Div(one, s) : s;
    LaneSums acc;
    acc.reset();
    // kPowApprox sums only need to stay inside the certified bound: f32 lane sums
    // (<= 512 terms each per block, relative error <= 2^-15, part of the caller's
    // bound) save the two f64 conversions and adds per vector
    constexpr bool kF32Sum = kNK == static_cast<int>(NormKind::kPowApprox);
    VF acc32 = hn::Zero(df);
    auto sums = [&]<bool kSplit>(std::bool_constant<kSplit>) HWY_ATTR {
      auto term = [&](VF x, VF w) HWY_ATTR {
        return exact_term<kDN, kEN, kG, kNK, false, -1, kSplit>(A, x, w, weighted, s, inv_s, z);
      };
      auto accumulate = [&](VF t) HWY_ATTR {
        if constexpr (kF32Sum) acc32 = hn::Add(acc32, t);
        else acc.add(t);
      };
      for (int64_t j = 0; j < n_main; j += N)
        accumulate(term(hn::LoadU(df, A.x + j), A.w ? hn::LoadU(df, A.w + j) : one));
      if (n_main < A.n) {
        const auto m = hn::FirstN(df, static_cast<size_t>(A.n - n_main));
        const VF t = term(hn::MaskedLoad(m, df, A.x + n_main), A.w ? hn::MaskedLoad(m, df, A.w + n_main) : one);
        accumulate(hn::IfThenElseZero(m, t));
      }
    };
    bool split = false;
    if constexpr (kCanSplit) split = data_splits && split_candidate_ok(s, xmax);
    bool magnitude = false;
    if constexpr (kCanMagnitude) magnitude = magnitude_data && split && exact_diff_ok(A, s, xmax);
    if (kCanMagnitude && magnitude) {
      // At 16 lanes both halves of a vector go to lane sums 0-7 (lower half first), at
      // 8 lanes the lower half to lanes 0-3 and the upper to 4-7: LaneSums::add's order
      VD& upper = N == 16 ? acc.a0 : acc.a1;
      for (int64_t j = 0; j < A.n; j += N)
        add_table_terms_f64(acc.a0, upper,
                            exact_diff_of_magnitude<kG>(A, hn::Load(df, abs_x + j), hn::Load(df, top + j), s, inv_s),
                            A.pow_table64);
    } else if (kCanSplit && split) {
      sums(std::true_type{});
    } else {
      sums(std::false_type{});
    }
    if constexpr (kF32Sum) acc.add(acc32);
    A.sums[i] = acc.total();
  }
}

template <int kDN, int kEN, int kG>
HWY_INLINE void BlockErrorsNorm(const BlockKernelArgs& A) {
  switch (A.norm_kind) {
    case NormKind::kTwo:
      return BlockErrorsT<kDN, kEN, kG, static_cast<int>(NormKind::kTwo)>(A);
    case NormKind::kThree:
      return BlockErrorsT<kDN, kEN, kG, static_cast<int>(NormKind::kThree)>(A);
    case NormKind::kPowReplay:
      return BlockErrorsT<kDN, kEN, kG, static_cast<int>(NormKind::kPowReplay)>(A);
    case NormKind::kPowApprox:
      return BlockErrorsT<kDN, kEN, kG, static_cast<int>(NormKind::kPowApprox)>(A);
    case NormKind::kTable16:
      return BlockErrorsT<kDN, kEN, kG, static_cast<int>(NormKind::kTable16)>(A);
    default:
      return BlockErrorsT<-1, -1, -1, -1>(A);
  }
}

template <int kDN, int kEN>
HWY_INLINE void BlockErrorsGrid(const BlockKernelArgs& A) {
  switch (A.grid) {
    case qobs::detail::GridKind::kInt:
      return BlockErrorsNorm<kDN, kEN, static_cast<int>(qobs::detail::GridKind::kInt)>(A);
    case qobs::detail::GridKind::kFp8:
      return BlockErrorsNorm<kDN, kEN, static_cast<int>(qobs::detail::GridKind::kFp8)>(A);
    // FP6 (MXFP6) reads the grid at run time: no specialized instantiations for it
    case qobs::detail::GridKind::kFp6:
      return BlockErrorsT<-1, -1, -1, -1>(A);
    default:
      return BlockErrorsNorm<kDN, kEN, static_cast<int>(qobs::detail::GridKind::kFp4)>(A);
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

inline constexpr BlockErrorsSimd kBlockErrorsSimd{&BlockErrors};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const BlockErrorsSimd* block_errors_simd(SimdLevel level) { return QOBS_SIMD_TABLE(BlockErrorsSimd, kBlockErrorsSimd); }

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
