// FP4 (E2M1) packing of 16-bit values in vector lanes (pack_simd.cc). Scalar twin: the
// code table of kernels::pack_fp4 (packing.cc), which also names an element that is not
// an FP4 value.
#pragma once

#include <cstdint>

#include "kernels/simd/simd_level.h"

namespace qobs::kernels::detail {

/// The vector packing kernels (simd_dispatch.h).
struct PackSimd {
  /// Packs n (even) bf16 (is_bf16) or f16 patterns that are E2M1 values, two codes per
  /// byte (element 2i in the low nibble, R8.5.1), into dst[0, n / 2). Code = sign << 3
  /// | magnitude index of {0, 0.5, 1, 1.5, 2, 3, 4, 6}; -0 is code 8. Returns false
  /// when some element is not an E2M1 value (then dst is unspecified and the caller
  /// redoes the range with the scalar loop, which reports the first such element).
  bool (*fp4_16)(const uint16_t* src, int64_t n, bool is_bf16, uint8_t* dst);
};
/// The table for a vector level; nullptr for kScalar (the scalar twin: pack_fp4's
/// element loop, pack_ref.cc).
const PackSimd* pack_simd(SimdLevel level);

}  // namespace qobs::kernels::detail
