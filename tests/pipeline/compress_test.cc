// Planning of compressed tensors for hostile weight shapes, and decoding of configs that
// lack what the decoder needs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "pipeline/compress.h"
#include "qobs/error.h"
#include "qobs/io.h"
#include "qobs/pipeline.h"
#include "test_util.h"

namespace qobs {
namespace {
namespace fs = std::filesystem;

using testing::expect_error;
using testing::TempDir;

QuantizationScheme scheme(const std::string& name) {
  QuantizeOptions o;
  o.scheme = name;
  return resolve_scheme(o);
}

TEST(Compress, EmptyWeightIsRefusedWhilePlanning) {
  // 0 x 2^62 is a valid safetensors entry (no bytes); before, planning multiplied
  // 2^62 by the bit width (signed overflow) and calibration then failed with "No
  // statistics ... observe a tensor first", naming no tensor.
  for (const std::string name : {"W4A16", "W8A8", "FP8_DYNAMIC", "NVFP4A16"}) {
    const QuantizationScheme s = scheme(name);
    for (const Shape& shape : {Shape{0, int64_t{1} << 62}, Shape{4, 0}, Shape{0, 0}})
      expect_error<InvalidArgument>(
          [&] {
            detail::plan_compressed(*s.weights, *s.format, DType::kBF16, shape, "model.layers.0.mlp.up_proj.weight");
          },
          {"model.layers.0.mlp.up_proj.weight", shape_str(shape), "no elements"});
  }
}

TEST(Compress, HugeColumnCountDoesNotOverflowThePackedShape) {
  // 2^62 columns x 4 bits wrapped to 0 packed columns before.
  const QuantizationScheme s = scheme("W4A16");
  expect_error<InvalidArgument>(
      [&] {
        detail::plan_compressed(*s.weights, *s.format, DType::kBF16, {1, int64_t{1} << 62}, "m.weight");
      },
      {"m.weight", "too large to plan", "exceeds the limit"});
  // The largest column count whose product fits still plans, with a rounded-up width.
  const int64_t cols = (std::numeric_limits<int64_t>::max() / 4) / 128 * 128;
  const auto plan = detail::plan_compressed(*s.weights, *s.format, DType::kBF16, {1, cols}, "m.weight");
  EXPECT_EQ(plan[0].local, "weight_packed");
  EXPECT_EQ(plan[0].shape, Shape({1, (cols * 4 + 31) / 32}));
}

TEST(Compress, EmptyWeightInACheckpointNamesTheTensor) {
  TempDir dir;
  fs::create_directories(dir.path / "in");
  write_safetensors((dir.path / "in" / "model.safetensors").string(),
                    {{"model.layers.0.mlp.up_proj.weight", Tensor(DType::kBF16, {0, 128})},
                     {"model.layers.0.mlp.down_proj.weight", Tensor(DType::kBF16, {128, 128})}});
  QuantizeOptions o;
  o.model_path = (dir.path / "in").string();
  o.output_dir = (dir.path / "out").string();
  o.scheme = "W4A16";
  expect_error<InvalidArgument>([&] { quantize_checkpoint(o); },
                                {"model.layers.0.mlp.up_proj.weight", "(0, 128)", "no elements"});
  EXPECT_FALSE(fs::exists(dir.path / "out"));
}

TEST(Compress, ReportSumsMeasuredByRowBlocksEqualTheWholeDequantizedWeight) {
  // compress_weight measures the weight against its dequantized copy a block of rows at a
  // time (qparams per row: tensor, channel, group, tensor_group), or whole (block
  // strategy, MX). Either way the sums are ref::error_sums of the weight and the whole
  // dequantized weight, bit for bit: shapes below, at and across the block boundary
  // (2^20 elements), rows of 500 (a block must still hold a multiple of 8 elements), f32
  // and bf16, symmetric and asymmetric zero points.
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (const std::string name :
       {"W4A16", "W4A16_ASYM", "W8A16", "W8A8", "NVFP4A16", "FP8_DYNAMIC", "FP8_BLOCK", "MXFP4A16"})
    for (DType dt : {DType::kF32, DType::kBF16})
      for (const Shape& shape :
           {Shape{5, 256}, Shape{136, 128}, Shape{8200, 128}, Shape{300, 4096}, Shape{6300, 500}}) {
        const QuantizationScheme s = scheme(name);
        const QuantizationArgs& a = *s.weights;
        // 500 columns: rows of a length that is no multiple of 8, for the per-channel schemes
        if (shape[1] % 128 != 0 && (a.group_size || a.block_structure)) continue;
        std::vector<float> v(static_cast<std::size_t>(shape[0] * shape[1]));
        // heavy tails (a few values 10^3 larger): sums whose rounding depends on the order
        for (float& x : v) x = nd(rng) * (rng() % 97 == 0 ? 1000.0f : 1.0f);
        const Tensor w = Tensor::from_floats(dt, shape, v);
        auto obs = load_observer("memoryless_minmax", "weight", a);
        obs->observe(w.view());
        const QParams qp = obs->get_qparams();
        const detail::Compressed c = detail::compress_weight(w.view(), qp, a, *s.format, "m.weight");
        // the whole dequantized weight, as compress_weight quantizes it (R5.7.5, R8.2.5)
        const Tensor scale = qp.scale.to(detail::model_dtype_of(dt));
        const Tensor* g = qp.global_scale ? &*qp.global_scale : nullptr;
        std::optional<DType> q_dt;
        if (a.type == QuantType::kInt || a.num_bits == 8) q_dt = a.pytorch_dtype();
        const Tensor q = quantize(w.view(), scale, &qp.zero_point, a, nullptr, g, q_dt);
        const Tensor dq = dequantize(q.view(), scale, a.symmetric ? nullptr : &qp.zero_point, a, nullptr, g, dt);
        const kernels::ErrorSums expect = kernels::ref::error_sums(w.view(), dq.view());
        const std::string at = name + " " + std::string(dtype_name(dt)) + " " + shape_str(shape);
        EXPECT_EQ(c.error.signal, expect.signal) << at;
        EXPECT_EQ(c.error.error, expect.error) << at;
        EXPECT_GT(c.error.error, 0.0) << at;
      }
}

TEST(Decompress, ConfigGroupWithoutWeightsIsRefused) {
  TempDir dir;
  write_safetensors((dir.path / "model.safetensors").string(),
                    {{"m.weight_scale", Tensor::from_values(DType::kBF16, {1}, {1})},
                     {"m.weight", Tensor::from_values(DType::kI8, {1, 2}, {1, 2})}});
  const auto write_config = [&](const std::string& groups) {
    std::ofstream(dir.path / "config.json")
        << R"({"quantization_config": {"format": "int-quantized", "config_groups": )" << groups << "}}";
  };
  const std::string out = (dir.path / "dense.safetensors").string();
  write_config(R"({"group_0": {"targets": ["Linear"], "input_activations": {"num_bits": 8}}})");
  expect_error<InvalidArgument>([&] { dequantize_checkpoint(dir.path.string(), out); },
                                {"config.json", "config group 'group_0'", "\"weights\""});
  write_config(R"({"group_0": {"targets": ["Linear"], "weights": null}})");
  expect_error<InvalidArgument>([&] { dequantize_checkpoint(dir.path.string(), out); }, {"config group 'group_0'"});
  write_config(R"(["group_0"])");
  expect_error<InvalidArgument>([&] { dequantize_checkpoint(dir.path.string(), out); }, {"exactly one config group"});
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace qobs
