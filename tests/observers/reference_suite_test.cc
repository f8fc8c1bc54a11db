// llm-compressor's own observer test suite (tests/llmcompressor/observers/*.py), ported
// to C++. Each test names the reference file and test it ports and the rule (RULES) it
// exercises. Expected values are the reference tests' literals; values marked
// "installed reference" were printed by llmcompressor 0.14.0.1 / compressed-tensors
// 0.19.0 (/work/refenv) on the same inputs (the torch-seeded Linear weights below are
// the exact values torch.manual_seed(42 / 123) produces for nn.Linear(8, 4)).
//
// Differences from the Python tests:
// - The reference feeds integer tensors (torch.tensor([1, 1, 1, 1, 1])); qobs rejects
//   non-float observations on purpose (docs/DEVIATIONS.md D11), so the same values are
//   given as f32. The results are identical (the first integer observation is stored as
//   is and blending happens in f32).
// - Module hooks become attach(in_features) + accumulate_input(x); `_set_importance`
//   becomes import_statistics of importance_sum / importance_count.
// Ported files: test_min_max.py, test_mse.py, test_imatrix.py, test_distributed.py,
// test_fusion_handler.py, test_fused_observers.py (fused global scale),
// test_observer_compile.py (compiled == qobs's chunked search), test_mse_vs_minmax.py.
// - test_fouroversix.py is not ported: `fouroversix` is not an observer of R6.2.2.
//   test_helpers.py / test_fused_observers.py need a HF model and oneshot; their observer
//   behaviour (token counting aside) is ported as the fused global-scale cases below.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "qobs/args.h"
#include "qobs/error.h"
#include "qobs/observer.h"
#include "qobs/qparams.h"

namespace qobs {
namespace {

template <typename E, typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

double round4(double v) { return std::round(v * 1e4) / 1e4; }

Tensor f32(Shape shape, std::vector<double> v) { return Tensor::from_values(DType::kF32, std::move(shape), v); }

/// torch.manual_seed(42); nn.Linear(8, 4).weight
const std::vector<double> kLinear42 = {
    0.27030518651008606,   0.29345211386680603,   -0.08282782882452011, 0.32477813959121704,  -0.07746481150388718,
    0.07134377956390381,   -0.17212924361228943,  0.2076357752084732,   0.31167247891426086,  -0.2593767046928406,
    0.30730724334716797,   0.06617080420255661,   0.2612083852291107,   0.04788193851709366,  0.17047923803329468,
    -0.049918558448553085, 0.2725493013858795,    0.052258338779211044, -0.16505283117294312, 0.09012015908956528,
    -0.16289499402046204,  -0.041462212800979614, -0.14359864592552185, 0.2345370501279831,   -0.2790845036506653,
    -0.16299176216125488,  -0.09983454644680023,  -0.21258191764354706, 0.03336947038769722,  -0.34919729828834534,
    0.31929728388786316,   -0.30033236742019653};
/// torch.manual_seed(123); nn.Linear(8, 4).weight
const std::vector<double> kLinear123 = {
    -0.1441706269979477,  0.0117113022133708,   -0.17559531331062317, 0.13332977890968323,  -0.3012469410896301,
    0.25917014479637146,  -0.256976842880249,   -0.28108975291252136, -0.22340580821037292, 0.16012202203273773,
    -0.13063520193099976, 0.132304385304451,    -0.3000711500644684,  -0.21450920403003693, -0.12981633841991425,
    -0.06948021799325943, -0.2697129249572754,  0.23150348663330078,  -0.08337889611721039, 0.11348628997802734,
    0.25001299381256104,  0.06586911529302597,  0.0966794341802597,   0.34127047657966614,  -0.15945589542388916,
    0.11198846995830536,  -0.15730160474777222, 0.25266680121421814,  0.2823677062988281,   -0.32596641778945923,
    0.3018093705177307,   0.16882683336734772};
/// torch.manual_seed(0); torch.rand(4, 4) * 127
const std::vector<double> kRand4x4 = {63.02458572387695,  97.56417083740234,  11.236634254455566, 16.767871856689453,
                                      39.04269790649414,  80.52799224853516,  62.24186325073242,  113.84848022460938,
                                      57.86475372314453,  80.30289459228516,  44.309471130371094, 51.018096923828125,
                                      2.8353707790374756, 21.445085525512695, 37.32383346557617,  65.85226440429688};

void expect_allclose(const Tensor& t, const std::vector<double>& expect, double rtol = 1e-5, double atol = 1e-8) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(expect.size()));
  for (int64_t i = 0; i < t.numel(); ++i)
    EXPECT_LE(std::abs(t.get(i) - expect[i]), atol + rtol * std::abs(expect[i])) << "element " << i;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8) {
  if (a.numel() != b.numel()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::abs(a.get(i) - b.get(i)) > atol + rtol * std::abs(b.get(i))) return false;
  return true;
}

// =====================================================================================
// test_min_max.py
// =====================================================================================

// test_min_max_observer[True-0.0078-0] / [False-0.0039--128]; R4.4 example 2.
TEST(RefMinMax, test_min_max_observer_R4_4) {
  const std::tuple<bool, double, double> cases[] = {{true, 0.0078, 0}, {false, 0.0039, -128}};
  for (const auto& [symmetric, expected_scale, expected_zp] : cases) {
    SCOPED_TRACE(symmetric);
    QuantizationArgs w;
    w.num_bits = 8;
    w.symmetric = symmetric;
    w.observer = "minmax";
    const auto args = w.validated();
    auto obs = load_observer(*args.observer, "weight", args);
    const Tensor t = f32({5}, {1, 1, 1, 1, 1});
    const QParams q = obs->observe(t.view()).get_qparams();
    EXPECT_EQ(round4(q.scale.get(0)), expected_scale);
    EXPECT_EQ(round4(q.zero_point.get(0)), expected_zp);
  }
}

// test_min_max_observer_symmetric_scale_range; R4.1.1.
TEST(RefMinMax, test_min_max_observer_symmetric_scale_range_R4_1_1) {
  QuantizationArgs w;
  w.symmetric = true;
  w.observer = "minmax";
  const auto args = w.validated();
  auto obs = load_observer(*args.observer, "weight", args);
  const Tensor t = f32({4, 4}, kRand4x4);
  const QParams q = obs->observe(t.view()).get_qparams();
  EXPECT_LE(round4(q.scale.get(0)), 1.0039);
  EXPECT_EQ(round4(q.zero_point.get(0)), 0);
}

// test_min_max_observer_value_update; R6.5.2 (EMA, averaging_constant 0.01).
TEST(RefMinMax, test_min_max_observer_value_update_R6_5_2) {
  const std::vector<std::vector<double>> tensors{
      {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}, {127, 1, 1, 1, 1}, {1, 1, 1, 1, 1}, {-128, 1, 1, 1, 1}};
  const double delta = 1e-6;
  QuantizationArgs a;
  a.strategy = Strategy::kTensor;
  a.observer = "minmax";
  auto obs = load_observer("minmax", "input", a.validated());
  double curr_max = 1, curr_min = 1;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(i);
    const Tensor t = f32({1, 5}, tensors[i]);
    obs->observe(t.view());
    const auto stats = obs->get_statistics();
    const double min_v = stats[0].second.get(0), max_v = stats[1].second.get(0);
    ASSERT_EQ(stats[0].first, "min_vals");
    curr_max = std::max(max_v, curr_max);
    curr_min = std::min(min_v, curr_min);
    if (i < 2) {
      EXPECT_EQ(curr_max, 1);
      EXPECT_EQ(curr_min, 1);
    } else if (i < 4) {
      EXPECT_LT(std::abs(curr_max - 2.2600), delta);
      EXPECT_EQ(curr_min, 1);
    } else {
      EXPECT_LT(std::abs(curr_max - 2.2600), delta);
      EXPECT_LT(std::abs(curr_min - (-0.2900)), delta);
    }
  }
}

// test_g_idx (older test_min_max.py): observing with g_idx equals observing the
// columns permuted by argsort(g_idx); R7.2.4 via the generation-2 adapter.
TEST(RefMinMax, test_g_idx_R7_2_4) {
  const int64_t group_size = 2, rows = 16, cols = 64;
  std::vector<double> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::fmod(static_cast<double>(i) * 0.6180339887, 1.0);
  const Tensor t = f32({rows, cols}, v);
  // g_idx = (index // group_size) under a fixed permutation.
  std::vector<int32_t> g_idx(static_cast<std::size_t>(cols));
  for (int64_t c = 0; c < cols; ++c)
    g_idx[static_cast<std::size_t>((c * 37) % cols)] = static_cast<int32_t>(c / group_size);
  std::vector<int64_t> order(static_cast<std::size_t>(cols));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return g_idx[x] < g_idx[y]; });
  std::vector<double> permuted(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) permuted[r * cols + c] = v[r * cols + order[c]];
  const Tensor tp = f32({rows, cols}, permuted);
  QuantizationArgs a;
  a.group_size = group_size;
  a.observer = "minmax";
  MinMaxHookAdapter with_g("minmax", "weight", a.validated());
  const auto s1 = with_g.forward(t.view(), g_idx);
  MinMaxHookAdapter plain("minmax", "weight", a.validated());
  const auto s2 = plain.forward(tp.view());
  EXPECT_TRUE(s1.scale.bit_equal(s2.scale));
  EXPECT_TRUE(s1.zero_point.bit_equal(s2.zero_point));
}

// =====================================================================================
// test_mse.py
// =====================================================================================

struct MseLossCase {
  const char* strategy;
  bool symmetric;
  double exp_loss;
};

// test_mse_observer[strategy-symmetric-exp_loss] (8 cases); R6.6 / R6.7.
TEST(RefMse, test_mse_observer_loss_table_R6_7) {
  const MseLossCase cases[] = {
      {"tensor", true, 4.8103e-06},   {"tensor", false, 1.1258e-06}, {"channel", true, 2.5675e-06},
      {"channel", false, 2.3696e-07}, {"group", true, 3.1282e-06},   {"group", false, 1.3794e-07},
      {"block", true, 2.8968e-06},    {"block", false, 5.6068e-07},
  };
  std::vector<double> v(24);
  for (int i = 0; i < 24; ++i) v[static_cast<std::size_t>(i)] = static_cast<double>(static_cast<float>(i) / 24.0f);
  const Tensor tensor = f32({6, 4}, v);
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.strategy) + (c.symmetric ? " sym" : " asym"));
    QuantizationArgs w;
    w.num_bits = 8;
    w.strategy = parse_strategy(c.strategy);
    w.symmetric = c.symmetric;
    if (std::string(c.strategy) == "group") w.group_size = 2;
    if (std::string(c.strategy) == "block") w.block_structure = std::array<int64_t, 2>{3, 2};
    w.observer = "mse";
    const auto args = w.validated();
    auto obs = load_observer(*args.observer, "weight", args);
    EXPECT_EQ(obs->name(), "mse");
    const QParams q = obs->observe(tensor.view()).get_qparams();
    const Tensor fq = fake_quantize(tensor.view(), q.scale, &q.zero_point, args);
    // torch.sum((tensor - q_tensor).abs_().pow_(2)) / numel, in f32.
    float sum = 0.0f;
    for (int64_t i = 0; i < 24; ++i) {
      const float d = std::abs(static_cast<float>(tensor.get(i)) - static_cast<float>(fq.get(i)));
      sum += d * d;
    }
    const double loss = static_cast<double>(sum / 24.0f);
    EXPECT_NEAR(loss, c.exp_loss, 1e-10);
  }
}

// test_mse_observer (older version): [1, 1, 1, 1, 1] -> scale 0.0078 / 0.0039, zp 0 / -128.
TEST(RefMse, test_mse_observer_ones_R4_4) {
  const std::tuple<bool, double, double> cases[] = {{true, 0.0078, 0}, {false, 0.0039, -128}};
  for (const auto& [symmetric, expected_scale, expected_zp] : cases) {
    QuantizationArgs w;
    w.symmetric = symmetric;
    w.observer = "mse";
    const auto args = w.validated();
    auto obs = load_observer("mse", "weight", args);
    const Tensor t = f32({5}, {1, 1, 1, 1, 1});
    const QParams q = obs->observe(t.view()).get_qparams();
    EXPECT_EQ(round4(q.scale.get(0)), expected_scale);
    EXPECT_EQ(round4(q.zero_point.get(0)), expected_zp);
  }
}

// test_mse_observer_symmetric_scale_range.
TEST(RefMse, test_mse_observer_symmetric_scale_range_R4_1_1) {
  QuantizationArgs w;
  w.symmetric = true;
  w.observer = "mse";
  const auto args = w.validated();
  auto obs = load_observer("mse", "weight", args);
  const Tensor t = f32({4, 4}, kRand4x4);
  const QParams q = obs->observe(t.view()).get_qparams();
  EXPECT_LE(round4(q.scale.get(0)), 1.0039);
  EXPECT_EQ(round4(q.zero_point.get(0)), 0);
}

// test_mse_fp4: bf16 arange(24)/24, FP4 tensor_group group 3 (no scale_dtype).
TEST(RefMse, test_mse_fp4_R6_7) {
  std::vector<double> v(24);
  for (int i = 0; i < 24; ++i) v[static_cast<std::size_t>(i)] = i;
  const Tensor w = Tensor::from_values(DType::kBF16, {4, 6}, v);
  // bf16 division by 24 (each quotient rounded to bf16).
  Tensor weight(DType::kBF16, {4, 6});
  for (int64_t i = 0; i < 24; ++i) weight.set(i, static_cast<double>(static_cast<float>(w.get(i)) / 24.0f));
  QuantizationArgs a;
  a.num_bits = 4;
  a.type = QuantType::kFloat;
  a.symmetric = true;
  a.strategy = Strategy::kTensorGroup;
  a.group_size = 3;
  const auto args = a.validated();
  auto obs = load_observer("mse", "weight", args);
  const QParams q = obs->observe(weight.view()).get_qparams();
  ASSERT_TRUE(q.global_scale.has_value());
  const Tensor fq = fake_quantize(weight.view(), q.scale, &q.zero_point, args, nullptr, &*q.global_scale);
  double mse = 0;
  for (int64_t i = 0; i < 24; ++i) mse += std::pow(fq.get(i) - weight.get(i), 2);
  mse /= 24;
  EXPECT_LE(mse, 0.0015);  // reference assertion (comment there: 0.0013)
  // Installed reference: global scale 2912, mse_loss 0.00084686279296875 (bf16).
  EXPECT_EQ(q.global_scale->get(0), 2912.0);
  EXPECT_NEAR(mse, 0.00084686279296875, 2e-5);
}

// test_mse_observer_rejects_expand_below_one[MemorylessMSEObserver / MovingAverageMSEObserver]; R6.7.2, Q24.
TEST(RefMse, test_mse_observer_rejects_expand_below_one_R6_7_2) {
  QuantizationArgs a;
  a.symmetric = true;
  a.observer = "mse";
  const auto args = a.validated();
  for (const char* name : {"memoryless_mse", "mse"}) {
    SCOPED_TRACE(name);
    expect_error<InvalidArgument>(
        [&] {
          load_observer(name, "weight", args, {{"expand", 0.5}});
        },
        "expand value must be at least 1.0");
    EXPECT_NO_THROW(load_observer(name, "weight", args, {{"expand", 1.0}}));
  }
}

// =====================================================================================
// test_imatrix.py
// =====================================================================================

std::shared_ptr<Observer> make_imatrix(Strategy strategy, std::optional<int64_t> group_size,
                                       const std::vector<double>* importance, ObserverKwargs kwargs = {},
                                       bool attach = true) {
  QuantizationArgs a;
  a.num_bits = 4;
  a.symmetric = true;
  a.strategy = strategy;
  a.group_size = group_size;
  a.observer = "imatrix_mse";
  a.observer_kwargs = std::move(kwargs);
  auto o = load_observer("imatrix_mse", "weight", a.validated());
  if (attach) o->attach(8);
  if (importance) {
    Statistics st;
    st.observer = "imatrix_mse";
    st.items.push_back({"importance_sum",
                        Tensor::from_values(DType::kF32, {static_cast<int64_t>(importance->size())}, *importance),
                        ReduceOp::kSum});
    st.items.push_back({"importance_count", Tensor::from_values(DType::kI64, {}, {1}), ReduceOp::kSum});
    o->import_statistics(st);
  }
  return o;
}

const std::vector<double> kImportance = {10, 10, 10, 10, 1, 1, 1, 1};  // _make_importance(8)

// TestActivationCollection::test_attach_collects_importance_on_observer; R6.8.3.
TEST(RefImatrix, test_attach_collects_importance_on_observer_R6_8_3) {
  auto o = make_imatrix(Strategy::kChannel, std::nullopt, nullptr);
  std::vector<double> x(48, 1.0);
  for (int i = 0; i < 6; ++i) x[static_cast<std::size_t>(i * 8)] = 2.0;
  o->accumulate_input(f32({2, 3, 8}, x).view());
  const Statistics st = o->export_statistics();
  EXPECT_EQ(st.find("importance_count")->get(0), 6);
  expect_allclose(*st.find("importance_sum"), {24, 6, 6, 6, 6, 6, 6, 6});
}

// TestActivationCollection::test_detach_stops_collection; R6.8.3.
TEST(RefImatrix, test_detach_stops_collection_R6_8_3) {
  auto o = make_imatrix(Strategy::kChannel, std::nullopt, nullptr);
  o->accumulate_input(f32({2, 3, 8}, std::vector<double>(48, 1.0)).view());
  const Tensor before = *o->export_statistics().find("importance_sum");
  o->detach();
  o->accumulate_input(f32({2, 3, 8}, std::vector<double>(48, 100.0)).view());
  EXPECT_TRUE(o->export_statistics().find("importance_sum")->bit_equal(before));
}

// TestGlobalMinMaxTensorGroup::test_global_scale_tensor_group_does_not_crash /
// test_global_scale_then_forward_tensor_group; R6.1.5.
TEST(RefImatrix, test_global_scale_tensor_group_R6_1_5) {
  const Tensor w = f32({4, 8}, kLinear42);
  auto o = make_imatrix(Strategy::kTensorGroup, 4, &kImportance);
  const QParams q = o->observe(w.view()).get_qparams();
  ASSERT_TRUE(q.global_scale.has_value());
  EXPECT_EQ(q.global_scale->shape(), (Shape{1}));
  EXPECT_TRUE(std::isfinite(q.global_scale->get(0)));
  for (int64_t i = 0; i < q.scale.numel(); ++i) EXPECT_TRUE(std::isfinite(q.scale.get(i)));
  // Installed reference on these weights (int4, no scale_dtype).
  EXPECT_NEAR(q.global_scale->get(0), 8102.7939, 1e-3);
  expect_allclose(q.scale, {350.8813781738281, 224.32398986816406, 336.722412109375, 282.2023620605469,
                            294.45477294921875, 253.38739013671875, 286.439453125, 358.3999938964844});
}

// TestBasicFunctionality::test_channel_strategy / test_group_strategy /
// test_tensor_group_strategy / test_block_strategy; R6.8.6.
TEST(RefImatrix, test_basic_strategies_R6_8_6) {
  const Tensor w = f32({4, 8}, kLinear42);
  {
    auto o = make_imatrix(Strategy::kChannel, std::nullopt, &kImportance);
    const QParams q = o->observe(w.view()).get_qparams();
    EXPECT_EQ(q.scale.shape(), (Shape{4, 1}));
    expect_allclose(q.scale, {0.043303750455379486, 0.041556332260370255, 0.036339905112981796, 0.044231656938791275});
  }
  {
    auto o = make_imatrix(Strategy::kGroup, 4, &kImportance);
    const QParams q = o->observe(w.view()).get_qparams();
    expect_allclose(q.scale, {0.043303750455379486, 0.0276847705245018, 0.041556332260370255, 0.034827783703804016,
                              0.036339905112981796, 0.03127160668373108, 0.035350702702999115, 0.044231656938791275});
  }
  {
    QuantizationArgs a;
    a.num_bits = 4;
    a.strategy = Strategy::kBlock;
    a.block_structure = std::array<int64_t, 2>{2, 4};
    a.observer = "imatrix_mse";
    auto o = load_observer("imatrix_mse", "weight", a.validated());
    o->attach(8);
    Statistics st;
    st.observer = "imatrix_mse";
    st.items.push_back({"importance_sum", Tensor::from_values(DType::kF32, {8}, kImportance), ReduceOp::kSum});
    st.items.push_back({"importance_count", Tensor::from_values(DType::kI64, {}, {1}), ReduceOp::kSum});
    o->import_statistics(st);
    const QParams q = o->observe(w.view()).get_qparams();
    expect_allclose(q.scale, {0.043303750455379486, 0.034827783703804016, 0.03721126541495323, 0.044231656938791275});
  }
}

// TestBasicFunctionality::test_no_importance_falls_back; R6.8.7, Q8. The reference
// test attaches and feeds nothing; qobs raises there (R6.12.3, D15), so the fallback
// values are checked on an observer that was never attached.
TEST(RefImatrix, test_no_importance_falls_back_R6_8_7) {
  const Tensor w = f32({4, 8}, kLinear42);
  auto o = make_imatrix(Strategy::kChannel, std::nullopt, nullptr, {}, /*attach=*/false);
  const QParams q = o->observe(w.view()).get_qparams();
  expect_allclose(q.scale, {0.043303750455379486, 0.041556332260370255, 0.036339905112981796, 0.044231656938791275});
  auto attached = make_imatrix(Strategy::kChannel, std::nullopt, nullptr);
  expect_error<InvalidArgument>([&] { attached->observe(w.view()); }, "no importance data");
}

// TestBasicFunctionality::test_importance_changes_result; R6.8.5.
TEST(RefImatrix, test_importance_changes_result_R6_8_5) {
  const Tensor w = f32({4, 8}, kLinear123);
  const std::vector<double> skew{1000, 1000, 1000, 1000, 0.01, 0.01, 0.01, 0.01};
  auto ow = make_imatrix(Strategy::kChannel, std::nullopt, &skew);
  auto ou = make_imatrix(Strategy::kChannel, std::nullopt, nullptr, {}, /*attach=*/false);
  const Tensor sw = ow->observe(w.view()).get_qparams().scale;
  const Tensor su = ou->observe(w.view()).get_qparams().scale;
  EXPECT_FALSE(allclose(sw, su)) << "Extreme importance weighting should produce different scales";
  // Installed reference.
  expect_allclose(sw, {0.03414132073521614, 0.03200758993625641, 0.03867732360959053, 0.0412890799343586});
  expect_allclose(su, {0.036149632185697556, 0.03600853681564331, 0.04550272971391678, 0.0412890799343586});
}

// TestBasicFunctionality::test_uniform_importance_matches_memoryless_mse; R6.8.6 vs R6.6.
TEST(RefImatrix, test_uniform_importance_matches_memoryless_mse_R6_8_6) {
  const Tensor w = f32({4, 8}, kLinear123);
  QuantizationArgs au;
  au.num_bits = 4;
  au.strategy = Strategy::kChannel;
  au.observer = "memoryless_mse";
  au.observer_kwargs = {{"grid", 20.0}};
  const std::vector<double> ones(8, 1.0);
  auto oi = make_imatrix(Strategy::kChannel, std::nullopt, &ones, {{"norm", 2.4}, {"maxshrink", 0.20}});
  auto ou = load_observer("memoryless_mse", "weight", au.validated());
  const QParams qi = oi->observe(w.view()).get_qparams();
  const QParams qu = ou->observe(w.view()).get_qparams();
  EXPECT_TRUE(allclose(qi.scale, qu.scale));
  EXPECT_TRUE(qi.zero_point.bit_equal(qu.zero_point));
}

// TestWeightOnlyGuard::test_non_weight_base_name_strict_raises / _non_strict_falls_back; R6.8.4-1.
TEST(RefImatrix, test_non_weight_base_name_R6_8_4) {
  QuantizationArgs a;
  a.strategy = Strategy::kTensor;
  a.observer = "imatrix_mse";
  const Tensor observed =
      f32({2, 1, 8}, {0.1, -0.4, 1.2, 0.3, -0.8, 0.5, 0.05, -1.1, 0.7, 0.2, -0.3, 0.9, -0.6, 0.4, 0.0, 1.0});
  a.observer_kwargs = {{"strict", true}};
  auto strict = load_observer("imatrix_mse", "input", a.validated());
  expect_error<NotImplementedError>([&] { strict->observe(observed.view()); }, "weight observers");
  a.observer_kwargs = {{"strict", false}};
  auto lax = load_observer("imatrix_mse", "input", a.validated());
  lax->observe(observed.view());
  const QParams q = lax->get_qparams();
  for (int64_t i = 0; i < q.scale.numel(); ++i) EXPECT_TRUE(std::isfinite(q.scale.get(i)));
  for (int64_t i = 0; i < q.zero_point.numel(); ++i) EXPECT_TRUE(std::isfinite(q.zero_point.get(i)));
}

// TestValidation::test_strict_raises_on_missing_importance; R6.8.4-3.
TEST(RefImatrix, test_strict_raises_on_missing_importance_R6_8_4) {
  const Tensor w = f32({4, 8}, kLinear42);
  auto o = make_imatrix(Strategy::kChannel, std::nullopt, nullptr, {{"strict", true}});
  expect_error<InvalidArgument>([&] { o->observe(w.view()).get_qparams(); }, "importance");
}

// TestValidation::test_strict_raises_on_wrong_size; R6.8.4-6.
TEST(RefImatrix, test_strict_raises_on_wrong_size_R6_8_4) {
  const Tensor w = f32({4, 8}, kLinear42);
  const std::vector<double> five(5, 1.0);
  auto o = make_imatrix(Strategy::kChannel, std::nullopt, &five, {{"strict", true}});
  expect_error<InvalidArgument>([&] { o->observe(w.view()).get_qparams(); }, "size mismatch");
}

// TestValidation::test_strict_raises_on_invalid_importance_values (3 cases); R6.8.4-4.
TEST(RefImatrix, test_strict_raises_on_invalid_importance_values_R6_8_4) {
  const Tensor w = f32({4, 8}, kLinear42);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::pair<std::vector<double>, const char*> cases[] = {{{1, nan, 1, 1, 1, 1, 1, 1}, "non-finite"},
                                                               {{1, -1, 1, 1, 1, 1, 1, 1}, "negative"},
                                                               {std::vector<double>(8, 0.0), "all zeros"}};
  for (const auto& [imp, match] : cases) {
    SCOPED_TRACE(match);
    auto o = make_imatrix(Strategy::kChannel, std::nullopt, &imp, {{"strict", true}});
    expect_error<InvalidArgument>([&] { o->observe(w.view()).get_qparams(); }, match);
  }
}

// TestValidation::test_non_strict_invalid_importance_falls_back_to_uniform_mse (3 cases); R6.8.7.
TEST(RefImatrix, test_non_strict_invalid_importance_falls_back_R6_8_7) {
  const Tensor w = f32({4, 8}, kLinear42);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::vector<double>> cases{
      {1, nan, 1, 1, 1, 1, 1, 1}, {1, -1, 1, 1, 1, 1, 1, 1}, std::vector<double>(8, 0.0)};
  QuantizationArgs au;
  au.num_bits = 4;
  au.strategy = Strategy::kChannel;
  au.observer = "memoryless_mse";
  au.observer_kwargs = {{"grid", 20.0}};
  for (const auto& imp : cases) {
    auto oi = make_imatrix(Strategy::kChannel, std::nullopt, &imp, {{"strict", false}});
    auto ou = load_observer("memoryless_mse", "weight", au.validated());
    const QParams qi = oi->observe(w.view()).get_qparams();
    const QParams qu = ou->observe(w.view()).get_qparams();
    EXPECT_TRUE(allclose(qi.scale, qu.scale));
    EXPECT_TRUE(qi.zero_point.bit_equal(qu.zero_point));
  }
}

// TestValidation::test_invalid_norm_raises[0, -1, inf, nan]; R6.8.1.
TEST(RefImatrix, test_invalid_norm_raises_R6_8_1) {
  for (double norm : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    SCOPED_TRACE(norm);
    expect_error<InvalidArgument>(
        [&] {
          make_imatrix(Strategy::kChannel, std::nullopt, nullptr, {{"norm", norm}});
        },
        "norm must be a finite positive number");
  }
}

// TestValidation::test_strict_raises_on_tensor_strategy; R6.8.4-2.
TEST(RefImatrix, test_strict_raises_on_tensor_strategy_R6_8_4) {
  const Tensor w = f32({4, 8}, kLinear42);
  auto o = make_imatrix(Strategy::kTensor, std::nullopt, nullptr, {{"strict", true}});
  expect_error<NotImplementedError>([&] { o->observe(w.view()).get_qparams(); }, "TENSOR strategy");
}

// TestStatisticsCleanup (3 tests); R6.8.8, Q26.
TEST(RefImatrix, test_get_qparams_deletes_imatrix_stats_R6_8_8) {
  const Tensor w = f32({4, 8}, kLinear42);
  for (auto [strategy, gs] :
       {std::pair<Strategy, std::optional<int64_t>>{Strategy::kChannel, std::nullopt}, {Strategy::kGroup, 4}}) {
    auto o = make_imatrix(strategy, gs, &kImportance);
    o->observe(w.view());
    EXPECT_TRUE(o->has_statistics());
    const Statistics before = o->export_statistics();
    for (const char* n : {"importance_sum", "importance_count", "min_vals", "max_vals"})
      EXPECT_NE(before.find(n), nullptr) << n;
    o->get_qparams();
    EXPECT_FALSE(o->has_statistics());
    const Statistics after = o->export_statistics();
    for (const char* n : {"importance_sum", "importance_count", "min_vals", "max_vals"})
      EXPECT_EQ(after.find(n), nullptr) << n;
  }
}

// =====================================================================================
// test_distributed.py
// =====================================================================================

QuantizationArgs int8_tensor() {
  QuantizationArgs a;
  a.strategy = Strategy::kTensor;
  return a.validated();
}

// test_memoryless_synchronize_returns_empty / test_memoryless_get_qparams_raises_without_observation.
TEST(RefDistributed, test_memoryless_R6_11_1) {
  auto o = load_observer("memoryless_minmax", "input", int8_tensor());
  EXPECT_TRUE(o->sync_table().empty());
  expect_error<PreconditionError>([&] { o->get_qparams(); }, "No statistics available");
}

// test_static_synchronize_* / test_moving_avg_synchronize_issues_all_reduce.
TEST(RefDistributed, test_synchronize_ops_R6_11_1) {
  auto s = load_observer("static_minmax", "input", int8_tensor());
  EXPECT_TRUE(s->export_statistics().empty()) << "nothing to sync before observation";
  const auto st = s->sync_table();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].second, ReduceOp::kMin);
  EXPECT_EQ(st[1].second, ReduceOp::kMax);
  const auto mt = load_observer("minmax", "input", int8_tensor())->sync_table();
  ASSERT_EQ(mt.size(), 2u);
  EXPECT_EQ(mt[0].second, ReduceOp::kAvg);
  EXPECT_EQ(mt[1].second, ReduceOp::kAvg);
}

Statistics minmax_stats(const char* observer, double mn, double mx, Shape shape) {
  Statistics st;
  st.observer = observer;
  st.items.push_back({"min_vals", Tensor::from_values(DType::kF32, shape, {mn}), ReduceOp::kMin});
  st.items.push_back({"max_vals", Tensor::from_values(DType::kF32, shape, {mx}), ReduceOp::kMax});
  return st;
}

// test_get_qparams_from_accumulated_state / test_get_qparams_raises_without_state.
TEST(RefDistributed, test_get_qparams_from_accumulated_state_R6_1_4) {
  auto o = load_observer("static_minmax", "input", int8_tensor());
  expect_error<PreconditionError>([&] { o->get_qparams(); }, "No statistics");
  o->import_statistics(minmax_stats("static_minmax", -5, 5, {1}));
  const QParams q = o->get_qparams();
  EXPECT_GT(q.scale.numel(), 0);
  EXPECT_GT(q.zero_point.numel(), 0);
  EXPECT_FALSE(q.global_scale.has_value());
  EXPECT_EQ(q.scale.get(0), static_cast<double>(5.0f / 127.5f));
}

// test_get_qparams_with_tensor_group_strategy.
TEST(RefDistributed, test_get_qparams_with_tensor_group_strategy_R6_1_5) {
  QuantizationArgs a;
  a.strategy = Strategy::kTensorGroup;
  a.group_size = 4;
  auto o = load_observer("static_minmax", "weight", a.validated());
  o->import_statistics(minmax_stats("static_minmax", -5, 5, {1, 1}));
  const QParams q = o->get_qparams();
  EXPECT_GT(q.scale.numel(), 0);
  ASSERT_TRUE(q.global_scale.has_value());
  // Installed reference: 537.6000366210938 (torch evaluates 2688 / t as reciprocal(t) * 2688
  // in f32, which is not the correctly rounded quotient 537.5999755859375).
  EXPECT_EQ(q.global_scale->get(0), 537.6000366210938);
}

// =====================================================================================
// test_fusion_handler.py and test_fused_observers.py (fused global scale)
// =====================================================================================

struct Fused {
  std::vector<Tensor> weights;
  std::vector<std::shared_ptr<Observer>> obs;
};

/// _make_fused_group(n): memoryless_minmax, int4 tensor_group group 16, Linear(64, 64).
Fused make_fused(int n, bool fuse = true) {
  Fused f;
  for (int i = 0; i < n; ++i) {
    std::vector<double> v(64 * 64);
    for (std::size_t k = 0; k < v.size(); ++k)
      v[k] = std::sin(static_cast<double>(k) * (0.37 + 0.11 * i)) * 0.125 * (i + 1);
    f.weights.push_back(f32({64, 64}, v));
  }
  QuantizationArgs a;
  a.num_bits = 4;
  a.strategy = Strategy::kTensorGroup;
  a.group_size = 16;
  for (int i = 0; i < n; ++i) {
    auto o = load_observer("memoryless_minmax", "weight", a.validated());
    o->bind_weight(f.weights[i].view());
    f.obs.push_back(o);
  }
  if (fuse) fuse_observers(f.obs);
  return f;
}

// TestFusionHandlerFuse::test_fuse_links_handlers; R6.10.2.
TEST(RefFusion, test_fuse_links_handlers_R6_10_2) {
  auto f = make_fused(3);
  for (auto& o : f.obs) EXPECT_EQ(o->fused_partners().size(), 2u);
  auto u = make_fused(1, false);
  EXPECT_TRUE(u.obs[0]->fused_partners().empty());
}

// TestGetStatistics::test_get_statistics_returns_dict / _raises_without_observation; R6.1.6.
TEST(RefFusion, test_get_statistics_R6_1_6) {
  auto u = make_fused(1, false);
  expect_error<PreconditionError>([&] { u.obs[0]->get_statistics(); }, "No statistics");
  u.obs[0]->observe(u.weights[0].view());
  const auto st = u.obs[0]->get_statistics();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].first, "min_vals");
  EXPECT_EQ(st[1].first, "max_vals");
}

// TestGetFusedStatistics::test_auto_observes_missing / TestEagerFusedObservation; R6.10.3.
TEST(RefFusion, test_auto_observes_missing_R6_10_3) {
  auto f = make_fused(3);
  f.obs[0]->observe(f.weights[0].view());
  for (auto& o : f.obs) EXPECT_TRUE(o->has_statistics());
}

// TestMaybeDeleteStatistics (4 tests); R6.10.4.
TEST(RefFusion, test_maybe_delete_statistics_R6_10_4) {
  {
    auto u = make_fused(1, false);
    u.obs[0]->observe(u.weights[0].view());
    u.obs[0]->delete_statistics();
    EXPECT_FALSE(u.obs[0]->has_statistics());
  }
  auto f = make_fused(3);
  for (int i = 0; i < 3; ++i) f.obs[i]->observe(f.weights[i].view());
  f.obs[0]->delete_statistics();
  for (auto& o : f.obs) EXPECT_TRUE(o->has_statistics());  // partial does not delete
  f.obs[1]->delete_statistics();
  f.obs[2]->delete_statistics();
  for (auto& o : f.obs) EXPECT_FALSE(o->has_statistics());  // all called deletes
  for (int i = 0; i < 3; ++i) f.obs[i]->observe(f.weights[i].view());
  f.obs[0]->delete_statistics();
  for (auto& o : f.obs) EXPECT_TRUE(o->has_statistics());  // resets after deletion
}

// TestCalculateGlobalScale (3 tests) and test_fused_observers.py (q/k/v share one global
// scale); R6.1.5, R7.2.10.
TEST(RefFusion, test_global_scale_consistent_across_group_R6_1_5) {
  QuantizationArgs t;
  t.strategy = Strategy::kTensor;
  auto plain = load_observer("memoryless_minmax", "weight", t.validated());
  const Tensor w = f32({4, 4}, kRand4x4);
  plain->observe(w.view());
  EXPECT_FALSE(plain->get_global_scale().has_value());

  auto f = make_fused(3);
  for (int i = 0; i < 3; ++i) f.obs[i]->observe(f.weights[i].view());
  std::vector<Tensor> scales;
  for (auto& o : f.obs) scales.push_back(*o->get_global_scale());
  for (const auto& s : scales) EXPECT_TRUE(s.bit_equal(scales[0]));
  // Generation 2 (R7.2.10): the fused scale is the minimum of the members' own global scales.
  double min_own = INFINITY;
  for (int i = 0; i < 3; ++i) {
    auto solo = make_fused(3, false);
    solo.obs[i]->observe(solo.weights[i].view());
    min_own = std::min(min_own, solo.obs[i]->get_global_scale()->get(0));
  }
  EXPECT_EQ(scales[0].get(0), min_own);
}

// TestNVFP4FusedLifecycle (4 tests); R6.10.4.
TEST(RefFusion, test_nvfp4_fused_lifecycle_R6_10_4) {
  auto f = make_fused(3);
  for (int i = 0; i < 3; ++i) f.obs[i]->observe(f.weights[i].view());
  std::vector<QParams> q;
  q.push_back(f.obs[0]->get_qparams());
  EXPECT_TRUE(f.obs[1]->has_statistics());
  q.push_back(f.obs[1]->get_qparams());
  EXPECT_TRUE(f.obs[2]->has_statistics());
  q.push_back(f.obs[2]->get_qparams());
  for (auto& o : f.obs) EXPECT_FALSE(o->has_statistics());
  for (const auto& p : q) {
    ASSERT_TRUE(p.global_scale.has_value());
    EXPECT_TRUE(p.global_scale->bit_equal(*q[0].global_scale));
  }
  // can re-observe after deletion
  for (int i = 0; i < 3; ++i) f.obs[i]->observe(f.weights[i].view());
  for (auto& o : f.obs) EXPECT_TRUE(o->has_statistics());
  for (auto& o : f.obs) EXPECT_TRUE(o->get_qparams().global_scale.has_value());
  // unfused: deleted immediately
  auto u = make_fused(1, false);
  u.obs[0]->observe(u.weights[0].view());
  u.obs[0]->get_qparams();
  EXPECT_FALSE(u.obs[0]->has_statistics());
}

// =====================================================================================
// test_observer_compile.py (eager vs compiled == qobs eager vs chunked search) and
// test_mse_vs_minmax.py
// =====================================================================================

/// Deterministic standard-normal samples (Box-Muller over a 64-bit LCG).
std::vector<double> randn(int64_t n, uint64_t seed, double std = 1.0) {
  std::vector<double> out(static_cast<std::size_t>(n));
  uint64_t st = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  auto uni = [&] {
    st = st * 6364136223846793005ULL + 1442695040888963407ULL;
    return (static_cast<double>(st >> 11) + 0.5) / 9007199254740992.0;
  };
  for (auto& x : out) x = std * std::sqrt(-2.0 * std::log(uni())) * std::cos(6.283185307179586 * uni());
  return out;
}

// test_observer_torch_compile[MemorylessMinMaxObserver / MemorylessMSEObserver x 3 shapes]; R6.6.7.
TEST(RefCompile, test_observer_torch_compile_R6_6_7) {
  QuantizationArgs a;
  a.strategy = Strategy::kTensor;
  const auto args = a.validated();
  const Shape shapes[] = {{1, 1, 128}, {1, 4, 128}, {2, 1, 256}};
  for (const char* name : {"memoryless_minmax", "memoryless_mse"}) {
    for (std::size_t k = 0; k < 3; ++k) {
      SCOPED_TRACE(std::string(name) + " shape " + std::to_string(k));
      const Tensor x = f32(shapes[k], randn(shape_numel(shapes[k]), 100 + k));
      ObserverOptions chunked;
      chunked.chunked_search = true;
      auto eager = load_observer(name, "weight", args);
      auto comp = load_observer(name, "weight", args, {}, chunked);
      const QParams qe = eager->observe(x.view()).get_qparams();
      const QParams qc = comp->observe(x.view()).get_qparams();
      EXPECT_TRUE(allclose(qe.scale, qc.scale, 1.3e-6, 1e-5));
      EXPECT_TRUE(qe.zero_point.bit_equal(qc.zero_point));
    }
  }
}

double fq_mse(const Tensor& t, const QParams& q, const QuantizationArgs& args) {
  const Tensor fq =
      fake_quantize(t.view(), q.scale, &q.zero_point, args, nullptr, q.global_scale ? &*q.global_scale : nullptr);
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += std::pow(fq.get(i) - t.get(i), 2);
  return s / static_cast<double>(t.numel());
}

// test_mse_vs_minmax_on_random_tensor (8 configurations x 3 std); R6.6.
TEST(RefMseVsMinMax, test_mse_vs_minmax_on_random_tensor_R6_6) {
  const std::tuple<Strategy, bool, int> configs[] = {
      {Strategy::kTensor, true, 8},   {Strategy::kTensor, false, 8},     {Strategy::kChannel, true, 8},
      {Strategy::kChannel, false, 8}, {Strategy::kTensorGroup, true, 4}, {Strategy::kTensorGroup, false, 4},
      {Strategy::kChannel, true, 4},  {Strategy::kChannel, false, 4}};
  for (double std : {0.05, 0.2, 1.0}) {
    const Tensor t = f32({128, 256}, randn(128 * 256, 42, std));
    for (const auto& [strategy, symmetric, bits] : configs) {
      SCOPED_TRACE(std::string(to_string(strategy)) + (symmetric ? " sym " : " asym ") + std::to_string(bits) +
                   " std " + std::to_string(std));
      QuantizationArgs a;
      a.num_bits = bits;
      a.strategy = strategy;
      a.symmetric = symmetric;
      if (strategy == Strategy::kTensorGroup) a.group_size = 32;
      const auto args = a.validated();
      auto mm = load_observer("memoryless_minmax", "weight", args);
      auto ms = load_observer("memoryless_mse", "weight", args);
      const double minmax_mse = fq_mse(t, mm->observe(t.view()).get_qparams(), args);
      const double mse_mse = fq_mse(t, ms->observe(t.view()).get_qparams(), args);
      if (strategy == Strategy::kTensor && symmetric) EXPECT_LE(mse_mse, minmax_mse + 1e-8);
      else EXPECT_LE(mse_mse, minmax_mse * 1.10 + 1e-8);
    }
  }
}

// test_mse_vs_minmax_various_shapes / test_mse_vs_minmax_extreme_values; R6.6.
TEST(RefMseVsMinMax, test_mse_vs_minmax_shapes_and_extremes_R6_6) {
  QuantizationArgs a;
  a.strategy = Strategy::kChannel;
  const auto args = a.validated();
  std::vector<Tensor> tensors;
  for (const Shape& s : {Shape{64, 128}, Shape{128, 256}, Shape{256, 512}, Shape{32, 64, 128}})
    tensors.push_back(f32(s, randn(shape_numel(s), 7, 0.05)));
  tensors.push_back(f32({64, 128}, randn(64 * 128, 8, 0.01)));
  tensors.push_back(f32({64, 128}, randn(64 * 128, 9, 100.0)));
  std::vector<double> skew(64 * 128);
  const auto lo = randn(64 * 100, 10, 0.1), hi = randn(64 * 28, 11, 10.0);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 128; ++c) skew[r * 128 + c] = c < 100 ? lo[r * 100 + c] : hi[r * 28 + (c - 100)];
  tensors.push_back(f32({64, 128}, skew));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(i);
    auto mm = load_observer("memoryless_minmax", "weight", args);
    auto ms = load_observer("memoryless_mse", "weight", args);
    const double minmax_mse = fq_mse(tensors[i], mm->observe(tensors[i].view()).get_qparams(), args);
    const double mse_mse = fq_mse(tensors[i], ms->observe(tensors[i].view()).get_qparams(), args);
    EXPECT_LE(mse_mse, minmax_mse * 1.10 + 1e-8);
  }
}

}  // namespace
}  // namespace qobs
