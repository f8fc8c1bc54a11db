#include "qobs/formats.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"

namespace qobs {

namespace {

constexpr int kFp8Bias = kFp8E4M3Spec.bias;
constexpr int kFp8Mantissa = kFp8E4M3Spec.mantissa_bits;
/// FP4 E2M1 magnitudes by code (R2.3); the last is the format's maximum.
constexpr float kFp4Magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
static_assert(kFp4Magnitudes[7] == kFp4E2M1Max);

}  // namespace

float f16_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp == 0) {
    // zero or subnormal: man * 2^-24, exact in float
    float f = std::ldexp(static_cast<float>(man), -24);
    return sign ? -f : f;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t double_to_f16(double v) {
  if (std::isnan(v)) return 0x7E00u;
  const uint16_t sign = std::signbit(v) ? 0x8000u : 0u;
  double a = std::fabs(v);
  if (a == 0) return sign;
  if (a >= 65520.0) return sign | 0x7C00u;  // 65520 is the midpoint to 2^16: ties -> Inf
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int exp = e - 1;    // a in [2^exp, 2^(exp+1))
  if (exp < -14) {
    // subnormal: multiples of 2^-24
    double q = std::nearbyint(std::ldexp(a, 24));  // RNE (default rounding mode)
    return sign | static_cast<uint16_t>(q);  // q == 1024 rolls into the min normal
  }
  double q = std::nearbyint(std::ldexp(a, 10 - exp));  // in [1024, 2048]
  uint32_t m = static_cast<uint32_t>(q);
  if (m == 2048) {
    m = 1024;
    ++exp;
  }
  if (exp > 15) return sign | 0x7C00u;
  return sign | static_cast<uint16_t>(((exp + 15) << 10) | (m - 1024));
}

uint16_t float_to_f16(float v) { return double_to_f16(static_cast<double>(v)); }

uint16_t double_to_bf16(double v) {
  // An f32 value (most callers' arithmetic is f32) needs no second rounding: its bf16
  // RNE is float_to_bf16's integer one, a few operations in place of frexp, ldexp and
  // nearbyint below (~4% of the lsq searches' instructions on bf16 weights). Both are
  // the one RNE of R0.4a (tests/core/formats_test.cc R0_4a_DoubleToBf16OfFloatsIsNearestEven).
  // NaN compares unequal to itself and stays on the path below.
  const float f = static_cast<float>(v);
  if (static_cast<double>(f) == v) return float_to_bf16(f);
  if (std::isnan(v)) return 0x7FC0u | (std::signbit(v) ? 0x8000u : 0u);
  const uint16_t sign = std::signbit(v) ? 0x8000u : 0u;
  double a = std::fabs(v);
  if (a == 0) return sign;
  if (std::isinf(a)) return sign | 0x7F80u;
  int e;
  std::frexp(a, &e);
  int exp = e - 1;
  if (exp < -126) {
    double q = std::nearbyint(std::ldexp(a, 133));  // multiples of 2^-133
    return sign | static_cast<uint16_t>(q);
  }
  double q = std::nearbyint(std::ldexp(a, 7 - exp));  // [128, 256]
  uint32_t m = static_cast<uint32_t>(q);
  if (m == 256) {
    m = 128;
    ++exp;
  }
  if (exp > 127) return sign | 0x7F80u;
  return sign | static_cast<uint16_t>(((exp + 127) << 7) | (m - 128));
}

float fp8_e4m3_to_float(uint8_t code) {
  const bool neg = code & 0x80u;
  const int exp = (code >> 3) & 0xF;
  const int man = code & 0x7;
  if (exp == 15 && man == 7) return std::numeric_limits<float>::quiet_NaN();
  float v = exp == 0 ? std::ldexp(static_cast<float>(man), 1 - kFp8Bias - kFp8Mantissa)
                     : std::ldexp(1.0f + static_cast<float>(man) / static_cast<float>(1 << kFp8Mantissa), exp - kFp8Bias);
  return neg ? -v : v;
}

uint8_t fp8_e4m3_from_double(double v) {
  if (std::isnan(v)) return 0x7F;
  const uint8_t sign = std::signbit(v) ? 0x80u : 0u;
  double a = std::fabs(v);
  if (a == 0) return sign;
  if (a > kFp8E4M3Spec.max_finite) return sign | 0x7E;  // saturate, Inf included (torch 2.14 CPU cast)
  int e;
  std::frexp(a, &e);
  int exp = e - 1;
  if (exp < 1 - kFp8Bias) {
    // subnormal: multiples of 2^-9; q == 8 is exactly the min normal code 0x08
    double q = std::nearbyint(std::ldexp(a, kFp8Bias - 1 + kFp8Mantissa));
    return sign | static_cast<uint8_t>(q);
  }
  double q = std::nearbyint(std::ldexp(a, 3 - exp));  // [8, 16]
  int m = static_cast<int>(q);
  if (m == 16) {
    m = 8;
    ++exp;
  }
  const int biased = exp + kFp8Bias;
  if (biased > 15 || (biased == 15 && m - 8 == 7)) return sign | 0x7E;  // rounds beyond 448: saturate
  return sign | static_cast<uint8_t>((biased << 3) | (m - 8));
}

float fp4_round(float x) {
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

uint8_t fp4_code(float q) {
  const float a = std::fabs(q);
  uint8_t idx = 0;
  for (uint8_t i = 0; i < 8; ++i)
    if (kFp4Magnitudes[i] == a) idx = i;
  return static_cast<uint8_t>((std::signbit(q) ? 0x8u : 0u) | idx);
}

float fp4_value(uint8_t code) {
  const float m = kFp4Magnitudes[code & 0x7u];
  return (code & 0x8u) ? -m : m;
}

double round_to_float_dtype(DType dt, double v) {
  switch (dt) {
    case DType::kF64: return v;
    case DType::kF32: return static_cast<double>(static_cast<float>(v));
    case DType::kBF16: return bf16_to_float(double_to_bf16(v));
    case DType::kF16: return f16_to_float(double_to_f16(v));
    case DType::kF8E4M3: return fp8_e4m3_to_float(fp8_e4m3_from_double(v));
    default: QOBS_THROW(TypeError, "round_to_float_dtype: ", dtype_name(dt), " is not a float dtype");
  }
}

float round_to_float_dtype(DType dt, float v) {
  switch (dt) {
    case DType::kF32: return v;
    case DType::kBF16: return bf16_to_float(float_to_bf16(v));
    case DType::kF16: return f16_to_float(float_to_f16(v));
    case DType::kF8E4M3: return fp8_e4m3_to_float(fp8_e4m3_from_double(v));
    default: return static_cast<float>(round_to_float_dtype(dt, static_cast<double>(v)));
  }
}

double dtype_tiny(DType dt) {
  switch (dt) {
    case DType::kF64: return std::numeric_limits<double>::min();
    case DType::kF32:
    case DType::kBF16: return std::ldexp(1.0, -126);
    case DType::kF16: return std::ldexp(1.0, -14);
    case DType::kF8E4M3: return min_normal(kFp8E4M3Spec);
    default: QOBS_THROW(TypeError, "tiny: ", dtype_name(dt), " is not a float dtype");
  }
}

double dtype_max(DType dt) {
  switch (dt) {
    case DType::kF64: return std::numeric_limits<double>::max();
    case DType::kF32: return std::numeric_limits<float>::max();
    case DType::kBF16: return bf16_to_float(0x7F7Fu);
    case DType::kF16: return 65504.0;
    case DType::kF8E4M3: return kFp8E4M3Spec.max_finite;
    case DType::kI8: return 127.0;
    case DType::kI16: return 32767.0;
    case DType::kI32: return 2147483647.0;
    case DType::kI64: return 9223372036854775807.0;
    case DType::kU8: return 255.0;
    case DType::kBool: return 1.0;
  }
  return 0.0;
}

double dtype_min(DType dt) {
  switch (dt) {
    case DType::kI8: return -128.0;
    case DType::kI16: return -32768.0;
    case DType::kI32: return -2147483648.0;
    case DType::kI64: return -9223372036854775808.0;
    case DType::kU8:
    case DType::kBool: return 0.0;
    default: return -dtype_max(dt);
  }
}

double round_to_power_2(DType dt, double v) {
  switch (dt) {
    case DType::kBF16: {
      uint16_t b = float_to_bf16(static_cast<float>(v));
      b = static_cast<uint16_t>(b + (1u << 5));
      b &= 0xFF80u;
      return bf16_to_float(b);
    }
    case DType::kF16: {
      uint16_t b = double_to_f16(v);
      b = static_cast<uint16_t>(b + (1u << 8));
      b &= 0xFC00u;
      return f16_to_float(b);
    }
    case DType::kF32: {
      uint32_t b = std::bit_cast<uint32_t>(static_cast<float>(v));
      b += 1u << 21;
      b &= 0xFF800000u;
      return std::bit_cast<float>(b);
    }
    case DType::kF64: {
      uint64_t b = std::bit_cast<uint64_t>(v);
      b += uint64_t{1} << 50;
      b &= 0xFFF0000000000000ull;
      return std::bit_cast<double>(b);
    }
    default: QOBS_THROW(TypeError, "round_to_power_2: unsupported dtype ", dtype_name(dt), " (R2.4.1)");
  }
}

double zero_scale_eps(DType dt) {
  switch (dt) {
    case DType::kF8E4M3: return exp2_int(-kFp8Mantissa);
    case DType::kF32: return std::ldexp(1.0, -23);
    case DType::kBF16: return std::ldexp(1.0, -7);
    case DType::kF16: return std::ldexp(1.0, -10);
    case DType::kF64: return std::ldexp(1.0, -52);
    default: return 1.0;  // integer dtypes incl. uint8 (MX)
  }
}

}  // namespace qobs
