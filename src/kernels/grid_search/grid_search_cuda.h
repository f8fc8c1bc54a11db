// The MSE grid search (R6.6, R6.8) on a CUDA device: the per-thread bodies, host and
// device code (QOBS_HD). They are the plain reference's steps (grid_search_ref.cc), not
// the CPU path's vector kernels: every candidate's error is the element-by-element sum
// in ErrorSum's canonical order, so the device gives the reference's bits by
// construction, and the tests run these bodies on the CPU over every index of the
// launch grid against ref::grid_search (tests/kernels/grid_search).
//
// One step per kernel (grid_search_cuda.cu):
//  1. min-max of every group (minmax_cuda.h), then group_range: the base range
//     (m0, M0) = expand x (min, max) (R6.6.3);
//  2. candidate_error for every (group, candidate) pair, and group_improvements: which
//     candidates strictly improve their group's best error, as bits, OR-ed into one
//     word per 32 candidates for the whole tensor (integer atomics: the result does not
//     depend on the order);
//  3. the reference's tensor-wide patience rule on those words (stop_point, one
//     thread), then choose: each group's last improving candidate before the stop.
// |e|^norm is the reference's Arith::pow_abs, except that norms other than 2 and 3 take
// their power from a table of Arith::pow_abs over every 16-bit |e| (bf16 / f16 error
// terms in parity mode) or from the libm powf replay (libm_powf.h): the device's own
// powf is not the host libm's. Where neither applies the caller keeps the CPU path.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/arith.h"
#include "core/element.h"
#include "kernels/cuda/flat_map.h"
#include "kernels/grid_search/select.h"
#include "kernels/pow/libm_powf.h"
#include "qobs/formats.h"
#include "qobs/host_device.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::cuda {

/// How an error term's |e|^norm is evaluated on the device (see the header comment).
enum class DevicePow : uint8_t {
  kArith,    ///< norm 2 or 3: Arith::pow_abs itself (repeated multiplication)
  kTable16,  ///< 16-bit error dtype in parity mode: table[pattern of |e|]
  kReplay,   ///< the libm powf replay on the device copy of its tables
};

/// R6.6.6 step 4 / R6.8.6: the term of one element, ErrorModel::term's value.
struct ErrorTerm {
  DType elem_dt = DType::kF32;
  NumericMode mode = NumericMode::kParity;
  double norm = 2.4;
  bool weighted = false;
  DevicePow pow = DevicePow::kArith;
  float y = 2.4f;                      ///< the exponent as pow_abs passes it: float(cast(norm))
  const float* table = nullptr;        ///< kTable16: 32768 terms (device)
  kernels::detail::PowfTables powf{};  ///< kReplay: device copies of libm's tables

  QOBS_HD double term(double r, double x, float w) const {
    const qobs::detail::Arith a{elem_dt, mode};
    const double d = a.sub(r, x);
    double e;
    if (pow == DevicePow::kArith) {
      e = a.pow_abs(d, norm);
    } else {
      const float ax = std::fabs(static_cast<float>(d));
      if (pow == DevicePow::kTable16) {
        const uint16_t bits = elem_dt == DType::kBF16 ? float_to_bf16(ax) : float_to_f16(ax);
        e = table[bits];
      } else {
        e = a.narrow(kernels::detail::powf_replay(ax, y, powf));
      }
    }
    if (weighted) e = a.mul(w, e);
    return e;
  }
};

struct GridSearchArgs {
  FlatMap x;
  FlatMap w;  ///< importance weights flattened like x (weighted only)
  bool weighted = false;
  int64_t S = 0;                   ///< candidates
  const double* shrink = nullptr;  ///< S shrink factors as the multiplication sees them (device)
  double expand = 1.0;
  qobs::detail::Arith a;           ///< the observed dtype's arithmetic
  qobs::detail::QParamPlan qplan;  ///< R6.6.6 steps 1-2 (no global scale)
  qobs::detail::QdqPlan dplan;
  ErrorTerm term;
  DType err_dt = DType::kF32;  ///< the dtype errors are rounded to and compared in (A2)
  double initial_best = 0;     ///< its largest finite value (R6.6.4)
  qobs::detail::StopRule stop;
  // device buffers
  const float* lo = nullptr;  ///< per group min and max (step 1)
  const float* hi = nullptr;
  double* m0 = nullptr;  ///< per group base range
  double* M0 = nullptr;
  uint32_t* bits = nullptr;      ///< per group words(S) words of improvement bits
  uint32_t* any = nullptr;       ///< words(S) words, zeroed before step 2
  int64_t* evaluated = nullptr;  ///< the candidates the reference evaluates (step 3)
  void* best_min = nullptr;      ///< per group results, in best_dtype (Tensor::from_floats of the float results)
  void* best_max = nullptr;
  DType best_dtype = DType::kF32;

  QOBS_HD int64_t words() const { return (S + 31) / 32; }
};

/// R6.6.3: group q's base range.
QOBS_HD inline void group_range(const GridSearchArgs& g, int64_t q) {
  g.m0[q] = g.a.mul(g.lo[q], g.expand);
  g.M0[q] = g.a.mul(g.hi[q], g.expand);
}

/// The error of candidate i on group q (R6.6.6 steps 1-4), rounded to the error dtype.
QOBS_HD inline double candidate_error(const GridSearchArgs& g, int64_t q, int64_t i) {
  const double cm = g.a.mul(g.m0[q], g.shrink[i]), cM = g.a.mul(g.M0[q], g.shrink[i]);
  const qobs::detail::ElemQParams sz = qobs::detail::compute_qparams_elem(cm, cM, g.qplan);
  qobs::detail::ErrorSum sum;
  for (int64_t j = 0; j < g.x.len; ++j) {
    const float x = g.x.load(q, j);
    const double r = qobs::detail::qdq_elem(x, sz.scale, sz.zero_point, g.dplan);
    sum.add(g.term.term(r, x, g.weighted ? g.w.load(q, j) : 1.0f));
  }
  return round_to_float_dtype(g.err_dt, sum.total());
}

/// Group q's improvement bits from its S errors (errs[i], candidate order): strict <,
/// from the error dtype's largest value (R6.6.4); NaN never improves. Writes the
/// group's words and ORs them into g.any.
QOBS_NO_EXEC_CHECK
template <class OrWord>
QOBS_HD inline void group_improvements(const GridSearchArgs& g, int64_t q, const double* errs, OrWord or_word) {
  double best = g.initial_best;
  const int64_t W = g.words();
  for (int64_t w = 0; w < W; ++w) {
    uint32_t word = 0;
    for (int64_t i = w * 32; i < (w + 1) * 32 && i < g.S; ++i)
      if (errs[i] < best) {
        best = errs[i];
        word |= uint32_t{1} << (i % 32);
      }
    g.bits[q * W + w] = word;
    if (word) or_word(g.any + w, word);
  }
}

/// The reference's tensor-wide stop (select.h stop_point) from the OR-ed words.
QOBS_HD inline void stop_of(const GridSearchArgs& g) {
  *g.evaluated = qobs::detail::stop_point(
      g.stop, [&](int64_t i) { return ((g.any[i / 32] >> (i % 32)) & 1u) != 0; }, g.S);
}

/// Group q's result: its last improving candidate before the stop, else (m0, M0).
QOBS_HD inline void choose(const GridSearchArgs& g, int64_t q) {
  const int64_t T = *g.evaluated, W = g.words();
  int64_t chosen = -1;
  for (int64_t i = 0; i < T; ++i)
    if ((g.bits[q * W + i / 32] >> (i % 32)) & 1u) chosen = i;
  const double m0 = g.m0[q], M0 = g.M0[q];
  qobs::detail::store_element(g.best_min, g.best_dtype, q,
                              static_cast<float>(chosen < 0 ? m0 : g.a.mul(m0, g.shrink[chosen])));
  qobs::detail::store_element(g.best_max, g.best_dtype, q,
                              static_cast<float>(chosen < 0 ? M0 : g.a.mul(M0, g.shrink[chosen])));
}

/// Runs steps 1 (range; the min-max must have filled g.lo / g.hi) to 3 on `stream` (a
/// cudaStream_t). grid_search_cuda.cu.
void launch_grid_search(const GridSearchArgs& g, void* stream);

/// Everything the CUDA grid search needs, resolved on the host once per call
/// (grid_search.cc): the arguments with their device pointers unset, and the host
/// tables the driver copies to the device (shrink factors, the kTable16 terms, libm's
/// powf constants). `unsupported` names why the call must stay on the CPU path (an
/// error dtype or norm whose power the device cannot reproduce, a layout FlatMap cannot
/// hold); empty when it may run on the device.
struct CudaSearchPlan {
  GridSearchArgs args;
  std::vector<double> shrink;
  std::vector<float> pow_table;
  std::string unsupported;
};
CudaSearchPlan cuda_search_plan(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                                const FlatView* weights);

}  // namespace qobs::kernels::cuda
