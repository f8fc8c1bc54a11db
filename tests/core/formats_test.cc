// RULES §2 number formats: FP8 E4M3, FP4 E2M1, bf16 / f16 conversions, round_to_power_2
// and the zero-scale eps table. Every test names the rule it checks; expected values
// are the literals of docs/RULES.md or follow from the format definitions.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "qobs/dtype.h"
#include "qobs/error.h"
#include "qobs/formats.h"
#include "qobs/tensor.h"

namespace qobs {
namespace {

/// R2.2 definition of an E4M3FN code, written from the rule text.
double fp8_definition(uint8_t code) {
  const int s = code >> 7, e = (code >> 3) & 0xF, m = code & 7;
  double mag = e == 0 ? (m / 8.0) * std::ldexp(1.0, -6) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return s ? -mag : mag;
}

bool is_fp8_nan_code(int code) { return (code & 0x7F) == 0x7F; }

TEST(Formats, R2_2_Fp8All256CodesDecodeAndRoundTrip) {
  int nan_codes = 0;
  for (int c = 0; c < 256; ++c) {
    SCOPED_TRACE(c);
    const auto code = static_cast<uint8_t>(c);
    const float v = fp8_e4m3_to_float(code);
    if (is_fp8_nan_code(c)) {
      EXPECT_TRUE(std::isnan(v));
      ++nan_codes;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), fp8_definition(code));
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0);
    EXPECT_EQ(fp8_e4m3_from_double(static_cast<double>(v)), code);
    EXPECT_EQ(round_to_float_dtype(DType::kF8E4M3, static_cast<double>(v)), static_cast<double>(v));
  }
  EXPECT_EQ(nan_codes, 2);  // only S.1111.111
}

TEST(Formats, R2_2_Fp8Constants) {
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0xFE), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x08), 0.015625f);     // min normal 2^-6
  EXPECT_EQ(fp8_e4m3_to_float(0x01), 0.001953125f);  // min subnormal 2^-9
  EXPECT_EQ(kFp8E4M3Spec.max_finite, 448.0);
  EXPECT_FALSE(kFp8E4M3Spec.has_inf);
  EXPECT_EQ(dtype_max(DType::kF8E4M3), 448.0);
  EXPECT_EQ(dtype_min(DType::kF8E4M3), -448.0);
  EXPECT_EQ(dtype_tiny(DType::kF8E4M3), 0.015625);
}

TEST(Formats, R2_2_Fp8NaNInputStaysNaN) {
  const uint8_t c = fp8_e4m3_from_double(std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(is_fp8_nan_code(c));
  EXPECT_TRUE(std::isnan(round_to_float_dtype(DType::kF8E4M3, std::numeric_limits<double>::quiet_NaN())));
}

TEST(Formats, R2_2_1_Fp8CastExamples) {
  struct Case {
    double in, out;
  };
  const Case cases[] = {
      {449, 448}, {464, 448}, {232, 224}, {17, 16}, {19, 20}, {0.001, 0.001953125}, {std::ldexp(1.0, -10), 0.0},
  };
  for (const auto& c : cases) {
    for (double sign : {1.0, -1.0}) {
      SCOPED_TRACE(sign * c.in);
      const uint8_t code = fp8_e4m3_from_double(sign * c.in);
      EXPECT_EQ(static_cast<double>(fp8_e4m3_to_float(code)), sign * c.out);
      EXPECT_EQ(round_to_float_dtype(DType::kF8E4M3, sign * c.in), sign * c.out);
      EXPECT_EQ(round_to_float_dtype(DType::kF8E4M3, static_cast<float>(sign * c.in)),
                static_cast<float>(sign * c.out));
    }
  }
  // 2^-10 is the tie between 0 and 2^-9: even -> zero, code 0x00 (sign kept for -2^-10).
  EXPECT_EQ(fp8_e4m3_from_double(std::ldexp(1.0, -10)), 0x00);
  EXPECT_EQ(fp8_e4m3_from_double(-std::ldexp(1.0, -10)), 0x80);
  // Just above the tie rounds up to the min subnormal.
  EXPECT_EQ(fp8_e4m3_from_double(std::ldexp(1.0, -10) * 1.0001), 0x01);
}

TEST(Formats, R2_2_1_Fp8RneOnEveryMidpoint) {
  // Between consecutive finite positive codes, the midpoint goes to the even code and
  // anything off the midpoint to the nearer one.
  for (int c = 0; c < 0x7E; ++c) {
    SCOPED_TRACE(c);
    const double lo = fp8_definition(static_cast<uint8_t>(c)), hi = fp8_definition(static_cast<uint8_t>(c + 1));
    const double mid = 0.5 * (lo + hi);
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(fp8_e4m3_from_double(mid), even);
    EXPECT_EQ(fp8_e4m3_from_double(std::nextafter(mid, 0.0)), c);
    EXPECT_EQ(fp8_e4m3_from_double(std::nextafter(mid, 1e9)), c + 1);
  }
}

TEST(Formats, R2_2_1_Fp8WidensBf16AndF16Exactly) {
  // bf16 / f16 inputs are widened exactly first: 17 and 19 are exact in both.
  EXPECT_EQ(round_to_float_dtype(DType::kF8E4M3, bf16_to_float(float_to_bf16(19.0f))), 20.0f);
  EXPECT_EQ(round_to_float_dtype(DType::kF8E4M3, f16_to_float(float_to_f16(17.0f))), 16.0f);
}

// ---- FP4 -----------------------------------------------------------------------------

constexpr float kFp4Mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

TEST(Formats, R2_3_Fp4All16Codes) {
  for (int c = 0; c < 16; ++c) {
    SCOPED_TRACE(c);
    const auto code = static_cast<uint8_t>(c);
    const float v = fp4_value(code);
    const float expect = (c & 8) ? -kFp4Mags[c & 7] : kFp4Mags[c & 7];
    EXPECT_EQ(v, expect);
    EXPECT_EQ(std::signbit(v), (c & 8) != 0) << "code 8 is -0.0";
    EXPECT_EQ(fp4_code(v), code);
    // Grid values are fixed points of the rounding, except -0.0 which becomes +0.0.
    const float r = fp4_round(v);
    EXPECT_EQ(r, expect);
    if (c == 8) EXPECT_FALSE(std::signbit(r));
    else EXPECT_EQ(std::signbit(r), (c & 8) != 0);
  }
  EXPECT_EQ(kFp4E2M1Spec.max_finite, 6.0);
}

TEST(Formats, R2_3_1_Fp4IntervalTableWithTies) {
  struct Case {
    float in, out;
  };
  const float up = std::numeric_limits<float>::infinity();
  auto above = [&](float x) { return std::nextafter(x, up); };
  auto below = [&](float x) { return std::nextafter(x, 0.0f); };
  const Case cases[] = {
      {0.0f, 0.0f},         {0.1f, 0.0f},  {0.25f, 0.0f}, {above(0.25f), 0.5f}, {0.5f, 0.5f},
      {below(0.75f), 0.5f}, {0.75f, 1.0f}, {1.0f, 1.0f},  {1.25f, 1.0f},        {above(1.25f), 1.5f},
      {below(1.75f), 1.5f}, {1.75f, 2.0f}, {2.5f, 2.0f},  {above(2.5f), 3.0f},  {3.0f, 3.0f},
      {below(3.5f), 3.0f},  {3.5f, 4.0f},  {5.0f, 4.0f},  {above(5.0f), 6.0f},  {5.5f, 6.0f},
      {6.0f, 6.0f},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.in);
    EXPECT_EQ(fp4_round(c.in), c.out);
    EXPECT_EQ(fp4_round(-c.in), c.in == 0.0f ? 0.0f : -c.out);
  }
}

TEST(Formats, R2_3_1_Fp4SignOfZero) {
  // sign(-0.0) = +0: -0.0 -> +0.0; a negative value rounding to magnitude 0 -> -0.0.
  const float neg_zero = fp4_round(-0.0f);
  EXPECT_EQ(neg_zero, 0.0f);
  EXPECT_FALSE(std::signbit(neg_zero));
  const float small = fp4_round(-0.1f);
  EXPECT_EQ(small, 0.0f);
  EXPECT_TRUE(std::signbit(small));
  EXPECT_TRUE(std::signbit(fp4_round(-0.25f)));
  EXPECT_FALSE(std::signbit(fp4_round(0.1f)));
  EXPECT_EQ(fp4_code(fp4_round(-0.1f)), 8);  // Q17
  EXPECT_EQ(fp4_code(fp4_round(-0.0f)), 0);
}

TEST(Formats, R2_3_1_Fp4NaNStaysNaN) { EXPECT_TRUE(std::isnan(fp4_round(std::numeric_limits<float>::quiet_NaN()))); }

// ---- E8M0 / round_to_power_2 -----------------------------------------------------------

TEST(Formats, R2_4_1_RoundToPower2Bf16Examples) {
  struct Case {
    double in, out;
  };
  const Case cases[] = {{5.687891, 4},    {0.965272, 1}, {-6.944130, -4},
                        {0.224199, 0.25}, {7.290238, 8}, {0.073246, 0.0625}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.in);
    const double v = round_to_float_dtype(DType::kBF16, c.in);
    EXPECT_EQ(round_to_power_2(DType::kBF16, v), c.out);
  }
  EXPECT_EQ(round_to_power_2(DType::kBF16, 0.0), 0.0);
}

TEST(Formats, R2_4_1_RoundToPower2ThresholdAtThreeQuarters) {
  // +-1.f * 2^e -> 2^e if f < 0.75 else 2^(e+1), in every float dtype.
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dt));
    EXPECT_EQ(round_to_power_2(dt, 1.5), 1.0);
    EXPECT_EQ(round_to_power_2(dt, 1.75), 2.0);
    EXPECT_EQ(round_to_power_2(dt, 3.5), 4.0);
    EXPECT_EQ(round_to_power_2(dt, 3.0), 2.0);
    EXPECT_EQ(round_to_power_2(dt, -1.75), -2.0);
    EXPECT_EQ(round_to_power_2(dt, 0.375), 0.25);
    EXPECT_EQ(round_to_power_2(dt, 0.0), 0.0);
    EXPECT_EQ(round_to_power_2(dt, 8.0), 8.0);
  }
  // Just below 1.75 on the dtype's own grid stays at 1.
  EXPECT_EQ(round_to_power_2(DType::kBF16, 1.75 - std::ldexp(1.0, -7)), 1.0);
  EXPECT_EQ(round_to_power_2(DType::kF16, 1.75 - std::ldexp(1.0, -10)), 1.0);
  EXPECT_EQ(round_to_power_2(DType::kF32, 1.75 - std::ldexp(1.0, -23)), 1.0);
}

// ---- eps ---------------------------------------------------------------------------------

TEST(Formats, R2_7_ZeroScaleEpsTable) {
  EXPECT_EQ(zero_scale_eps(DType::kF8E4M3), 0.125);
  EXPECT_EQ(zero_scale_eps(DType::kF32), std::ldexp(1.0, -23));
  EXPECT_EQ(zero_scale_eps(DType::kBF16), 0.0078125);
  EXPECT_EQ(zero_scale_eps(DType::kF16), 0.0009765625);
  EXPECT_EQ(zero_scale_eps(DType::kF64), std::ldexp(1.0, -52));
  for (DType dt : {DType::kU8, DType::kI8, DType::kI16, DType::kI32, DType::kI64}) {
    SCOPED_TRACE(dtype_name(dt));
    EXPECT_EQ(zero_scale_eps(dt), 1.0);
  }
}

// ---- bf16 / f16 --------------------------------------------------------------------------

TEST(Formats, R0_4a_F16All65536CodesRoundTrip) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const auto code = static_cast<uint16_t>(c);
    const float v = f16_to_float(code);
    const bool nan = ((c >> 10) & 0x1F) == 0x1F && (c & 0x3FF) != 0;
    if (nan) {
      ASSERT_TRUE(std::isnan(v)) << c;
      ASSERT_TRUE(std::isnan(f16_to_float(float_to_f16(v)))) << c;
      continue;
    }
    ASSERT_EQ(float_to_f16(v), code) << c;
    ASSERT_EQ(double_to_f16(static_cast<double>(v)), code) << c;
    ASSERT_EQ(round_to_float_dtype(DType::kF16, v), v) << c;
  }
}

TEST(Formats, R0_4a_Bf16All65536CodesRoundTrip) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const auto code = static_cast<uint16_t>(c);
    const float v = bf16_to_float(code);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    ASSERT_EQ(bits, c << 16) << "bf16 is the upper half of the f32 pattern";
    if (std::isnan(v)) {
      ASSERT_TRUE(std::isnan(bf16_to_float(float_to_bf16(v)))) << c;
      continue;
    }
    ASSERT_EQ(float_to_bf16(v), code) << c;
    ASSERT_EQ(double_to_bf16(static_cast<double>(v)), code) << c;
  }
}

TEST(Formats, R0_4a_HalfRneTies) {
  // f16: ulp at 1 is 2^-10.
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even (1.0)
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even (1 + 2^-9)
  EXPECT_EQ(float_to_f16(65519.0f), 0x7BFF);                          // below the tie: 65504
  EXPECT_EQ(float_to_f16(65520.0f), 0x7C00);                          // tie with 65536 -> Inf
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -24)), 0x0001);             // min subnormal kept
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);             // tie -> 0
  EXPECT_EQ(float_to_f16(std::ldexp(3.0f, -25)), 0x0002);             // tie 1.5 ulp -> even 2
  EXPECT_EQ(float_to_f16(-std::ldexp(1.0f, -25)), 0x8000);
  // bf16: ulp at 1 is 2^-7.
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3F81);
  EXPECT_EQ(float_to_bf16(-0.30078125f), 0xBE9A);  // R4.4 example 4 value is exact
  EXPECT_EQ(bf16_to_float(float_to_bf16(-0.3f)), -0.30078125f);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // overflows to Inf under RNE
  // bf16 subnormals kept.
  EXPECT_EQ(bf16_to_float(float_to_bf16(std::ldexp(1.0f, -133))), std::ldexp(1.0f, -133));
}

TEST(Formats, R0_4a_DoubleNarrowingRoundsOnce) {
  // Via float the 2^-40 would be lost and the value would become a tie (-> even).
  EXPECT_EQ(double_to_f16(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3C01);
  EXPECT_EQ(double_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), 0x3F81);
  EXPECT_EQ(round_to_float_dtype(DType::kF16, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)),
            1.0 + std::ldexp(1.0, -10));
  EXPECT_EQ(round_to_float_dtype(DType::kF32, 1.0 + std::ldexp(1.0, -24) + std::ldexp(1.0, -40)),
            1.0 + std::ldexp(1.0, -23));
  EXPECT_EQ(round_to_float_dtype(DType::kF32, 1.0 + std::ldexp(1.0, -24)), 1.0);  // exact tie -> even
}

/// R0.4a's bf16 RNE of a finite f32 v, from the definition: of the two bf16 values that
/// bracket |v| (its pattern truncated, and the next one up, which past the largest
/// finite value stands for 2^128, the overflow threshold's other end), the nearer, a tie
/// going to the even pattern. The differences are exact in double.
uint16_t bf16_nearest_even(float v) {
  const uint32_t mag = std::bit_cast<uint32_t>(v) & 0x7FFFFFFFu, sign = (std::bit_cast<uint32_t>(v) >> 16) & 0x8000u;
  const uint32_t down = mag >> 16, up = down + 1;
  const double a = std::bit_cast<float>(mag), lo = bf16_to_float(static_cast<uint16_t>(down));
  const double hi = up == 0x7F80u ? std::ldexp(1.0, 128) : bf16_to_float(static_cast<uint16_t>(up));
  const double below = a - lo, above = hi - a;
  const uint32_t pick = below < above ? down : above < below ? up : (down % 2 == 0 ? down : up);
  return static_cast<uint16_t>(sign | pick);
}

TEST(Formats, R0_4a_DoubleToBf16OfFloatsIsNearestEven) {
  // double_to_bf16 takes an integer rounding for values that are f32 (formats.cc): every
  // f32 pattern whose low half is at or beside a bf16 midpoint or a bf16 value, both
  // signs, all exponents (subnormals, the overflow threshold and the infinities
  // included), then a stride through the rest.
  auto check = [](uint32_t bits) {
    const float v = std::bit_cast<float>(bits);
    if (std::isnan(v)) return;
    const uint16_t want = std::isinf(v) ? static_cast<uint16_t>(bits >> 16) : bf16_nearest_even(v);
    ASSERT_EQ(double_to_bf16(static_cast<double>(v)), want) << std::hex << bits;
    ASSERT_EQ(float_to_bf16(v), want) << std::hex << bits;
  };
  for (uint32_t high = 0; high < 0x10000u; ++high)
    for (uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) check((high << 16) | low);
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 40009) check(static_cast<uint32_t>(bits));
}

TEST(Formats, R0_4a_QuietNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(nan))));
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(nan))));
  // A signalling-looking NaN whose payload lives only in the low 16 bits must not become Inf.
  uint32_t bits = 0x7F800001u;
  float snan;
  std::memcpy(&snan, &bits, 4);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(snan))));
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
}

TEST(Formats, R4_2_DtypeTiny) {
  EXPECT_EQ(dtype_tiny(DType::kF32), std::ldexp(1.0, -126));
  EXPECT_EQ(dtype_tiny(DType::kBF16), std::ldexp(1.0, -126));
  EXPECT_EQ(dtype_tiny(DType::kF16), std::ldexp(1.0, -14));
  EXPECT_EQ(dtype_max(DType::kF16), 65504.0);
}

TEST(Formats, R1_2_2_DtypeNames) {
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::kF8E4M3);
  EXPECT_EQ(parse_dtype("torch.float8_e4m3fn"), DType::kF8E4M3);
  EXPECT_EQ(parse_dtype("torch.uint8"), DType::kU8);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_THROW(parse_dtype("torch.float7"), InvalidArgument);
  EXPECT_THROW(parse_dtype(""), InvalidArgument);
  EXPECT_EQ(dtype_name(DType::kF8E4M3), "float8_e4m3fn");
  EXPECT_EQ(safetensors_dtype_name(DType::kF8E4M3), "F8_E4M3");
}

}  // namespace
TEST(Formats, FloatAndDoubleRoundingTo16BitAgree) {
  // Tensor::from_floats rounds f32 to bf16 / f16 with the float converters, from_values
  // with the double ones: the same RNE on every finite float and infinity (sampled across
  // every binade, with both neighbours of each tie pattern).
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4093) {
    for (uint32_t d : {0u, 1u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFu, 0x1000u, 0x1001u}) {
      const uint32_t bits = (static_cast<uint32_t>(u) & ~0xFFFFu) | (d & 0xFFFFu);
      float f;
      std::memcpy(&f, &bits, 4);
      if (std::isnan(f)) continue;
      ASSERT_EQ(float_to_bf16(f), double_to_bf16(f)) << f;
      ASSERT_EQ(float_to_f16(f), double_to_f16(f)) << f;
    }
  }
}

}  // namespace qobs

namespace qobs {
namespace {

TEST(Formats, R2_2_1_Fp8FromFloatEqualsFromDouble) {
  // The integer encoder against the double one: every float whose top 16 bits are any
  // pattern, with low halves at and around the RNE boundaries (0x0000, 0x0001, 0x7FFF,
  // 0x8000, 0x8001, 0xFFFF, the 2^19 mantissa half-way point of FP8 and its neighbours)
  // plus random ones: normals, subnormals, the saturation edge near 448, +-Inf, NaN.
  std::mt19937 rng(5);
  std::vector<uint32_t> lows = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
  for (int k = 0; k < 6; ++k) lows.push_back(rng() & 0xFFFF);
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : lows) {
      const float f = std::bit_cast<float>((hi << 16) | lo);
      ASSERT_EQ(fp8_e4m3_from_float(f), fp8_e4m3_from_double(f)) << std::hex << ((hi << 16) | lo);
    }
  // the bits the 3-bit rounding looks at: 2^19 (half an FP8 step) +-1 with either
  // parity of the kept bit, in every binade
  for (uint32_t e = 0; e < 256; ++e)
    for (uint32_t m3 = 0; m3 < 8; ++m3)
      for (uint32_t rest : {0x7FFFFu, 0x80000u, 0x80001u, 0x00000u, 0xFFFFFu})
        for (uint32_t s : {0u, 0x80000000u}) {
          const uint32_t b = s | (e << 23) | (m3 << 20) | rest;
          const float f = std::bit_cast<float>(b);
          ASSERT_EQ(fp8_e4m3_from_float(f), fp8_e4m3_from_double(f)) << std::hex << b;
        }
}

TEST(Formats, TensorToBetweenFloatDtypesEqualsTheDoublePath) {
  // Tensor::to between f32, bf16, f16 and FP8 converts through float; each element must
  // be what from_values (the double path) stores for the same value.
  std::vector<double> values;
  std::mt19937 rng(9);
  std::normal_distribution<double> nd(0.0, 1.0);
  for (int i = 0; i < 4000; ++i) values.push_back(nd(rng) * std::ldexp(1.0, static_cast<int>(rng() % 40) - 20));
  for (double v : {0.0, -0.0, 448.0, -448.0, 460.0, 1e6, 0x1p-9, 0x1p-10, 3 * 0x1p-11, 65504.0, 65520.0, 1e-8,
                   std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()})
    values.push_back(v);
  const int64_t n = static_cast<int64_t>(values.size());
  const DType floats[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3};
  for (DType from : floats) {
    const Tensor src = Tensor::from_values(from, {n}, values);
    for (DType to : floats) {
      const Tensor got = src.to(to);
      const Tensor want = Tensor::from_values(to, {n}, src.to_doubles());
      EXPECT_TRUE(got.bit_equal(want)) << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

}  // namespace
}  // namespace qobs
