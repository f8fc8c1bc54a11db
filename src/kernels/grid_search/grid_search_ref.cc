// The plain reference of the MSE grid search: every candidate evaluated for every
// group, element by element, then the reference's sequential selection (select.h),
// written to mirror R6.6 / R6.8 line by line. The CPU path (grid_search_cpu.cc) must
// reproduce it bit for bit.
#include <cmath>
#include <limits>
#include <vector>

#include "core/arith.h"
#include "kernels/kernels.h"
#include "kernels/grid_search/select.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::ref {

GridSearchResult grid_search(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                             const FlatView* weights) {
  const DType dt = flat.dtype;
  const int64_t nq = flat.layout.num_qparams();
  const int64_t len = flat.layout.num_obs() * flat.layout.group_len();
  const std::vector<double> shrink = detail::search_shrink_factors(cfg, dt);
  const int64_t S = static_cast<int64_t>(shrink.size());
  const detail::Arith a{dt, cfg.mode};
  const detail::QParamPlan qplan = detail::QParamPlan::make(search_args, dt, std::nullopt, cfg.mode);
  const detail::QdqPlan dplan = detail::QdqPlan::make(search_args, dt, dt, true, true, cfg.mode);
  const detail::ErrorModel em = detail::ErrorModel::make(cfg, dt);

  std::vector<double> m0(static_cast<std::size_t>(nq)), M0(static_cast<std::size_t>(nq));
  std::vector<double> errs(static_cast<std::size_t>(S * nq));  // [candidate][q]
  std::vector<float> x(static_cast<std::size_t>(len)), w(weights ? static_cast<std::size_t>(len) : 0);

  for (int64_t q = 0; q < nq; ++q) {
    flat.gather(q, x.data());
    if (weights) weights->gather(q, w.data());
    double lo = INFINITY, hi = -INFINITY;
    for (float v : x) {
      lo = detail::nan_min(lo, v);
      hi = detail::nan_max(hi, v);
    }
    // R6.6.3: the base range, scaled by the host scalar `expand`
    m0[q] = a.mul(lo, cfg.expand);
    M0[q] = a.mul(hi, cfg.expand);
    for (int64_t i = 0; i < S; ++i) {
      const double cm = a.mul(m0[q], shrink[i]), cM = a.mul(M0[q], shrink[i]);
      const detail::ElemQParams sz = detail::compute_qparams_elem(cm, cM, qplan);
      detail::ErrorSum sum;
      for (int64_t j = 0; j < len; ++j) {
        const double r = detail::qdq_elem(x[j], sz.scale, sz.zero_point, dplan);
        sum.add(em.term(r, x[j], weights ? w[j] : 1.0f));
      }
      errs[static_cast<std::size_t>(i * nq + q)] = em.round(sum.total());
    }
  }

  GridSearchResult res;
  res.best_min.resize(static_cast<std::size_t>(nq));
  res.best_max.resize(static_cast<std::size_t>(nq));
  std::vector<int64_t> chosen;
  res.candidates_evaluated = detail::select_candidates(cfg, em, errs, nq, S, chosen);
  for (int64_t q = 0; q < nq; ++q) {
    const int64_t i = chosen[static_cast<std::size_t>(q)];
    res.best_min[q] = static_cast<float>(i < 0 ? m0[q] : a.mul(m0[q], shrink[i]));
    res.best_max[q] = static_cast<float>(i < 0 ? M0[q] : a.mul(M0[q], shrink[i]));
  }
  return res;
}

}  // namespace qobs::kernels::ref
