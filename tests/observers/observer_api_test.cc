// RULES §6 / §7 observer API: registry (R6.2), two-phase contract (R6.1), EMA and MSE
// examples (R6.5.2, R6.7.4), imatrix hooks (R6.8.3), fusion and cooperative deletion
// (R6.10), DDP statistics (R6.11.1), mergeable / serializable statistics, the
// generation-2 adapter (R7.4.1), kwarg validation (R6.7.2, R6.8.1, docs/DEVIATIONS.md),
// non-finite input, and observers shared between threads.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "qobs/args.h"
#include "qobs/error.h"
#include "qobs/layout.h"
#include "qobs/observer.h"
#include "qobs/qparams.h"
#include "test_util.h"

namespace qobs {
namespace {

using testing::expect_error;

QuantizationArgs args_of(Strategy s, std::optional<int64_t> gs = std::nullopt, int bits = 8, bool symmetric = true) {
  QuantizationArgs a;
  a.num_bits = bits;
  a.symmetric = symmetric;
  a.strategy = s;
  a.group_size = gs;
  return a.validated();
}

QuantizationArgs nvfp4_args(int64_t gs = 16) {
  QuantizationArgs a;
  a.num_bits = 4;
  a.type = QuantType::kFloat;
  a.strategy = Strategy::kTensorGroup;
  a.group_size = gs;
  a.scale_dtype = DType::kF8E4M3;
  return a.validated();
}

Tensor f32(Shape shape, std::vector<double> v) { return Tensor::from_values(DType::kF32, std::move(shape), v); }

/// Deterministic pseudo-random values in [-1, 1).
std::vector<double> noise(int64_t n, uint32_t seed) {
  std::vector<double> v(static_cast<std::size_t>(n));
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = (static_cast<double>(s >> 8) / static_cast<double>(1u << 24)) * 2.0 - 1.0;
  }
  return v;
}

double stat(const Observer& o, const std::string& name, int64_t i = 0) {
  for (const auto& [n, t] : o.get_statistics())
    if (n == name) return t.get(i);
  ADD_FAILURE() << "no statistic " << name;
  return NAN;
}

// ---- R6.2 registry -------------------------------------------------------------------------

TEST(ObserverApi, R6_2_2_BuiltinsRegistered) {
  const auto names = registered_observers();
  const std::vector<std::string> builtins{"memoryless_minmax",  "static_minmax", "minmax", "memoryless_mse", "mse",
                                          "nvfp4_expanded_mse", "imatrix_mse"};
  ASSERT_GE(names.size(), builtins.size());
  for (std::size_t i = 0; i < builtins.size(); ++i) EXPECT_EQ(names[i], builtins[i]);
  for (const auto& n : builtins) EXPECT_EQ(load_observer(n, "weight", args_of(Strategy::kChannel))->name(), n);
}

TEST(ObserverApi, R6_2_1_NameNormalization) {
  EXPECT_EQ(normalize_observer_name("Static-MinMax"), "static-minmax");
  EXPECT_EQ(normalize_observer_name("static_minmax"), "static-minmax");
  EXPECT_EQ(normalize_observer_name("static minmax"), "static-minmax");
  for (const char* spelling : {"static_minmax", "Static-MinMax", "static minmax", "STATIC_MINMAX"})
    EXPECT_EQ(load_observer(spelling, "input", args_of(Strategy::kTensor))->name(), "static_minmax") << spelling;
  EXPECT_EQ(load_observer("Memoryless MSE", "weight", args_of(Strategy::kTensor))->name(), "memoryless_mse");
}

TEST(ObserverApi, R6_2_1_UnknownNames) {
  EXPECT_THROW(load_observer("no_such_observer", "weight", args_of(Strategy::kTensor)), UnknownName);
  EXPECT_THROW(load_observer("minmax2", "input", args_of(Strategy::kTensor)), UnknownName);
  EXPECT_THROW(load_observer("", "input", args_of(Strategy::kTensor)), UnknownName);
  // R1.3.3: an unknown name in args fails only on instantiation.
  QuantizationArgs a;
  a.observer = "bogus";
  const auto v = a.validated();
  EXPECT_THROW(load_observer(*v.observer, "weight", v), UnknownName);
}

TEST(ObserverApi, R6_2_BuiltinsCannotBeReplaced) {
  EXPECT_THROW(register_observer("Static MinMax",
                                 [](const std::string& b, const QuantizationArgs& a, const ObserverOptions& o) {
                                   return load_observer("memoryless_minmax", b, a, {}, o);
                                 }),
               InvalidArgument);
}

TEST(ObserverApi, R6_9_1_CalibrationObserverNames) {
  EXPECT_EQ(calibration_observer_name("weight", "static_minmax"), "memoryless_minmax");
  EXPECT_EQ(calibration_observer_name("weight", "minmax"), "memoryless_minmax");
  EXPECT_EQ(calibration_observer_name("weight", "mse"), "memoryless_mse");
  EXPECT_EQ(calibration_observer_name("weight", "imatrix_mse"), "imatrix_mse");
  EXPECT_EQ(calibration_observer_name("input", "minmax"), "minmax");
  EXPECT_EQ(calibration_observer_name("input", "mse"), "mse");
  EXPECT_EQ(calibration_observer_name("weight", "Static_MinMax"), "Static_MinMax") << "exact-string comparison";
}

TEST(ObserverApi, R6_1_1_KwargsMergedIntoACopy) {
  // Q25 note: the caller's args are not mutated.
  const auto a = args_of(Strategy::kTensor);
  auto o = load_observer("memoryless_mse", "weight", a, {{"grid", 50.0}});
  EXPECT_TRUE(a.observer_kwargs.empty());
  EXPECT_EQ(std::get<double>(o->args().observer_kwargs.at("grid")), 50.0);
  EXPECT_EQ(grid_candidates(*o).size(), 10u);  // trunc(0.2 * 50)
}

TEST(ObserverApi, Q1_Q2_GridCandidates) {
  auto m = load_observer("memoryless_mse", "weight", args_of(Strategy::kTensor));
  const auto c = grid_candidates(*m);
  ASSERT_EQ(c.size(), 20u);
  EXPECT_EQ(c.front(), 1.0);
  EXPECT_NEAR(c.back(), 0.81, 1e-12);
  auto nv = load_observer("nvfp4_expanded_mse", "weight", nvfp4_args());
  const auto cn = grid_candidates(*nv);
  EXPECT_EQ(cn.size(), 111u);
  auto im = load_observer("imatrix_mse", "weight", args_of(Strategy::kChannel));
  const auto ci = grid_candidates(*im);
  ASSERT_EQ(ci.size(), 20u);  // Q7: S + 1 candidates with S = max(1, trunc(0.95 * 20)) = 19
  EXPECT_EQ(ci.front(), 1.0);
  EXPECT_NEAR(ci.back(), 0.05, 1e-12);
  EXPECT_TRUE(grid_candidates(*load_observer("minmax", "input", args_of(Strategy::kTensor))).empty());
}

// ---- R6.1 two-phase contract ---------------------------------------------------------------

TEST(ObserverApi, R6_1_2_EmptyTensorsIgnored) {
  for (const char* name : {"memoryless_minmax", "static_minmax", "minmax", "memoryless_mse", "mse"}) {
    SCOPED_TRACE(name);
    auto o = load_observer(name, "input", args_of(Strategy::kTensor));
    const Tensor empty(DType::kF32, {0, 8});
    o->observe(empty.view());
    EXPECT_FALSE(o->has_statistics());
    const Tensor x = f32({1, 2}, {-1, 2});
    o->observe(x.view());
    const double before = stat(*o, "max_vals");
    o->observe(empty.view());
    EXPECT_EQ(stat(*o, "max_vals"), before);
  }
}

TEST(ObserverApi, Q27_WeightObservedOnce) {
  for (const char* name : {"memoryless_minmax", "static_minmax", "minmax"}) {
    SCOPED_TRACE(name);
    auto w = load_observer(name, "weight", args_of(Strategy::kTensor));
    const Tensor a = f32({2}, {-1, 1}), b = f32({2}, {-5, 7});
    w->observe(a.view()).observe(b.view());
    EXPECT_EQ(stat(*w, "min_vals"), -1);
    EXPECT_EQ(stat(*w, "max_vals"), 1);
    w->get_qparams();
    EXPECT_FALSE(w->has_statistics());
    w->observe(b.view());  // statistics consumed: observed again
    EXPECT_EQ(stat(*w, "max_vals"), 7);
    // Activations are observed every time.
    auto in = load_observer(name, "input", args_of(Strategy::kTensor));
    in->observe(a.view()).observe(b.view());
    EXPECT_NE(stat(*in, "max_vals"), 1);
  }
}

TEST(ObserverApi, R6_1_4_GetQparamsWithoutStatistics) {
  for (const auto& name : registered_observers()) {
    SCOPED_TRACE(name);
    if (name != "memoryless_minmax" && name != "static_minmax" && name != "minmax" && name != "memoryless_mse" &&
        name != "mse" && name != "nvfp4_expanded_mse" && name != "imatrix_mse")
      continue;
    auto o = load_observer(name, "weight", name == "nvfp4_expanded_mse" ? nvfp4_args() : args_of(Strategy::kChannel));
    EXPECT_FALSE(o->has_statistics());
    expect_error<PreconditionError>([&] { o->get_qparams(); }, {"No statistics"});
    expect_error<PreconditionError>([&] { o->get_statistics(); }, {"No statistics"});
  }
}

TEST(ObserverApi, R6_1_4_GetQparamsConsumesStatistics) {
  auto o = load_observer("static_minmax", "input", args_of(Strategy::kTensor));
  const Tensor x = f32({2, 2}, {-3, 1, 0.5, 2});
  o->observe(x.view());
  const QParams q = o->get_qparams();
  EXPECT_EQ(q.scale.get(0), static_cast<double>(3.0f / 127.5f));
  EXPECT_FALSE(q.global_scale.has_value());
  EXPECT_FALSE(o->has_statistics());
  EXPECT_THROW(o->get_qparams(), PreconditionError);
}

TEST(ObserverApi, R6_1_8_StatisticsKeepObservedDtype) {
  auto o = load_observer("static_minmax", "input", args_of(Strategy::kTensor));
  const Tensor x = Tensor::from_values(DType::kBF16, {1, 4}, {-0.3, 1, 2, 3});
  o->observe(x.view());
  for (const auto& [n, t] : o->get_statistics()) EXPECT_EQ(t.dtype(), DType::kBF16) << n;
  EXPECT_EQ(stat(*o, "min_vals"), -0.30078125);
  EXPECT_EQ(o->get_qparams().scale.dtype(), DType::kBF16);
}

TEST(ObserverApi, D11_NonFloatObservationsRejected) {
  // MSE observers take float tensors only; fp8 / f64 are rejected by every observer.
  auto mse = load_observer("memoryless_mse", "input", args_of(Strategy::kTensor));
  const Tensor i = Tensor::from_values(DType::kI64, {5}, {1, 1, 1, 1, 1});
  EXPECT_THROW(mse->observe(i.view()), TypeError);
  auto mm = load_observer("memoryless_minmax", "input", args_of(Strategy::kTensor));
  const Tensor f8 = Tensor::from_values(DType::kF8E4M3, {2}, {1, 2});
  EXPECT_THROW(mm->observe(f8.view()), TypeError);
}

TEST(ObserverApi, R6_3_1_IntegerObservationsWithMinMaxObservers) {
  // llm-compressor's min-max tests observe torch.tensor([1, 1, 1, 1, 1]) (int64): the
  // statistics stay int64, the scale is f32 (R4.1 output dtypes): 1/127.5 sym, 1/255 asym.
  auto o = load_observer("memoryless_minmax", "input", args_of(Strategy::kTensor));
  const Tensor i = Tensor::from_values(DType::kI64, {5}, {1, 1, 1, 1, 1});
  o->observe(i.view());
  EXPECT_EQ(o->get_statistics()[0].second.dtype(), DType::kI64);
  const QParams q = o->get_qparams();
  EXPECT_EQ(q.scale.dtype(), DType::kF32);
  EXPECT_EQ(q.scale.get(0), static_cast<double>(1.0f / 127.5f));
  EXPECT_EQ(q.zero_point.get(0), 0.0);
  // EMA blending turns integer statistics into f32 (R6.5.2)
  auto ema = load_observer("minmax", "input", args_of(Strategy::kTensor), {{"averaging_constant", 0.5}});
  ema->observe(i.view());
  const Tensor j = Tensor::from_values(DType::kI64, {2}, {-3, 3});
  ema->observe(j.view());
  EXPECT_EQ(ema->get_statistics()[0].second.dtype(), DType::kF32);
  EXPECT_EQ(ema->get_statistics()[0].second.get(0), -1.0);  // lerp(1, -3, 0.5)
  EXPECT_EQ(ema->get_statistics()[1].second.get(0), 2.0);   // lerp(1, 3, 0.5)
}

TEST(ObserverApi, R6_1_2_NonFiniteInputRejected) {
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity()}) {
    for (const char* name : {"memoryless_minmax", "minmax", "memoryless_mse"}) {
      SCOPED_TRACE(std::string(name) + " " + std::to_string(bad));
      ObserverOptions opt;
      opt.label = "model.layers.0.mlp.up_proj.input";
      auto o = load_observer(name, "input", args_of(Strategy::kTensor), {}, opt);
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
        const Tensor x = Tensor::from_values(dt, {1, 3}, {1.0, bad, 2.0});
        expect_error<InvalidArgument>([&] { o->observe(x.view()); }, {"non-finite", "up_proj"});
      }
      EXPECT_FALSE(o->has_statistics());
    }
    SCOPED_TRACE("imatrix_mse " + std::to_string(bad));
    auto w = load_observer("imatrix_mse", "weight", args_of(Strategy::kChannel));
    const Tensor x = Tensor::from_values(DType::kF32, {2, 2}, {1.0, 0.5, bad, 2.0});
    expect_error<InvalidArgument>([&] { w->observe(x.view()); }, {"non-finite", "flat index 2"});
    EXPECT_FALSE(w->has_statistics());
  }
}

TEST(ObserverApi, R6_1_2_NonFiniteInputLeavesEarlierStatisticsIntact) {
  // Min-max and MSE observers detect NaN / Inf from their own statistics (one pass over
  // the data); the rejected observation must not leave a trace in the running statistics.
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity()})
    for (const char* name : {"memoryless_minmax", "static_minmax", "minmax", "memoryless_mse", "mse"})
      for (std::optional<int64_t> gs : {std::optional<int64_t>{}, std::optional<int64_t>{3}}) {
        SCOPED_TRACE(std::string(name) + " " + std::to_string(bad));
        // inputs (weights are observed once, R6.1.2-2), per tensor and in groups of 3
        auto o = load_observer(name, "input", args_of(gs ? Strategy::kGroup : Strategy::kTensor, gs));
        const Tensor good = f32({2, 3}, {-1, 2, 0.5, 3, -4, 1});
        o->observe(good.view());
        const auto before = o->get_statistics();
        for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
          const Tensor x = Tensor::from_values(dt, {2, 3}, {1.0, 0.25, -2.0, 5.0, bad, 2.0});
          expect_error<InvalidArgument>([&] { o->observe(x.view()); }, {"non-finite", "flat index 4"});
          const auto after = o->get_statistics();
          ASSERT_EQ(after.size(), before.size());
          for (std::size_t k = 0; k < after.size(); ++k) {
            EXPECT_EQ(after[k].first, before[k].first);
            EXPECT_EQ(after[k].second.to_doubles(), before[k].second.to_doubles());
          }
        }
      }
}

TEST(ObserverApi, R6_1_2_NonFiniteInCalibrationSizedBatchRejected) {
  // A batch large enough for the threaded in-place min-max (>= 2^16 values, one
  // observation per token): NaN / Inf in a late chunk is still found and rejected, and
  // the running statistics keep the earlier batch.
  const int64_t tokens = 300, hidden = 520, at = 150001;
  std::vector<float> v(static_cast<std::size_t>(tokens * hidden));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int64_t>(i % 97) - 48) / 16.0f;
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::infinity()})
    for (const char* name : {"static_minmax", "minmax"})
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
        SCOPED_TRACE(std::string(name) + " " + std::to_string(bad) + " " + std::string(dtype_name(dt)));
        auto o = load_observer(name, "input", args_of(Strategy::kTensor));
        o->observe(Tensor::from_floats(dt, {tokens, hidden}, v).view());
        EXPECT_EQ(stat(*o, "min_vals"), -3.0);
        EXPECT_EQ(stat(*o, "max_vals"), 3.0);
        std::vector<float> poisoned = v;
        poisoned[static_cast<std::size_t>(at)] = static_cast<float>(bad);
        const Tensor x = Tensor::from_floats(dt, {tokens, hidden}, poisoned);
        expect_error<InvalidArgument>([&] { o->observe(x.view()); }, {"non-finite", "flat index 150001"});
        EXPECT_EQ(stat(*o, "min_vals"), -3.0);
        EXPECT_EQ(stat(*o, "max_vals"), 3.0);
      }
}

// ---- R6.4 / R6.5 min-max family --------------------------------------------------------------

TEST(ObserverApi, R6_4_MemorylessAndStaticMinMax) {
  const Tensor a = f32({1, 2}, {-1, 2}), b = f32({1, 2}, {-3, 1});
  auto m = load_observer("memoryless_minmax", "input", args_of(Strategy::kTensor));
  m->observe(a.view()).observe(b.view());
  EXPECT_EQ(stat(*m, "min_vals"), -3);
  EXPECT_EQ(stat(*m, "max_vals"), 1);
  auto s = load_observer("static_minmax", "input", args_of(Strategy::kTensor));
  s->observe(a.view()).observe(b.view());
  EXPECT_EQ(stat(*s, "min_vals"), -3);
  EXPECT_EQ(stat(*s, "max_vals"), 2);
}

TEST(ObserverApi, R6_5_2_EmaExampleSequence) {
  auto o = load_observer("minmax", "input", args_of(Strategy::kTensor), {{"averaging_constant", 0.1}});
  const std::vector<std::vector<double>> obs{{0, 0}, {-3, 1}, {-1, 3}};
  const float mins[] = {0.0f, -0.3f, -0.37f}, maxs[] = {0.0f, 0.1f, 0.39f};
  for (std::size_t i = 0; i < obs.size(); ++i) {
    const Tensor x = f32({2}, obs[i]);
    o->observe(x.view());
    EXPECT_FLOAT_EQ(static_cast<float>(stat(*o, "min_vals")), mins[i]) << i;
    EXPECT_FLOAT_EQ(static_cast<float>(stat(*o, "max_vals")), maxs[i]) << i;
  }
}

TEST(ObserverApi, R6_5_2_LerpIsThreeRoundedOps) {
  // Q30: a*(1-w) + b*w in f32, each op rounded.
  auto o = load_observer("minmax", "input", args_of(Strategy::kTensor), {{"averaging_constant", 0.1}});
  const Tensor a = f32({2}, {-3, 1}), b = f32({2}, {-1, 3});
  o->observe(a.view()).observe(b.view());
  const float w = 0.1f, one_minus = static_cast<float>(1.0 - 0.1);
  const float expect_min = -3.0f * one_minus + -1.0f * w;
  const float expect_max = 1.0f * one_minus + 3.0f * w;
  EXPECT_EQ(static_cast<float>(stat(*o, "min_vals")), expect_min);
  EXPECT_EQ(static_cast<float>(stat(*o, "max_vals")), expect_max);
}

TEST(ObserverApi, R6_5_2_AveragingConstantOneAndZero) {
  const Tensor a = f32({2}, {-3, 1}), b = f32({2}, {-1, 3});
  auto one = load_observer("minmax", "input", args_of(Strategy::kTensor), {{"averaging_constant", 1.0}});
  one->observe(a.view()).observe(b.view());
  EXPECT_EQ(stat(*one, "min_vals"), -1);
  EXPECT_EQ(stat(*one, "max_vals"), 3);
  auto zero = load_observer("minmax", "input", args_of(Strategy::kTensor), {{"averaging_constant", 0.0}});
  zero->observe(a.view()).observe(b.view());
  EXPECT_EQ(stat(*zero, "min_vals"), -3);
  EXPECT_EQ(stat(*zero, "max_vals"), 1);
}

// ---- R6.7 MSE ------------------------------------------------------------------------------

TEST(ObserverApi, R6_7_4_MemorylessMseExample) {
  auto o = load_observer("memoryless_mse", "input", args_of(Strategy::kTensor));
  const std::vector<std::vector<double>> obs{{0, 0}, {-3, 1}, {-1, 3}};
  const double mins[] = {0, -3, -1}, maxs[] = {0, 1, 3};
  for (std::size_t i = 0; i < obs.size(); ++i) {
    const Tensor x = f32({2}, obs[i]);
    o->observe(x.view());
    EXPECT_EQ(stat(*o, "min_vals"), mins[i]) << i;
    EXPECT_EQ(stat(*o, "max_vals"), maxs[i]) << i;
  }
}

TEST(ObserverApi, R6_7_4_AllZeroDataFirstCandidateWins) {
  auto o = load_observer("memoryless_mse", "weight", args_of(Strategy::kChannel));
  const Tensor z(DType::kF32, {3, 4});
  o->observe(z.view());
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(stat(*o, "min_vals", i), 0);
    EXPECT_EQ(stat(*o, "max_vals", i), 0);
  }
  const QParams q = o->get_qparams();
  EXPECT_EQ(q.scale.get(0), std::ldexp(1.0, -23));
}

// ---- R6.8.3 imatrix hooks ------------------------------------------------------------------

TEST(ObserverApi, R6_8_3_ImatrixHookExample) {
  auto o = load_observer("imatrix_mse", "weight", args_of(Strategy::kChannel, std::nullopt, 4));
  o->attach(8);
  std::vector<double> x(2 * 3 * 8, 1.0);
  for (int i = 0; i < 6; ++i) x[static_cast<std::size_t>(i * 8)] = 2.0;
  const Tensor xt = f32({2, 3, 8}, x);
  o->accumulate_input(xt.view());
  const Statistics st = o->export_statistics();
  const Tensor* count = st.find("importance_count");
  const Tensor* sum = st.find("importance_sum");
  ASSERT_NE(count, nullptr);
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(count->get(0), 6);
  EXPECT_EQ(sum->dtype(), DType::kF32);
  ASSERT_EQ(sum->numel(), 8);
  const double expect[8] = {24, 6, 6, 6, 6, 6, 6, 6};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(sum->get(i), expect[i]) << i;
  // detach stops the accumulation.
  o->detach();
  const Tensor big = f32({2, 3, 8}, std::vector<double>(48, 100.0));
  o->accumulate_input(big.view());
  EXPECT_EQ(o->export_statistics().find("importance_count")->get(0), 6);
}

TEST(ObserverApi, R6_8_2_ImatrixSyncTable) {
  auto o = load_observer("imatrix_mse", "weight", args_of(Strategy::kChannel, std::nullopt, 4));
  const auto t = o->sync_table();
  ASSERT_EQ(t.size(), 2u);
  for (const auto& [n, op] : t) {
    EXPECT_TRUE(n == "importance_sum" || n == "importance_count") << n;
    EXPECT_EQ(op, ReduceOp::kSum);
  }
}

// ---- R6.10 fusion ---------------------------------------------------------------------------

struct FusedGroup {
  std::vector<Tensor> weights;
  std::vector<std::shared_ptr<Observer>> obs;
};

FusedGroup make_fused_group(int n) {
  FusedGroup g;
  for (int i = 0; i < n; ++i) {
    auto v = noise(4 * 32, 17 + i);
    for (auto& x : v) x *= (i + 1);  // member i has absmax ~ i + 1
    g.weights.push_back(f32({4, 32}, v));
  }
  for (int i = 0; i < n; ++i) {
    ObserverOptions opt;
    opt.label = "layer.proj" + std::to_string(i) + ".weight";
    auto o = load_observer("memoryless_minmax", "weight", nvfp4_args(), {}, opt);
    o->bind_weight(g.weights[i].view());
    g.obs.push_back(o);
  }
  fuse_observers(g.obs);
  return g;
}

TEST(ObserverApi, R6_10_1_FusedLayerNames) {
  const std::vector<std::vector<std::string>> expect{
      {"gate_proj", "up_proj"}, {"q_proj", "k_proj", "v_proj"}, {"q_a_proj", "kv_a_proj_with_mqa"}, {"w1", "w3"}};
  EXPECT_EQ(fused_layer_names(), expect);
}

TEST(ObserverApi, R6_10_4_CooperativeDeletionThreeMembers) {
  auto g = make_fused_group(3);
  for (int i = 0; i < 3; ++i) g.obs[i]->observe(g.weights[i].view());
  const QParams q0 = g.obs[0]->get_qparams();
  for (auto& o : g.obs) EXPECT_TRUE(o->has_statistics());
  const QParams q1 = g.obs[1]->get_qparams();
  for (auto& o : g.obs) EXPECT_TRUE(o->has_statistics());
  const QParams q2 = g.obs[2]->get_qparams();
  for (auto& o : g.obs) EXPECT_FALSE(o->has_statistics());
  ASSERT_TRUE(q0.global_scale && q1.global_scale && q2.global_scale);
  EXPECT_TRUE(q0.global_scale->bit_equal(*q1.global_scale));
  EXPECT_TRUE(q0.global_scale->bit_equal(*q2.global_scale));
  // The shared global scale is the one of the union of the three weights.
  double absmax = 0;
  for (const auto& w : g.weights)
    for (int64_t i = 0; i < w.numel(); ++i) absmax = std::max(absmax, std::abs(w.get(i)));
  const Tensor expect = generate_gparam(f32({1}, {-absmax}), f32({1}, {absmax}));
  EXPECT_TRUE(q0.global_scale->bit_equal(expect));
  // The cycle repeats.
  for (int i = 0; i < 3; ++i) g.obs[i]->observe(g.weights[i].view());
  g.obs[2]->get_qparams();
  for (auto& o : g.obs) EXPECT_TRUE(o->has_statistics());
}

TEST(ObserverApi, R6_10_3_EagerFusedObservation) {
  auto g = make_fused_group(3);
  g.obs[0]->observe(g.weights[0].view());
  for (auto& o : g.obs) EXPECT_TRUE(o->has_statistics());
  EXPECT_EQ(g.obs[0]->fused_partners().size(), 2u);
}

TEST(ObserverApi, R6_10_4_UnfusedDeletesImmediately) {
  auto o = load_observer("memoryless_minmax", "weight", nvfp4_args());
  const Tensor w = f32({2, 16}, noise(32, 3));
  o->observe(w.view());
  const auto q = o->get_qparams();
  EXPECT_TRUE(q.global_scale.has_value());
  EXPECT_FALSE(o->has_statistics());
}

TEST(ObserverApi, R6_10_2_FusionRules) {
  // No tensor_group member: nothing happens.
  auto a = load_observer("memoryless_minmax", "weight", args_of(Strategy::kChannel));
  auto b = load_observer("memoryless_minmax", "weight", args_of(Strategy::kChannel));
  fuse_observers({a, b, nullptr});
  EXPECT_TRUE(a->fused_partners().empty());
  // A mix -> Precondition.
  auto c = load_observer("memoryless_minmax", "weight", nvfp4_args());
  expect_error<PreconditionError>([&] { fuse_observers({a, c}); }, {"non-TENSOR_GROUP"});
  // Non-tensor_group args: no global scale.
  const Tensor w = f32({2, 16}, noise(32, 4));
  a->observe(w.view());
  EXPECT_FALSE(a->get_global_scale().has_value());
}

// ---- R6.11 statistics --------------------------------------------------------------------------

TEST(ObserverApi, R6_11_1_SyncTables) {
  const auto in = args_of(Strategy::kTensor);
  EXPECT_TRUE(load_observer("memoryless_minmax", "input", in)->sync_table().empty());
  EXPECT_TRUE(load_observer("memoryless_mse", "input", in)->sync_table().empty());
  EXPECT_TRUE(load_observer("nvfp4_expanded_mse", "weight", nvfp4_args())->sync_table().empty());
  using Table = std::vector<std::pair<std::string, ReduceOp>>;
  EXPECT_EQ(load_observer("static_minmax", "input", in)->sync_table(),
            (Table{{"min_vals", ReduceOp::kMin}, {"max_vals", ReduceOp::kMax}}));
  EXPECT_EQ(load_observer("minmax", "input", in)->sync_table(),
            (Table{{"min_vals", ReduceOp::kAvg}, {"max_vals", ReduceOp::kAvg}}));
  EXPECT_EQ(load_observer("mse", "input", in)->sync_table(),
            (Table{{"min_vals", ReduceOp::kAvg}, {"max_vals", ReduceOp::kAvg}}));
}

Statistics one_stat(const std::string& name, ReduceOp op, std::vector<double> v, DType dt = DType::kF32) {
  Statistics s;
  s.observer = "static_minmax";
  s.items.push_back({name, Tensor::from_values(dt, {static_cast<int64_t>(v.size())}, v), op});
  return s;
}

TEST(ObserverApi, R6_11_1_ReduceStatisticsOps) {
  const Statistics r0 = one_stat("x", ReduceOp::kMin, {1, -2, 3}), r1 = one_stat("x", ReduceOp::kMin, {0, 5, 3});
  const Statistics mins[] = {r0, r1};
  EXPECT_EQ(reduce_statistics(mins).find("x")->to_doubles(), (std::vector<double>{0, -2, 3}));
  const Statistics maxs[] = {one_stat("x", ReduceOp::kMax, {1, -2, 3}), one_stat("x", ReduceOp::kMax, {0, 5, 3})};
  EXPECT_EQ(reduce_statistics(maxs).find("x")->to_doubles(), (std::vector<double>{1, 5, 3}));
  const Statistics sums[] = {one_stat("x", ReduceOp::kSum, {1, -2, 3}), one_stat("x", ReduceOp::kSum, {0, 5, 3}),
                             one_stat("x", ReduceOp::kSum, {1, 1, 1})};
  EXPECT_EQ(reduce_statistics(sums).find("x")->to_doubles(), (std::vector<double>{2, 4, 7}));
  const Statistics avgs[] = {one_stat("x", ReduceOp::kAvg, {1, -2, 3}), one_stat("x", ReduceOp::kAvg, {0, 5, 4})};
  const Statistics ra = reduce_statistics(avgs);
  EXPECT_EQ(ra.find("x")->to_doubles(), (std::vector<double>{0.5, 1.5, 3.5}));
  EXPECT_EQ(ra.contributions, 2);
  // Integer SUM (importance_count).
  const Statistics cnt[] = {one_stat("c", ReduceOp::kSum, {6}, DType::kI64),
                            one_stat("c", ReduceOp::kSum, {4}, DType::kI64)};
  const Statistics rc = reduce_statistics(cnt);
  EXPECT_EQ(rc.find("c")->dtype(), DType::kI64);
  EXPECT_EQ(rc.find("c")->get(0), 10);
  // Missing statistic / size mismatch.
  const Statistics missing[] = {one_stat("x", ReduceOp::kSum, {1}), one_stat("y", ReduceOp::kSum, {1})};
  EXPECT_THROW(reduce_statistics(missing), InvalidArgument);
  const Statistics mismatch[] = {one_stat("x", ReduceOp::kSum, {1}), one_stat("x", ReduceOp::kSum, {1, 2})};
  expect_error<InvalidArgument>([&] { reduce_statistics(mismatch); }, {"size mismatch"});
}

TEST(ObserverApi, R6_11_1_MergeEqualsOneObserverThatSawBoth) {
  const auto args = args_of(Strategy::kGroup, 4);
  const Tensor b1 = f32({2, 3, 8}, noise(48, 1)), b2 = f32({2, 3, 8}, noise(48, 2));
  auto r0 = load_observer("static_minmax", "input", args), r1 = load_observer("static_minmax", "input", args);
  r0->observe(b1.view());
  r1->observe(b2.view());
  r0->merge_statistics(r1->export_statistics());
  auto both = load_observer("static_minmax", "input", args);
  both->observe(b1.view()).observe(b2.view());
  const auto sa = r0->get_statistics(), sb = both->get_statistics();
  ASSERT_EQ(sa.size(), sb.size());
  for (std::size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_TRUE(sa[i].second.bit_equal(sb[i].second)) << sa[i].first;
  }
  const QParams qa = r0->get_qparams(), qb = both->get_qparams();
  EXPECT_TRUE(qa.scale.bit_equal(qb.scale));
  EXPECT_TRUE(qa.zero_point.bit_equal(qb.zero_point));
}

TEST(ObserverApi, R6_11_1_MergeAveragesMovingAverage) {
  const auto args = args_of(Strategy::kTensor);
  auto r0 = load_observer("minmax", "input", args), r1 = load_observer("minmax", "input", args);
  const Tensor a = f32({2}, {-2, 2}), b = f32({2}, {-4, 6});
  r0->observe(a.view());
  r1->observe(b.view());
  r0->merge_statistics(r1->export_statistics());
  EXPECT_EQ(stat(*r0, "min_vals"), -3);
  EXPECT_EQ(stat(*r0, "max_vals"), 4);
}

TEST(ObserverApi, StatisticsSerializeRoundTrip) {
  auto o = load_observer("imatrix_mse", "weight", args_of(Strategy::kChannel, std::nullopt, 4));
  o->attach(8);
  const Tensor x = f32({3, 8}, noise(24, 9));
  o->accumulate_input(x.view());
  const Tensor w = Tensor::from_values(DType::kBF16, {4, 8}, noise(32, 10));
  o->observe(w.view());
  Statistics st = o->export_statistics();
  st.contributions = 3;
  const auto bytes = st.serialize();
  ASSERT_GE(bytes.size(), 8u);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "QOBSSTAT");
  const Statistics back = Statistics::deserialize(bytes);
  EXPECT_EQ(back.observer, st.observer);
  EXPECT_EQ(back.contributions, 3);
  ASSERT_EQ(back.items.size(), st.items.size());
  for (std::size_t i = 0; i < st.items.size(); ++i) {
    EXPECT_EQ(back.items[i].name, st.items[i].name);
    EXPECT_EQ(back.items[i].reduce, st.items[i].reduce);
    EXPECT_TRUE(back.items[i].value.bit_equal(st.items[i].value)) << st.items[i].name;
  }
  // Importing into a fresh observer reproduces the qparams.
  auto fresh = load_observer("imatrix_mse", "weight", args_of(Strategy::kChannel, std::nullopt, 4));
  fresh->import_statistics(back);
  const QParams qa = o->get_qparams(), qb = fresh->get_qparams();
  EXPECT_TRUE(qa.scale.bit_equal(qb.scale));
  // Importing statistics of another observer kind is rejected.
  auto other = load_observer("static_minmax", "weight", args_of(Strategy::kChannel, std::nullopt, 4));
  EXPECT_THROW(other->import_statistics(back), InvalidArgument);
}

// The serialized format, byte for byte, written out by hand from Statistics::serialize's
// contract (little-endian, "QOBSSTAT", version 1): other processes and files depend on it.
TEST(ObserverApi, StatisticsSerializedBytesArePinned) {
  Statistics st;
  st.observer = "minmax";
  st.contributions = 2;
  st.items.push_back({"min_vals", Tensor::from_values(DType::kF32, {2}, {1.0, -2.0}), ReduceOp::kMin});
  st.items.push_back({"n", Tensor::from_values(DType::kI64, {1, 1}, {5}), ReduceOp::kSum});
  const std::vector<uint8_t> expect = {
      'Q', 'O', 'B', 'S', 'S', 'T', 'A', 'T',                // magic
      0x01, 0x00, 0x00, 0x00,                                // version 1 (uint32)
      0x06, 0x00, 0x00, 0x00, 'm', 'i', 'n', 'm', 'a', 'x',  // observer (uint32 length)
      0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,        // contributions 2 (int64)
      0x02, 0x00, 0x00, 0x00,                                // 2 items (uint32)
      // item 0: "min_vals", kMin, float32, shape [2], 8 bytes, 1.0f and -2.0f
      0x08, 0x00, 0x00, 0x00, 'm', 'i', 'n', '_', 'v', 'a', 'l', 's',  //
      0x00,                                                            // ReduceOp::kMin
      0x01,                                                            // DType::kF32
      0x01, 0x00, 0x00, 0x00,                                          // rank 1
      0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                  // dim 2
      0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                  // 8 bytes
      0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0xC0,                  // 0x3F800000, 0xC0000000
      // item 1: "n", kSum, int64, shape [1, 1], 8 bytes, 5
      0x01, 0x00, 0x00, 0x00, 'n',                     //
      0x03,                                            // ReduceOp::kSum
      0x08,                                            // DType::kI64
      0x02, 0x00, 0x00, 0x00,                          // rank 2
      0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // dim 1
      0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // dim 1
      0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // 8 bytes
      0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // 5
  };
  EXPECT_EQ(st.serialize(), expect);
  const Statistics back = Statistics::deserialize(expect);
  EXPECT_EQ(back.observer, "minmax");
  EXPECT_EQ(back.contributions, 2);
  ASSERT_EQ(back.items.size(), 2u);
  EXPECT_EQ(back.items[0].name, "min_vals");
  EXPECT_EQ(back.items[0].reduce, ReduceOp::kMin);
  EXPECT_EQ(back.items[0].value.to_doubles(), (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(back.items[1].value.shape(), (Shape{1, 1}));
  EXPECT_EQ(back.items[1].value.to_doubles(), (std::vector<double>{5.0}));
  // A truncation names what was being read.
  const std::vector<uint8_t> cut(expect.begin(), expect.begin() + 26);
  expect_error<IoError>([&] { Statistics::deserialize(cut); }, {"statistics bytes", "contributions", "offset 22"});
}

TEST(ObserverApi, StatisticsCorruptAndTruncatedBytes) {
  auto o = load_observer("static_minmax", "input", args_of(Strategy::kTensor));
  const Tensor x = f32({4}, {-1, 2, 3, 4});
  o->observe(x.view());
  const auto bytes = o->export_statistics().serialize();
  EXPECT_NO_THROW(Statistics::deserialize(bytes));
  // Every truncation fails with IoError.
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> t(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(Statistics::deserialize(t), IoError) << n;
  }
  // Trailing bytes, bad magic, bad version.
  auto extra = bytes;
  extra.push_back(0);
  EXPECT_THROW(Statistics::deserialize(extra), IoError);
  auto magic = bytes;
  magic[0] = 'X';
  EXPECT_THROW(Statistics::deserialize(magic), IoError);
  auto version = bytes;
  version[8] = 0x7F;
  EXPECT_THROW(Statistics::deserialize(version), IoError);
  // Flipping any single byte either still decodes or raises IoError (never crashes or
  // throws another type).
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    auto c = bytes;
    c[i] ^= 0xFF;
    try {
      Statistics::deserialize(c);
    } catch (const IoError&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "byte " << i << ": " << e.what();
    }
  }
}

// ---- R7.4.1 generation-2 adapter --------------------------------------------------------------

TEST(ObserverApi, R7_4_1_TwoIndependentTracks) {
  const auto args = args_of(Strategy::kTensor);
  MinMaxHookAdapter ad("static_minmax", "input", args);
  const Tensor a = f32({1, 2}, {-1, 2}), b = f32({1, 2}, {-3, 1});
  ad.forward(a.view());
  ad.get_global_scale(b.view());
  // The qparam track saw only a; the global track only b.
  auto sa = ad.forward(a.view());
  EXPECT_EQ(sa.scale.get(0), static_cast<double>(2.0f / 127.5f));
  const Tensor g = ad.get_global_scale(b.view());
  EXPECT_EQ(g.get(0), static_cast<double>(2688.0f / 3.0f));
  // Statistics are never consumed.
  EXPECT_NO_THROW(ad.forward(a.view()));
  // The EMA observer advances each track once per call (no double increment).
  MinMaxHookAdapter ema("minmax", "input", args, {{"averaging_constant", 0.5}});
  ema.forward(a.view());
  ema.get_global_scale(b.view());
  const auto e = ema.forward(b.view());  // qparam track: lerp(2, 1, 0.5) = 1.5 ; min lerp(-1, -3) = -2
  EXPECT_EQ(e.scale.get(0), static_cast<double>(2.0f / 127.5f));
}

TEST(ObserverApi, R7_4_1_ForwardWithBoundGlobalScaleEqualsGeneration3) {
  const Tensor w = Tensor::from_values(DType::kBF16, {8, 32}, noise(256, 21));
  // Only min-max: the equality rests on "tensor-wide absmax == absmax over the group
  // statistics" (R7.4.1), which an MSE search over the whole tensor does not satisfy.
  for (const char* name : {"memoryless_minmax"}) {
    SCOPED_TRACE(name);
    MinMaxHookAdapter ad(name, "weight", nvfp4_args());
    ad.set_global_scale(ad.get_global_scale(w.view()));
    const ScaleZeroPoint r = ad.forward(w.view());
    auto o = load_observer(name, "weight", nvfp4_args());
    o->observe(w.view());
    const QParams q = o->get_qparams();
    EXPECT_TRUE(r.scale.bit_equal(q.scale));
    EXPECT_TRUE(r.zero_point.bit_equal(q.zero_point));
  }
  // Also for a non tensor_group strategy without any global scale.
  MinMaxHookAdapter ch("memoryless_minmax", "weight", args_of(Strategy::kChannel));
  auto o = load_observer("memoryless_minmax", "weight", args_of(Strategy::kChannel));
  o->observe(w.view());
  EXPECT_TRUE(ch.forward(w.view()).scale.bit_equal(o->get_qparams().scale));
}

TEST(ObserverApi, R7_4_1_TensorGroupWithoutGlobalScale) {
  MinMaxHookAdapter ad("memoryless_minmax", "weight", nvfp4_args());
  const Tensor w = f32({2, 16}, noise(32, 5));
  expect_error<InvalidArgument>([&] { ad.forward(w.view()); }, {"global scale"});
}

TEST(ObserverApi, R7_4_1_ForwardReordersByGIdx) {
  const auto args = args_of(Strategy::kGroup, 2);
  const Tensor w = f32({1, 4}, {1, 10, 2, 20});
  const std::vector<int32_t> g_idx{0, 1, 0, 1};
  MinMaxHookAdapter ad("memoryless_minmax", "weight", args);
  const auto r = ad.forward(w.view(), g_idx);
  // Groups after reordering: {1, 2} and {10, 20}.
  EXPECT_EQ(r.scale.get(0), static_cast<double>(2.0f / 127.5f));
  EXPECT_EQ(r.scale.get(1), static_cast<double>(20.0f / 127.5f));
}

// ---- kwarg validation ---------------------------------------------------------------------------

struct BadKwarg {
  const char* observer;
  const char* key;
  KwargValue value;
  const char* value_text;
};

TEST(ObserverApi, R6_7_2_R6_8_1_InvalidKwargsNameOptionValueAndRule) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<BadKwarg> cases{
      {"memoryless_mse", "maxshrink", -0.1, "-0.1"},
      {"memoryless_mse", "maxshrink", 1.5, "1.5"},
      {"mse", "maxshrink", 2.0, "2"},
      {"imatrix_mse", "maxshrink", -0.5, "-0.5"},
      {"imatrix_mse", "maxshrink", 1.01, "1.01"},
      {"memoryless_mse", "grid", 0.0, "0"},
      {"nvfp4_expanded_mse", "grid", -5.0, "-5"},
      {"imatrix_mse", "grid", 0.0, "0"},
      {"imatrix_mse", "grid", int64_t{-1}, "-1"},
      {"memoryless_mse", "norm", 0.0, "0"},
      {"mse", "norm", -1.0, "-1"},
      {"memoryless_mse", "norm", inf, "inf"},
      {"imatrix_mse", "norm", 0.0, "0"},
      {"imatrix_mse", "norm", -1.0, "-1"},
      {"imatrix_mse", "norm", inf, "inf"},
      {"imatrix_mse", "norm", nan, "nan"},
      {"memoryless_mse", "expand", 0.5, "0.5"},
      {"mse", "expand", 0.5, "0.5"},
      {"nvfp4_expanded_mse", "expand", 0.9, "0.9"},
      {"imatrix_mse", "expand", 0.5, "0.5"},
      {"memoryless_mse", "patience", int64_t{-1}, "-1"},
      {"imatrix_mse", "patience", int64_t{-2}, "-2"},
      {"minmax", "averaging_constant", 1.5, "1.5"},
      {"minmax", "averaging_constant", -0.1, "-0.1"},
      {"mse", "averaging_constant", 2.0, "2"},
      {"memoryless_mse", "chunk_size", int64_t{0}, "0"},
      {"mse", "chunk_size", int64_t{-3}, "-3"},
      {"nvfp4_expanded_mse", "chunk_size", int64_t{0}, "0"},
  };
  const std::regex rule(R"(R\d+\.\d+)");
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.observer) + " " + c.key + "=" + c.value_text);
    const auto args = std::string(c.observer) == "nvfp4_expanded_mse" ? nvfp4_args() : args_of(Strategy::kChannel);
    const char* base = std::string(c.observer) == "minmax" ? "input" : "weight";
    try {
      load_observer(c.observer, base, args, {{c.key, c.value}});
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(c.key), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.value_text), std::string::npos) << msg;
      EXPECT_TRUE(std::regex_search(msg, rule)) << "no rule id in: " << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong type: " << e.what();
    }
  }
}

TEST(ObserverApi, R6_7_2_SpecMessages) {
  expect_error<InvalidArgument>(
      [] {
        load_observer("memoryless_mse", "weight", args_of(Strategy::kTensor), {{"expand", 0.5}});
      },
      {"expand value must be at least 1.0"});
  expect_error<InvalidArgument>(
      [] {
        load_observer("nvfp4_expanded_mse", "weight", nvfp4_args(), {{"chunk_size", int64_t{0}}});
      },
      {"chunk_size must be positive"});
  expect_error<InvalidArgument>(
      [] {
        load_observer("imatrix_mse", "weight", args_of(Strategy::kChannel), {{"norm", 0.0}});
      },
      {"norm must be a finite positive number"});
  // Valid edge values are accepted.
  EXPECT_NO_THROW(load_observer("memoryless_mse", "weight", args_of(Strategy::kTensor),
                                {{"maxshrink", 0.0}, {"patience", int64_t{0}}, {"expand", 1.0}}));
  EXPECT_NO_THROW(load_observer("imatrix_mse", "weight", args_of(Strategy::kChannel),
                                {{"maxshrink", 1.0}, {"patience", int64_t{0}}, {"strict", true}}));
  EXPECT_NO_THROW(load_observer("minmax", "input", args_of(Strategy::kTensor), {{"averaging_constant", 0.0}}));
  EXPECT_NO_THROW(
      load_observer("memoryless_mse", "weight", args_of(Strategy::kTensor), {{"triton_error_buffer", 0.3}}));
}

TEST(ObserverApi, D9_UnknownKwargNamesTheKeyAndRule) {
  for (const char* name : {"memoryless_mse", "mse", "minmax", "imatrix_mse"}) {
    SCOPED_TRACE(name);
    const char* base = std::string(name) == "minmax" ? "input" : "weight";
    try {
      load_observer(name, base, args_of(Strategy::kChannel), {{"maxshrnk", 0.5}});
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("maxshrnk"), std::string::npos) << msg;
      EXPECT_TRUE(std::regex_search(msg, std::regex(R"(R\d+\.\d+)"))) << "no rule id in: " << msg;
    }
  }
}

TEST(ObserverApi, KwargTypeErrors) {
  EXPECT_THROW(load_observer("memoryless_mse", "weight", args_of(Strategy::kTensor), {{"grid", std::string("ten")}}),
               InvalidArgument);
  EXPECT_THROW(load_observer("imatrix_mse", "weight", args_of(Strategy::kChannel), {{"strict", std::string("yes")}}),
               InvalidArgument);
}

TEST(ObserverApi, R3_1_UnknownBaseNameRejected) {
  EXPECT_THROW(load_observer("memoryless_minmax", "bias", args_of(Strategy::kTensor)), InvalidArgument);
}

}  // namespace
}  // namespace qobs

namespace qobs {
namespace {

// ---- observe_flattened (llm-compressor's update_statistics_from_observed) -------------------

/// Observing an already flattened value (R3.1's (num_obs, *qparam_shape, group_size))
/// gives exactly the statistics and qparams of observing the value itself: every
/// built-in observer, weights (tensor, channel, group, tensor_group, block) and
/// activations (tensor, group, observed twice: the running statistics), f32 and bf16.
TEST(ObserverApi, R3_1_ObserveFlattenedEqualsObserve) {
  struct Case {
    std::string base;
    QuantizationArgs args;
    Shape shape;
  };
  QuantizationArgs block;
  block.strategy = Strategy::kBlock;
  block.block_structure = std::array<int64_t, 2>{4, 8};
  block = block.validated();
  const std::vector<Case> cases{
      {"weight", args_of(Strategy::kTensor), {8, 32}},
      {"weight", args_of(Strategy::kChannel, std::nullopt, 4), {8, 32}},
      {"weight", args_of(Strategy::kGroup, 16, 4), {8, 32}},
      {"weight", args_of(Strategy::kGroup, 16, 4, false), {8, 32}},
      {"weight", nvfp4_args(), {8, 32}},
      {"weight", block, {8, 32}},
      {"input", args_of(Strategy::kTensor), {2, 3, 32}},
      {"input", args_of(Strategy::kGroup, 16), {2, 3, 32}},
  };
  int compared = 0;
  for (const std::string& name : registered_observers())
    for (const Case& c : cases)
      for (DType dt : {DType::kF32, DType::kBF16}) {
        std::shared_ptr<Observer> a, b;
        try {
          a = load_observer(name, c.base, c.args);
          b = load_observer(name, c.base, c.args);
        } catch (const std::exception&) {
          continue;  // an observer / strategy pair the registry refuses
        }
        if (c.base == "weight") {  // importance for the imatrix observers (a no-op for the rest)
          for (auto* o : {a.get(), b.get()}) {
            o->attach(c.shape.back());
            const Tensor x = Tensor::from_values(DType::kF32, {4, c.shape.back()}, noise(4 * c.shape.back(), 9));
            o->accumulate_input(x.view());
          }
        }
        bool ok = true;
        // a weight is observed once (forward's rule; the flattened entry replaces)
        for (uint32_t seed : c.base == "weight" ? std::vector<uint32_t>{1u} : std::vector<uint32_t>{1u, 2u}) {
          const int64_t n = shape_numel(c.shape);
          const Tensor v = Tensor::from_values(dt, c.shape, noise(n, seed));
          try {
            a->observe(v.view());
          } catch (const std::exception&) {
            ok = false;  // the observer does not take this value; nothing to compare
            break;
          }
          const Tensor flat = flatten_for_calibration(v.view(), c.base, c.args).materialize();
          b->observe_flattened(flat.view());
        }
        if (!ok) continue;
        const std::string where = name + " " + c.base + " " + std::string(to_string(c.args.get_strategy())) + " " +
                                  std::string(dtype_name(dt));
        const auto sa = a->get_statistics(), sb = b->get_statistics();
        ASSERT_EQ(sa.size(), sb.size()) << where;
        for (std::size_t i = 0; i < sa.size(); ++i) {
          ASSERT_EQ(sa[i].first, sb[i].first) << where;
          ASSERT_EQ(sa[i].second.shape(), sb[i].second.shape()) << where << " " << sa[i].first;
          for (int64_t k = 0; k < sa[i].second.numel(); ++k)
            ASSERT_EQ(sa[i].second.get(k), sb[i].second.get(k)) << where << " " << sa[i].first << "[" << k << "]";
        }
        const QParams qa = a->get_qparams(), qb = b->get_qparams();
        for (int64_t k = 0; k < qa.scale.numel(); ++k) ASSERT_EQ(qa.scale.get(k), qb.scale.get(k)) << where;
        for (int64_t k = 0; k < qa.zero_point.numel(); ++k)
          ASSERT_EQ(qa.zero_point.get(k), qb.zero_point.get(k)) << where;
        ++compared;
      }
  EXPECT_GT(compared, 60);
}

TEST(ObserverApi, R3_1_ObserveFlattenedRefusesMisshapedValues) {
  auto o = load_observer("memoryless_minmax", "weight", args_of(Strategy::kGroup, 16, 4), {}, {.label = "m.weight"});
  const Tensor rank1 = Tensor::from_values(DType::kF32, {32}, noise(32, 3));
  expect_error<ShapeError>([&] { o->observe_flattened(rank1.view()); }, {"m.weight", "R3.1", "(32,)"});
  const Tensor groups_of_8 = Tensor::from_values(DType::kF32, {1, 8, 4, 8}, noise(256, 3));
  expect_error<ShapeError>([&] { o->observe_flattened(groups_of_8.view()); }, {"m.weight", "group_size 16", "R3.2"});
  EXPECT_FALSE(o->has_statistics());
  const Tensor nan = Tensor::from_values(DType::kF32, {1, 8, 2, 16}, std::vector<double>(256, NAN));
  expect_error<InvalidArgument>([&] { o->observe_flattened(nan.view()); }, {"m.weight", "non-finite"});
  EXPECT_FALSE(o->has_statistics());
  const Tensor empty = Tensor::from_values(DType::kF32, {1, 0, 2, 16}, {});
  expect_error<ShapeError>([&] { o->observe_flattened(empty.view()); }, {"m.weight", "empty"});
  // as the reference's update_statistics_from_observed: a weight's statistics are replaced
  const Tensor ones = Tensor::from_values(DType::kF32, {1, 1, 1, 16}, std::vector<double>(16, 1.0));
  const Tensor twos = Tensor::from_values(DType::kF32, {1, 1, 1, 16}, std::vector<double>(16, 2.0));
  o->observe_flattened(ones.view());
  o->observe_flattened(twos.view());
  EXPECT_EQ(stat(*o, "max_vals"), 2.0);
}

// ---- thread safety (the contract in qobs/observer.h) ---------------------------------------
//
// Calls on one observer, or on the observers of one fused group, run one at a time; the
// C++ API is as safe to share between threads as the Python one
// (python/tests/test_threads.py). ObserverThreads.ConcurrentCallsOnOneObserverNeverOverlap
// fails without the observer's lock, whatever the machine: its probe observer's update
// stays inside for 200 us and counts how often another call is inside at the same time,
// so eight threads calling observe() overlap within the first rounds (checked by building
// with Observer::lock() taking nothing: 199 overlaps, 25 of 200 observations counted, and
// the next test crashed). The built-in observer tests compare with one thread; without
// the lock they corrupt the statistics' std::map.

constexpr int kThreads = 8;

/// f32 tensor of deterministic noise in [-scale, scale).
Tensor noisy(Shape shape, uint32_t seed, double scale = 1.0) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v = noise(n, seed);
  for (double& x : v) x *= scale;
  return f32(std::move(shape), std::move(v));
}

/// Runs work(t) on kThreads threads released together; rethrows the first failure.
void run_threads(const std::function<void(int)>& work) {
  std::atomic<int> ready{0};
  std::vector<std::exception_ptr> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      try {
        work(t);
      } catch (...) {
        errors[static_cast<std::size_t>(t)] = std::current_exception();
      }
    });
  for (auto& th : threads) th.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

/// An observer whose update counts its observations with a plain read-modify-write and
/// records every moment at which two updates run at once.
class OverlapProbe : public Observer {
 public:
  OverlapProbe() : Observer("input", args_of(Strategy::kTensor), {}) {}
  std::string_view name() const override { return "overlap_probe"; }
  void update_state(std::map<std::string, Tensor>& st, const FlatView&) const override {
    if (inside_.fetch_add(1) != 0) overlaps_.fetch_add(1);
    Tensor& n = st["observations"];
    if (!n.defined()) n = Tensor(DType::kI64, {1});
    const double before = n.get(0);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    n.set(0, before + 1);
    inside_.fetch_sub(1);
  }
  int overlaps() const { return overlaps_.load(); }

 protected:
  std::vector<std::string> statistic_names() const override { return {"observations"}; }

 private:
  mutable std::atomic<int> inside_{0};
  mutable std::atomic<int> overlaps_{0};
};

TEST(ObserverThreads, ConcurrentCallsOnOneObserverNeverOverlap) {
  auto probe = std::make_shared<OverlapProbe>();
  const Tensor x = noisy({4, 8}, 1);
  constexpr int kRounds = 25;
  run_threads([&](int t) {
    for (int i = 0; i < kRounds; ++i) {
      probe->observe(x.view());
      if ((i + t) % 5 == 0) EXPECT_TRUE(probe->has_statistics());
    }
  });
  EXPECT_EQ(probe->overlaps(), 0);
  const auto stats = probe->get_statistics();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].second.get(0), kThreads * kRounds);  // no update lost
}

TEST(ObserverThreads, SharedStaticMinMaxEqualsOneThread) {
  // static_minmax keeps the running min / max: the order of the threads' observations
  // does not change the result.
  const QuantizationArgs args = args_of(Strategy::kTensor, std::nullopt, 8, false);
  constexpr int kRounds = 40;
  std::vector<std::vector<Tensor>> batches(kThreads);
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kRounds; ++i)
      batches[t].push_back(noisy({16, 64}, static_cast<uint32_t>(1000 * t + i), 1.0 + (i % 5)));
  auto shared = load_observer("static_minmax", "input", args);
  run_threads([&](int t) {
    for (int i = 0; i < kRounds; ++i) {
      shared->observe(batches[t][i].view());
      if (i % 7 == 0) {
        EXPECT_TRUE(shared->has_statistics());
        EXPECT_EQ(shared->get_statistics().size(), 2u);
        EXPECT_FALSE(shared->export_statistics().empty());
      }
    }
  });
  auto single = load_observer("static_minmax", "input", args);
  for (int t = 0; t < kThreads; ++t)
    for (const Tensor& b : batches[t]) single->observe(b.view());
  const QParams got = shared->get_qparams(), want = single->get_qparams();
  EXPECT_TRUE(got.scale.bit_equal(want.scale));
  EXPECT_TRUE(got.zero_point.bit_equal(want.zero_point));
}

TEST(ObserverThreads, ObserveAndConsumeRaceOnOneWeightObserver) {
  // Each thread's observe + get_qparams pair races with the others': every get_qparams
  // returns the qparams of a complete observation of the one weight, or finds none.
  const Tensor w = noisy({32, 128}, 7);
  const QuantizationArgs args = args_of(Strategy::kGroup, 32, 4);
  auto ref = load_observer("memoryless_mse", "weight", args);
  ref->observe(w.view());
  const QParams want = ref->get_qparams();
  auto shared = load_observer("memoryless_mse", "weight", args);
  std::atomic<int> got_some{0};
  run_threads([&](int) {
    for (int i = 0; i < 6; ++i) {
      shared->observe(w.view());
      try {
        const QParams q = shared->get_qparams();
        EXPECT_TRUE(q.scale.bit_equal(want.scale));
        EXPECT_TRUE(q.zero_point.bit_equal(want.zero_point));
        got_some.fetch_add(1);
      } catch (const PreconditionError&) {
        // another thread consumed the statistics first
      }
      shared->delete_statistics();
    }
  });
  EXPECT_GT(got_some.load(), 0);
}

TEST(ObserverThreads, FusedPartnersShareOneLockEvenWhileBeingFused) {
  // tensor_group partners read and consume each other's statistics (R6.10.4). Threads
  // use the members while the main thread fuses them, so some calls wait on a lock
  // group the fusion replaces.
  const QuantizationArgs args = nvfp4_args();
  std::vector<Tensor> ws;
  for (uint32_t i = 0; i < 3; ++i) ws.push_back(noisy({16, 64}, 50 + i, 1.0 + i));
  const auto make_group = [&] {
    std::vector<std::shared_ptr<Observer>> obs;
    for (const Tensor& w : ws) {
      obs.push_back(load_observer("memoryless_minmax", "weight", args));
      obs.back()->bind_weight(w.view());
    }
    return obs;
  };
  auto expected = make_group();
  fuse_observers(expected);
  const Tensor want = *expected[0]->get_global_scale();

  auto obs = make_group();
  std::atomic<bool> fused{false};
  std::thread fuser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    fuse_observers(obs);
    fused.store(true);
  });
  run_threads([&](int t) {
    const std::size_t k = static_cast<std::size_t>(t) % ws.size();
    for (int i = 0; i < 30 || !fused.load(); ++i) {
      obs[k]->observe(ws[k].view());
      if (fused.load()) EXPECT_TRUE(obs[k]->get_global_scale()->bit_equal(want));
      obs[k]->export_statistics();
      obs[k]->fused_partners();
    }
  });
  fuser.join();
  for (const auto& o : obs) EXPECT_TRUE(o->get_global_scale()->bit_equal(want));
  // Cooperative deletion across the group, from several threads.
  run_threads([&](int t) {
    const std::size_t k = static_cast<std::size_t>(t) % ws.size();
    obs[k]->observe(ws[k].view());
    obs[k]->get_global_scale();
  });
  for (const auto& o : obs) o->get_qparams();
}

}  // namespace
}  // namespace qobs
