// Exact widening of bf16 / f16 bit patterns to f32 and the RNE narrowing back, in
// vector lanes (convert_simd.cc). Scalar twins: bf16_to_float / f16_to_float and
// float_to_bf16 / float_to_f16 (qobs/formats.h), which widen16 / narrow16 below run
// where there is no table.
#pragma once

#include <cstdint>

#include "kernels/simd/simd_level.h"
#include "qobs/formats.h"

namespace qobs::kernels::detail {

/// The conversion kernels (simd_dispatch.h).
struct ConvertSimd {
  /// Exact widening of n bf16 (is_bf16) or f16 bit patterns to float.
  void (*widen)(const uint16_t* src, int64_t n, bool is_bf16, float* dst);
  /// RNE narrowing of n floats to bf16 (is_bf16) or f16 bit patterns, as
  /// Tensor::from_floats stores them: float_to_bf16 / float_to_f16, and a NaN through
  /// from_floats' double path (double_to_bf16 / double_to_f16).
  void (*narrow16)(const float* src, int64_t n, bool is_bf16, uint16_t* dst);
};
/// The table for a vector level; nullptr for kScalar.
const ConvertSimd* convert_simd(SimdLevel level);

/// ConvertSimd::widen, or its scalar twin where k is null.
inline void widen16(const ConvertSimd* k, const uint16_t* src, int64_t n, bool is_bf16, float* dst) {
  if (k) return k->widen(src, n, is_bf16, dst);
  for (int64_t j = 0; j < n; ++j) dst[j] = is_bf16 ? bf16_to_float(src[j]) : f16_to_float(src[j]);
}

}  // namespace qobs::kernels::detail
