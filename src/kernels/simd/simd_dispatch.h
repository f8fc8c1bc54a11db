// How a Highway unit exports its kernels: a table of function pointers per compiled
// target, picked once per kernel call for the caller's SimdLevel -- the shape of
// Highway's HWY_EXPORT / HWY_DYNAMIC_DISPATCH, keyed by qobs's level (QOBS_SIMD,
// ScopedSimdLevel) instead of Highway's own CPU detection, so that the tests can run
// every level in one process.
//
// A unit `foo_simd.cc`:
//  - declares in its header a struct of function pointers (`struct FooSimd`) and
//    `const FooSimd* foo_simd(SimdLevel level)`;
//  - defines, inside every per-target namespace that carries kernels (AVX2, AVX-512;
//    simd_targets.h), `inline constexpr FooSimd kFooSimd{&Kernel1, &Kernel2, ...}`;
//  - in its HWY_ONCE part, after this header, defines
//    `const FooSimd* foo_simd(SimdLevel level) { return QOBS_SIMD_TABLE(FooSimd, kFooSimd); }`.
// kScalar has no table (nullptr): the caller runs its scalar twin. A vector level this
// binary was not compiled for throws instead of silently running something else.
#pragma once

#include "core/check.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels::detail {

template <class Table>
const Table* pick_simd_table(SimdLevel level, const Table* avx2, const Table* avx512) {
  if (level == SimdLevel::kScalar) return nullptr;
  const Table* t = level == SimdLevel::kAvx512 ? avx512 : avx2;
  QOBS_CHECK(t != nullptr, PreconditionError, "SIMD level ", to_string(level), " is not compiled into this binary");
  return t;
}

}  // namespace qobs::kernels::detail

#if HWY_TARGETS & HWY_AVX3
#define QOBS_SIMD_TABLE_AVX512(Type, table) &N_AVX3::table
#else
#define QOBS_SIMD_TABLE_AVX512(Type, table) static_cast<const Type*>(nullptr)
#endif
#if HWY_TARGETS & HWY_AVX2
#define QOBS_SIMD_TABLE_AVX2(Type, table) &N_AVX2::table
#else
#define QOBS_SIMD_TABLE_AVX2(Type, table) static_cast<const Type*>(nullptr)
#endif
/// The unit's table for `level` (a variable of the enclosing function), see above.
#define QOBS_SIMD_TABLE(Type, table)                                                       \
  ::qobs::kernels::detail::pick_simd_table<Type>(level, QOBS_SIMD_TABLE_AVX2(Type, table), \
                                                 QOBS_SIMD_TABLE_AVX512(Type, table))
