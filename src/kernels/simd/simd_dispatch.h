// QOBS_SIMD_DISPATCH(call): runs N_AVX3::call or N_AVX2::call for the caller's `level`,
// or throws for a level this binary lacks. Explicit per-level tables instead of
// HWY_DYNAMIC_DISPATCH: the level is chosen by the caller (QOBS_SIMD /
// ScopedSimdLevel), not by Highway's own CPU detection. Included in the HWY_ONCE part
// of a kernel file, inside namespace qobs::kernels::detail, after <hwy/highway.h>.
#pragma once

#include "core/check.h"
#include "kernels/simd/simd_level.h"

#if HWY_TARGETS & HWY_AVX3
#define QOBS_CASE_AVX512(call) \
  if (level == SimdLevel::kAvx512) return N_AVX3::call;
#else
#define QOBS_CASE_AVX512(call)
#endif
#if HWY_TARGETS & HWY_AVX2
#define QOBS_CASE_AVX2(call) \
  if (level == SimdLevel::kAvx2) return N_AVX2::call;
#else
#define QOBS_CASE_AVX2(call)
#endif
#define QOBS_SIMD_DISPATCH(call) \
  QOBS_CASE_AVX512(call)         \
  QOBS_CASE_AVX2(call)           \
  QOBS_THROW(PreconditionError, "SIMD level ", to_string(level), " is not compiled into this binary")
