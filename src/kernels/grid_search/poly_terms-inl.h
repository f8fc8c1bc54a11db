// Per-target pieces of the certified polynomial terms (pow_poly.h) shared by the
// one-group sums (poly_sums_simd.cc) and the batch kernel (poly_batch_simd.cc): the
// 16-entry 2^(p k) table lookup, the polynomial in m, and the dispatch that instantiates
// a kernel per (zero point, grid, degree).
//
// A per-target header (Highway's -inl.h convention): a unit includes it after
// <hwy/highway.h>, outside any namespace, and foreach_target.h re-reads it once per
// target, each time into that target's namespace (the include guard toggles with
// HWY_TARGET_TOGGLE). It carries code for the AVX2 and AVX-512 passes only
// (simd_targets.h).
#if defined(QOBS_KERNELS_GRID_SEARCH_POLY_TERMS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QOBS_KERNELS_GRID_SEARCH_POLY_TERMS_INL_H_
#undef QOBS_KERNELS_GRID_SEARCH_POLY_TERMS_INL_H_
#else
#define QOBS_KERNELS_GRID_SEARCH_POLY_TERMS_INL_H_
#endif

#include <hwy/highway.h>
#include "kernels/grid_search/pow_poly.h"
#include "qparams/qparam_math.h"

#include "kernels/simd/lane_types-inl.h"
#include "kernels/simd/table_lookups_x86-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

/// sum c[i] m^i by Horner's rule: fewest ops. (Estrin's scheme, one op more for a
/// shorter dependency chain, measured slower: the kernel is bound by issue, not latency.)
template <int kDeg>
HWY_INLINE VF eval_poly(const VF* c, VF m) {
  VF v = c[kDeg];
  for (int k = kDeg - 1; k >= 0; --k) v = hn::MulAdd(v, m, c[k]);
  return v;
}

/// Runs K::Run<kZp, kFp4, kDeg> for the grid, zero point and polynomial degree at hand
/// (the poly kernels are instantiated per combination so the hot loops carry no branch).
template <class K, bool kZp, bool kFp4, class Args>
void poly_degree_dispatch(const Args& A) {
  switch (A.poly->degree) {
    case 2:
      return K::template Run<kZp, kFp4, 2>(A);
    case 3:
      return K::template Run<kZp, kFp4, 3>(A);
    case 4:
      return K::template Run<kZp, kFp4, 4>(A);
    case 5:
      return K::template Run<kZp, kFp4, 5>(A);
    default:
      return K::template Run<kZp, kFp4, 6>(A);
  }
}

template <class K, class Args>
void poly_dispatch(const Args& A, bool has_zp) {
  if (A.grid == qobs::detail::GridKind::kFp4) return poly_degree_dispatch<K, false, true>(A);  // symmetric (R4.1)
  return has_zp ? poly_degree_dispatch<K, true, false>(A) : poly_degree_dispatch<K, false, false>(A);
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#endif  // QOBS_KERNELS_GRID_SEARCH_POLY_TERMS_INL_H_
