// nvfp4_expanded_imatrix (R6.12) and the fouroversix alias (R6.13): registry, defaults,
// validation, and the data-free error of the imatrix observers (R6.12.3, D15). The
// numbers themselves are checked against the reference by golden_observers_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "observers/builtin_observers.h"
#include "qobs/error.h"
#include "qobs/observer.h"
#include "test_util.h"

namespace qobs {
namespace {

using testing::expect_error;

QuantizationArgs nvfp4() {
  QuantizationArgs a;
  a.num_bits = 4;
  a.type = QuantType::kFloat;
  a.strategy = Strategy::kTensorGroup;
  a.group_size = 16;
  a.scale_dtype = DType::kF8E4M3;
  return a.validated();
}

Tensor weight(int64_t rows, int64_t cols) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + (i % 7));
  return Tensor::from_floats(DType::kF32, {rows, cols}, v);
}

TEST(NewObservers, R6_2_2_BothNamesAreRegistered) {
  const auto names = registered_observers();
  for (const char* n : {"nvfp4_expanded_imatrix", "fouroversix"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  EXPECT_EQ(load_observer("NVFP4-Expanded-IMatrix", "weight", nvfp4())->name(), "nvfp4_expanded_imatrix");
}

TEST(NewObservers, R6_12_1_ExpandedImatrixDefaults) {
  auto o = load_observer("nvfp4_expanded_imatrix", "weight", nvfp4());
  const auto& cfg = dynamic_cast<const detail::ImatrixMseObserver&>(*o).search_config();
  EXPECT_TRUE(cfg.imatrix);
  EXPECT_EQ(cfg.maxshrink, 1.0 - 0.8 / 1.8);
  EXPECT_EQ(cfg.grid, 200);
  EXPECT_EQ(cfg.norm, 2.4);
  EXPECT_EQ(cfg.expand, 1.8);
  EXPECT_EQ(cfg.patience, 1000);
  // R6.12.2: i = 0..111 inclusive, from p = 1 down to 0.445
  const auto p = grid_candidates(*o);
  ASSERT_EQ(p.size(), 112u);
  EXPECT_EQ(p.front(), 1.0);
  EXPECT_EQ(p.back(), 1.0 - 111.0 / 200.0);
  // kwargs override the defaults; the imatrix sync table applies (R6.11.1)
  auto k = load_observer("nvfp4_expanded_imatrix", "weight", nvfp4(), {{"grid", int64_t{100}}, {"maxshrink", 0.3}});
  EXPECT_EQ(grid_candidates(*k).size(), 31u);
  EXPECT_EQ(o->sync_table().size(), 2u);
}

TEST(NewObservers, R6_12_1_ExpandedImatrixValidation) {
  for (const auto& [key, value, needle] : std::vector<std::tuple<std::string, KwargValue, std::string>>{
           {"grid", int64_t{0}, "grid must be positive"},
           {"patience", int64_t{-1}, "patience must be >= 0"},
           {"maxshrink", 1.5, "maxshrink must be in [0, 1]"},
           {"norm", NAN, "norm must be a finite positive number"},
           {"expand", 0.5, "expand value must be at least 1.0"},
           {"maxshrnk", 0.5, "unknown observer_kwargs key"}}) {
    SCOPED_TRACE(key);
    expect_error<InvalidArgument>(
        [&] {
          load_observer("nvfp4_expanded_imatrix", "weight", nvfp4(), {{key, value}});
        },
        {"nvfp4_expanded_imatrix", needle});
  }
}

TEST(NewObservers, R6_13_1_FouroversixIsNvfp4ExpandedMse) {
  auto alias = load_observer("fouroversix", "weight", nvfp4());
  auto mse = load_observer("nvfp4_expanded_mse", "weight", nvfp4());
  EXPECT_EQ(alias->name(), "nvfp4_expanded_mse");
  EXPECT_EQ(grid_candidates(*alias), grid_candidates(*mse));
  EXPECT_EQ(grid_candidates(*alias).size(), 111u);
  const Tensor w = weight(8, 64);
  const QParams a = alias->observe(w.view()).get_qparams();
  const QParams b = mse->observe(w.view()).get_qparams();
  EXPECT_EQ(testing::describe_difference(a.scale, b.scale), "");
  EXPECT_EQ(testing::describe_difference(*a.global_scale, *b.global_scale), "");
  expect_error<InvalidArgument>(
      [] {
        load_observer("fouroversix", "weight", nvfp4(), {{"expand", 0.9}});
      },
      {"expand value must be at least 1.0"});
}

// R6.12.3 / D15: attached but no input reached the module (a data-free run). The
// reference logs once and calibrates without importance; qobs refuses, strict or not.
TEST(NewObservers, R6_12_3_AttachedWithoutInputRaises) {
  for (const char* name : {"imatrix_mse", "nvfp4_expanded_imatrix"}) {
    SCOPED_TRACE(name);
    for (bool strict : {false, true}) {
      auto o = load_observer(name, "weight", nvfp4(), {{"strict", strict}},
                             ObserverOptions{.label = "model.layers.0.mlp.up_proj.weight"});
      o->attach(64);
      const Tensor w = weight(8, 64);
      expect_error<InvalidArgument>([&] { o->observe(w.view()); },
                                    {name, "no importance data", "model.layers.0.mlp.up_proj.weight",
                                     "requires_calibration_data=True", "accumulate_input", "R6.12.3"});
      EXPECT_FALSE(o->has_statistics());
    }
  }
}

TEST(NewObservers, R6_12_3_InputAfterAttachCalibrates) {
  auto o = load_observer("nvfp4_expanded_imatrix", "weight", nvfp4(), {{"strict", true}});
  o->attach(64);
  const Tensor x = weight(3, 64);
  o->accumulate_input(x.view());
  const Tensor w = weight(8, 64);
  const QParams q = o->observe(w.view()).get_qparams();
  EXPECT_EQ(q.scale.shape(), (Shape{8, 4}));
  EXPECT_EQ(imatrix_search_path(*o), "importance");
}

TEST(NewObservers, R6_8_7_NeverAttachedKeepsTheFallback) {
  // no accumulators at all (e.g. a module without in_features): R6.8.4-3 fallback
  for (const char* name : {"imatrix_mse", "nvfp4_expanded_imatrix"}) {
    auto o = load_observer(name, "weight", nvfp4());
    const Tensor w = weight(8, 64);
    o->observe(w.view());
    EXPECT_EQ(imatrix_search_path(*o), "uniform fallback: no importance data available") << name;
  }
}

TEST(NewObservers, R1_6_2_NeedsImportance) {
  for (const char* n : {"imatrix_mse", "nvfp4_expanded_imatrix", "IMatrix-MSE", "nvfp4 expanded imatrix"})
    EXPECT_TRUE(observer_needs_importance(n)) << n;
  for (const char* n : {"nvfp4_expanded_mse", "fouroversix", "memoryless_mse", "qobs_imatrix_mse"})
    EXPECT_FALSE(observer_needs_importance(n)) << n;
}

}  // namespace
}  // namespace qobs
