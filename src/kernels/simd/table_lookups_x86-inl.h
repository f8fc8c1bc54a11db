// Two table lookups of the search kernels, written with x86 instructions:
//  - exp_table16: a float from a 16-entry table per lane (the 2^(p k) factors of the
//    certified polynomial terms). AVX-512 does it in one vpermps; AVX2 in two 8-lane
//    vpermps and a blend on index bit 3, because Highway 1.0.3 has no two-table lookup
//    and a gather costs several times the permutes.
//  - add_table_terms_f64: the f64 terms of a vector of bf16 error values, looked up in
//    a 65536-entry table and added to two accumulators (the exact kernels' bf16 terms).
//    A vgatherdpd per half is slower than scalar loads where the gathers saturate
//    their port: AVX2 takes eight scalar loads (two per 128-bit pair), and AVX-512 one
//    gather for the lower half and scalar loads for the upper, which splits the
//    lookups between the gather and the load ports. Measured on the bf16 batch
//    searches at one thread: ~20% less time on AVX2 and ~8% on AVX-512 than two
//    gathers, on x86 cores whose gathers took most of the exact kernels' time
//    (docs/history/PERFORMANCE-log.md).
// Portable twins, in Highway gathers: exp_table16_portable and
// add_table_terms_f64_portable below, compared with these bit for bit on every index by
// tests/kernels (TableLookupsSimd, table_lookups_simd.cc).
//
// A per-target header (Highway's -inl.h convention): included after <hwy/highway.h>,
// outside any namespace, re-read once per target. It carries code for the AVX2 and
// AVX-512 passes only (simd_targets.h), each pass its own definitions.
#if defined(QOBS_KERNELS_SIMD_TABLE_LOOKUPS_X86_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QOBS_KERNELS_SIMD_TABLE_LOOKUPS_X86_INL_H_
#undef QOBS_KERNELS_SIMD_TABLE_LOOKUPS_X86_INL_H_
#else
#define QOBS_KERNELS_SIMD_TABLE_LOOKUPS_X86_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>

#include "kernels/simd/lane_types-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

/// The f64 table entries at ix[0..3] by scalar loads, two per 128-bit pair.
HWY_INLINE __m256d table_quad_f64(const double* table64, const uint32_t* ix) {
  const __m128d lo = _mm_loadh_pd(_mm_load_sd(table64 + ix[0]), table64 + ix[1]);
  const __m128d hi = _mm_loadh_pd(_mm_load_sd(table64 + ix[2]), table64 + ix[3]);
  return _mm256_set_m128d(hi, lo);
}

/// exp_table16's portable twin: table[ef & 15] per lane by a gather.
HWY_INLINE VF exp_table16_portable(const float* table, hn::Vec<DI> ef) {
  return hn::GatherIndex(DF(), table, hn::And(ef, hn::Set(DI(), 15)));
}

/// add_table_terms_f64's portable twin: both halves by f64 gathers.
HWY_INLINE void add_table_terms_f64_portable(VD& lower, VD& upper, VF e, const double* table64) {
  const DD dd;
  const DI64 di64;
  const hn::Vec<DI> idx = hn::BitCast(DI(), hn::ShiftRight<16>(hn::BitCast(DU(), e)));
  const hn::Half<DI> dhi;
  lower = hn::Add(lower, hn::GatherIndex(dd, table64, hn::PromoteTo(di64, hn::LowerHalf(dhi, idx))));
  upper = hn::Add(upper, hn::GatherIndex(dd, table64, hn::PromoteTo(di64, hn::UpperHalf(dhi, idx))));
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

#if HWY_TARGET == HWY_AVX3

/// 2^(p k) for the exponent fields `ef` (only their low 4 bits are read): one 16-lane
/// permute.
HWY_INLINE VF exp_table16(const float* table, hn::Vec<DI> ef) {
  return VF{_mm512_permutexvar_ps(ef.raw, _mm512_load_ps(table))};
}

/// Adds the terms of a vector of bf16 e (kTable16, unweighted; either sign: the f64
/// copy holds the terms of both) to two f64 sums, those of the lower half of the vector
/// to `lower` and those of the upper half to `upper` (the batch kernel: a row's sums of
/// the two halves' groups; the block kernel: lane sums j % 8, the same vector twice at
/// 16 lanes), read from the table's f64 copy in place of one f32 gather, two widenings
/// and a lane extraction. The values added are the same (f32 terms widen exactly).
/// The lower half by vgatherdpd, the upper half by scalar loads.
HWY_INLINE void add_table_terms_f64(VD& lower, VD& upper, VF e, const double* table64) {
  const auto idx = hn::ShiftRight<16>(hn::BitCast(DU(), e)).raw;
  lower = hn::Add(lower, VD{_mm512_i32gather_pd(_mm512_castsi512_si256(idx), table64, 8)});
  alignas(32) uint32_t ix[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(ix), _mm512_extracti64x4_epi64(idx, 1));
  upper = hn::Add(upper, VD{_mm512_insertf64x4(_mm512_castpd256_pd512(table_quad_f64(table64, ix)),
                                               table_quad_f64(table64, ix + 4), 1)});
}

#elif HWY_TARGET == HWY_AVX2

/// 2^(p k) for the exponent fields `ef` (only their low 4 bits are read): two 8-lane
/// permutes and a blend on bit 3.
HWY_INLINE VF exp_table16(const float* table, hn::Vec<DI> ef) {
  const __m256 lo = _mm256_permutevar8x32_ps(_mm256_load_ps(table), ef.raw);
  const __m256 hi = _mm256_permutevar8x32_ps(_mm256_load_ps(table + 8), ef.raw);
  return VF{_mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(ef.raw, 28)))};
}

/// add_table_terms_f64 (see the AVX-512 form): the eight terms by scalar loads.
HWY_INLINE void add_table_terms_f64(VD& lower, VD& upper, VF e, const double* table64) {
  const auto idx = hn::ShiftRight<16>(hn::BitCast(DU(), e)).raw;
  alignas(32) uint32_t ix[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(ix), idx);
  lower = hn::Add(lower, VD{table_quad_f64(table64, ix)});
  upper = hn::Add(upper, VD{table_quad_f64(table64, ix + 4)});
}

#endif  // HWY_TARGET

}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#endif  // QOBS_KERNELS_SIMD_TABLE_LOOKUPS_X86_INL_H_
