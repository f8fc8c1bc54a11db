// R4.1 in vector lanes for f32 statistics (qparams_simd.cc). Scalar twin:
// ShrunkQParams::compute (qparam_math.h), tested bit for bit against
// compute_qparams_elem.
#pragma once

#include <cstdint>

#include "kernels/simd/simd_level.h"
#include "qobs/dtype.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::detail {

/// The vector R4.1 kernels (simd_dispatch.h).
struct QParamsSimd {
  /// R4.1 for n f32 (min, max) pairs under a ShrunkQParams-usable plan (q.usable): the
  /// scales and the zero points (integer values, as floats; 0 when symmetric), bit for
  /// bit compute_qparams_elem's. False when some statistic is NaN / Inf (the outputs
  /// are then unspecified: the scalar path reports it), so the caller needs no
  /// separate scan.
  bool (*f32)(const qobs::detail::ShrunkQParams& q, const float* lo, const float* hi, int64_t n, float* scale,
              float* zp);
  /// The same on bf16 (in_bf16) / f16 statistic patterns, widened in the lanes, with
  /// the scales stored in scale_dt (f32, bf16 or f16; narrowed in the lanes as
  /// ConvertSimd::narrow16 narrows the finite or +inf scales of finite statistics): no
  /// widening and narrowing passes through buffers. False when a statistic is NaN / Inf.
  bool (*f16)(const qobs::detail::ShrunkQParams& q, const uint16_t* lo, const uint16_t* hi, bool in_bf16, int64_t n,
              DType scale_dt, void* scale, float* zp);
};
/// The table for a vector level; nullptr for kScalar (the scalar twin: QParamsJob::run).
const QParamsSimd* qparams_simd(SimdLevel level);

}  // namespace qobs::kernels::detail
