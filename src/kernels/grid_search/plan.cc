#include "kernels/grid_search/plan.h"

#include <algorithm>
#include <cmath>

#include "kernels/grid_search/exact_batch_simd.h"
#include "kernels/pow/libm_powf.h"
#include "kernels/grid_search/poly_batch_simd.h"

namespace qobs::kernels::cpu {

using qobs::detail::Arith;
using namespace qobs::kernels::detail;

namespace {

static_assert(kSumBlock == qobs::detail::kErrorSumBlock, "SIMD and reference blocks must agree");

Narrow narrow_for(DType dt, NumericMode mode) {
  if (mode == NumericMode::kWide) return Narrow::kNone;
  if (dt == DType::kBF16) return Narrow::kBF16;
  if (dt == DType::kF16) return Narrow::kF16;
  return Narrow::kNone;
}

VectorPlan vector_plan(const GridSearchConfig& cfg, DType dt, const qobs::detail::ErrorModel& em,
                       const qobs::detail::QdqPlan& dplan, bool symmetric, const SearchKernels& kernels) {
  VectorPlan v;
  auto vec_dtype = [](DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; };
  v.simd = kernels.block != nullptr && vec_dtype(dt) && vec_dtype(em.elem_dt);
  if (!v.simd) return v;
  BlockKernelArgs& k = v.proto;
  k.has_zp = !symmetric;  // symmetric zero points are 0: y + 0 and d - 0 are exact
  k.data_narrow = narrow_for(dt, cfg.mode);
  k.err_narrow = narrow_for(em.elem_dt, cfg.mode);
  k.grid = dplan.grid;
  k.q_min = static_cast<float>(dplan.q_min);
  k.q_max = static_cast<float>(dplan.q_max);
  // Arith::pow_abs: the exponent is a host scalar converted to the error dtype first
  // (bf16 evaluates |e|^2.40625 for 2.4), then powf in f32
  k.norm = static_cast<float>(Arith{em.elem_dt, cfg.mode}.cast(cfg.norm));
  if (cfg.norm == 2.0) k.norm_kind = NormKind::kTwo;
  else if (cfg.norm == 3.0) k.norm_kind = NormKind::kThree;
  else if (k.err_narrow != Narrow::kNone) {
    // 16-bit error terms: tabulate the reference's own pow_abs for all 2^15
    // non-negative patterns (~1 ms), exact by construction
    const Arith ae{em.elem_dt, cfg.mode};
    v.pow_table.resize(32768);
    for (uint32_t b = 0; b < 32768; ++b) {
      const float e =
          em.elem_dt == DType::kBF16 ? bf16_to_float(static_cast<uint16_t>(b)) : f16_to_float(static_cast<uint16_t>(b));
      v.pow_table[b] = static_cast<float>(ae.pow_abs(e, cfg.norm));
    }
    // only the exact batch kernel's bf16 instantiations gather from the f64 copy, by
    // all 16 bits of e: the sign's half repeats the terms (it looks up r' - |x|, whose
    // sign is arbitrary, exact_diff_of_magnitude)
    if (em.elem_dt == DType::kBF16) {
      v.pow_table64.assign(v.pow_table.begin(), v.pow_table.end());
      v.pow_table64.insert(v.pow_table64.end(), v.pow_table.begin(), v.pow_table.end());
    }
    k.norm_kind = NormKind::kTable16;
  } else if (powf_matches(k.norm)) {
    k.norm_kind = NormKind::kPowReplay;
    k.tables = libm_powf_tables();
  } else {
    k.norm_kind = NormKind::kPowScalar;
  }
  return v;
}

CertifiedPlan certified_plan(const GridSearchConfig& cfg, DType dt, const qobs::detail::ErrorModel& em,
                             const qobs::detail::QdqPlan& dplan, const std::vector<double>& shrink,
                             const VectorPlan& vec, bool weighted, int64_t len) {
  CertifiedPlan c;
  if (!vec.simd) return c;
  const BlockKernelArgs& k = vec.proto;
  // The certified approximation needs f32 terms and sums (the bound is relative to
  // f32 rounding) and non-negative unit weights.
  c.approx = (k.norm_kind == NormKind::kPowReplay || k.norm_kind == NormKind::kPowScalar) && !weighted &&
             em.elem_dt == DType::kF32 && em.err_dt == DType::kF32 && k.norm >= 1 && k.norm <= 8;
  // kPowApproxRelErr (its exponent scaling) + libm powf's <= 1 ulp + the final f32
  // rounding of the sum, with room to spare
  c.approx_rel = kPowApproxRelErr * std::max(1.0, static_cast<double>(k.norm) / 2.4) + 0x1p-20;
  // Unclamped elements have |r| <= 1/2 (INT) or <= 1 (FP4, steps up to 2); the ones
  // the smallest candidate range clamps reach about Q (1 / (expand p_min) - 1). The
  // table window [2^k_lo, 2^(k_lo + 16)) starts at 2^-12 and moves up as far as those
  // need (INT8 at p_min = 0.81: |r| up to ~31, window [2^-10, 64)). A residual outside
  // the window only sends its candidate to the exact path: the choice never changes a
  // result. FP8's top binade has steps of 32: |r| up to 16 would leave the table.
  c.q_abs_max = std::max(std::fabs(dplan.q_min), std::fabs(dplan.q_max));
  const double p_eff = shrink.empty() ? 1.0 : cfg.expand * shrink.back();
  const double r_est = 1.0 + c.q_abs_max * std::max(0.0, 1.0 / p_eff - 1.0);
  const int k_lo = -12 + std::max(0, static_cast<int>(std::ceil(std::log2(std::min(r_est, 0x1p20)))) - 3);
  c.use_poly = c.approx &&
               (k.grid == qobs::detail::GridKind::kInt || (k.grid == qobs::detail::GridKind::kFp4 && !k.has_zp)) &&
               k.data_narrow == Narrow::kNone && dt == DType::kF32 && make_pow_poly(k.norm, k_lo, &c.poly);
  if (c.use_poly) c.poly_bound = poly_sum_bound(c.poly, len, kSumBlock);
  return c;
}

/// Small groups: one group per lane, so that the per-candidate work (qparams, the
/// bound, the comparison) is vectorized too instead of being paid per group. f32 data
/// with the certified terms takes the polynomial batch; bf16 / f16 data (whose terms
/// and sums are rounded to 16 bits, so no cheaper term can stand in for them) takes
/// the exact batch, where the vector kernel is exact (not kPowScalar's per-lane pow).
BatchPlan batch_plan(const GridSearchConfig& cfg, DType dt, const VectorPlan& vec, const CertifiedPlan& cert,
                     const qobs::detail::ShrunkQParams& shrunk, bool contiguous, int64_t len,
                     const SearchKernels& kernels) {
  BatchPlan b;
  if (!cfg.batch_groups || !shrunk.usable || len > kPolyBatchMaxLen) return b;
  if (cert.use_poly && contiguous) {
    b.lanes = kernels.poly_batch->lanes();
    b.bound = poly_sum_bound_sequential(cert.poly, len);
  } else if (vec.simd && !cert.approx && (dt == DType::kBF16 || dt == DType::kF16) &&
             vec.proto.norm_kind != NormKind::kPowScalar) {
    b.lanes = kernels.exact_batch->lanes();
    b.exact = true;
  }
  return b;
}

}  // namespace

Plan make_plan(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
               const FlatView* weights, SimdLevel level) {
  const DType dt = flat.dtype;
  const int64_t len = flat.layout.num_obs() * flat.layout.group_len();
  const bool contiguous = flat.group_is_contiguous();
  std::vector<double> shrink = qobs::detail::search_shrink_factors(cfg, dt);
  // Arith::mul converts its host-scalar operand to f32 (the statistics' dtype here)
  std::vector<float> shrink_f32;
  for (double p : shrink) shrink_f32.push_back(static_cast<float>(p));
  const auto qplan = qobs::detail::QParamPlan::make(search_args, dt, std::nullopt, cfg.mode);
  const auto shrunk = qobs::detail::ShrunkQParams::make(qplan);
  const auto dplan = qobs::detail::QdqPlan::make(search_args, dt, dt, true, true, cfg.mode);
  const auto em = qobs::detail::ErrorModel::make(cfg, dt);
  const SearchKernels kernels = SearchKernels::at(level);
  VectorPlan vec = vector_plan(cfg, dt, em, dplan, search_args.symmetric, kernels);
  const CertifiedPlan cert = certified_plan(cfg, dt, em, dplan, shrink, vec, weights != nullptr, len);
  const int64_t S = static_cast<int64_t>(shrink.size());
  const BatchPlan batch = batch_plan(cfg, dt, vec, cert, shrunk, contiguous, len, kernels);
  return Plan{.flat = flat,
              .weights = weights,
              .cfg = cfg,
              .dt = dt,
              .k = kernels,
              .len = len,
              .contiguous = contiguous,
              .w_contiguous = weights && weights->group_is_contiguous(),
              .shrink = std::move(shrink),
              .shrink_f32 = std::move(shrink_f32),
              .S = S,
              .a = Arith{dt, cfg.mode},
              .qplan = qplan,
              .shrunk = shrunk,
              .dplan = dplan,
              .em = em,
              .vec = std::move(vec),
              .cert = cert,
              .batch = batch};
}

}  // namespace qobs::kernels::cpu
