// Private interface of the vectorized quantize / dequantize / fake_quantize runs
// (qdq_simd.cc, compiled once per instruction set by Highway). The caller
// (kernels/qdq/qdq_cpu.cc) picks the level once per call and cuts the tensor into runs
// along the last axis over which the scale is constant or advances one element per
// column.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/simd/narrow.h"
#include "kernels/simd/simd_level.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::detail {

/// Element storage the vector loads and stores handle.
enum class QdqStorage : uint8_t { kF32, kBF16, kF16, kI8 };

/// One run of n consecutive elements of x and of the output, cut into groups of
/// consecutive elements that share a scale.
struct QdqRunArgs {
  QdqOp op = QdqOp::kFakeQuantize;
  const void* x = nullptr;
  QdqStorage x_storage = QdqStorage::kF32;
  void* out = nullptr;
  QdqStorage out_storage = QdqStorage::kF32;
  int64_t n = 0;
  /// Scale (on s_dt's grid), zero point cast to x's dtype (R5.1.1 step 2) and to s_dt
  /// (R5.1.3), all as f32: entry k serves the k-th group of the run, whose first group
  /// has `head` elements and every later one `group` (group 1: one value per element).
  const float* s = nullptr;
  const float* z_x = nullptr;
  const float* z_s = nullptr;
  int64_t group = 1, head = 1;
  bool has_zp = false;
  Narrow y_narrow = Narrow::kNone;  ///< dtype of x / s (+ z)
  Narrow s_narrow = Narrow::kNone;  ///< dtype of the dequantization (s_dt)
  qobs::detail::GridKind grid = qobs::detail::GridKind::kInt;
  float q_min = 0, q_max = 0;
};

/// The vector QDQ run (simd_dispatch.h).
struct QdqSimd {
  /// Evaluates a run. Returns false, with the run's output unspecified, when an element
  /// needs the scalar steps: a non-finite x or a NaN quotient, whose NaN encodings the
  /// vector lanes do not reproduce.
  bool (*run)(const QdqRunArgs& args);
};
/// The table for a vector level; nullptr for kScalar (the scalar twin: the element
/// loop of qdq_cpu.cc over qdq_elem).
const QdqSimd* qdq_simd(SimdLevel level);

}  // namespace qobs::kernels::detail
