// The grid search driver (kernels.h): the candidate list of R6.6.5 / R6.8.6, and the
// search itself, whose implementation is picked once per call -- the fused, threaded
// CPU path at the active SIMD level (grid_search_cpu.cc). The plain reference is
// grid_search_ref.cc.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/grid_search/grid_search_cpu.h"
#include "kernels/grid_search/grid_search_cuda.h"
#include "kernels/grid_search/select.h"
#include "kernels/kernels_cuda.h"
#include "core/check.h"
#include "kernels/kernels.h"
#include "kernels/pow/libm_powf.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels {

std::vector<double> grid_candidates(const GridSearchConfig& cfg) {
  std::vector<double> out;
  // R6.6.5: S = trunc(maxshrink * grid) in double; candidates p_i = 1 - i/grid.
  const double prod = std::trunc(cfg.maxshrink * cfg.grid);
  if (cfg.imatrix) {
    // R6.8.6: max(1, S) steps and S + 1 candidates, i = 0..S inclusive (Q7)
    const int64_t S = std::max<int64_t>(1, static_cast<int64_t>(prod));
    for (int64_t i = 0; i <= S; ++i) out.push_back(1.0 - static_cast<double>(i) / cfg.grid);
    return out;
  }
  const int64_t S = prod > 0 ? static_cast<int64_t>(prod) : 0;
  for (int64_t i = 0; i < S; ++i) out.push_back(1.0 - static_cast<double>(i) / cfg.grid);
  return out;
}

GridSearchResult grid_search(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                             const FlatView* weights) {
  return cpu::grid_search(flat, search_args, cfg, weights, active_simd_level(), cfg.num_threads);
}

namespace cuda {

CudaSearchPlan cuda_search_plan(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                                const FlatView* weights) {
  CudaSearchPlan p;
  GridSearchArgs& g = p.args;
  const DType dt = flat.dtype;
  if (dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF16) {
    p.unsupported =
        std::string("observed dtype ") + std::string(dtype_name(dt)) + " (the device path reads f32, bf16, f16)";
    return p;
  }
  const auto x = flat_map_of(flat);
  const auto w = weights ? flat_map_of(*weights) : std::optional<FlatMap>(FlatMap{});
  if (!x || !w) {
    p.unsupported = "a layout with more axes than the device view holds";
    return p;
  }
  g.x = *x;
  g.weighted = weights != nullptr;
  if (weights) g.w = *w;
  p.shrink = qobs::detail::search_shrink_factors(cfg, dt);
  g.S = static_cast<int64_t>(p.shrink.size());
  g.expand = cfg.expand;
  g.a = qobs::detail::Arith{dt, cfg.mode};
  g.qplan = qobs::detail::QParamPlan::make(search_args, dt, std::nullopt, cfg.mode);
  g.dplan = qobs::detail::QdqPlan::make(search_args, dt, dt, true, true, cfg.mode);
  const auto em = qobs::detail::ErrorModel::make(cfg, dt);
  g.err_dt = em.err_dt;
  g.initial_best = em.initial_best();
  g.stop = qobs::detail::StopRule::of(cfg);
  ErrorTerm& t = g.term;
  t.elem_dt = em.elem_dt;
  t.mode = cfg.mode;
  t.norm = cfg.norm;
  t.weighted = em.weighted;
  const qobs::detail::Arith ae{em.elem_dt, cfg.mode};
  t.y = static_cast<float>(ae.cast(cfg.norm));
  const bool narrow16 = cfg.mode == NumericMode::kParity && (em.elem_dt == DType::kBF16 || em.elem_dt == DType::kF16);
  if (cfg.norm == 2.0 || cfg.norm == 3.0) {
    t.pow = DevicePow::kArith;
  } else if (narrow16) {
    // Arith::pow_abs of every non-negative 16-bit |e|, as the CPU path's kTable16
    t.pow = DevicePow::kTable16;
    p.pow_table.resize(32768);
    for (uint32_t b = 0; b < 32768; ++b) {
      const float e =
          em.elem_dt == DType::kBF16 ? bf16_to_float(static_cast<uint16_t>(b)) : f16_to_float(static_cast<uint16_t>(b));
      p.pow_table[b] = static_cast<float>(ae.pow_abs(e, cfg.norm));
    }
  } else if (em.elem_dt != DType::kF64 && detail::powf_matches(t.y)) {
    t.pow = DevicePow::kReplay;
  } else {
    p.unsupported =
        "|e|^" + std::to_string(cfg.norm) + " with this host's libm powf, which the device cannot replay (libm_powf.h)";
  }
  return p;
}

}  // namespace cuda

namespace cuda {

void grid_search(const Backend& b, const CudaSearchPlan& plan, void* best_min, void* best_max, DType out_dtype,
                 Stream s) {
  QOBS_CHECK(plan.unsupported.empty(), PreconditionError, "grid search on the device: ", plan.unsupported);
  GridSearchArgs g = plan.args;
  const int64_t nq = g.x.num_qparams, W = g.words();
  auto upload = [&](const void* host, std::size_t bytes) {
    DeviceBuffer d(b, bytes, s);
    if (bytes) b.copy(d.get(), host, bytes, CopyKind::kHostToDevice, s);
    return d;
  };
  DeviceBuffer shrink = upload(plan.shrink.data(), plan.shrink.size() * sizeof(double));
  DeviceBuffer table = upload(plan.pow_table.data(), plan.pow_table.size() * sizeof(float));
  DeviceBuffer log2_tab, log2_poly, exp2_tab, exp2_poly;
  if (g.term.pow == DevicePow::kReplay) {
    const kernels::detail::PowfTables* t = kernels::detail::libm_powf_tables();
    QOBS_CHECK(t != nullptr, PreconditionError, "grid search on the device: the libm powf replay is not available");
    log2_tab = upload(t->log2_tab, 32 * sizeof(double));
    log2_poly = upload(t->log2_poly, 5 * sizeof(double));
    exp2_tab = upload(t->exp2_tab, 32 * sizeof(uint64_t));
    exp2_poly = upload(t->exp2_poly, 3 * sizeof(double));
    g.term.powf = {log2_tab.as<double>(), log2_poly.as<double>(), exp2_tab.as<uint64_t>(), t->exp2_shift,
                   exp2_poly.as<double>()};
  }
  DeviceBuffer lo(b, static_cast<std::size_t>(nq) * sizeof(float), s),
      hi(b, static_cast<std::size_t>(nq) * sizeof(float), s);
  DeviceBuffer m0(b, static_cast<std::size_t>(nq) * sizeof(double), s),
      M0(b, static_cast<std::size_t>(nq) * sizeof(double), s);
  DeviceBuffer bits(b, static_cast<std::size_t>(nq * W) * sizeof(uint32_t), s);
  DeviceBuffer any(b, static_cast<std::size_t>(W) * sizeof(uint32_t), s);
  DeviceBuffer evaluated(b, sizeof(int64_t), s);
  // step 1: the groups' min-max (R6.3.1), as the search reads them (f32)
  MinmaxArgs mm;
  mm.x = g.x;
  constexpr int64_t kChunk = 4096;
  mm.chunk = kChunk;
  mm.chunks = std::max<int64_t>(1, (g.x.len + kChunk - 1) / kChunk);
  DeviceBuffer plo(b, static_cast<std::size_t>(nq * mm.chunks) * sizeof(double), s);
  DeviceBuffer phi(b, static_cast<std::size_t>(nq * mm.chunks) * sizeof(double), s);
  mm.part_lo = plo.as<double>();
  mm.part_hi = phi.as<double>();
  mm.out_dtype = DType::kF32;
  mm.mins = lo.get();
  mm.maxs = hi.get();
  b.minmax(mm, s);
  g.shrink = shrink.as<double>();
  g.term.table = table.as<float>();
  g.lo = lo.as<float>();
  g.hi = hi.as<float>();
  g.m0 = m0.as<double>();
  g.M0 = M0.as<double>();
  g.bits = bits.as<uint32_t>();
  g.any = any.as<uint32_t>();
  g.evaluated = evaluated.as<int64_t>();
  g.best_min = best_min;
  g.best_max = best_max;
  g.best_dtype = out_dtype;
  b.grid_search(g, s);
}

}  // namespace cuda

}  // namespace qobs::kernels
