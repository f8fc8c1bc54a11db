// Golden tests of MXFP6 against compressed-tensors 0.20.1 (tests/golden/mxfp6.json from
// tools/make_golden_ct020.py): the FP6 E2M3 cast and code table (R2.8), the MX scale
// rule with the element mantissa (R2.4.5), calculate_qparams (R4.1), fake_quantize and
// quantize (R5), the mxfp6-pack-quantized compressor and its decompression (R8.10), the
// reference's errors, and its non-finite results where qobs raises instead (D2, D3,
// D16). Bit-identical dtype, shape and bytes are required; NaN outputs of the cast
// compare as "is NaN" (the reference's NaN payload is not stable).
#include <gtest/gtest.h>

#include <cmath>

#include "pipeline/compress.h"
#include "test_util.h"

namespace qobs {
namespace {

using nlohmann::json;
using testing::describe_difference;

using testing::case_args_from_golden;

std::optional<testing::Golden> golden() { return testing::load_golden("mxfp6.json"); }

TEST(GoldenMxfp6, CodeTableAndPackingOfAll64Codes) {
  auto g = golden();
  if (!g) GTEST_SKIP() << "golden file absent";
  for (const json& c : g->doc["code_cases"]) {
    SCOPED_TRACE(c["id"].get<std::string>());
    const Tensor table = g->tensor(c["table"]);
    ASSERT_EQ(table.numel(), 32);
    for (uint8_t i = 0; i < 32; ++i) {
      EXPECT_EQ(static_cast<double>(fp6_magnitude(i)), table.get(i)) << "index " << int(i);
      EXPECT_EQ(fp6_index(fp6_magnitude(i)), i);
    }
    const Tensor packed = g->tensor(c["packed"]);
    const Tensor f32 = g->tensor(c["decoded_f32"]), bf16 = g->tensor(c["decoded_bf16"]);
    EXPECT_EQ(describe_difference(f32, unpack_fp6(packed, DType::kF32)), "");
    EXPECT_EQ(describe_difference(bf16, unpack_fp6(packed, DType::kBF16)), "");
    EXPECT_EQ(describe_difference(g->tensor(c["repacked"]), pack_fp6(f32)), "");
    EXPECT_EQ(describe_difference(g->tensor(c["repacked"]), pack_fp6(bf16)), "");
  }
}

TEST(GoldenMxfp6, CastPowerOfTwoAndMxScales) {
  auto g = golden();
  if (!g) GTEST_SKIP() << "golden file absent";
  int64_t values = 0;
  for (const json& c : g->doc["round_cases"]) {
    const std::string op = c["op"];
    SCOPED_TRACE(c["id"].get<std::string>());
    const Tensor x = g->tensor(c["x"]);
    const Tensor expect = g->tensor(c["expect"]);
    if (op == "mx_scales") {
      EXPECT_EQ(describe_difference(expect, generate_mx_scales(x, c["num_bits"].get<int>())), "");
      values += x.numel();
      continue;
    }
    ASSERT_EQ(expect.dtype(), x.dtype());
    int bad = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.get(i);
      double y;
      if (op == "fp6_cast") y = fp6_round(static_cast<float>(v));
      // (f16 from its stored bits: a double carries no f16 NaN payload, and 0x7FC0 + 2^6 is -0.0)
      else if (op == "round_to_power_2" && x.dtype() == DType::kF16)
        y = f16_to_float(round_to_power_2_bits16(x.data_as<uint16_t>()[i], 10, c["elem_mantissa"].get<int>()));
      else if (op == "round_to_power_2") y = round_to_power_2(x.dtype(), v, c["elem_mantissa"].get<int>());
      else FAIL() << "unknown op " << op;
      const double e = expect.get(i);
      // (the value as x's dtype stores it: exact for every E2M3 value and power of two)
      const double got = round_to_float_dtype(x.dtype(), y);
      const bool same = std::isnan(e) ? std::isnan(got) : testing::double_bits(e) == testing::double_bits(got);
      if (!same && bad++ < 5) ADD_FAILURE() << "x = " << v << ": got " << got << ", reference " << e;
    }
    EXPECT_EQ(bad, 0);
    values += x.numel();
  }
  EXPECT_GT(values, 69961);
}

TEST(GoldenMxfp6, CalculateQParams) {
  auto g = golden();
  if (!g) GTEST_SKIP() << "golden file absent";
  int n = 0;
  for (const json& c : g->doc["qparams_cases"]) {
    SCOPED_TRACE(c["id"].get<std::string>());
    const auto r = calculate_qparams(g->tensor(c["min"]), g->tensor(c["max"]), case_args_from_golden(c));
    EXPECT_EQ(describe_difference(g->tensor(c["expect"]["scale"]), r.scale), "") << "scale";
    EXPECT_EQ(describe_difference(g->tensor(c["expect"]["zero_point"]), r.zero_point), "") << "zero_point";
    ++n;
  }
  EXPECT_EQ(n, 45);
}

TEST(GoldenMxfp6, FakeQuantizeAndQuantize) {
  auto g = golden();
  if (!g) GTEST_SKIP() << "golden file absent";
  int n = 0;
  for (const char* kind : {"fake_quant_cases", "quantize_cases"}) {
    for (const json& c : g->doc[kind]) {
      SCOPED_TRACE(c["id"].get<std::string>());
      const Tensor x = g->tensor(c["x"]);
      const auto zp = g->maybe(c["zero_point"]);
      const Tensor scale = g->tensor(c["scale"]);
      const Tensor y = std::string(kind) == "fake_quant_cases"
                           ? fake_quantize(x.view(), scale, zp ? &*zp : nullptr, case_args_from_golden(c))
                           : quantize(x.view(), scale, zp ? &*zp : nullptr, case_args_from_golden(c));
      EXPECT_EQ(describe_difference(g->tensor(c["expect"]), y), "");
      ++n;
    }
  }
  EXPECT_EQ(n, 134);
}

/// The pipeline's compressor (detail::compress_weight, what `qobs quantize` writes) on
/// the reference's weight and float scale, and the decompression a loader runs.
TEST(GoldenMxfp6, CompressAndDecompress) {
  auto g = golden();
  if (!g) GTEST_SKIP() << "golden file absent";
  const QuantizationArgs args = preset_scheme("MXFP6A16").weights.value();
  int n = 0;
  for (const json& c : g->doc["pack_cases"]) {
    SCOPED_TRACE(c["id"].get<std::string>());
    const Tensor w = g->tensor(c["weight"]);
    const Tensor s = g->tensor(c["weight_scale"]);
    // R8.10.1: the codes are quantize without a zero point
    EXPECT_EQ(describe_difference(g->tensor(c["codes"]), quantize(w.view(), s, nullptr, args)), "") << "codes";
    QParams qp{s, Tensor(DType::kU8, s.shape()), std::nullopt};
    const detail::Compressed out = detail::compress_weight(w.view(), qp, args, "mxfp6-pack-quantized", "w");
    ASSERT_EQ(out.tensors.size(), 2u);
    EXPECT_EQ(out.tensors[0].first, "weight_packed");
    EXPECT_EQ(describe_difference(g->tensor(c["compressed"]["weight_packed"]), out.tensors[0].second), "");
    EXPECT_EQ(out.tensors[1].first, "weight_scale");
    EXPECT_EQ(describe_difference(g->tensor(c["compressed"]["weight_scale"]), out.tensors[1].second), "");
    // the reference decompresses into bf16
    const Tensor values = unpack_fp6(out.tensors[0].second, DType::kBF16);
    const Tensor scale = decode_e8m0(out.tensors[1].second, DType::kBF16);
    EXPECT_EQ(describe_difference(g->tensor(c["decompressed"]["weight_scale"]), scale), "");
    EXPECT_EQ(describe_difference(g->tensor(c["decompressed"]["weight"]),
                                  dequantize(values.view(), scale, nullptr, args, nullptr, nullptr, DType::kBF16)),
              "");
    ++n;
  }
  EXPECT_EQ(n, 18);
  for (const json& c : g->doc["unpack_cases"]) {
    SCOPED_TRACE(c["id"].get<std::string>());
    const Tensor packed = g->tensor(c["packed"]);
    const Tensor f32 = unpack_fp6(packed, DType::kF32);
    EXPECT_EQ(f32.shape(), Shape({c["rows"].get<int64_t>(), c["cols"].get<int64_t>()}));
    EXPECT_EQ(describe_difference(g->tensor(c["decoded_f32"]), f32), "");
    EXPECT_EQ(describe_difference(g->tensor(c["decoded_bf16"]), unpack_fp6(packed, DType::kBF16)), "");
    EXPECT_EQ(describe_difference(g->tensor(c["repacked"]), pack_fp6(f32)), "");
  }
}

TEST(GoldenMxfp6, ReferenceErrorsRaise) {
  auto g = golden();
  if (!g) GTEST_SKIP() << "golden file absent";
  int n = 0;
  for (const json& e : g->doc["error_cases"]) {
    SCOPED_TRACE(e["id"].get<std::string>());
    const json& in = e["inputs"];
    const std::string kind = e["kind"], exc = e["exception"];
    auto run = [&]() {
      if (kind == "args") {
        QuantizationArgs::from_json(in["args_kwargs"].dump());
        return;
      }
      if (kind == "pack") {
        pack_fp6(g->tensor(in["x"]));
        return;
      }
      const QuantizationArgs a = QuantizationArgs::from_json(in["args"].dump());
      if (kind == "range") {
        a.q_range();
      } else if (kind == "qparams") {
        calculate_qparams(g->tensor(in["min"]), g->tensor(in["max"]), a);
      } else if (kind == "fake_quant") {
        fake_quantize(g->tensor(in["x"]).view(), g->tensor(in["scale"]), nullptr, a);
      } else if (kind == "compress") {
        const Tensor s = g->tensor(in["scale"]);
        detail::compress_weight(g->tensor(in["x"]).view(), QParams{s, Tensor(DType::kU8, s.shape()), std::nullopt}, a,
                                "mxfp6-pack-quantized", "w");
      } else {
        FAIL() << "unhandled error kind " << kind;
      }
    };
    // R0.5: ValueError -> InvalidArgument, NotImplementedError -> NotImplemented
    if (exc == "ValueError") testing::expect_error<InvalidArgument>(run, {});
    else if (exc == "NotImplementedError") testing::expect_error<NotImplementedError>(run, {});
    else ADD_FAILURE() << "unhandled reference exception " << exc;
    ++n;
  }
  EXPECT_EQ(n, 13);
}

/// Where the reference lets NaN / Inf through, qobs raises (docs/DEVIATIONS.md): a
/// non-finite statistic (D2), scale (D3) or packed value (D16). Finite scales with
/// non-finite elements give the reference's values.
TEST(GoldenMxfp6, NonFiniteInputs) {
  auto g = golden();
  if (!g) GTEST_SKIP() << "golden file absent";
  int raised = 0, matched = 0;
  for (const json& c : g->doc["nonfinite_cases"]) {
    SCOPED_TRACE(c["id"].get<std::string>());
    const std::string op = c.value("op", std::string("qparams"));
    if (op == "qparams") {
      EXPECT_THROW(calculate_qparams(g->tensor(c["min"]), g->tensor(c["max"]), case_args_from_golden(c)),
                   InvalidArgument);
      ++raised;
    } else if (op == "compress") {
      const Tensor s = g->tensor(c["weight_scale"]);
      EXPECT_THROW(detail::compress_weight(g->tensor(c["weight"]).view(),
                                           QParams{s, Tensor(DType::kU8, s.shape()), std::nullopt},
                                           preset_scheme("MXFP6A16").weights.value(), "mxfp6-pack-quantized", "w"),
                   InvalidArgument);
      ++raised;
    } else {
      const Tensor x = g->tensor(c["x"]), scale = g->tensor(c["scale"]);
      const auto zp = g->maybe(c["zero_point"]);
      bool finite_scale = true;
      for (int64_t i = 0; i < scale.numel(); ++i) finite_scale = finite_scale && std::isfinite(scale.get(i));
      auto run = [&] {
        return op == "fake_quantize" ? fake_quantize(x.view(), scale, zp ? &*zp : nullptr, case_args_from_golden(c))
                                     : quantize(x.view(), scale, zp ? &*zp : nullptr, case_args_from_golden(c));
      };
      if (!finite_scale) {
        EXPECT_THROW(run(), InvalidArgument);
        ++raised;
        continue;
      }
      EXPECT_EQ(describe_difference(g->tensor(c["expect"]), run()), "");
      ++matched;
    }
  }
  EXPECT_EQ(raised + matched, 12);
}

}  // namespace
}  // namespace qobs
