// The x86 table lookups of table_lookups_x86-inl.h and their portable twins on arrays,
// so that the tests can compare the two bit for bit (table_lookups_simd.cc).
#pragma once

#include <cstdint>

#include "kernels/simd/simd_level.h"

namespace qobs::kernels::detail {

/// Array forms of the lookups (simd_dispatch.h); `portable` picks the twin.
struct TableLookupsSimd {
  /// out[j] = exp_table16(table, ef[j]) for n lanes' worth of indices (table: 16
  /// floats, 64-byte aligned).
  void (*exp_table16)(const float* table, const int32_t* ef, int64_t n, float* out, bool portable);
  /// For each vector of e values (n a multiple of the float lanes): starting from zero
  /// accumulators, add_table_terms_f64, then the lower then the upper accumulator into
  /// out (as many doubles as e values).
  void (*terms_f64)(const double* table64, const float* e, int64_t n, double* out, bool portable);
  /// The float lanes of this level.
  int (*lanes)();
};
/// The table for a vector level; nullptr for kScalar.
const TableLookupsSimd* table_lookups_simd(SimdLevel level);

}  // namespace qobs::kernels::detail
