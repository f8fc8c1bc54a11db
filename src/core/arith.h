// Emulation of the reference's element-wise arithmetic (R0.4). Host and device code
// (QOBS_HD): the CUDA kernels evaluate the same operations from the same source.
//
// Values are carried as double but always lie on the grid of the dtype they belong to.
// An operation on f32/bf16/f16 operands is evaluated in f32 (the operands widen exactly)
// and, in parity mode, rounded once (RNE) to the operand dtype, exactly as PyTorch does
// on the CPU (R0.4b). f64 operands are evaluated in f64. Wide mode keeps f32
// intermediates and never narrows to bf16/f16 (Note R0.4).
#pragma once

#include <cmath>

#include "qobs/dtype.h"
#include "qobs/formats.h"
#include "qobs/host_device.h"
#include "qobs/numeric.h"

namespace qobs::detail {

struct Arith {
  DType dt;
  NumericMode mode = NumericMode::kParity;

  /// Rounds an f32 result to dt (parity) or keeps it (wide).
  QOBS_HD double narrow(float v) const {
    if (mode == NumericMode::kWide || dt == DType::kF32) return v;
    return round_to_float_dtype(dt, v);
  }
  /// Converts a value of another dtype (or a host scalar) to this dtype (R0.4a/c).
  QOBS_HD double cast(double v) const {
    if (dt == DType::kF64) return v;
    if (mode == NumericMode::kWide || dt == DType::kF32) return static_cast<float>(v);
    return round_to_float_dtype(dt, v);
  }
  QOBS_HD double add(double a, double b) const {
    return dt == DType::kF64 ? a + b : narrow(static_cast<float>(a) + static_cast<float>(b));
  }
  QOBS_HD double sub(double a, double b) const {
    return dt == DType::kF64 ? a - b : narrow(static_cast<float>(a) - static_cast<float>(b));
  }
  QOBS_HD double mul(double a, double b) const {
    return dt == DType::kF64 ? a * b : narrow(static_cast<float>(a) * static_cast<float>(b));
  }
  QOBS_HD double div(double a, double b) const {
    return dt == DType::kF64 ? a / b : narrow(static_cast<float>(a) / static_cast<float>(b));
  }
  /// |a|^norm with PyTorch's special cases for the exponents 2 and 3 (repeated
  /// multiplication), std::pow in f32 otherwise.
  QOBS_HD double pow_abs(double a, double norm) const {
    if (dt == DType::kF64) {
      const double x = std::fabs(a);
      if (norm == 2.0) return x * x;
      if (norm == 3.0) return x * x * x;
      return std::pow(x, norm);
    }
    const float x = std::fabs(static_cast<float>(a));
    if (norm == 2.0) return narrow(x * x);
    // bf16 rounds the intermediate square (bf16(bf16(x*x)*x)); f16 and f32 do not.
    if (norm == 3.0) return dt == DType::kBF16 ? narrow(static_cast<float>(narrow(x * x)) * x) : narrow(x * x * x);
    // PyTorch converts a scalar exponent to the tensor's own dtype: bf16 evaluates
    // |e|^2.40625 and f16 |e|^2.400390625 when asked for 2.4.
    return narrow(std::pow(x, static_cast<float>(cast(norm))));
  }
};

/// Round half to even, equal to std::nearbyint in the default rounding mode but inline:
/// the baseline x86-64 build has no roundsd, and libm's nearbyint saves and restores
/// the FP environment on every call (it dominated the per-candidate qparams).
/// Adding and removing 2^52 leaves an integer rounded by the FPU's own RNE.
QOBS_HD inline double round_half_even(double v) {
  if (!(std::fabs(v) < 0x1p52)) return v;  // already an integer, or NaN / inf
  const double big = std::copysign(0x1p52, v);
  return std::copysign((v + big) - big, v);  // copysign keeps -0.0 for -0.5 < v <= -0
}

/// NaN-propagating minimum / maximum (torch.minimum / torch.maximum semantics).
QOBS_HD inline double nan_min(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  return a < b ? a : b;
}
QOBS_HD inline double nan_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  return a > b ? a : b;
}
/// clamp(v, lo, hi) = min(max(v, lo), hi) with NaN propagation (R0.4f).
QOBS_HD inline double clamp_nan(double v, double lo, double hi) { return nan_min(nan_max(v, lo), hi); }

/// R0.4c for two >=1-dim float tensors: the wider float type wins, bf16 with f16 -> f32.
QOBS_HD inline DType promote_float_dtypes(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::kF64 || b == DType::kF64) return DType::kF64;
  return DType::kF32;
}

}  // namespace qobs::detail
