// RULES §3 flatten_for_calibration: shapes for weights, activations and attention
// states, block padding (R3.5), Q15, and g_idx reordering (R7.2.4).
#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <vector>

#include "qobs/args.h"
#include "qobs/error.h"
#include "qobs/formats.h"
#include "qobs/layout.h"
#include "test_util.h"

namespace qobs {
namespace {

using testing::expect_error;

std::vector<float> iota_data(int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

QuantizationArgs make_args(Strategy s, std::optional<int64_t> gs = std::nullopt,
                           std::optional<std::array<int64_t, 2>> block = std::nullopt, Dynamic dyn = Dynamic::kFalse) {
  QuantizationArgs a;
  a.strategy = s;
  a.group_size = gs;
  a.block_structure = block;
  a.dynamic = dyn;
  return a.validated();
}

Shape flat_shape(const Shape& shape, std::string_view base, const QuantizationArgs& a) {
  const auto data = iota_data(shape_numel(shape));
  const TensorView v(data.data(), DType::kF32, shape);
  return flatten_for_calibration(v, base, a).layout.flat_shape();
}

std::vector<float> gather(const FlatView& f, int64_t q) {
  std::vector<float> out(static_cast<std::size_t>(f.layout.num_obs() * f.layout.group_len()));
  f.gather(q, out.data());
  return out;
}

// ---- R3.2 weights -------------------------------------------------------------------------

TEST(Flatten, R3_2_WeightTensor) {
  const auto a = make_args(Strategy::kTensor);
  EXPECT_EQ(flat_shape({4, 6}, "weight", a), (Shape{1, 1, 24}));
  EXPECT_EQ(flat_shape({5}, "weight", a), (Shape{1, 1, 5}));
  EXPECT_EQ(flat_shape({2, 3, 4}, "weight", a), (Shape{1, 1, 24}));
}

TEST(Flatten, R3_2_WeightChannel) {
  const auto a = make_args(Strategy::kChannel);
  EXPECT_EQ(flat_shape({4, 6}, "weight", a), (Shape{1, 4, 1, 6}));
  EXPECT_EQ(flat_shape({2, 4, 6}, "weight", a), (Shape{1, 2, 4, 1, 6}));
  const auto data = iota_data(24);
  const auto f = flatten_for_calibration(TensorView(data.data(), DType::kF32, {4, 6}), "weight", a);
  EXPECT_EQ(f.layout.qparam_shape, (Shape{4, 1}));
  EXPECT_EQ(gather(f, 2), (std::vector<float>{12, 13, 14, 15, 16, 17}));
}

TEST(Flatten, R3_2_WeightGroupAndTensorGroup) {
  for (Strategy s : {Strategy::kGroup, Strategy::kTensorGroup}) {
    const auto a = make_args(s, 3);
    EXPECT_EQ(flat_shape({4, 6}, "weight", a), (Shape{1, 4, 2, 3}));
    EXPECT_EQ(flat_shape({2, 4, 6}, "weight", a), (Shape{1, 2, 4, 2, 3}));
    const auto data = iota_data(24);
    const auto f = flatten_for_calibration(TensorView(data.data(), DType::kF32, {4, 6}), "weight", a);
    EXPECT_EQ(f.layout.qparam_shape, (Shape{4, 2}));
    EXPECT_EQ(gather(f, 3), (std::vector<float>{9, 10, 11}));  // row 1, group 1
    const auto bad = make_args(s, 4);
    EXPECT_THROW(flat_shape({4, 6}, "weight", bad), ShapeError);
  }
}

TEST(Flatten, R3_2_WeightBlock) {
  const auto a = make_args(Strategy::kBlock, std::nullopt, std::array<int64_t, 2>{2, 3});
  EXPECT_EQ(flat_shape({4, 6}, "weight", a), (Shape{1, 2, 2, 6}));
  const auto data = iota_data(24);
  const auto f = flatten_for_calibration(TensorView(data.data(), DType::kF32, {4, 6}), "weight", a);
  EXPECT_EQ(f.layout.qparam_shape, (Shape{2, 2}));
  // Block (0, 1): rows 0-1, cols 3-5, row-major inside the block.
  EXPECT_EQ(gather(f, 1), (std::vector<float>{3, 4, 5, 9, 10, 11}));
  // Block (1, 0): rows 2-3, cols 0-2.
  EXPECT_EQ(gather(f, 2), (std::vector<float>{12, 13, 14, 18, 19, 20}));
  // Padded: (5, 7) with [2, 3] -> (6, 9) -> 3 x 3 blocks.
  EXPECT_EQ(flat_shape({5, 7}, "weight", a), (Shape{1, 3, 3, 6}));
  const auto d57 = iota_data(35);
  const auto p = flatten_for_calibration(TensorView(d57.data(), DType::kF32, {5, 7}), "weight", a);
  // Block (2, 2): row 4 cols 6..8 then the padding row.
  EXPECT_EQ(gather(p, 8), (std::vector<float>{34, 0, 0, 0, 0, 0}));
  // Block structure needs a 2-D weight.
  EXPECT_THROW(flat_shape({2, 4, 6}, "weight", a), InvalidArgument);
}

TEST(Flatten, R3_2_WeightTokenAndAttnHeadRejected) {
  EXPECT_THROW(flat_shape({4, 6}, "weight", make_args(Strategy::kToken, std::nullopt, std::nullopt, Dynamic::kTrue)),
               InvalidArgument);
  EXPECT_THROW(flat_shape({4, 6}, "weight", make_args(Strategy::kAttnHead)), InvalidArgument);
}

// ---- R3.3 activations ----------------------------------------------------------------------

TEST(Flatten, R3_3_ActivationTensor) {
  const auto a = make_args(Strategy::kTensor);
  for (const char* base : {"input", "output"}) {
    EXPECT_EQ(flat_shape({2, 3, 8}, base, a), (Shape{6, 1, 8}));
    EXPECT_EQ(flat_shape({5, 8}, base, a), (Shape{5, 1, 8}));
    EXPECT_EQ(flat_shape({8}, base, a), (Shape{1, 1, 8}));
  }
}

TEST(Flatten, R3_3_ActivationTokenUnchanged) {
  const auto a = make_args(Strategy::kToken, std::nullopt, std::nullopt, Dynamic::kTrue);
  const auto data = iota_data(48);
  const auto f = flatten_for_calibration(TensorView(data.data(), DType::kF32, {2, 3, 8}), "input", a);
  EXPECT_TRUE(f.layout.unchanged);
}

TEST(Flatten, R3_3_ActivationGroup) {
  for (Strategy s : {Strategy::kGroup, Strategy::kTensorGroup}) {
    const auto a = make_args(s, 4);
    EXPECT_EQ(flat_shape({2, 3, 8}, "input", a), (Shape{6, 2, 4}));
    const auto data = iota_data(48);
    const auto f = flatten_for_calibration(TensorView(data.data(), DType::kF32, {2, 3, 8}), "input", a);
    EXPECT_EQ(f.layout.qparam_shape, (Shape{2}));
    // Group 1 over all 6 tokens: columns 4..7 of each row.
    const auto g = gather(f, 1);
    ASSERT_EQ(g.size(), 24u);
    EXPECT_EQ(g[0], 4);
    EXPECT_EQ(g[3], 7);
    EXPECT_EQ(g[4], 12);
    EXPECT_EQ(g[23], 47);
    EXPECT_THROW(flat_shape({2, 3, 6}, "input", a), ShapeError);
  }
}

TEST(Flatten, Q15_TwoDimensionalActivationGroupCollapses) {
  // (tokens, hidden) = (5, 8), gs 4: the merge of dims 0 and 1 gives (10, 4) and the
  // statistic is a scalar.
  const auto a = make_args(Strategy::kGroup, 4);
  const auto data = iota_data(40);
  const auto f = flatten_for_calibration(TensorView(data.data(), DType::kF32, {5, 8}), "input", a);
  EXPECT_EQ(f.layout.flat_shape(), (Shape{10, 4}));
  EXPECT_TRUE(f.layout.qparam_shape.empty());
  EXPECT_EQ(f.layout.num_qparams(), 1);
}

TEST(Flatten, R3_3_ActivationStrategiesRejected) {
  EXPECT_THROW(flat_shape({2, 3, 8}, "input", make_args(Strategy::kChannel)), InvalidArgument);
  EXPECT_THROW(flat_shape({2, 3, 8}, "output", make_args(Strategy::kAttnHead)), InvalidArgument);
  EXPECT_THROW(flat_shape({4, 8}, "input", make_args(Strategy::kBlock, std::nullopt, std::array<int64_t, 2>{2, 2})),
               InvalidArgument);
}

// ---- R3.4 attention states -----------------------------------------------------------------

TEST(Flatten, R3_4_AttentionTensor) {
  const auto a = make_args(Strategy::kTensor);
  for (const char* base : {"q", "k", "v"}) EXPECT_EQ(flat_shape({2, 3, 4, 5}, base, a), (Shape{8, 1, 15}));
  // Swap of heads and seq: observation (b, s) holds heads x head_dim of that token.
  const auto data = iota_data(120);
  const auto f = flatten_for_calibration(TensorView(data.data(), DType::kF32, {2, 3, 4, 5}), "k", a);
  const auto g = gather(f, 0);
  ASSERT_EQ(g.size(), 120u);
  // Observation 1 = (b 0, s 1): head 0 values 5..9, then head 1 values 25..29.
  EXPECT_EQ(g[15], 5);
  EXPECT_EQ(g[20], 25);
}

TEST(Flatten, R3_4_AttentionAttnHead) {
  const auto a = make_args(Strategy::kAttnHead);
  EXPECT_EQ(flat_shape({2, 3, 4, 5}, "q", a), (Shape{8, 3, 1, 1, 5}));
  const auto data = iota_data(120);
  const auto f = flatten_for_calibration(TensorView(data.data(), DType::kF32, {2, 3, 4, 5}), "v", a);
  EXPECT_EQ(f.layout.qparam_shape, (Shape{3, 1, 1}));
  // Head 1: observations (b, s) in order, each head_dim values.
  const auto g = gather(f, 1);
  ASSERT_EQ(g.size(), 40u);
  EXPECT_EQ(g[0], 20);   // b0 h1 s0 d0
  EXPECT_EQ(g[5], 25);   // b0 h1 s1 d0
  EXPECT_EQ(g[20], 80);  // b1 h1 s0 d0
}

TEST(Flatten, R3_4_AttentionStrategiesRejected) {
  EXPECT_THROW(flat_shape({2, 3, 4, 8}, "q", make_args(Strategy::kChannel)), InvalidArgument);
  EXPECT_THROW(flat_shape({2, 3, 4, 8}, "k", make_args(Strategy::kGroup, 4)), InvalidArgument);
  EXPECT_THROW(flat_shape({2, 3, 4, 8}, "k", make_args(Strategy::kTensorGroup, 4)), InvalidArgument);
  EXPECT_THROW(flat_shape({2, 3, 4, 8}, "v", make_args(Strategy::kToken, std::nullopt, std::nullopt, Dynamic::kTrue)),
               InvalidArgument);
  EXPECT_THROW(flat_shape({4, 8}, "v", make_args(Strategy::kBlock, std::nullopt, std::array<int64_t, 2>{2, 2})),
               InvalidArgument);
}

TEST(Flatten, R3_1_UnknownBaseName) {
  EXPECT_THROW(flat_shape({4, 6}, "bias", make_args(Strategy::kTensor)), InvalidArgument);
  EXPECT_TRUE(is_activation_base_name("input"));
  EXPECT_TRUE(is_activation_base_name("v"));
  EXPECT_FALSE(is_activation_base_name("weight"));
}

TEST(Flatten, R3_1_MaterializeMatchesFlatShape) {
  const auto a = make_args(Strategy::kGroup, 3);
  const auto data = iota_data(24);
  const auto f = flatten_for_calibration(TensorView(data.data(), DType::kF32, {4, 6}), "weight", a);
  const Tensor m = f.materialize();
  EXPECT_EQ(m.shape(), (Shape{1, 4, 2, 3}));
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(m.get(i), i);
}

// materialize's copies (one for groups laid end to end, one per unit-stride group, one
// per element) against gather's, on every strategy, a transposed (non-contiguous) view,
// several observations per group, f32 and bf16.
TEST(Flatten, R3_1_MaterializeEqualsGatherOnEveryLayout) {
  struct Case {
    Shape shape;
    std::string base;
    QuantizationArgs args;
    bool transposed;
  };
  const std::vector<Case> cases{
      {{6, 8}, "weight", make_args(Strategy::kTensor), false},
      {{6, 8}, "weight", make_args(Strategy::kChannel), false},
      {{6, 8}, "weight", make_args(Strategy::kChannel), true},
      {{6, 8}, "weight", make_args(Strategy::kGroup, 4), false},
      {{6, 8}, "weight", make_args(Strategy::kGroup, 2), true},
      {{6, 8}, "weight", make_args(Strategy::kTensorGroup, 4), false},
      {{6, 8}, "weight", make_args(Strategy::kBlock, std::nullopt, std::array<int64_t, 2>{2, 4}), false},
      {{2, 3, 8}, "input", make_args(Strategy::kTensor), false},
      {{2, 3, 8}, "input", make_args(Strategy::kToken, std::nullopt, std::nullopt, Dynamic::kTrue), false},
      {{2, 3, 8}, "input", make_args(Strategy::kGroup, 4), false},
      {{2, 3, 4, 8}, "q", make_args(Strategy::kAttnHead), false},
  };
  for (DType dt : {DType::kF32, DType::kBF16})
    for (const Case& c : cases) {
      SCOPED_TRACE(c.base + " " + shape_str(c.shape) + (c.transposed ? " transposed" : "") + " " +
                   std::string(dtype_name(dt)));
      const std::vector<float> values = iota_data(shape_numel(c.shape));
      const Tensor t = Tensor::from_values(dt, c.shape, std::vector<double>(values.begin(), values.end()));
      TensorView v = t.view();
      if (c.transposed) {
        // the same storage read as the transpose: shape (8, 6), strides (1, 8)
        v.shape = {c.shape[1], c.shape[0]};
        v.strides = {1, c.shape[1]};
      }
      const FlatView f = flatten_for_calibration(v, c.base, c.args);
      const Tensor m = f.materialize();
      const int64_t per = f.layout.num_obs() * f.layout.group_len(), g_len = f.layout.group_len();
      ASSERT_EQ(m.numel(), f.layout.num_qparams() * per);
      for (int64_t q = 0; q < f.layout.num_qparams(); ++q) {
        const std::vector<float> want = gather(f, q);
        for (int64_t n = 0; n < f.layout.num_obs(); ++n)
          for (int64_t g = 0; g < g_len; ++g)
            ASSERT_EQ(m.get((n * f.layout.num_qparams() + q) * g_len + g),
                      want[static_cast<std::size_t>(n * g_len + g)])
                << "q " << q << " n " << n << " g " << g;
      }
    }
}

// ---- R3.5 padding ---------------------------------------------------------------------------

TEST(Flatten, R3_5_PaddingExamples) {
  struct Case {
    int64_t rows, cols, pad_r, pad_c;
  };
  const Case cases[] = {{10944, 2048, 64, 0}, {100, 200, 28, 56}, {300, 256, 84, 0},
                        {256, 300, 0, 84},    {256, 384, 0, 0},   {100, 100, 28, 28}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.cols));
    std::vector<uint8_t> bytes(static_cast<std::size_t>(c.rows * c.cols), 1);
    const Tensor p = pad_to_blocks(TensorView(bytes.data(), DType::kU8, {c.rows, c.cols}), 128, 128);
    EXPECT_EQ(p.shape(), (Shape{c.rows + c.pad_r, c.cols + c.pad_c}));
  }
}

TEST(Flatten, R3_5_PaddingValuesAndBlockCounts) {
  const auto data = iota_data(35);
  const Tensor p = pad_to_blocks(TensorView(data.data(), DType::kF32, {5, 7}), 2, 3);
  ASSERT_EQ(p.shape(), (Shape{6, 9}));
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 9; ++c) EXPECT_EQ(p.get(r * 9 + c), (r < 5 && c < 7) ? r * 7 + c : 0.0) << r << "," << c;
  // 3-D: only the last two dims are padded.
  const auto d3 = iota_data(2 * 3 * 5);
  EXPECT_EQ(pad_to_blocks(TensorView(d3.data(), DType::kF32, {2, 3, 5}), 2, 4).shape(), (Shape{2, 4, 8}));
  // 1-D input is rejected.
  EXPECT_THROW(pad_to_blocks(TensorView(d3.data(), DType::kF32, {30}), 2, 4), InvalidArgument);
  // Flatten of a padded block weight: (100, 200) with [128, 128] -> 1 x 2 blocks.
  std::vector<float> w(100 * 200, 1.0f);
  const auto a = make_args(Strategy::kBlock, std::nullopt, std::array<int64_t, 2>{128, 128});
  const auto f = flatten_for_calibration(TensorView(w.data(), DType::kF32, {100, 200}), "weight", a);
  EXPECT_EQ(f.layout.flat_shape(), (Shape{1, 1, 2, 128 * 128}));
}

// ---- R7.2.4 g_idx reordering ----------------------------------------------------------------

TEST(Flatten, R7_2_4_GIdxReordersColumnsStably) {
  const auto a = make_args(Strategy::kGroup, 2);
  const auto data = iota_data(12);  // (2, 6)
  const std::vector<int32_t> g_idx{2, 0, 1, 0, 2, 1};
  const auto f = flatten_for_calibration(TensorView(data.data(), DType::kF32, {2, 6}), "weight", a, g_idx);
  EXPECT_EQ(f.layout.flat_shape(), (Shape{1, 2, 3, 2}));
  // Stable ascending sort of g_idx: columns 1, 3 | 2, 5 | 0, 4.
  EXPECT_EQ(gather(f, 0), (std::vector<float>{1, 3}));
  EXPECT_EQ(gather(f, 1), (std::vector<float>{2, 5}));
  EXPECT_EQ(gather(f, 2), (std::vector<float>{0, 4}));
  EXPECT_EQ(gather(f, 5), (std::vector<float>{6, 10}));
}

TEST(Flatten, R0_2_StridedViewsFlattenLikeContiguous) {
  // A transposed (non-contiguous) view flattens by logical index.
  const auto data = iota_data(24);  // storage (6, 4); view (4, 6) = transpose
  const TensorView t(data.data(), DType::kF32, {4, 6}, {1, 4});
  const auto f = flatten_for_calibration(t, "weight", make_args(Strategy::kChannel));
  EXPECT_EQ(gather(f, 1), (std::vector<float>{1, 5, 9, 13, 17, 21}));
}

// A block_structure far larger than the weight pads it to a tensor whose byte count
// does not fit in int64: formerly the size wrapped and the padding copy wrote past a
// tiny buffer (segfault from Python with block_structure=[2**31, 2**31]).
TEST(Flatten, BlockPaddingSizeOverflowIsRejected) {
  const auto data = iota_data(24);
  const TensorView w(data.data(), DType::kF32, {4, 6});
  const int64_t big = int64_t{1} << 31;
  expect_error<InvalidArgument>(
      [&] {
        (void)flatten_for_calibration(w, "weight", make_args(Strategy::kBlock, std::nullopt, {{{big, big}}}));
      },
      {"block padding of shape (4, 6) to block_structure [2147483648, 2147483648]: padded bytes",
       "9223372036854775807"});
  expect_error<InvalidArgument>([&] { (void)pad_to_blocks(w, big, big); },
                                {"block_structure [2147483648, 2147483648]"});
  const int64_t max = std::numeric_limits<int64_t>::max();
  // rounding up itself overflows: a broadcast view with max - 1 rows, blocks of 2^62
  const TensorView tall(data.data(), DType::kF32, {max - 1, 1}, {0, 0});
  expect_error<InvalidArgument>([&] { (void)pad_to_blocks(tall, int64_t{1} << 62, 1); }, {"padded rows"});
  expect_error<InvalidArgument>([&] { (void)pad_to_blocks(w, 0, 1); }, {"must be two positive integers"});
  // a rank-3 tensor: the leading dim multiplies the padded block
  const auto data3 = iota_data(2 * 4 * 6);
  const TensorView w3(data3.data(), DType::kF32, {2, 4, 6});
  expect_error<InvalidArgument>([&] { (void)pad_to_blocks(w3, int64_t{1} << 31, int64_t{1} << 31); },
                                {"padded elements"});
}

// A group_size beyond every dimension is a plain divisibility error, never a size.
TEST(Flatten, HugeGroupSizeIsRejected) {
  const auto data = iota_data(32);
  const TensorView w(data.data(), DType::kF32, {4, 8});
  const int64_t gs = std::numeric_limits<int64_t>::max();
  expect_error<ShapeError>([&] { (void)flatten_for_calibration(w, "weight", make_args(Strategy::kGroup, gs)); },
                           {"group_size 9223372036854775807 does not divide 8"});
  const TensorView x(data.data(), DType::kF32, {2, 2, 8});
  expect_error<ShapeError>([&] { (void)flatten_for_calibration(x, "input", make_args(Strategy::kGroup, gs)); },
                           {"group_size 9223372036854775807"});
}

// The kernels read a group in place when its axes are row-major from stride 1, however
// many axes the flatten produced; size-1 axes take any stride.
TEST(Flatten, GroupContiguityOverSeveralAxes) {
  FlatView f;
  f.layout.obs_axes = {{1, 0}};
  f.layout.qparam_axes = {{4, 6}};
  f.layout.group_axes = {{2, 3}, {1, 99}, {3, 1}};
  EXPECT_TRUE(f.group_is_contiguous());
  EXPECT_TRUE(f.groups_end_to_end());
  f.layout.qparam_axes = {{4, 12}};  // gaps between groups
  EXPECT_TRUE(f.group_is_contiguous());
  EXPECT_FALSE(f.groups_end_to_end());
  f.layout.group_axes = {{2, 1}, {3, 2}};  // column-major
  EXPECT_FALSE(f.group_is_contiguous());
  f.layout.group_axes = {{6, 1}};
  f.layout.obs_axes = {{2, 24}};  // two observations per group
  EXPECT_FALSE(f.group_is_contiguous());
}

}  // namespace
}  // namespace qobs
