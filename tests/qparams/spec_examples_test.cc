// RULES §4 / §5 worked examples: R4.4 examples 1-5 (parity mode; example 3 also in
// wide mode), R4.2 global-scale examples, R4.1 zero-scale replacement, R4.3 dynamic
// scale shapes and the R5.4.1 block example. Expected values are the RULES literals.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "qobs/args.h"
#include "qobs/error.h"
#include "qobs/formats.h"
#include "qobs/observer.h"
#include "qobs/qparams.h"

namespace qobs {
namespace {

Tensor scalar1(DType dt, double v) { return Tensor::from_values(dt, {1}, {v}); }

QuantizationArgs int_args(int bits, bool symmetric) {
  QuantizationArgs a;
  a.num_bits = bits;
  a.symmetric = symmetric;
  return a.validated();
}

QuantizationArgs nvfp4_weight_args(int64_t group) {
  QuantizationArgs a;
  a.num_bits = 4;
  a.type = QuantType::kFloat;
  a.strategy = Strategy::kTensorGroup;
  a.group_size = group;
  a.scale_dtype = DType::kF8E4M3;
  return a.validated();
}

TEST(SpecExamples, R4_4_Example1Int8Symmetric) {
  const auto r = calculate_qparams(scalar1(DType::kF32, -3), scalar1(DType::kF32, 1), int_args(8, true));
  EXPECT_EQ(r.scale.dtype(), DType::kF32);
  EXPECT_EQ(r.scale.shape(), (Shape{1}));
  EXPECT_EQ(r.scale.get(0), static_cast<double>(3.0f / 127.5f));
  EXPECT_NEAR(r.scale.get(0), 0.023529412, 1e-9);
  EXPECT_EQ(r.zero_point.dtype(), DType::kI8);
  EXPECT_EQ(r.zero_point.get(0), 0);
}

TEST(SpecExamples, R4_4_Example2OnesTensor) {
  // Tensor strategy on [1, 1, 1, 1, 1]: min = max = 1.
  const auto sym = calculate_qparams(scalar1(DType::kF32, 1), scalar1(DType::kF32, 1), int_args(8, true));
  EXPECT_EQ(sym.scale.get(0), static_cast<double>(1.0f / 127.5f));
  EXPECT_NEAR(sym.scale.get(0), 0.0078431, 1e-7);
  EXPECT_EQ(sym.zero_point.get(0), 0);
  const auto asym = calculate_qparams(scalar1(DType::kF32, 1), scalar1(DType::kF32, 1), int_args(8, false));
  EXPECT_EQ(asym.scale.get(0), static_cast<double>(1.0f / 255.0f));
  EXPECT_NEAR(asym.scale.get(0), 0.0039216, 1e-7);
  EXPECT_EQ(asym.zero_point.get(0), -128);
  EXPECT_EQ(asym.zero_point.dtype(), DType::kI8);
}

TEST(SpecExamples, R4_4_Example3Nvfp4Bf16Parity) {
  std::vector<double> w(24);
  std::iota(w.begin(), w.end(), 0.0);
  const Tensor weight = Tensor::from_values(DType::kBF16, {4, 6}, w);
  const auto args = nvfp4_weight_args(3);
  auto obs = load_observer("memoryless_minmax", "weight", args);
  obs->observe(weight.view());
  const QParams qp = obs->get_qparams();
  ASSERT_TRUE(qp.global_scale.has_value());
  EXPECT_EQ(qp.global_scale->dtype(), DType::kF32);
  EXPECT_EQ(qp.global_scale->shape(), (Shape{1}));
  EXPECT_EQ(qp.global_scale->get(0), 117.0);
  ASSERT_EQ(qp.scale.shape(), (Shape{4, 2}));
  const double expect_scale[8] = {40, 96, 160, 208, 288, 320, 384, 448};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(qp.scale.get(i), expect_scale[i]) << i;
  EXPECT_EQ(qp.zero_point.dtype(), DType::kF8E4M3);
  const Tensor fq = fake_quantize(weight.view(), qp.scale, &qp.zero_point, args, nullptr, &*qp.global_scale);
  EXPECT_EQ(fq.dtype(), DType::kBF16);  // Q18: group paths return x's dtype
  EXPECT_EQ(fq.get(2 * 6 + 1), 14.75);
}

TEST(SpecExamples, R4_4_Example3WideModeDiffers) {
  // Note R0.4: in wide mode the global scale is not bf16-rounded (116.8696) and the
  // fake-quantized element [2][1] becomes 14.8125 instead of 14.75.
  std::vector<double> w(24);
  std::iota(w.begin(), w.end(), 0.0);
  const Tensor weight = Tensor::from_values(DType::kBF16, {4, 6}, w);
  const auto args = nvfp4_weight_args(3);
  ObserverOptions opt;
  opt.mode = NumericMode::kWide;
  auto obs = load_observer("memoryless_minmax", "weight", args, {}, opt);
  obs->observe(weight.view());
  const QParams qp = obs->get_qparams();
  ASSERT_TRUE(qp.global_scale.has_value());
  EXPECT_NE(qp.global_scale->get(0), 117.0);
  EXPECT_NEAR(qp.global_scale->get(0), 2688.0 / 23.0, 1e-4);
  const Tensor fq =
      fake_quantize(weight.view(), qp.scale, &qp.zero_point, args, nullptr, &*qp.global_scale, NumericMode::kWide);
  EXPECT_EQ(fq.get(2 * 6 + 1), 14.8125);
}

TEST(SpecExamples, R4_4_Example4Int8AsymBf16) {
  const Tensor mn = scalar1(DType::kBF16, -0.3);
  EXPECT_EQ(mn.get(0), -0.30078125);
  const auto r = calculate_qparams(mn, scalar1(DType::kBF16, 5.0), int_args(8, false));
  EXPECT_EQ(r.scale.dtype(), DType::kBF16);
  EXPECT_EQ(r.scale.get(0), 0.0208740234375);
  EXPECT_EQ(r.zero_point.dtype(), DType::kI8);
  EXPECT_EQ(r.zero_point.get(0), -114);  // Q22: -113.5 in bf16, half-to-even
}

TEST(SpecExamples, R4_4_Example5Int4Asym) {
  const auto r = calculate_qparams(scalar1(DType::kF32, -0.5), scalar1(DType::kF32, 1.0), int_args(4, false));
  EXPECT_FLOAT_EQ(static_cast<float>(r.scale.get(0)), 0.1f);
  EXPECT_EQ(r.zero_point.get(0), -3);
}

TEST(SpecExamples, R4_1_Step1RangeIncludesZero) {
  // min > 0 and max < 0 are clamped to 0 first.
  const auto r = calculate_qparams(scalar1(DType::kF32, 2), scalar1(DType::kF32, 3), int_args(8, false));
  EXPECT_EQ(r.scale.get(0), static_cast<double>(3.0f / 255.0f));
  EXPECT_EQ(r.zero_point.get(0), -128);
  const auto n = calculate_qparams(scalar1(DType::kF32, -3), scalar1(DType::kF32, -2), int_args(8, false));
  EXPECT_EQ(n.zero_point.get(0), 127);
}

TEST(SpecExamples, R4_1_AsymmetricFp4NotImplemented) {
  QuantizationArgs a;
  a.num_bits = 4;
  a.type = QuantType::kFloat;
  a.symmetric = false;
  EXPECT_THROW(calculate_qparams(scalar1(DType::kF32, -1), scalar1(DType::kF32, 1), a.validated()),
               NotImplementedError);
}

TEST(SpecExamples, R4_1_Step7ZeroScaleReplacement) {
  // Q14 / Q23: eps of the scale dtype (or scale_dtype).
  const auto f32 = calculate_qparams(scalar1(DType::kF32, 0), scalar1(DType::kF32, 0), int_args(8, true));
  EXPECT_EQ(f32.scale.get(0), std::ldexp(1.0, -23));
  const auto bf = calculate_qparams(scalar1(DType::kBF16, 0), scalar1(DType::kBF16, 0), int_args(8, true));
  EXPECT_EQ(bf.scale.get(0), 0.0078125);
  const auto asym = calculate_qparams(scalar1(DType::kF32, 0), scalar1(DType::kF32, 0), int_args(8, false));
  EXPECT_EQ(asym.scale.get(0), std::ldexp(1.0, -23));
  EXPECT_EQ(asym.zero_point.get(0), 0);
  QuantizationArgs f8;
  f8.type = QuantType::kFloat;
  f8.scale_dtype = DType::kF8E4M3;
  const auto s8 = calculate_qparams(scalar1(DType::kF32, 0), scalar1(DType::kF32, 0), f8.validated());
  EXPECT_EQ(s8.scale.get(0), 0.125);
}

TEST(SpecExamples, R4_1_FloatRanges) {
  // W/2 = 448 for fp8 and 6 for fp4.
  QuantizationArgs f8;
  f8.type = QuantType::kFloat;
  const auto r8 = calculate_qparams(scalar1(DType::kF32, -896), scalar1(DType::kF32, 1), f8.validated());
  EXPECT_EQ(r8.scale.get(0), 2.0);
  EXPECT_EQ(r8.zero_point.dtype(), DType::kF8E4M3);
  QuantizationArgs f4;
  f4.num_bits = 4;
  f4.type = QuantType::kFloat;
  const auto r4 = calculate_qparams(scalar1(DType::kF32, -3), scalar1(DType::kF32, 1), f4.validated());
  EXPECT_EQ(r4.scale.get(0), 0.5);
  EXPECT_EQ(f4.validated().q_range(), (std::pair<float, float>{-6.0f, 6.0f}));
  EXPECT_EQ(f8.validated().q_range(), (std::pair<float, float>{-448.0f, 448.0f}));
  EXPECT_EQ(int_args(4, true).q_range(), (std::pair<float, float>{-8.0f, 7.0f}));
}

TEST(SpecExamples, R4_2_GlobalScaleExamples) {
  const auto g23 = generate_gparam(scalar1(DType::kBF16, -23), scalar1(DType::kBF16, 23));
  EXPECT_EQ(g23.dtype(), DType::kF32);
  EXPECT_EQ(g23.shape(), (Shape{1}));
  EXPECT_EQ(g23.get(0), 117.0);
  const auto g11 = generate_gparam(scalar1(DType::kBF16, -11), scalar1(DType::kBF16, 11));
  EXPECT_EQ(g11.get(0), 244.0);
  // f32 is not rounded to bf16 (installed reference values of 2688 / torch.tensor([a])).
  const auto f = generate_gparam(scalar1(DType::kF32, -23), scalar1(DType::kF32, 1));
  EXPECT_EQ(f.get(0), 116.86956787109375);
  EXPECT_EQ(generate_gparam(scalar1(DType::kF32, -5), scalar1(DType::kF32, 5)).get(0), 537.6000366210938);
  EXPECT_EQ(generate_gparam(scalar1(DType::kBF16, -5), scalar1(DType::kBF16, 5)).get(0), 540.0);
}

TEST(SpecExamples, Q10_F16GlobalScaleOverflowFallsBackToOne) {
  const auto g = generate_gparam(scalar1(DType::kF16, -0.01), scalar1(DType::kF16, 0.01));
  EXPECT_EQ(g.get(0), 1.0);
  // 0.05 > 2688 / 65504: finite.
  const auto ok = generate_gparam(scalar1(DType::kF16, 0), scalar1(DType::kF16, 0.5));
  EXPECT_EQ(ok.get(0), 5376.0);
}

TEST(SpecExamples, R4_2_ZeroRangeUsesTiny) {
  // a = tiny = 2^-126: 2688 / 2^-126 overflows f32 -> Inf -> 1.0.
  const auto g = generate_gparam(scalar1(DType::kF32, 0), scalar1(DType::kF32, 0));
  EXPECT_EQ(g.get(0), 1.0);
}

TEST(SpecExamples, R4_3_DynamicScaleShapes) {
  std::vector<float> x(32);
  std::iota(x.begin(), x.end(), -16.0f);
  QuantizationArgs g;
  g.group_size = 4;
  g.dynamic = Dynamic::kTrue;
  const auto rg = compute_dynamic_scales_and_zp(TensorView(x.data(), DType::kF32, {1, 4, 8}), g.validated());
  EXPECT_EQ(rg.scale.shape(), (Shape{1, 4, 2}));
  QuantizationArgs t;
  t.strategy = Strategy::kToken;
  t.dynamic = Dynamic::kTrue;
  const auto rt = compute_dynamic_scales_and_zp(TensorView(x.data(), DType::kF32, {2, 2, 8}), t.validated());
  EXPECT_EQ(rt.scale.shape(), (Shape{2, 2, 1}));
  // Q16: a 2-D activation falls back to a single whole-tensor scale.
  const auto r2 = compute_dynamic_scales_and_zp(TensorView(x.data(), DType::kF32, {4, 8}), t.validated());
  EXPECT_EQ(r2.scale.numel(), 1);
  EXPECT_EQ(r2.scale.get(0), static_cast<double>(16.0f / 127.5f));
  QuantizationArgs tn;
  tn.dynamic = Dynamic::kTrue;
  const auto rn = compute_dynamic_scales_and_zp(TensorView(x.data(), DType::kF32, {4, 8}), tn.validated());
  EXPECT_EQ(rn.scale.shape(), (Shape{1}));
  EXPECT_THROW(compute_dynamic_scales_and_zp(TensorView(x.data(), DType::kF32, {1, 4, 8}),
                                             [] {
                                               QuantizationArgs a;
                                               a.group_size = 3;
                                               a.dynamic = Dynamic::kTrue;
                                               return a.validated();
                                             }()),
               ShapeError);
}

TEST(SpecExamples, R5_4_1_BlockExample) {
  QuantizationArgs a;
  a.type = QuantType::kFloat;
  a.strategy = Strategy::kBlock;
  a.block_structure = std::array<int64_t, 2>{128, 128};
  const auto args = a.validated();
  for (float v : {1.0f, 0.5f}) {
    SCOPED_TRACE(v);
    std::vector<float> x(100 * 200, v);
    const Tensor scale = Tensor::from_values(DType::kF32, {1, 2}, {1.0, 1.0});
    const Tensor fq = fake_quantize(TensorView(x.data(), DType::kF32, {100, 200}), scale, nullptr, args);
    ASSERT_EQ(fq.shape(), (Shape{100, 200}));
    for (int64_t i = 0; i < fq.numel(); ++i) ASSERT_EQ(fq.get(i), v) << i;
  }
}

TEST(SpecExamples, R4_1_1_SymmetricIntClipsPositiveExtreme) {
  // Q13: scale = absmax / 127.5, so +absmax maps to ~127.5 and ends at 127: the largest
  // positive element is slightly clipped (127 * scale < absmax). (In f32, 1 / 127.5 is
  // rounded up, so +-1 / scale is just inside +-127.5 and both ends round to +-127.)
  const auto args = int_args(8, true);
  const auto r = calculate_qparams(scalar1(DType::kF32, -1), scalar1(DType::kF32, 1), args);
  std::vector<float> x{-1.0f, 1.0f, 2.0f};
  const Tensor q =
      quantize(TensorView(x.data(), DType::kF32, {3}), r.scale, &r.zero_point, args, nullptr, nullptr, DType::kI8);
  EXPECT_EQ(q.get(0), -127);
  EXPECT_EQ(q.get(1), 127);
  EXPECT_EQ(q.get(2), 127);  // clamped to q_max
  const Tensor fq = fake_quantize(TensorView(x.data(), DType::kF32, {3}), r.scale, &r.zero_point, args);
  EXPECT_LT(fq.get(1), 1.0);
  EXPECT_EQ(fq.get(1), static_cast<double>(127.0f * static_cast<float>(r.scale.get(0))));
}

}  // namespace
}  // namespace qobs
