// Everything the grid search resolves once per call (Plan), grouped by the path that
// reads it, and each worker's reusable buffers (Scratch).
#pragma once

#include <cstdint>
#include <vector>

#include "core/arith.h"
#include "kernels/kernels.h"
#include "kernels/grid_search/select.h"
#include "kernels/grid_search/block_errors_simd.h"
#include "kernels/grid_search/exact_batch_simd.h"
#include "kernels/grid_search/poly_batch_simd.h"
#include "kernels/grid_search/poly_sums_simd.h"
#include "kernels/minmax/group_minmax.h"
#include "kernels/grid_search/pow_poly.h"
#include "kernels/simd/simd_level.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::cpu {

/// The vector kernels of the search, picked once per call for its SimdLevel (all null
/// at kScalar, where the fused scalar loop runs).
struct SearchKernels {
  GroupKernels group;
  const detail::BlockErrorsSimd* block = nullptr;
  const detail::PolySumsSimd* poly_sums = nullptr;
  const detail::PolyBatchSimd* poly_batch = nullptr;
  const detail::ExactBatchSimd* exact_batch = nullptr;
  static SearchKernels at(SimdLevel level) {
    return {GroupKernels::at(level), detail::block_errors_simd(level), detail::poly_sums_simd(level),
            detail::poly_batch_simd(level), detail::exact_batch_simd(level)};
  }
};

/// The exact vector path (exact.h): whether the block kernel applies and its per-call
/// constants. simd false: the fused scalar loop runs.
struct VectorPlan {
  bool simd = false;              ///< the vector kernel applies to this dtype / error dtype
  detail::BlockKernelArgs proto;  ///< per-call constants of the block kernel
  std::vector<float> pow_table;   ///< kTable16: the terms of all 2^15 16-bit |e| (see vector_sums)
  /// bf16 pow_table widened to f64 for both signs (65536 entries, the exact batch
  /// kernel's gathers); empty for f16
  std::vector<double> pow_table64;
};

/// The certified path (certified.h): approximate sums with a rigorous interval decide
/// the comparisons they can.
struct CertifiedPlan {
  bool approx = false;      ///< decide comparisons with certified approximate sums first
  double approx_rel = 0.0;  ///< relative bound of the kPowApprox sums
  bool use_poly = false;    ///< INT or FP4 grid, f32 data: the cheaper terms of pow_poly.h
  detail::PowPoly poly{};
  detail::PolySumBound poly_bound{};  ///< for groups of len elements: the same for every group
  double q_abs_max = 0.0;             ///< max(|q_min|, |q_max|), for poly_r_error
};

/// The batch kernels (batch.h): one group per vector lane.
struct BatchPlan {
  int lanes = 1;                 ///< groups per batch; 1 = one group at a time
  bool exact = false;            ///< the exact batch kernel (exact_batch_simd.h), else the certified polynomial
  detail::PolySumBound bound{};  ///< the polynomial's only
};

/// Everything a worker needs for one call, resolved once (make_plan).
struct Plan {
  // the call
  const FlatView& flat;
  const FlatView* weights;
  GridSearchConfig cfg;
  DType dt;
  SearchKernels k;
  int64_t len;        ///< elements per group
  bool contiguous;    ///< groups read in place (FlatView::group_is_contiguous)
  bool w_contiguous;  ///< the same for the weights
  // the candidates (R6.6.5) and the arithmetic of R6.6.6
  std::vector<double> shrink;
  std::vector<float> shrink_f32;  ///< the host shrink factors as the f32 multiply sees them
  int64_t S;                      ///< number of candidates
  qobs::detail::Arith a;
  qobs::detail::QParamPlan qplan;
  qobs::detail::ShrunkQParams shrunk;
  qobs::detail::QdqPlan dplan;
  qobs::detail::ErrorModel em;
  // how a group is evaluated
  VectorPlan vec;
  CertifiedPlan cert;
  BatchPlan batch;
};

Plan make_plan(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
               const FlatView* weights, SimdLevel level);

/// One worker's buffers, reused from group to group.
struct Scratch {
  std::vector<float> xbuf, wbuf, scale, zp;
  std::vector<double> m_scale, m_zp, sums, errs, lo, hi;
  std::vector<uint8_t> improved;
  // the batch kernel's: the transposed groups (one 64-byte line per element row), the
  // per-lane statistics, the groups' data and the per-candidate improvement masks
  std::vector<float> xt, m0, M0, xmax, lo_f, hi_f;
  std::vector<const float*> group_x;
  std::vector<uint32_t> lane_improved;
  // the exact batch kernel's: the lanes' widened / gathered groups and weights, the
  // transposed weights and the lanes' weight pointers
  std::vector<float> xw, ww, wt;
  std::vector<const float*> group_w;
  int64_t groups_batched = 0, exact_evaluations = 0;
};

}  // namespace qobs::kernels::cpu
