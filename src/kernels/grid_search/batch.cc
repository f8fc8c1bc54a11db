#include "kernels/grid_search/batch.h"

#include <algorithm>
#include <cmath>

#include "kernels/grid_search/exact.h"
#include "kernels/minmax/group_minmax.h"
#include "kernels/grid_search/exact_batch_simd.h"
#include "kernels/grid_search/poly_batch_simd.h"

namespace qobs::kernels::cpu {

using namespace qobs::kernels::detail;

namespace {

/// The batch kernel's exact fallback: the reference's error of one candidate on one
/// lane's group.
struct BatchExact {
  const Plan* P;
  Scratch* s;
  static double call(void* ctx, int lane, float scale, float zp) {
    const BatchExact& b = *static_cast<const BatchExact*>(ctx);
    ++b.s->exact_evaluations;
    double e;
    vector_sums(*b.P, b.P->vec.proto.norm_kind, b.s->group_x[static_cast<std::size_t>(lane)], nullptr, &scale, &zp, 1,
                false, *b.s, &e);
    return e;
  }
};

/// The batch's groups (a short batch repeats its last group): read (in place, widened
/// or gathered), transposed into s.xt (|x| when abs_values), their base ranges into
/// s.m0 / s.M0 and max |x| into s.xmax. False when some group holds NaN or a base range
/// is not below `limit` in magnitude (non-finite included).
bool load_batch(const Plan& P, int64_t q0, int64_t count, bool abs_values, double limit, Scratch& s) {
  const int L = P.batch.lanes;
  const int64_t len = P.len;
  for (auto* v : {&s.xt, &s.xw}) v->resize(static_cast<std::size_t>(len * L));
  for (auto* v : {&s.m0, &s.M0, &s.xmax, &s.lo_f, &s.hi_f}) v->resize(static_cast<std::size_t>(L));
  s.group_x.resize(static_cast<std::size_t>(L));
  s.lane_improved.resize(static_cast<std::size_t>((P.S + 31) / 32 * L));
  for (int l = 0; l < L; ++l)
    s.group_x[static_cast<std::size_t>(l)] = load_group_to(P.flat, P.contiguous, q0 + std::min<int64_t>(l, count - 1),
                                                           len, P.k.group, s.xw.data() + l * len);
  // NaN: the one-group path propagates it as the reference does
  if (!P.k.poly_batch->transpose(s.group_x.data(), len, abs_values, s.xt.data(), s.lo_f.data(), s.hi_f.data()))
    return false;
  for (int l = 0; l < L; ++l) {
    const std::size_t u = static_cast<std::size_t>(l);
    float lo = s.lo_f[u], hi = s.hi_f[u];
    settle_zero_signs(s.group_x[u], len, &lo, &hi);
    const double mq = P.a.mul(lo, P.cfg.expand), Mq = P.a.mul(hi, P.cfg.expand);
    if (!(std::fabs(mq) < limit && std::fabs(Mq) < limit)) return false;
    s.m0[u] = static_cast<float>(mq);
    s.M0[u] = static_cast<float>(Mq);
    s.xmax[u] = std::max(std::fabs(lo), std::fabs(hi));
  }
  return true;
}

/// A finished batch's outputs: the real lanes' base ranges into m0 / M0, their
/// 32-candidate words (s.lane_improved) into the groups' 64-bit improvement words and
/// into any.
void store_lane_bits(const Plan& P, int64_t q0, int64_t count, const Scratch& s, double* m0, double* M0, uint64_t* bits,
                     int64_t W, uint8_t* any) {
  const int64_t L = P.batch.lanes, S = P.S;
  // two 32-candidate words of a lane make one of its 64-bit improvement words
  const int64_t W32 = (S + 31) / 32;
  auto word32 = [&](int64_t w, int64_t l) -> uint64_t {
    return w < W32 ? s.lane_improved[static_cast<std::size_t>(w * L + l)] : 0u;
  };
  for (int64_t l = 0; l < count; ++l) {
    m0[q0 + l] = s.m0[static_cast<std::size_t>(l)];
    M0[q0 + l] = s.M0[static_cast<std::size_t>(l)];
    uint64_t* qb = bits + (q0 + l) * W;
    for (int64_t wi = 0; wi < W; ++wi) qb[wi] |= word32(2 * wi, l) | word32(2 * wi + 1, l) << 32;
  }
  for (int64_t w = 0; w < W32; ++w) {
    uint32_t any_word = 0;  // the real lanes only: a short batch's copies do not count
    for (int64_t l = 0; l < count; ++l) any_word |= s.lane_improved[static_cast<std::size_t>(w * L + l)];
    for (int64_t i = w * 32; i < std::min(S, w * 32 + 32); ++i) any[i] |= (any_word >> (i % 32)) & 1u;
  }
}

/// The exact batch kernel on groups [q0, q0 + count): false, with nothing written,
/// when some group holds NaN (in its values or weights) or Inf, or some candidate's
/// scale is not finite and positive.
bool exact_batch_improvements(const Plan& P, int64_t q0, int64_t count, Scratch& s, double* m0, double* M0,
                              uint64_t* bits, int64_t W, uint8_t* any) {
  const int L = P.batch.lanes;
  const int64_t len = P.len, S = P.S;
  if (!load_batch(P, q0, count, false, INFINITY, s)) return false;
  auto lane_group = [&](int l) { return q0 + std::min<int64_t>(l, count - 1); };
  ExactBatchArgs k;
  if (P.weights) {
    for (auto* v : {&s.wt, &s.ww}) v->resize(static_cast<std::size_t>(len * L));
    s.group_w.resize(static_cast<std::size_t>(L));
    for (int l = 0; l < L; ++l)
      s.group_w[static_cast<std::size_t>(l)] =
          load_group_to(*P.weights, P.w_contiguous, lane_group(l), len, P.k.group, s.ww.data() + l * len);
    // the weights' min / max go unused (into lo_f / hi_f, read already); NaN: refused
    if (!P.k.poly_batch->transpose(s.group_w.data(), len, false, s.wt.data(), s.lo_f.data(), s.hi_f.data()))
      return false;
    k.wt = s.wt.data();
  }
  k.xt = s.xt.data();
  k.n = len;
  k.m0 = s.m0.data();
  k.M0 = s.M0.data();
  k.num_candidates = S;
  k.shrink = P.shrink_f32.data();
  k.qparams = P.shrunk;
  k.term = P.vec.proto;
  // kTable16: taken from the plan here, so that no copy of a Plan points into another's
  k.term.pow_table = P.vec.pow_table.data();
  k.term.pow_table64 = P.vec.pow_table64.data();
  // ShrunkQParams-usable plans have integer zero points clamped to [q_min, q_max]
  k.q_exact = codes_exact_in_data_dtype(k.term, true);
  k.err_dt = P.em.err_dt;
  k.initial_best = static_cast<float>(P.em.initial_best());
  k.improved = s.lane_improved.data();
  if (!P.k.exact_batch->run(k)) return false;
  store_lane_bits(P, q0, count, s, m0, M0, bits, W, any);
  s.groups_batched += count;
  return true;
}

}  // namespace

bool batch_improvements(const Plan& P, int64_t q0, int64_t count, Scratch& s, double* m0, double* M0, uint64_t* bits,
                        int64_t W, uint8_t* any) {
  if (P.batch.exact) return exact_batch_improvements(P, q0, count, s, m0, M0, bits, W, any);
  const int64_t len = P.len, S = P.S;
  const bool fp4 = P.vec.proto.grid == qobs::detail::GridKind::kFp4;
  if (!load_batch(P, q0, count, fp4, 0x1p100, s)) return false;
  BatchExact ctx{&P, &s};
  PolyBatchArgs k;
  k.xt = s.xt.data();
  k.n = len;
  k.m0 = s.m0.data();
  k.M0 = s.M0.data();
  k.xmax = s.xmax.data();
  k.num_candidates = S;
  k.shrink = P.shrink_f32.data();
  k.qparams = P.shrunk;
  k.grid = P.vec.proto.grid;
  k.q_min = P.vec.proto.q_min;
  k.q_max = P.vec.proto.q_max;
  k.poly = &P.cert.poly;
  k.bound = P.batch.bound;
  k.q_abs_max = P.cert.q_abs_max;
  k.initial_best = P.em.initial_best();
  k.exact = &BatchExact::call;
  k.ctx = &ctx;
  k.improved = s.lane_improved.data();
  P.k.poly_batch->run(k);
  store_lane_bits(P, q0, count, s, m0, M0, bits, W, any);
  s.groups_batched += count;
  return true;
}

}  // namespace qobs::kernels::cpu
