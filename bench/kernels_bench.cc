// Google Benchmark suite: every observer on LLM-sized weights, f32 and bf16,
// plus a plain streaming read of the same tensor as the bandwidth yardstick for
// min-max. Threads: QOBS_NUM_THREADS (default: hardware concurrency); level: QOBS_SIMD.
//
// Default shape 4096x4096 keeps a run to about a minute on 2 cores; QOBS_BENCH_FULL=1
// adds 4096x11008 and 14336x4096.
//
// Counters: bytes_per_second (tensor bytes read), elem_cand/s (element x candidate
// pairs of the grid search per second, all threads).
#include <benchmark/benchmark.h>

#include <atomic>
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_schemes.h"
#include "kernels/kernels.h"
#include "kernels/parallel/thread_pool.h"
#include "qobs/qobs.h"

namespace {

using qobs::DType;

const qobs::Tensor& weight(int64_t rows, int64_t cols, DType dt) {
  static std::vector<std::pair<std::string, qobs::Tensor>> cache;
  const std::string key = std::to_string(rows) + "x" + std::to_string(cols) + std::string(qobs::dtype_name(dt));
  for (auto& [k, t] : cache)
    if (k == key) return t;
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (float& x : v) x = nd(rng);
  cache.emplace_back(key, qobs::Tensor::from_floats(dt, {rows, cols}, v));
  return cache.back().second;
}

/// A bench scheme name, or else a preset's weight args (W4A16_ASYM, MXFP4A16).
qobs::QuantizationArgs scheme_or_preset(const std::string& name) {
  for (const char* preset : {"W4A16_ASYM", "MXFP4A16"})
    if (name == preset) return qobs::preset_scheme(name).weights->validated();
  return qobs::bench::scheme_args(name);
}

int64_t candidates(const std::string& observer) {
  if (observer == "memoryless_mse" || observer == "mse") return 20;
  if (observer == "nvfp4_expanded_mse") return 111;
  if (observer == "imatrix_mse") return 20;  // 21 evaluated unless early stopping
  return 0;
}

void BM_Observer(benchmark::State& state, std::string observer, std::string scheme, DType dt, int64_t rows,
                 int64_t cols) {
  const qobs::Tensor& w = weight(rows, cols, dt);
  const qobs::QuantizationArgs args = scheme_or_preset(scheme);
  std::vector<float> imp(static_cast<std::size_t>(cols));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.1f, 2.0f);
  for (float& x : imp) x = u(rng);
  for (auto _ : state) {
    auto obs = qobs::load_observer(observer, "weight", args);
    if (observer == "imatrix_mse" || observer == "imatrix_lsq") {
      obs->attach(cols);
      obs->accumulate_input(qobs::TensorView(imp.data(), DType::kF32, {1, cols}));
    }
    obs->observe(w.view());
    benchmark::DoNotOptimize(obs->get_qparams());
  }
  const double n = static_cast<double>(rows * cols);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * static_cast<double>(qobs::dtype_size(dt))));
  if (candidates(observer) > 0)
    state.counters["elem_cand/s"] = benchmark::Counter(n * static_cast<double>(candidates(observer)),
                                                       benchmark::Counter::kIsIterationInvariantRate);
}

/// One calibration batch of activations (tokens x hidden) through an activation
/// observer, as llm-compressor's calibration hooks call it once per batch per Linear:
/// the observer keeps its running statistics across iterations (static / EMA).
void BM_ActivationObserver(benchmark::State& state, std::string observer, std::string scheme, DType dt, int64_t rows,
                           int64_t cols) {
  const qobs::Tensor& x = weight(rows, cols, dt);
  auto obs = qobs::load_observer(observer, "input", qobs::bench::scheme_args(scheme));
  for (auto _ : state) obs->observe(x.view());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * rows * cols *
                          static_cast<int64_t>(qobs::dtype_size(dt)));
}

/// The imatrix forward-pre hook's work on one batch: sum of x^2 per input feature.
void BM_ImatrixAccumulate(benchmark::State& state, DType dt, int64_t rows, int64_t cols) {
  const qobs::Tensor& x = weight(rows, cols, dt);
  auto obs = qobs::load_observer("imatrix_mse", "weight", qobs::bench::scheme_args("int4_g128"));
  obs->attach(cols);
  for (auto _ : state) obs->accumulate_input(x.view());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * rows * cols *
                          static_cast<int64_t>(qobs::dtype_size(dt)));
}

/// The min-max kernel alone (kernels::minmax on the flattened view), without the
/// observer's input check, statistics tensors and qparam computation.
void BM_MinMaxKernel(benchmark::State& state, std::string scheme, DType dt, int64_t rows, int64_t cols) {
  const qobs::Tensor& w = weight(rows, cols, dt);
  const qobs::FlatView flat = qobs::flatten_for_calibration(w.view(), "weight", qobs::bench::scheme_args(scheme));
  std::vector<float> mins(static_cast<std::size_t>(flat.layout.num_qparams())), maxs(mins.size());
  for (auto _ : state) {
    qobs::kernels::minmax(flat, mins.data(), maxs.data());
    benchmark::DoNotOptimize(mins.data());
  }
  state.SetBytesProcessed(
      static_cast<int64_t>(state.iterations() * rows * cols * static_cast<int64_t>(qobs::dtype_size(dt))));
}

/// The steps of a min-max observer after the kernel, on the statistics of the same
/// weight: "stats_scan" is what the observer reads of them (the finiteness check and the
/// global amax), "qparams" is R4.1 into scale and zero-point tensors (with the global
/// scale for tensor_group). Their sum with minmax_kernel is most of the observer's time.
void BM_MinMaxSteps(benchmark::State& state, std::string scheme, std::string step, DType dt, int64_t rows,
                    int64_t cols) {
  const qobs::Tensor& w = weight(rows, cols, dt);
  const qobs::QuantizationArgs args = qobs::bench::scheme_args(scheme);
  const qobs::FlatView flat = qobs::flatten_for_calibration(w.view(), "weight", args);
  const auto [mins, maxs] = qobs::kernels::minmax_stats(flat);
  std::optional<qobs::Tensor> global;
  if (args.get_strategy() == qobs::Strategy::kTensorGroup) {
    const auto lo = qobs::kernels::nan_min_max(mins.view()), hi = qobs::kernels::nan_min_max(maxs.view());
    const double amax = std::max(-lo->first, hi->second);
    global = qobs::generate_gparam(qobs::Tensor::from_values(mins.dtype(), {1}, {-amax}),
                                   qobs::Tensor::from_values(mins.dtype(), {1}, {amax}));
  }
  for (auto _ : state) {
    if (step == "stats_scan") {
      benchmark::DoNotOptimize(qobs::kernels::first_non_finite(mins.view()) +
                               qobs::kernels::first_non_finite(maxs.view()));
      benchmark::DoNotOptimize(qobs::kernels::nan_min_max(mins.view()));
      benchmark::DoNotOptimize(qobs::kernels::nan_min_max(maxs.view()));
    } else {
      benchmark::DoNotOptimize(qobs::kernels::calculate_qparams(mins, maxs, args, global ? &*global : nullptr,
                                                                qobs::NumericMode::kParity, 0));
    }
  }
  state.SetBytesProcessed(
      static_cast<int64_t>(state.iterations() * rows * cols * static_cast<int64_t>(qobs::dtype_size(dt))));
}

/// The grid search alone (kernels::grid_search on the flattened view), with the batch
/// kernel (one group per vector lane) or with the one-group path: the same results, so
/// the pair shows what the batch kernel buys. nvfp4_defaults: nvfp4_expanded_mse's
/// 111 candidates and 1.8x range; otherwise memoryless_mse's 20.
void BM_GridSearch(benchmark::State& state, std::string scheme, bool nvfp4_defaults, bool batch, int64_t rows,
                   int64_t cols, DType dt) {
  const qobs::Tensor& w = weight(rows, cols, dt);
  qobs::QuantizationArgs args = qobs::bench::scheme_args(scheme);
  if (args.get_strategy() == qobs::Strategy::kTensorGroup) args.scale_dtype.reset();  // R6.6.2
  const qobs::FlatView flat = qobs::flatten_for_calibration(w.view(), "weight", args);
  qobs::kernels::GridSearchConfig cfg;
  if (nvfp4_defaults) {
    cfg.maxshrink = 1.0 - 0.8 / 1.8;
    cfg.grid = 200.0;
    cfg.patience = 1000;
    cfg.expand = 1.8;
  }
  cfg.batch_groups = batch;
  int64_t evaluated = 0;
  for (auto _ : state) {
    const qobs::kernels::GridSearchResult r = qobs::kernels::grid_search(flat, args, cfg);
    evaluated = r.candidates_evaluated;
    benchmark::DoNotOptimize(r.best_min.data());
  }
  state.counters["elem_cand/s"] =
      benchmark::Counter(static_cast<double>(rows * cols * evaluated), benchmark::Counter::kIsIterationInvariantRate);
}

/// The yardstick for min-max: read every float of the tensor once, same threads.
void BM_StreamRead(benchmark::State& state, int64_t rows, int64_t cols, DType dt) {
  // the tensor's bytes read as floats: a bf16 weight is the same 32-bit stream at half
  // the length (the values themselves do not matter to a read)
  const qobs::Tensor& w = weight(rows, cols, dt);
  const float* p = static_cast<const float*>(w.data());
  const int64_t n = rows * cols * static_cast<int64_t>(qobs::dtype_size(dt)) / 4;
  const int threads = qobs::kernels::resolve_num_threads(0);
  const int64_t parts = threads * 4, step = (n + parts - 1) / parts;
  for (auto _ : state) {
    std::vector<float> partial(static_cast<std::size_t>(parts));
    qobs::kernels::parallel_for(parts, threads, [&](int64_t t, int) {
      // 8 independent max chains: the compiler vectorizes this into a pure stream
      float m[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const int64_t b = t * step, e = std::min(n, b + step);
      int64_t j = b;
      for (; j + 8 <= e; j += 8)
        for (int l = 0; l < 8; ++l) m[l] = std::max(m[l], p[j + l]);
      for (; j < e; ++j) m[0] = std::max(m[0], p[j]);
      float r = m[0];
      for (float x : m) r = std::max(r, x);
      partial[static_cast<std::size_t>(t)] = r;
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}

struct Shape {
  int64_t rows, cols;
};

void register_all() {
  std::vector<Shape> shapes{{4096, 4096}};
  if (const char* full = std::getenv("QOBS_BENCH_FULL"); full && std::string(full) == "1") {
    shapes.push_back({4096, 11008});
    shapes.push_back({14336, 4096});
  }
  for (const Shape& s : shapes) {
    const std::string sh = std::to_string(s.rows) + "x" + std::to_string(s.cols);
    for (DType dt : {DType::kF32, DType::kBF16})
      benchmark::RegisterBenchmark(("stream_read/" + std::string(dt == DType::kF32 ? "f32/" : "bf16/") + sh).c_str(),
                                   BM_StreamRead, s.rows, s.cols, dt)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MinTime(0.5);
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const std::string d = dt == DType::kF32 ? "f32" : "bf16";
      // activations: one 2048-token batch of the hidden size
      const std::string act = "2048x" + std::to_string(s.cols);
      for (const char* o : {"memoryless_minmax", "static_minmax", "minmax"})
        benchmark::RegisterBenchmark(("activation/" + std::string(o) + "/int8_tensor/" + d + "/" + act).c_str(),
                                     BM_ActivationObserver, std::string(o), std::string("int8_tensor"), dt, 2048,
                                     s.cols)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->MinTime(0.5);
      benchmark::RegisterBenchmark(("activation/imatrix_accumulate/" + d + "/" + act).c_str(), BM_ImatrixAccumulate, dt,
                                   2048, s.cols)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MinTime(0.5);
      for (const char* scheme : {"int4_g128", "nvfp4", "int8_channel"})
        benchmark::RegisterBenchmark(("minmax_kernel/" + std::string(scheme) + "/" + d + "/" + sh).c_str(),
                                     BM_MinMaxKernel, std::string(scheme), dt, s.rows, s.cols)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->MinTime(0.5);
      for (const char* step : {"stats_scan", "qparams"})
        benchmark::RegisterBenchmark(("minmax_steps/nvfp4/" + std::string(step) + "/" + d + "/" + sh).c_str(),
                                     BM_MinMaxSteps, std::string("nvfp4"), std::string(step), dt, s.rows, s.cols)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->MinTime(0.5);
      struct Obs {
        const char* name;
        const char* scheme;
        int iterations;
      };
      if (dt == DType::kF32)
        for (bool batch : {true, false}) {
          const std::string path = batch ? "batch" : "one_group";
          benchmark::RegisterBenchmark(("grid_search/nvfp4_expanded/" + path + "/f32/" + sh).c_str(), BM_GridSearch,
                                       std::string("nvfp4"), true, batch, s.rows, s.cols, dt)
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime()
              ->Iterations(2);
          benchmark::RegisterBenchmark(("grid_search/mse_int4_g128/" + path + "/f32/" + sh).c_str(), BM_GridSearch,
                                       std::string("int4_g128"), false, batch, s.rows, s.cols, dt)
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime()
              ->Iterations(5);
        }
      // bf16 grid searches (the 16-bit batch kernel, or one group at a time)
      if (dt == DType::kBF16)
        for (bool batch : {true, false}) {
          const std::string path = batch ? "batch" : "one_group";
          benchmark::RegisterBenchmark(("grid_search/nvfp4_expanded/" + path + "/bf16/" + sh).c_str(), BM_GridSearch,
                                       std::string("nvfp4"), true, batch, s.rows, s.cols, dt)
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime()
              ->Iterations(2);
          benchmark::RegisterBenchmark(("grid_search/mse_int4_g128/" + path + "/bf16/" + sh).c_str(), BM_GridSearch,
                                       std::string("int4_g128"), false, batch, s.rows, s.cols, dt)
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime()
              ->Iterations(5);
        }
      // every observer of the registry, on the formats it is used with
      for (const Obs& o :
           {Obs{"memoryless_minmax", "int4_g128", 0}, Obs{"memoryless_minmax", "nvfp4", 0},
            Obs{"memoryless_minmax", "int8_channel", 0}, Obs{"memoryless_minmax", "fp8_channel", 0},
            Obs{"static_minmax", "int4_g128", 0}, Obs{"static_minmax", "nvfp4", 0}, Obs{"minmax", "int4_g128", 0},
            Obs{"minmax", "fp8_channel", 0}, Obs{"memoryless_mse", "int4_g128", 2}, Obs{"memoryless_mse", "nvfp4", 1},
            Obs{"memoryless_mse", "int8_channel", 1}, Obs{"memoryless_mse", "fp8_channel", 1},
            Obs{"mse", "int4_g128", 2}, Obs{"nvfp4_expanded_mse", "nvfp4", 1}, Obs{"imatrix_mse", "int4_g128", 2},
            Obs{"imatrix_mse", "int8_channel", 1},
            // the least-squares observers (docs/LSQ.md#L4) beside the reference
            // observers they must not be slower than, on the same tensors
            Obs{"lsq_mse", "int4_g128", 1}, Obs{"imatrix_lsq", "int4_g128", 1}, Obs{"memoryless_mse", "W4A16_ASYM", 1},
            Obs{"imatrix_mse", "W4A16_ASYM", 1}, Obs{"lsq_mse", "W4A16_ASYM", 1}, Obs{"imatrix_lsq", "W4A16_ASYM", 1},
            Obs{"lsq_mse", "nvfp4", 1}, Obs{"imatrix_lsq", "nvfp4", 1}, Obs{"memoryless_mse", "MXFP4A16", 1},
            Obs{"lsq_mse", "MXFP4A16", 1}, Obs{"imatrix_lsq", "MXFP4A16", 1}}) {
        auto* b =
            benchmark::RegisterBenchmark((std::string(o.name) + "/" + o.scheme + "/" + d + "/" + sh).c_str(),
                                         BM_Observer, std::string(o.name), std::string(o.scheme), dt, s.rows, s.cols);
        b->Unit(benchmark::kMillisecond)->UseRealTime();
        if (o.iterations > 0) b->Iterations(o.iterations);
        else b->MinTime(0.5);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
