// Number formats and element-level rounding primitives (RULES §2).
//
// Spec cards (R2.2, R2.3, R2.4):
//   bf16      1-8-7, bias 127, Inf/NaN (IEEE), subnormals kept, max 3.3895e38.
//   f16       1-5-10, bias 15, Inf/NaN (IEEE), subnormals kept, max 65504.
//   FP8 E4M3  1-4-3, bias 7, no Inf, NaN = S.1111.111, subnormals m/8*2^-6,
//             max 448, min normal 2^-6, min subnormal 2^-9.
//   FP4 E2M1  1-2-1, bias 1, no Inf/NaN, magnitudes {0,.5,1,1.5,2,3,4,6}; never a
//             storage dtype: values live in float tensors or as packed nibbles.
//   FP6 E2M3  1-2-3, bias 1, no Inf/NaN, max 7.5, steps 1/8 below 2, 1/4 in [2, 4),
//             1/2 from 4 (R2.8); like FP4 never a storage dtype (6-bit codes, R8.10).
//   E8M0      8-bit biased exponent (MX scales), value 2^(e-127), stored as uint8.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "qobs/dtype.h"
#include "qobs/host_device.h"

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
inline constexpr FormatSpec kFp6E2M3Spec{"float6_e2m3", 6, 2, 3, 1, false, false, true, 7.5};
inline constexpr FormatSpec kE8M0Spec{"e8m0", 8, 8, 0, 127, false, true, false, 1.7014118346046923e38};

// Constants derived from the table, so that no file repeats a format's numbers (all
// compile-time: using them costs nothing at run time).

/// 2^e, exact for the exponents of these formats.
QOBS_HD constexpr double exp2_int(int e) {
  double r = 1.0;
  for (; e > 0; --e) r *= 2.0;
  for (; e < 0; ++e) r /= 2.0;
  return r;
}
/// Smallest positive normal value of a float format: 2^(1 - bias).
QOBS_HD constexpr double min_normal(const FormatSpec& f) { return exp2_int(1 - f.bias); }
/// Smallest positive subnormal value (the subnormal step): 2^(1 - bias - mantissa_bits).
QOBS_HD constexpr double min_subnormal(const FormatSpec& f) { return exp2_int(1 - f.bias - f.mantissa_bits); }
/// Largest biased exponent field of a format.
constexpr int max_exponent_field(const FormatSpec& f) { return (1 << f.exponent_bits) - 1; }

/// FP8 E4M3 / FP4 E2M1 / FP6 E2M3 largest finite magnitude, in f32 for the float kernels
/// (448 / 6 / 7.5).
inline constexpr float kFp8E4M3Max = static_cast<float>(kFp8E4M3Spec.max_finite);
inline constexpr float kFp4E2M1Max = static_cast<float>(kFp4E2M1Spec.max_finite);
inline constexpr float kFp6E2M3Max = static_cast<float>(kFp6E2M3Spec.max_finite);
/// R4.2: the NVFP4 global scale is (FP8 max x FP4 max) / amax = 2688 / amax.
inline constexpr double kNvfp4GlobalScaleNumerator = kFp8E4M3Spec.max_finite * kFp4E2M1Spec.max_finite;
/// The E8M0 exponent bias: code e stands for 2^(e - 127) (R2.4.2, R8.6.2).
inline constexpr int kE8M0Bias = kE8M0Spec.bias;

// ---- IEEE half formats ------------------------------------------------------------

/// bf16 bits -> float (exact). Inline, like float_to_bf16: the per-element loops of
/// other files (tensor loads, scale conversions) call them millions of times.
QOBS_HD inline float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
/// float -> bf16 bits, round to nearest even; NaN stays NaN (quiet).
QOBS_HD inline uint16_t float_to_bf16(float v) {
  uint32_t u = std::bit_cast<uint32_t>(v);
  if (v != v) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: keep the sign, quiet
  u += 0x7FFFu + ((u >> 16) & 1u);  // RNE: add 0x7FFF plus the lowest kept bit, then truncate
  return static_cast<uint16_t>(u >> 16);
}
/// f16 bits -> float (exact).
QOBS_HD inline float f16_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp == 0) {
    // zero or subnormal: man * 2^-24, exact in float
    const float f = std::ldexp(static_cast<float>(man), -24);
    return sign ? -f : f;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}
/// double -> f16 bits with a single rounding (no double rounding through float).
QOBS_HD inline uint16_t double_to_f16(double v) {
  if (std::isnan(v)) return 0x7E00u;
  const uint16_t sign = std::signbit(v) ? 0x8000u : 0u;
  const double a = std::fabs(v);
  if (a == 0) return sign;
  if (a >= 65520.0) return sign | 0x7C00u;  // 65520 is the midpoint to 2^16: ties -> Inf
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int exp = e - 1;    // a in [2^exp, 2^(exp+1))
  if (exp < -14) {
    // subnormal: multiples of 2^-24
    const double q = std::nearbyint(std::ldexp(a, 24));  // RNE (default rounding mode)
    return sign | static_cast<uint16_t>(q);              // q == 1024 rolls into the min normal
  }
  const double q = std::nearbyint(std::ldexp(a, 10 - exp));  // in [1024, 2048]
  uint32_t m = static_cast<uint32_t>(q);
  if (m == 2048) {
    m = 1024;
    ++exp;
  }
  if (exp > 15) return sign | 0x7C00u;
  return sign | static_cast<uint16_t>(((exp + 15) << 10) | (m - 1024));
}
/// float -> f16 bits, round to nearest even, overflow to Inf, subnormals kept.
QOBS_HD inline uint16_t float_to_f16(float v) { return double_to_f16(static_cast<double>(v)); }
/// double -> bf16 bits with a single rounding.
QOBS_HD inline uint16_t double_to_bf16(double v) {
  // An f32 value (most callers' arithmetic is f32) needs no second rounding: its bf16
  // RNE is float_to_bf16's integer one, a few operations in place of frexp, ldexp and
  // nearbyint below (~4% of the lsq searches' instructions on bf16 weights). Both are
  // the one RNE of R0.4a (tests/core/formats_test.cc R0_4a_DoubleToBf16OfFloatsIsNearestEven).
  // NaN compares unequal to itself and stays on the path below.
  const float f = static_cast<float>(v);
  if (static_cast<double>(f) == v) return float_to_bf16(f);
  if (std::isnan(v)) return 0x7FC0u | (std::signbit(v) ? 0x8000u : 0u);
  const uint16_t sign = std::signbit(v) ? 0x8000u : 0u;
  const double a = std::fabs(v);
  if (a == 0) return sign;
  if (std::isinf(a)) return sign | 0x7F80u;
  int e;
  std::frexp(a, &e);
  int exp = e - 1;
  if (exp < -126) {
    const double q = std::nearbyint(std::ldexp(a, 133));  // multiples of 2^-133
    return sign | static_cast<uint16_t>(q);
  }
  const double q = std::nearbyint(std::ldexp(a, 7 - exp));  // [128, 256]
  uint32_t m = static_cast<uint32_t>(q);
  if (m == 256) {
    m = 128;
    ++exp;
  }
  if (exp > 127) return sign | 0x7F80u;
  return sign | static_cast<uint16_t>(((exp + 127) << 7) | (m - 128));
}

// ---- FP8 E4M3 (R2.2) --------------------------------------------------------------

/// Code -> value (NaN for 0x7F / 0xFF).
QOBS_HD inline float fp8_e4m3_to_float(uint8_t code) {
  constexpr int kBias = kFp8E4M3Spec.bias, kMantissa = kFp8E4M3Spec.mantissa_bits;
  const bool neg = code & 0x80u;
  const int exp = (code >> 3) & 0xF;
  const int man = code & 0x7;
  if (exp == 15 && man == 7) return std::numeric_limits<float>::quiet_NaN();
  const float v = exp == 0
                      ? std::ldexp(static_cast<float>(man), 1 - kBias - kMantissa)
                      : std::ldexp(1.0f + static_cast<float>(man) / static_cast<float>(1 << kMantissa), exp - kBias);
  return neg ? -v : v;
}
/// Value -> code, round to nearest even on the exact value. Values beyond 448 (Inf
/// included) saturate to +-448 as the installed reference's CPU cast does (R2.2.1
/// describes NaN; every quantization path clamps to +-448 first, so both agree there).
QOBS_HD inline uint8_t fp8_e4m3_from_double(double v) {
  constexpr int kBias = kFp8E4M3Spec.bias, kMantissa = kFp8E4M3Spec.mantissa_bits;
  if (std::isnan(v)) return 0x7F;
  const uint8_t sign = std::signbit(v) ? 0x80u : 0u;
  const double a = std::fabs(v);
  if (a == 0) return sign;
  if (a > kFp8E4M3Spec.max_finite) return sign | 0x7E;  // saturate, Inf included (torch 2.14 CPU cast)
  int e;
  std::frexp(a, &e);
  int exp = e - 1;
  if (exp < 1 - kBias) {
    // subnormal: multiples of 2^-9; q == 8 is exactly the min normal code 0x08
    const double q = std::nearbyint(std::ldexp(a, kBias - 1 + kMantissa));
    return sign | static_cast<uint8_t>(q);
  }
  const double q = std::nearbyint(std::ldexp(a, 3 - exp));  // [8, 16]
  int m = static_cast<int>(q);
  if (m == 16) {
    m = 8;
    ++exp;
  }
  const int biased = exp + kBias;
  if (biased > 15 || (biased == 15 && m - 8 == 7)) return sign | 0x7E;  // rounds beyond 448: saturate
  return sign | static_cast<uint8_t>((biased << 3) | (m - 8));
}
/// fp8_e4m3_from_double of a float by integer arithmetic: the same code for every float.
/// Inline: the CLI converts a million NVFP4 scales per weight, and the loop of
/// Tensor::to vectorizes only when it sees the body.
QOBS_HD inline uint8_t fp8_e4m3_from_float(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return 0x7F;         // NaN
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
QOBS_HD inline float fp4_round(float x) {
  if (std::isnan(x)) return x;
  const float a = std::fabs(x);
  float m;
  // R2.3.1 intervals; closed ends give the tie to the even-mantissa code.
  if (a <= 0.25f) m = 0.0f;
  else if (a < 0.75f) m = 0.5f;
  else if (a <= 1.25f) m = 1.0f;
  else if (a < 1.75f) m = 1.5f;
  else if (a <= 2.5f) m = 2.0f;
  else if (a < 3.5f) m = 3.0f;
  else if (a <= 5.0f) m = 4.0f;
  else m = kFp4E2M1Max;
  // sign(x) * m with sign(+-0) = +0: -0.0 -> +0.0, small negatives -> -0.0.
  const float s = x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
  return s * m;
}
/// FP4 E2M1 magnitude of a 3-bit magnitude index (R2.3); index 7 is the maximum.
QOBS_HD inline float fp4_magnitude(uint8_t index) {
  switch (index & 0x7u) {
    case 0:
      return 0.0f;
    case 1:
      return 0.5f;
    case 2:
      return 1.0f;
    case 3:
      return 1.5f;
    case 4:
      return 2.0f;
    case 5:
      return 3.0f;
    case 6:
      return 4.0f;
    default:
      return kFp4E2M1Max;
  }
}
/// 4-bit code of an FP4 grid value: (sign bit << 3) | magnitude index (R8.5.1).
/// Precondition: |q| is on the grid.
QOBS_HD inline uint8_t fp4_code(float q) {
  const float a = std::fabs(q);
  uint8_t idx = 0;
  for (uint8_t i = 0; i < 8; ++i)
    if (fp4_magnitude(i) == a) idx = i;
  return static_cast<uint8_t>((std::signbit(q) ? 0x8u : 0u) | idx);
}
/// Value of a 4-bit code.
QOBS_HD inline float fp4_value(uint8_t code) {
  const float m = fp4_magnitude(code);
  return (code & 0x8u) ? -m : m;
}

// ---- FP6 E2M3 (R2.8) --------------------------------------------------------------

/// The reference's FP6 cast (R2.8.1): |x| in f32, step 2^(max(e, 0) - 3) for the
/// binade e of |x|, round half to even to a multiple of the step, saturate at 7.5, then
/// x's sign by copysign (so -0.0 stays -0.0 and -0.05 gives -0.0). NaN stays NaN;
/// +-inf saturates to +-7.5. |x| / step is below 16 for every finite x (step is at least
/// 1/8 and at least 1/8 of |x|'s binade), so adding and removing 2^23 rounds it RNE.
QOBS_HD inline float fp6_round(float x) {
  const float a = std::fabs(x);
  int e = static_cast<int>((std::bit_cast<uint32_t>(a) >> 23) & 0xFFu) - 127;
  if (e < 0) e = 0;
  const float step = std::bit_cast<float>(static_cast<uint32_t>(e - kFp6E2M3Spec.mantissa_bits + 127) << 23);
  const float q = ((a / step + 0x1p23f) - 0x1p23f) * step;
  const float r = q > kFp6E2M3Max ? kFp6E2M3Max : q;  // a NaN fails the comparison and stays
  return std::copysign(r, x);
}
/// FP6 E2M3 magnitude of a 5-bit magnitude index (R2.8): index < 8 is the subnormal
/// index / 8, else (1 + m / 8) 2^e for index = 8 + 8 e + m; index 31 is the maximum.
QOBS_HD inline float fp6_magnitude(uint8_t index) {
  const int i = index & 0x1F;
  if (i < 8) return static_cast<float>(i) * 0.125f;
  const int e = (i - 8) >> 3, m = (i - 8) & 7;
  return (1.0f + static_cast<float>(m) * 0.125f) * static_cast<float>(1 << e);
}
/// The 5-bit magnitude index of an FP6 grid magnitude a (0 <= a <= 7.5, on the grid):
/// a 8 below 1 (multiples of 1/8), else 8 + 8 e + m for a = (1 + m / 8) 2^e. Off the
/// grid the result is meaningless (the packer checks fp6_magnitude(index) == a).
QOBS_HD inline uint8_t fp6_index(float a) {
  if (a < 1.0f) return static_cast<uint8_t>(a * 8.0f);
  const int e = a < 2.0f ? 0 : (a < 4.0f ? 1 : 2);
  const int m = static_cast<int>((a / static_cast<float>(1 << e) - 1.0f) * 8.0f);
  return static_cast<uint8_t>(8 + 8 * e + m);
}
/// Value of a 6-bit code (R8.10.1): magnitude index in bits 0-4, sign in bit 5 (code 32
/// is -0.0).
QOBS_HD inline float fp6_value(uint8_t code) {
  const float m = fp6_magnitude(code);
  return (code & 0x20u) ? -m : m;
}

// ---- generic narrowing ------------------------------------------------------------

/// Converts a double to the nearest value of a floating dtype (f64, f32, bf16, f16, fp8)
/// with one RNE rounding (R0.4a); the result is returned widened to double. For fp8 a
/// value beyond 448 saturates (see fp8_e4m3_from_double). Not a float dtype: NaN (every
/// caller passes a float dtype; the argument checks name a wrong one before).
QOBS_HD inline double round_to_float_dtype(DType dt, double v) {
  switch (dt) {
    case DType::kF64:
      return v;
    case DType::kF32:
      return static_cast<double>(static_cast<float>(v));
    case DType::kBF16:
      return bf16_to_float(double_to_bf16(v));
    case DType::kF16:
      return f16_to_float(double_to_f16(v));
    case DType::kF8E4M3:
      return fp8_e4m3_to_float(fp8_e4m3_from_double(v));
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}
/// Float view of round_to_float_dtype for the f32-representable dtypes (not f64).
QOBS_HD inline float round_to_float_dtype(DType dt, float v) {
  switch (dt) {
    case DType::kF32:
      return v;
    case DType::kBF16:
      return bf16_to_float(float_to_bf16(v));
    case DType::kF16:
      return f16_to_float(float_to_f16(v));
    case DType::kF8E4M3:
      return fp8_e4m3_to_float(fp8_e4m3_from_double(v));
    default:
      return static_cast<float>(round_to_float_dtype(dt, static_cast<double>(v)));
  }
}

/// Smallest positive normal number of a floating dtype ("tiny", R4.2); NaN for
/// another dtype.
QOBS_HD inline double dtype_tiny(DType dt) {
  switch (dt) {
    case DType::kF64:
      return std::numeric_limits<double>::min();
    case DType::kF32:
    case DType::kBF16:
      return exp2_int(-126);
    case DType::kF16:
      return exp2_int(-14);
    case DType::kF8E4M3:
      return min_normal(kFp8E4M3Spec);
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}
/// Largest finite number of a dtype (finfo.max / iinfo.max).
double dtype_max(DType dt);
/// Smallest (most negative) finite number of a dtype (finfo.min / iinfo.min).
double dtype_min(DType dt);

/// R2.4.1 on a 16-bit pattern (bf16 or f16) with M mantissa bits (7 or 10): add
/// 2^(M - elem_mantissa - 1) and clear the mantissa; a carry out of the top wraps.
QOBS_HD inline uint16_t round_to_power_2_bits16(uint16_t b, int M, int elem_mantissa) {
  return static_cast<uint16_t>((b + (1u << (M - elem_mantissa - 1))) & (0xFFFFu << M));
}

/// R2.4.1 round_to_power_2 on the bit pattern of dt (bf16, f16, f32; f64 in double):
/// add 2^(M - elem_mantissa - 1) to the integer pattern (M: dt's mantissa bits) and
/// clear the mantissa, so a magnitude 1.f 2^E goes up to 2^(E+1) exactly when
/// f >= 1 - 2^-(elem_mantissa + 1) (FP4's and FP8's 1: 0.75; FP6's 3: 15/16, R2.4.5).
/// v must be on dt's grid. Another dtype: NaN (QuantizationArgs validation admits none).
QOBS_HD inline double round_to_power_2(DType dt, double v, int elem_mantissa = 1) {
  switch (dt) {
    case DType::kBF16:
      return bf16_to_float(round_to_power_2_bits16(float_to_bf16(static_cast<float>(v)), 7, elem_mantissa));
    case DType::kF16:
      return f16_to_float(round_to_power_2_bits16(double_to_f16(v), 10, elem_mantissa));
    case DType::kF32: {
      uint32_t b = std::bit_cast<uint32_t>(static_cast<float>(v));
      b += 1u << (23 - elem_mantissa - 1);
      b &= 0xFF800000u;
      return std::bit_cast<float>(b);
    }
    case DType::kF64: {
      uint64_t b = std::bit_cast<uint64_t>(v);
      b += uint64_t{1} << (52 - elem_mantissa - 1);
      b &= 0xFFF0000000000000ull;
      return std::bit_cast<double>(b);
    }
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}

/// R2.4.2 / R2.4.5: the element format's constants of the MX scale rule for float
/// num_bits 4, 6 or 8: the exponent offset floor(log2(max)) (FP4 2, FP6 2, FP8 8) and
/// the mantissa width round_to_power_2 is given (3 for FP6; FP8 keeps FP4's 1, as the
/// reference does).
QOBS_HD inline int mx_exponent_offset(int num_bits) { return num_bits == 8 ? 8 : 2; }
QOBS_HD inline int mx_elem_mantissa(int num_bits) { return num_bits == 6 ? kFp6E2M3Spec.mantissa_bits : 1; }

/// log2 of a power of two (or of 0, +inf, NaN), exactly: ilogb for a finite positive
/// value, whose result is then exact on every host and device libm; log2's special
/// values (-inf for 0, +inf, NaN) otherwise.
QOBS_HD inline double log2_of_power_of_2(double v) {
  if (v > 0 && v < std::numeric_limits<double>::infinity()) return static_cast<double>(std::ilogb(v));
  return std::log2(v);
}

/// R2.7 eps used to replace zero scales, for the dtype of the scale (or scale_dtype).
QOBS_HD inline double zero_scale_eps(DType dt) {
  switch (dt) {
    case DType::kF8E4M3:
      return exp2_int(-kFp8E4M3Spec.mantissa_bits);
    case DType::kF32:
      return exp2_int(-23);
    case DType::kBF16:
      return exp2_int(-7);
    case DType::kF16:
      return exp2_int(-10);
    case DType::kF64:
      return exp2_int(-52);
    default:
      return 1.0;  // integer dtypes incl. uint8 (MX)
  }
}

}  // namespace qobs
