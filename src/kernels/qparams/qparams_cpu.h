// The vectorized R4.1 for the common plans (qparams_cpu.cc), behind
// kernels::calculate_qparams. Private to src/kernels (the driver qparams.cc, tests).
#pragma once

#include <optional>

#include "kernels/kernels.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels::cpu {

/// calculate_qparams for f32 / bf16 / f16 statistics (one dtype), not MX, with at most an
/// FP8 E4M3 scale_dtype and a global scale (NVFP4), an integer zero-point dtype or a
/// symmetric plan (ShrunkQParams::usable),
/// at `level` (not kScalar) on `num_threads`: bit for bit the scalar R4.1. nullopt when
/// the call is outside that set, or has something to report (mismatched shapes,
/// non-finite statistics): the scalar path then handles it, errors included.
std::optional<ScaleZeroPoint> calculate_qparams_simd(const Tensor& min_vals, const Tensor& max_vals,
                                                     const QuantizationArgs& args, const Tensor* global_scale,
                                                     NumericMode mode, SimdLevel level, int num_threads);

}  // namespace qobs::kernels::cpu
