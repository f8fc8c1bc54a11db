// Number formats and element-level rounding primitives (RULES §2).
//
// Spec cards (R2.2, R2.3, R2.4):
//   bf16      1-8-7, bias 127, Inf/NaN (IEEE), subnormals kept, max 3.3895e38.
//   f16       1-5-10, bias 15, Inf/NaN (IEEE), subnormals kept, max 65504.
//   FP8 E4M3  1-4-3, bias 7, no Inf, NaN = S.1111.111, subnormals m/8*2^-6,
//             max 448, min normal 2^-6, min subnormal 2^-9.
//   FP4 E2M1  1-2-1, bias 1, no Inf/NaN, magnitudes {0,.5,1,1.5,2,3,4,6}; never a
//             storage dtype: values live in float tensors or as packed nibbles.
//   E8M0      8-bit biased exponent (MX scales), value 2^(e-127), stored as uint8.
#pragma once

#include <bit>
#include <cstdint>

#include "qobs/dtype.h"

namespace qobs {

/// Immutable description of a small float or integer code format: the one place each
/// format's constants are written down (the spec cards above), the rest derived from it.
struct FormatSpec {
  const char* name;
  int total_bits;
  int exponent_bits;  ///< 0 for integers
  int mantissa_bits;  ///< 0 for integers
  int bias;
  bool has_inf;
  bool has_nan;
  bool is_signed;
  double max_finite;
};

inline constexpr FormatSpec kFp8E4M3Spec{"float8_e4m3fn", 8, 4, 3, 7, false, true, true, 448.0};
inline constexpr FormatSpec kFp4E2M1Spec{"float4_e2m1", 4, 2, 1, 1, false, false, true, 6.0};
inline constexpr FormatSpec kE8M0Spec{"e8m0", 8, 8, 0, 127, false, true, false, 1.7014118346046923e38};

// Constants derived from the table, so that no file repeats a format's numbers (all
// compile-time: using them costs nothing at run time).

/// 2^e, exact for the exponents of these formats.
constexpr double exp2_int(int e) {
  double r = 1.0;
  for (; e > 0; --e) r *= 2.0;
  for (; e < 0; ++e) r /= 2.0;
  return r;
}
/// Smallest positive normal value of a float format: 2^(1 - bias).
constexpr double min_normal(const FormatSpec& f) { return exp2_int(1 - f.bias); }
/// Smallest positive subnormal value (the subnormal step): 2^(1 - bias - mantissa_bits).
constexpr double min_subnormal(const FormatSpec& f) { return exp2_int(1 - f.bias - f.mantissa_bits); }
/// Largest biased exponent field of a format.
constexpr int max_exponent_field(const FormatSpec& f) { return (1 << f.exponent_bits) - 1; }

/// FP8 E4M3 / FP4 E2M1 largest finite magnitude, in f32 for the float kernels (448 / 6).
inline constexpr float kFp8E4M3Max = static_cast<float>(kFp8E4M3Spec.max_finite);
inline constexpr float kFp4E2M1Max = static_cast<float>(kFp4E2M1Spec.max_finite);
/// R4.2: the NVFP4 global scale is (FP8 max x FP4 max) / amax = 2688 / amax.
inline constexpr double kNvfp4GlobalScaleNumerator = kFp8E4M3Spec.max_finite * kFp4E2M1Spec.max_finite;
/// The E8M0 exponent bias: code e stands for 2^(e - 127) (R2.4.2, R8.6.2).
inline constexpr int kE8M0Bias = kE8M0Spec.bias;

// ---- IEEE half formats ------------------------------------------------------------

/// bf16 bits -> float (exact). Inline, like float_to_bf16: the per-element loops of
/// other files (tensor loads, scale conversions) call them millions of times.
inline float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
/// float -> bf16 bits, round to nearest even; NaN stays NaN (quiet).
inline uint16_t float_to_bf16(float v) {
  uint32_t u = std::bit_cast<uint32_t>(v);
  if (v != v) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: keep the sign, quiet
  u += 0x7FFFu + ((u >> 16) & 1u);  // RNE: add 0x7FFF plus the lowest kept bit, then truncate
  return static_cast<uint16_t>(u >> 16);
}
/// f16 bits -> float (exact).
float f16_to_float(uint16_t bits);
/// float -> f16 bits, round to nearest even, overflow to Inf, subnormals kept.
uint16_t float_to_f16(float v);
/// double -> f16 bits with a single rounding (no double rounding through float).
uint16_t double_to_f16(double v);
/// double -> bf16 bits with a single rounding.
uint16_t double_to_bf16(double v);

// ---- FP8 E4M3 (R2.2) --------------------------------------------------------------

/// Code -> value (NaN for 0x7F / 0xFF).
float fp8_e4m3_to_float(uint8_t code);
/// Value -> code, round to nearest even on the exact value. Values beyond 448 (Inf
/// included) saturate to +-448 as the installed reference's CPU cast does (R2.2.1
/// describes NaN; every quantization path clamps to +-448 first, so both agree there).
uint8_t fp8_e4m3_from_double(double v);
/// fp8_e4m3_from_double of a float by integer arithmetic: the same code for every float.
/// Inline: the CLI converts a million NVFP4 scales per weight, and the loop of
/// Tensor::to vectorizes only when it sees the body.
inline uint8_t fp8_e4m3_from_float(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return 0x7F;       // NaN
  if (abs_bits > 0x43E00000u) return sign | 0x7E;  // above 448 (Inf included): saturate
  if (abs_bits < 0x3C800000u) {
    // below the smallest normal 2^-6: multiples of 2^-9, RNE (a * 512 is exact); the
    // float's own RNE to an integer by adding and removing 2^23 (a * 512 < 8)
    const float q = (std::bit_cast<float>(abs_bits) * 512.0f + 0x1p23f) - 0x1p23f;
    return sign | static_cast<uint8_t>(q);
  }
  // RNE of the 23-bit mantissa to 3 bits; a carry moves into the exponent, and nothing
  // at or below 448 rounds past it
  const uint32_t r = (abs_bits + 0x7FFFFu + ((abs_bits >> 20) & 1u)) >> 20;
  return sign | static_cast<uint8_t>(r - ((127u - static_cast<uint32_t>(kFp8E4M3Spec.bias)) << 3));
}

// ---- FP4 E2M1 (R2.3) --------------------------------------------------------------

/// The reference FP4 rounding of R2.3.1: nearest grid value, ties to even mantissa, the
/// sign re-applied by multiplication with sign(x) (so -0.0 -> +0.0, -0.1 -> -0.0).
/// NaN stays NaN. The input must already be clamped to [-6, 6].
float fp4_round(float x);
/// 4-bit code of an FP4 grid value: (sign bit << 3) | magnitude index (R8.5.1).
/// Precondition: |q| is on the grid.
uint8_t fp4_code(float q);
/// Value of a 4-bit code.
float fp4_value(uint8_t code);

// ---- generic narrowing ------------------------------------------------------------

/// Converts a double to the nearest value of a floating dtype (f64, f32, bf16, f16, fp8)
/// with one RNE rounding (R0.4a); the result is returned widened to double. For fp8 a
/// value beyond 448 after rounding gives NaN (see fp8_e4m3_from_double).
double round_to_float_dtype(DType dt, double v);
/// Float view of round_to_float_dtype for the f32-representable dtypes (not f64).
float round_to_float_dtype(DType dt, float v);

/// Smallest positive normal number of a floating dtype ("tiny", R4.2).
double dtype_tiny(DType dt);
/// Largest finite number of a dtype (finfo.max / iinfo.max).
double dtype_max(DType dt);
/// Smallest (most negative) finite number of a dtype (finfo.min / iinfo.min).
double dtype_min(DType dt);

/// R2.4.1 round_to_power_2 on the bit pattern of dt (bf16, f16, f32; f64 in double):
/// add 2^(M-2) to the integer pattern and clear the mantissa. v must be on dt's grid.
double round_to_power_2(DType dt, double v);

/// R2.7 eps used to replace zero scales, for the dtype of the scale (or scale_dtype).
double zero_scale_eps(DType dt);

}  // namespace qobs
