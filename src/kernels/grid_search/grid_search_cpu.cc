// The fused grid search. The reference evaluates candidate by candidate over the
// whole tensor and keeps an S x num_qparams error matrix; here each group is read once,
// all S candidates are evaluated on it, and only one bit per (group, candidate) is kept:
// "did this candidate strictly improve this group's best error". That bit depends only
// on the group's own errors, so after all groups are done the tensor-wide patience rule
// is replayed from the per-candidate OR of the bits (detail::stop_point) and each
// group's choice is its last improving candidate before the stop -- exactly what the
// reference's sequential loop selects (R6.6.6 / R6.6.7 / R6.8.6).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/parallel/thread_pool.h"
#include "kernels/grid_search/batch.h"
#include "kernels/grid_search/certified.h"
#include "kernels/grid_search/exact.h"
#include "kernels/minmax/group_minmax.h"
#include "kernels/grid_search/plan.h"
#include "kernels/grid_search/grid_search_cpu.h"
#include "kernels/grid_search/select.h"

namespace qobs::kernels::cpu {

using qobs::detail::Arith;

namespace {

/// R6.6.6 steps 1-2 for every candidate of a group with base range (m0, M0): the
/// scales and zero points into s.scale / s.zp (as the vector kernels take them) and,
/// where the scalar path reads them, s.m_scale / s.m_zp. False when some qparam or the
/// range is not finite (or a scale not positive): only the scalar path defines those.
bool candidate_qparams(const Plan& P, double m0, double M0, Scratch& s) {
  const int64_t S = P.S;
  for (auto* v : {&s.m_scale, &s.m_zp, &s.errs, &s.sums}) v->resize(static_cast<std::size_t>(S));
  s.scale.resize(static_cast<std::size_t>(S));
  s.zp.resize(static_cast<std::size_t>(S));
  const Arith ax{P.dt, P.cfg.mode};
  bool finite = std::isfinite(m0) & std::isfinite(M0);
  if (finite && P.shrunk.usable) {
    // R6.6.6 steps 1-2 in the common plan, branch-free (values equal the loop below)
    P.shrunk.compute(static_cast<float>(m0), static_cast<float>(M0), P.shrink_f32.data(), S, s.scale.data(),
                     s.zp.data());
    for (int64_t i = 0; i < S; ++i) {
      const std::size_t u = static_cast<std::size_t>(i);
      finite &= std::isfinite(s.scale[u]) & (s.scale[u] > 0);
    }
    if (!P.vec.simd || !finite) {  // scalar_errors (exact.h) reads the double copies
      std::copy(s.scale.begin(), s.scale.end(), s.m_scale.begin());
      std::copy(s.zp.begin(), s.zp.end(), s.m_zp.begin());
    }
  } else {
    for (int64_t i = 0; i < S; ++i) {
      const std::size_t u = static_cast<std::size_t>(i);
      // R6.6.6 steps 1-2 (host-scalar shrink, calculate_qparams without global scale)
      const double cm = P.a.mul(m0, P.shrink[u]);
      const double cM = P.a.mul(M0, P.shrink[u]);
      const qobs::detail::ElemQParams sz = qobs::detail::compute_qparams_elem(cm, cM, P.qplan);
      s.m_scale[u] = sz.scale;
      s.m_zp[u] = sz.zero_point;
      s.scale[u] = static_cast<float>(sz.scale);
      // R5.1.1: z is converted to x's dtype (and to s's, the same dtype here)
      const double zx = P.dplan.has_zp ? ax.cast(sz.zero_point) : 0.0;
      s.zp[u] = static_cast<float>(zx);
      finite &= std::isfinite(sz.scale) & (sz.scale > 0) & std::isfinite(zx);
    }
  }
  return finite;
}

/// improved[i] for all S candidates of one group whose values are x (weights w), as
/// the reference decides them.
void group_improvements(const Plan& P, const float* x, const float* w, double xmax, double m0, double M0, Scratch& s,
                        uint8_t* improved) {
  const bool finite = candidate_qparams(P, m0, M0, s);
  double* errs = s.errs.data();
  if (!P.vec.simd || !finite) {
    // The reference's own per-element arithmetic, candidate by candidate on the
    // cached group (also the path for non-finite data, which only the scalar
    // primitives define exactly).
    scalar_errors(P, x, w, s, errs);
    improvements_from_errors(P, errs, improved);
    return;
  }
  if (!P.cert.approx) {
    vector_sums(P, P.vec.proto.norm_kind, x, w, s.scale.data(), s.zp.data(), P.S, false, s, errs);
    improvements_from_errors(P, errs, improved);
    return;
  }
  certified_improvements(P, x, w, xmax, s, improved);
}

}  // namespace

GridSearchResult grid_search(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                             const FlatView* weights, SimdLevel level, int num_threads) {
  const int64_t nq = flat.layout.num_qparams();
  const Plan P = make_plan(flat, search_args, cfg, weights, level);
  const int64_t S = P.S, len = P.len;
  const int threads = resolve_num_threads(num_threads);
  const int64_t W = (S + 63) / 64;  // improvement bits per group
  std::vector<uint64_t> bits(static_cast<std::size_t>(nq * W), 0);
  std::vector<double> m0(static_cast<std::size_t>(nq)), M0(static_cast<std::size_t>(nq));
  std::vector<std::vector<uint8_t>> any(static_cast<std::size_t>(threads),
                                        std::vector<uint8_t>(static_cast<std::size_t>(S), 0));
  std::vector<Scratch> scratch(static_cast<std::size_t>(threads));

  // Tasks of whole groups (whole batches for the batch kernel); ~8 tasks per thread
  // balance the load without making a task smaller than a few hundred
  // candidate-groups of work.
  const int64_t L = P.batch.lanes;
  const int64_t target_tasks = threads == 1 ? 1 : threads * 8;
  const int64_t per_task = (std::max<int64_t>(1, (nq + target_tasks - 1) / target_tasks) + L - 1) / L * L;
  const int64_t num_tasks = (nq + per_task - 1) / per_task;
  parallel_for(num_tasks, threads, [&](int64_t task, int worker) {
    Scratch& s = scratch[static_cast<std::size_t>(worker)];
    s.improved.resize(static_cast<std::size_t>(S));
    std::vector<uint8_t>& any_w = any[static_cast<std::size_t>(worker)];
    auto one_group = [&](int64_t q) {
      const float* x = load_group(flat, P.contiguous, q, len, P.k.group, s.xbuf);
      const float* w = weights ? load_group(*weights, P.w_contiguous, q, len, P.k.group, s.wbuf) : nullptr;
      double lo, hi;
      group_minmax(x, len, P.k.group, &lo, &hi);
      // R6.6.3: the base range, scaled by the host scalar `expand`
      m0[static_cast<std::size_t>(q)] = P.a.mul(lo, cfg.expand);
      M0[static_cast<std::size_t>(q)] = P.a.mul(hi, cfg.expand);
      group_improvements(P, x, w, std::max(std::fabs(lo), std::fabs(hi)), m0[static_cast<std::size_t>(q)],
                         M0[static_cast<std::size_t>(q)], s, s.improved.data());
      uint64_t* qb = bits.data() + q * W;
      for (int64_t i = 0; i < S; ++i) {
        // branch-free: which candidates improve varies from group to group
        const uint8_t imp = s.improved[static_cast<std::size_t>(i)];
        qb[i / 64] |= uint64_t{imp} << (i % 64);
        any_w[static_cast<std::size_t>(i)] |= imp;
      }
    };
    const int64_t q_end = std::min(nq, (task + 1) * per_task);
    for (int64_t q = task * per_task; q < q_end; q += L) {
      const int64_t count = std::min(L, q_end - q);
      if (L > 1 && batch_improvements(P, q, count, s, m0.data(), M0.data(), bits.data(), W, any_w.data())) continue;
      for (int64_t g = q; g < q + count; ++g) one_group(g);
    }
  });

  std::vector<uint8_t> any_improved(static_cast<std::size_t>(S), 0);
  for (const auto& a : any)
    for (int64_t i = 0; i < S; ++i) any_improved[static_cast<std::size_t>(i)] |= a[static_cast<std::size_t>(i)];
  GridSearchResult res;
  res.candidates_evaluated = qobs::detail::stop_point(cfg, any_improved, S);
  for (const Scratch& s : scratch) {
    res.groups_batched += s.groups_batched;
    res.exact_evaluations += s.exact_evaluations;
  }
  const int64_t T = res.candidates_evaluated;
  res.best_min.resize(static_cast<std::size_t>(nq));
  res.best_max.resize(static_cast<std::size_t>(nq));
  for (int64_t q = 0; q < nq; ++q) {
    // the last improving candidate before the stop
    int64_t chosen = -1;
    const uint64_t* qb = bits.data() + q * W;
    for (int64_t wi = std::min(W - 1, (T - 1) / 64); T > 0 && wi >= 0; --wi) {
      uint64_t word = qb[wi];
      const int64_t hi_bit = std::min<int64_t>(63, T - 1 - wi * 64);
      if (hi_bit < 63) word &= (uint64_t{1} << (hi_bit + 1)) - 1;
      if (word) {
        chosen = wi * 64 + (63 - __builtin_clzll(word));
        break;
      }
    }
    const double mq = m0[static_cast<std::size_t>(q)], Mq = M0[static_cast<std::size_t>(q)];
    res.best_min[static_cast<std::size_t>(q)] =
        static_cast<float>(chosen < 0 ? mq : P.a.mul(mq, P.shrink[static_cast<std::size_t>(chosen)]));
    res.best_max[static_cast<std::size_t>(q)] =
        static_cast<float>(chosen < 0 ? Mq : P.a.mul(Mq, P.shrink[static_cast<std::size_t>(chosen)]));
  }
  return res;
}

}  // namespace qobs::kernels::cpu
