#include "kernels/grid_search/exact.h"

#include <algorithm>

#include "kernels/grid_search/block_errors_simd.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::cpu {

using namespace qobs::kernels::detail;

void scalar_errors(const Plan& P, const float* x, const float* w, const Scratch& s, double* errs) {
  for (int64_t i = 0; i < P.S; ++i) {
    qobs::detail::ErrorSum sum;
    const double sc = s.m_scale[static_cast<std::size_t>(i)], z = s.m_zp[static_cast<std::size_t>(i)];
    for (int64_t j = 0; j < P.len; ++j)
      sum.add(P.em.term(qobs::detail::qdq_elem(x[j], sc, z, P.dplan), x[j], w ? w[j] : 1.0f));
    errs[i] = P.em.round(sum.total());
  }
}

void vector_sums(const Plan& P, NormKind nk, const float* x, const float* w, const float* scale, const float* zp,
                 int64_t count, bool raw, Scratch& s, double* out) {
  BlockKernelArgs k = P.vec.proto;
  k.norm_kind = nk;
  // kTable16: taken from the plan here, so that no copy of a Plan points into another's
  k.pow_table = P.vec.pow_table.data();
  k.pow_table64 = P.vec.pow_table64.empty() ? nullptr : P.vec.pow_table64.data();
  k.num_candidates = count;
  k.scale = scale;
  k.zp = zp;
  if (s.sums.size() < static_cast<std::size_t>(count)) s.sums.resize(static_cast<std::size_t>(count));
  k.sums = s.sums.data();
  for (int64_t i = 0; i < count; ++i) out[i] = 0.0;
  for (int64_t b = 0; b < P.len; b += kSumBlock) {
    k.x = x + b;
    k.w = w ? w + b : nullptr;
    k.n = std::min<int64_t>(kSumBlock, P.len - b);
    P.k.block->run(k);
    for (int64_t i = 0; i < count; ++i) out[i] += s.sums[static_cast<std::size_t>(i)];
  }
  if (!raw)
    for (int64_t i = 0; i < count; ++i)
      out[i] = P.em.err_dt == DType::kF32 ? static_cast<float>(out[i]) : round_to_float_dtype(P.em.err_dt, out[i]);
}

void improvements_from_errors(const Plan& P, const double* errs, uint8_t* improved) {
  double best = P.em.initial_best();
  for (int64_t i = 0; i < P.S; ++i) {
    improved[i] = errs[i] < best;  // strict; NaN never improves
    if (improved[i]) best = errs[i];
  }
}

}  // namespace qobs::kernels::cpu
