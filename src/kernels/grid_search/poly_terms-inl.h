// Per-target pieces of the certified polynomial terms (pow_poly.h) shared by the
// one-group sums (poly_sums_simd.cc) and the batch kernel (poly_batch_simd.cc): the
// 16-entry 2^(p k) table lookup, the polynomial in m, and the dispatch that
// instantiates a kernel per (zero point, grid, degree). Included inside each kernel
// file's per-target namespace after lane_types-inl.h, once per Highway target -- hence
// no include guard.

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
