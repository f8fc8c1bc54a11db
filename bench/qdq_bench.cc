// fake_quantize and packing on a 4096x4096 weight: the scalar reference
// (kernels::ref, the element-by-element path the public functions used before) against
// the dispatched fast path. Threads: QOBS_NUM_THREADS; level: QOBS_SIMD. Part of
// qobs_bench (registered statically; kernels_bench.cc holds main).
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "bench_schemes.h"
#include "kernels/kernels.h"
#include "qobs/packing.h"
#include "qobs/qobs.h"

namespace {

using qobs::DType;
using qobs::Tensor;
using qobs::kernels::QdqOp;

constexpr int64_t kRows = 4096, kCols = 4096;

Tensor make_weight(DType dt) {
  std::vector<float> v(static_cast<std::size_t>(kRows * kCols));
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (float& x : v) x = nd(rng);
  return Tensor::from_floats(dt, {kRows, kCols}, v);
}

/// A weight with its dynamic qparams (R4.3) and, for tensor_group, its global scale.
struct Problem {
  Tensor w, scale, zp;
  std::optional<Tensor> global;
  qobs::QuantizationArgs args;
};

const Problem& problem(const std::string& scheme, DType dt) {
  static std::vector<std::pair<std::string, Problem>> cache;
  const std::string key = scheme + std::string(qobs::dtype_name(dt));
  for (auto& [k, p] : cache)
    if (k == key) return p;
  Problem p;
  p.w = make_weight(dt);
  p.args = qobs::bench::scheme_args(scheme);
  if (p.args.get_strategy() == qobs::Strategy::kTensorGroup) {
    const std::vector<double> v = p.w.to_doubles();
    double lo = 0, hi = 0;
    for (double x : v) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    p.global = qobs::generate_gparam(Tensor::from_values(dt, {1}, {lo}), Tensor::from_values(dt, {1}, {hi}));
  }
  auto qp = qobs::compute_dynamic_scales_and_zp(p.w.view(), p.args, p.global ? &*p.global : nullptr);
  p.scale = std::move(qp.scale);
  p.zp = std::move(qp.zero_point);
  cache.emplace_back(key, std::move(p));
  return cache.back().second;
}

void BM_FakeQuantize(benchmark::State& state, bool reference, std::string scheme, DType dt) {
  const Problem& p = problem(scheme, dt);
  const Tensor* g = p.global ? &*p.global : nullptr;
  for (auto _ : state) {
    Tensor out = reference ? qobs::kernels::ref::qdq(QdqOp::kFakeQuantize, p.w.view(), p.scale, &p.zp, p.args, nullptr,
                                                     g, std::nullopt, qobs::NumericMode::kParity)
                           : qobs::fake_quantize(p.w.view(), p.scale, &p.zp, p.args, nullptr, g);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * kRows * kCols * static_cast<int64_t>(qobs::dtype_size(dt)));
}

/// pack_int_rows of the INT4 codes of the weight (int8 values, as compress.cc packs them).
void BM_PackIntRows(benchmark::State& state, bool reference, DType dt) {
  const Problem& p = problem("int4_g128", dt);
  const Tensor q = qobs::quantize(p.w.view(), p.scale, &p.zp, p.args, nullptr, nullptr, DType::kI8);
  for (auto _ : state) {
    Tensor out = reference ? qobs::kernels::ref::pack_int_rows(q, 4, "w") : qobs::pack_int_rows(q, 4, "w");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * kRows * kCols);
}

/// pack_fp4 of the NVFP4 grid values of the weight, in the weight's dtype.
void BM_PackFp4(benchmark::State& state, bool reference, DType dt) {
  const Problem& p = problem("nvfp4", dt);
  const Tensor q = qobs::quantize(p.w.view(), p.scale, nullptr, p.args, nullptr, &*p.global, dt);
  for (auto _ : state) {
    Tensor out = reference ? qobs::kernels::ref::pack_fp4(q, "w") : qobs::pack_fp4(q, "w");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * kRows * kCols * static_cast<int64_t>(qobs::dtype_size(dt)));
}

int register_qdq() {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const std::string d = dt == DType::kF32 ? "f32" : "bf16";
    for (bool reference : {true, false}) {
      const std::string impl = reference ? "/ref" : "/fast";
      for (const char* scheme : {"int4_g128", "nvfp4"})
        benchmark::RegisterBenchmark(("fake_quantize/" + std::string(scheme) + "/" + d + impl).c_str(), BM_FakeQuantize,
                                     reference, std::string(scheme), dt)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->MinTime(reference ? 0.01 : 0.5);
      benchmark::RegisterBenchmark(("pack_int_rows/int4/" + d + impl).c_str(), BM_PackIntRows, reference, dt)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MinTime(0.5);
      benchmark::RegisterBenchmark(("pack_fp4/nvfp4/" + d + impl).c_str(), BM_PackFp4, reference, dt)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MinTime(reference ? 0.1 : 0.5);
    }
  }
  return 0;
}

const int kRegistered = register_qdq();

}  // namespace
