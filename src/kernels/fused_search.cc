// Fused grid search. The reference evaluates candidate by candidate over the
// whole tensor and keeps an S x num_qparams error matrix; here each group is read once,
// all S candidates are evaluated on it, and only one bit per (group, candidate) is kept:
// "did this candidate strictly improve this group's best error". That bit depends only
// on the group's own errors, so after all groups are done the tensor-wide patience rule
// is replayed from the per-candidate OR of the bits (detail::stop_point) and each
// group's choice is its last improving candidate before the stop -- exactly what the
// reference's sequential loop selects (R6.6.6 / R6.6.7 / R6.8.6).
#include "kernels/fused_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/arith.h"
#include "kernels/parallel/thread_pool.h"
#include "kernels/search/select.h"
#include "kernels/simd/libm_powf.h"
#include "kernels/simd/block_errors_simd.h"
#include "kernels/simd/minmax_simd.h"
#include "kernels/simd/poly_batch_simd.h"
#include "kernels/simd/poly_sums_simd.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::fast {

using qobs::detail::Arith;
using qobs::detail::ErrorModel;
using namespace qobs::kernels::detail;

namespace {

static_assert(kSumBlock == qobs::detail::kErrorSumBlock, "SIMD and reference blocks must agree");

/// The len values of qparam element q as floats: in place for contiguous f32, else
/// widened / gathered into buf.
const float* load_group(const FlatView& f, bool contiguous, int64_t q, int64_t len, SimdLevel level,
                        std::vector<float>& buf) {
  if (contiguous) {
    const int64_t off = f.group_offset(q);
    if (f.dtype == DType::kF32) return static_cast<const float*>(f.data) + off;
    if ((f.dtype == DType::kBF16 || f.dtype == DType::kF16) && level != SimdLevel::kScalar) {
      buf.resize(static_cast<std::size_t>(len));
      widen_simd(level, static_cast<const uint16_t*>(f.data) + off, len, f.dtype == DType::kBF16, buf.data());
      return buf.data();
    }
  }
  buf.resize(static_cast<std::size_t>(len));
  f.gather(q, buf.data());
  return buf.data();
}

/// A vector min / max of zero does not say which zero: the reference's sequential loop
/// keeps the later of two equal values, so a zero result takes the last zero's sign.
void settle_zero_signs(const float* x, int64_t n, float* lo, float* hi) {
  if (*lo != 0.0f && *hi != 0.0f) return;
  int64_t j = n - 1;
  while (j >= 0 && x[j] != 0.0f) --j;
  if (j < 0) return;
  if (*lo == 0.0f) *lo = x[j];
  if (*hi == 0.0f) *hi = x[j];
}

/// R6.3.1 min / max of one group, equal to the reference's sequential nan_min /
/// nan_max loop: NaN wins, and for a zero result the sign of the last zero in index
/// order (the loop keeps the later of two equal values).
void group_minmax(const float* x, int64_t n, SimdLevel level, double* lo, double* hi) {
  if (level == SimdLevel::kScalar || n < 8) {
    double l = INFINITY, h = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      l = qobs::detail::nan_min(l, x[j]);
      h = qobs::detail::nan_max(h, x[j]);
    }
    *lo = l;
    *hi = h;
    return;
  }
  float l, h;
  minmax_simd(level, x, n, &l, &h);
  settle_zero_signs(x, n, &l, &h);
  *lo = l;
  *hi = h;
}

Narrow narrow_for(DType dt, NumericMode mode) {
  if (mode == NumericMode::kWide) return Narrow::kNone;
  if (dt == DType::kBF16) return Narrow::kBF16;
  if (dt == DType::kF16) return Narrow::kF16;
  return Narrow::kNone;
}

/// Everything a worker needs for one call, resolved once.
struct Plan {
  const FlatView& flat;
  const FlatView* weights;
  GridSearchConfig cfg;
  DType dt;
  int64_t len, S;
  std::vector<double> shrink;
  std::vector<float> shrink_f32;  // the host shrink factors as the f32 multiply sees them
  Arith a;
  qobs::detail::QParamPlan qplan;
  qobs::detail::ShrunkQParams shrunk;
  qobs::detail::QdqPlan dplan;
  ErrorModel em;
  SimdLevel level;
  std::vector<float> pow_table;  // kTable16
  bool simd;    // the vector kernel applies to this dtype / error dtype
  bool approx;  // decide comparisons with certified approximate sums first
  double approx_rel;
  bool use_poly;  // INT or FP4 grid, f32 data: the cheaper certified terms of pow_poly.h
  PowPoly poly;
  PolySumBound poly_bound;  // for groups of len elements: the same for every group
  double q_abs_max;         // max(|q_min|, |q_max|), for poly_r_error
  bool contiguous, w_contiguous;
  BlockKernelArgs proto;  // per-call constants of the block kernel
  int lanes = 1;          // groups per batch of the batch kernel; 1 = one group at a time
  PolySumBound batch_bound{};
};

struct Scratch {
  std::vector<float> xbuf, wbuf, scale, zp;
  std::vector<double> m_scale, m_zp, sums, errs, lo, hi;
  std::vector<uint8_t> improved;
  // the batch kernel's: the transposed groups (one 64-byte line per element row), the
  // per-lane statistics, the groups' data and the per-candidate improvement masks
  std::vector<float> xt, m0, M0, xmax, lo_f, hi_f;
  std::vector<const float*> group_x;
  std::vector<uint32_t> lane_improved;
  int64_t groups_batched = 0, exact_evaluations = 0;
};

/// The reference's improvement rule over one group's errors: improved[i] = errs[i] <
/// (best of the earlier candidates), best starting at the error dtype's max (R6.6.4).
void improvements_from_errors(const Plan& P, const double* errs, uint8_t* improved) {
  double best = P.em.initial_best();
  for (int64_t i = 0; i < P.S; ++i) {
    improved[i] = errs[i] < best;  // strict; NaN never improves
    if (improved[i]) best = errs[i];
  }
}

/// Canonical sums of `count` candidates (scales `scale`, zero points `zp`) on one group
/// with the vector kernel; rounded to the error dtype unless `raw`.
void vector_sums(const Plan& P, NormKind nk, const float* x, const float* w, const float* scale, const float* zp,
                 int64_t count, bool raw, Scratch& s, double* out) {
  BlockKernelArgs k = P.proto;
  k.norm_kind = nk;
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
    block_errors_simd(P.level, k);
    for (int64_t i = 0; i < count; ++i) out[i] += s.sums[static_cast<std::size_t>(i)];
  }
  if (!raw)
    for (int64_t i = 0; i < count; ++i)
      out[i] = P.em.err_dt == DType::kF32 ? static_cast<float>(out[i]) : round_to_float_dtype(P.em.err_dt, out[i]);
}

/// The kPowPoly intervals [lo_i, hi_i] around each candidate's error (f32 data, INT
/// grid, unweighted). A candidate the bound does not cover (|r| left the table, s
/// outside the normal range scale_pow handles, a sum near f32 overflow) gets NaN
/// bounds, i.e. is evaluated exactly.
void poly_intervals(const Plan& P, const float* x, double xmax, Scratch& s) {
  const int64_t S = P.S, len = P.len;
  PolySumArgs k;
  k.num_candidates = S;
  k.scale = s.scale.data();
  k.zp = s.zp.data();
  k.has_zp = P.proto.has_zp;
  k.grid = P.proto.grid;
  k.q_min = P.proto.q_min;
  k.q_max = P.proto.q_max;
  k.poly = &P.poly;
  double* total = s.errs.data();
  if (len <= kSumBlock) {
    k.x = x;
    k.n = len;
    k.sums = total;
    poly_sums_simd(P.level, k);
  } else {
    k.sums = s.sums.data();
    for (int64_t i = 0; i < S; ++i) total[i] = 0.0;
    for (int64_t b = 0; b < len; b += kSumBlock) {
      k.x = x + b;
      k.n = std::min<int64_t>(kSumBlock, len - b);
      poly_sums_simd(P.level, k);
      for (int64_t i = 0; i < S; ++i) total[i] += s.sums[static_cast<std::size_t>(i)];
    }
  }
  const PolySumBound& bound = P.poly_bound;
  for (int64_t i = 0; i < S; ++i) {
    const float sc = s.scale[static_cast<std::size_t>(i)];
    const double sp = P.poly.scale_pow(sc);
    const double A = total[i] * sp;
    const double rho = poly_r_error(xmax / sc, std::fabs(s.zp[static_cast<std::size_t>(i)]), P.q_abs_max);
    const double slack = (bound.abs_units + poly_r_slack(P.poly, rho, total[i], len)) * sp + bound.abs;
    const bool known = sc >= 0x1p-125f && sc <= 0x1p125f && std::isfinite(A) && A < 0x1p100;
    s.lo[static_cast<std::size_t>(i)] = known ? A * (1.0 - bound.rel) - slack : NAN;
    s.hi[static_cast<std::size_t>(i)] = known ? A * (1.0 + bound.rel) + slack : NAN;
  }
}

/// improved[i] for all S candidates of one group whose values are x (weights w), as
/// the reference decides them.
void group_improvements(const Plan& P, const float* x, const float* w, double xmax, double m0, double M0, Scratch& s,
                        uint8_t* improved) {
  const int64_t S = P.S, len = P.len;
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
    if (!P.simd || !finite) {  // the scalar path below reads the double copies
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
  double* errs = s.errs.data();
  if (!P.simd || !finite) {
    // The reference's own per-element arithmetic, candidate by candidate on the
    // cached group (also the path for non-finite data, which only the scalar
    // primitives define exactly).
    for (int64_t i = 0; i < S; ++i) {
      qobs::detail::ErrorSum sum;
      const double sc = s.m_scale[static_cast<std::size_t>(i)], z = s.m_zp[static_cast<std::size_t>(i)];
      for (int64_t j = 0; j < len; ++j)
        sum.add(P.em.term(qobs::detail::qdq_elem(x[j], sc, z, P.dplan), x[j], w ? w[j] : 1.0f));
      errs[i] = P.em.round(sum.total());
    }
    improvements_from_errors(P, errs, improved);
    return;
  }
  if (!P.approx) {
    vector_sums(P, P.proto.norm_kind, x, w, s.scale.data(), s.zp.data(), S, false, s, errs);
    improvements_from_errors(P, errs, improved);
    return;
  }
  // Certified approximation (f32 errors, unweighted, non-integer norm): approximate
  // sums A_i with |err_i - A_i| <= c A_i + abs_i decide every comparison whose
  // intervals do not overlap; an overlapping one is settled with the exact
  // (libm-replay) sums of the two candidates involved. Each decision therefore equals
  // the reference's.
  s.lo.resize(static_cast<std::size_t>(S));
  s.hi.resize(static_cast<std::size_t>(S));
  if (P.use_poly) {
    poly_intervals(P, x, xmax, s);
  } else {
    vector_sums(P, NormKind::kPowApprox, x, w, s.scale.data(), s.zp.data(), S, true, s, errs);
    // + the f32 lane sums of the specialized kernels (<= 2^-15 per block) + f64 adds
    const double c = P.approx_rel + 0x1p-15 + static_cast<double>(len) * 0x1p-50;
    const double abs_slack = static_cast<double>(len) * kPowApproxAbsErr + 0x1p-149;
    for (int64_t i = 0; i < S; ++i) {
      const double A = errs[i];
      s.lo[static_cast<std::size_t>(i)] = std::isfinite(A) ? A * (1.0 - c) - abs_slack : NAN;
      s.hi[static_cast<std::size_t>(i)] = A * (1.0 + c) + abs_slack;
    }
  }
  double exact_buf;
  auto exact = [&](int64_t i) {
    ++s.exact_evaluations;
    vector_sums(P, P.proto.norm_kind, x, w, s.scale.data() + i, s.zp.data() + i, 1, false, s, &exact_buf);
    return exact_buf;
  };
  double best_lo = P.em.initial_best(), best_hi = best_lo;
  int64_t best_idx = -1;
  bool best_exact = true;
  for (int64_t i = 0; i < S; ++i) {
    double lo = s.lo[static_cast<std::size_t>(i)], hi = s.hi[static_cast<std::size_t>(i)];
    bool is_exact = false, imp;
    // a NaN bound (unknown sum) fails both tests and is evaluated exactly
    if (!(hi < best_lo || lo >= best_hi)) {
      const double e = exact(i);
      if (!best_exact) {
        best_lo = best_hi = exact(best_idx);
        best_exact = true;
      }
      imp = e < best_lo;  // strict; NaN never improves
      lo = hi = e;
      is_exact = true;
    } else {
      imp = hi < best_lo;
    }
    improved[i] = imp;
    if (imp) {
      best_lo = lo;
      best_hi = hi;
      best_idx = i;
      best_exact = is_exact;
    }
  }
}

/// The batch kernel's exact fallback: the reference's error of one candidate on one
/// lane's group.
struct BatchExact {
  const Plan* P;
  Scratch* s;
  static double call(void* ctx, int lane, float scale, float zp) {
    const BatchExact& b = *static_cast<const BatchExact*>(ctx);
    ++b.s->exact_evaluations;
    double e;
    vector_sums(*b.P, b.P->proto.norm_kind, b.s->group_x[static_cast<std::size_t>(lane)], nullptr, &scale, &zp, 1,
                false, *b.s, &e);
    return e;
  }
};

/// Groups [q0, q0 + count) (count <= P.lanes) with the batch kernel, one group per
/// lane: their base ranges into m0 / M0, their improvement bits into bits (W words a
/// group) and any. False, with nothing written, when some group's range is outside
/// what the kernel takes (non-finite, or |m| >= 2^100): the caller runs those groups
/// one at a time.
bool batch_improvements(const Plan& P, int64_t q0, int64_t count, Scratch& s, double* m0, double* M0, uint64_t* bits,
                        int64_t W, uint8_t* any) {
  const int L = P.lanes;
  const int64_t len = P.len, S = P.S;
  const bool fp4 = P.proto.grid == qobs::detail::GridKind::kFp4;
  s.xt.resize(static_cast<std::size_t>(len * L));
  for (auto* v : {&s.m0, &s.M0, &s.xmax, &s.lo_f, &s.hi_f}) v->resize(static_cast<std::size_t>(L));
  s.group_x.resize(static_cast<std::size_t>(L));
  s.lane_improved.resize(static_cast<std::size_t>((S + 31) / 32 * L));
  for (int l = 0; l < L; ++l) {
    const int64_t q = q0 + std::min<int64_t>(l, count - 1);  // a short batch repeats its last group
    s.group_x[static_cast<std::size_t>(l)] = static_cast<const float*>(P.flat.data) + P.flat.group_offset(q);
  }
  // NaN: the one-group path propagates it as the reference does
  if (!batch_transpose_simd(P.level, s.group_x.data(), len, fp4, s.xt.data(), s.lo_f.data(), s.hi_f.data()))
    return false;
  for (int l = 0; l < L; ++l) {
    const std::size_t u = static_cast<std::size_t>(l);
    float lo = s.lo_f[u], hi = s.hi_f[u];
    settle_zero_signs(s.group_x[u], len, &lo, &hi);
    const double mq = P.a.mul(lo, P.cfg.expand), Mq = P.a.mul(hi, P.cfg.expand);
    if (!(std::fabs(mq) < 0x1p100 && std::fabs(Mq) < 0x1p100)) return false;
    s.m0[u] = static_cast<float>(mq);
    s.M0[u] = static_cast<float>(Mq);
    s.xmax[u] = std::max(std::fabs(lo), std::fabs(hi));
  }
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
  k.grid = P.proto.grid;
  k.q_min = P.proto.q_min;
  k.q_max = P.proto.q_max;
  k.poly = &P.poly;
  k.bound = P.batch_bound;
  k.q_abs_max = P.q_abs_max;
  k.initial_best = P.em.initial_best();
  k.exact = &BatchExact::call;
  k.ctx = &ctx;
  k.improved = s.lane_improved.data();
  poly_batch_simd(P.level, k);
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
  s.groups_batched += count;
  return true;
}

}  // namespace

GridSearchResult grid_search(const FlatView& flat, const QuantizationArgs& search_args, const GridSearchConfig& cfg,
                             const FlatView* weights, SimdLevel level, int num_threads) {
  const DType dt = flat.dtype;
  const int64_t nq = flat.layout.num_qparams();
  const int64_t len = flat.layout.num_obs() * flat.layout.group_len();
  Plan P{flat,
         weights,
         cfg,
         dt,
         len,
         0,
         qobs::detail::search_shrink_factors(cfg, dt),
         {},
         Arith{dt, cfg.mode},
         qobs::detail::QParamPlan::make(search_args, dt, std::nullopt, cfg.mode),
         {},
         qobs::detail::QdqPlan::make(search_args, dt, dt, true, true, cfg.mode),
         ErrorModel::make(cfg, dt),
         level,
         {},
         false,
         false,
         0.0,
         false,
         {},
         {},
         0.0,
         flat.group_is_contiguous(),
         weights && weights->group_is_contiguous(),
         {}};
  P.S = static_cast<int64_t>(P.shrink.size());
  P.shrunk = qobs::detail::ShrunkQParams::make(P.qplan);
  // Arith::mul converts its host-scalar operand to f32 (the statistics' dtype here)
  for (double p : P.shrink) P.shrink_f32.push_back(static_cast<float>(p));
  const int64_t S = P.S;
  auto vec_dtype = [](DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; };
  P.simd = level != SimdLevel::kScalar && vec_dtype(dt) && vec_dtype(P.em.elem_dt);
  if (P.simd) {
    BlockKernelArgs& k = P.proto;
    k.has_zp = !search_args.symmetric;  // symmetric zero points are 0: y + 0 and d - 0 are exact
    k.data_narrow = narrow_for(dt, cfg.mode);
    k.err_narrow = narrow_for(P.em.elem_dt, cfg.mode);
    k.grid = P.dplan.grid;
    k.q_min = static_cast<float>(P.dplan.q_min);
    k.q_max = static_cast<float>(P.dplan.q_max);
    // Arith::pow_abs: the exponent is a host scalar converted to the error dtype first
    // (bf16 evaluates |e|^2.40625 for 2.4), then powf in f32
    k.norm = static_cast<float>(Arith{P.em.elem_dt, cfg.mode}.cast(cfg.norm));
    if (cfg.norm == 2.0) k.norm_kind = NormKind::kTwo;
    else if (cfg.norm == 3.0) k.norm_kind = NormKind::kThree;
    else if (k.err_narrow != Narrow::kNone) {
      // 16-bit error terms: tabulate the reference's own pow_abs for all 2^15
      // non-negative patterns (~1 ms), exact by construction
      const Arith ae{P.em.elem_dt, cfg.mode};
      P.pow_table.resize(32768);
      for (uint32_t b = 0; b < 32768; ++b) {
        const float e = P.em.elem_dt == DType::kBF16 ? bf16_to_float(static_cast<uint16_t>(b))
                                                     : f16_to_float(static_cast<uint16_t>(b));
        P.pow_table[b] = static_cast<float>(ae.pow_abs(e, cfg.norm));
      }
      k.norm_kind = NormKind::kTable16;
      k.pow_table = P.pow_table.data();
    } else if (powf_matches(k.norm)) {
      k.norm_kind = NormKind::kPowReplay;
      k.tables = libm_powf_tables();
    } else {
      k.norm_kind = NormKind::kPowScalar;
    }
    // The certified approximation needs f32 terms and sums (the bound is relative to
    // f32 rounding) and non-negative unit weights.
    P.approx = (k.norm_kind == NormKind::kPowReplay || k.norm_kind == NormKind::kPowScalar) && !weights &&
               P.em.elem_dt == DType::kF32 && P.em.err_dt == DType::kF32 && k.norm >= 1 && k.norm <= 8;
    // kPowApproxRelErr (its exponent scaling) + libm powf's <= 1 ulp + the final f32
    // rounding of the sum, with room to spare
    P.approx_rel = kPowApproxRelErr * std::max(1.0, static_cast<double>(k.norm) / 2.4) + 0x1p-20;
    // Unclamped elements have |r| <= 1/2 (INT) or <= 1 (FP4, steps up to 2); the ones
    // the smallest candidate range clamps reach about Q (1 / (expand p_min) - 1). The
    // table window [2^k_lo, 2^(k_lo + 16)) starts at 2^-12 and moves up as far as those
    // need (INT8 at p_min = 0.81: |r| up to ~31, window [2^-10, 64)). A residual outside
    // the window only sends its candidate to the exact path: the choice never changes a
    // result. FP8's top binade has steps of 32: |r| up to 16 would leave the table.
    P.q_abs_max = std::max(std::fabs(P.dplan.q_min), std::fabs(P.dplan.q_max));
    const double p_eff = P.shrink.empty() ? 1.0 : cfg.expand * P.shrink.back();
    const double r_est = 1.0 + P.q_abs_max * std::max(0.0, 1.0 / p_eff - 1.0);
    const int k_lo = -12 + std::max(0, static_cast<int>(std::ceil(std::log2(std::min(r_est, 0x1p20)))) - 3);
    P.use_poly = P.approx &&
                 (k.grid == qobs::detail::GridKind::kInt ||
                  (k.grid == qobs::detail::GridKind::kFp4 && !k.has_zp)) &&
                 k.data_narrow == Narrow::kNone &&
                 dt == DType::kF32 && make_pow_poly(k.norm, k_lo, &P.poly);
    if (P.use_poly) {
      P.poly_bound = poly_sum_bound(P.poly, len, kSumBlock);
      // Small groups: one group per lane, so that the per-candidate work (qparams, the
      // bound, the comparison) is vectorized too instead of being paid per group.
      if (P.shrunk.usable && P.contiguous && len <= kPolyBatchMaxLen && cfg.batch_groups) {
        P.lanes = poly_batch_lanes(level);
        P.batch_bound = poly_sum_bound_sequential(P.poly, len);
      }
    }
  }
  const int threads = resolve_num_threads(num_threads);
  const int64_t W = (S + 63) / 64;  // improvement bits per group
  std::vector<uint64_t> bits(static_cast<std::size_t>(nq * W), 0);
  std::vector<double> m0(static_cast<std::size_t>(nq)), M0(static_cast<std::size_t>(nq));
  std::vector<std::vector<uint8_t>> any(static_cast<std::size_t>(threads), std::vector<uint8_t>(static_cast<std::size_t>(S), 0));
  std::vector<Scratch> scratch(static_cast<std::size_t>(threads));

  // Tasks of whole groups (whole batches for the batch kernel); ~8 tasks per thread
  // balance the load without making a task smaller than a few hundred
  // candidate-groups of work.
  const int64_t L = P.lanes;
  const int64_t target_tasks = threads == 1 ? 1 : threads * 8;
  const int64_t per_task = (std::max<int64_t>(1, (nq + target_tasks - 1) / target_tasks) + L - 1) / L * L;
  const int64_t num_tasks = (nq + per_task - 1) / per_task;
  parallel_for(num_tasks, threads, [&](int64_t task, int worker) {
    Scratch& s = scratch[static_cast<std::size_t>(worker)];
    s.improved.resize(static_cast<std::size_t>(S));
    std::vector<uint8_t>& any_w = any[static_cast<std::size_t>(worker)];
    auto one_group = [&](int64_t q) {
      const float* x = load_group(flat, P.contiguous, q, len, level, s.xbuf);
      const float* w = weights ? load_group(*weights, P.w_contiguous, q, len, level, s.wbuf) : nullptr;
      double lo, hi;
      group_minmax(x, len, level, &lo, &hi);
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

void minmax(const FlatView& flat, float* mins, float* maxs, SimdLevel level, int num_threads) {
  const int64_t nq = flat.layout.num_qparams();
  const int64_t len = flat.layout.num_obs() * flat.layout.group_len();
  const bool contiguous = flat.group_is_contiguous();
  const int threads = resolve_num_threads(num_threads);
  if (nq == 1 && contiguous && flat.dtype == DType::kF32 && threads > 1 && len >= (int64_t{1} << 16)) {
    // One huge group (tensor strategy): split the range; min / max combine exactly in
    // any order except for the sign of a zero, which group_minmax's rule settles below.
    const float* x = static_cast<const float*>(flat.data) + flat.group_offset(0);
    const int64_t parts = threads * 4, step = (len + parts - 1) / parts;
    std::vector<double> lo(static_cast<std::size_t>(parts)), hi(static_cast<std::size_t>(parts));
    parallel_for(parts, threads, [&](int64_t p, int) {
      const int64_t b = p * step, e = std::min(len, b + step);
      double l = INFINITY, h = -INFINITY;
      if (e > b) group_minmax(x + b, e - b, level, &l, &h);
      lo[static_cast<std::size_t>(p)] = l;
      hi[static_cast<std::size_t>(p)] = h;
    });
    double l = INFINITY, h = -INFINITY;
    for (int64_t p = 0; p < parts; ++p) {  // parts in index order: later equal zeros win
      l = qobs::detail::nan_min(l, lo[static_cast<std::size_t>(p)]);
      h = qobs::detail::nan_max(h, hi[static_cast<std::size_t>(p)]);
    }
    mins[0] = static_cast<float>(l);
    maxs[0] = static_cast<float>(h);
    return;
  }
  const int64_t target_tasks = threads == 1 ? 1 : threads * 8;
  // Small groups laid end to end (NVFP4's 16, MXFP4's 32): eight per pass
  // (minmax_groups_simd), tasks of whole passes.
  const bool vec_dtype = flat.dtype == DType::kF32 || flat.dtype == DType::kBF16 || flat.dtype == DType::kF16;
  const bool eight_at_once =
      level != SimdLevel::kScalar && vec_dtype && len % 8 == 0 && len <= 64 && flat.groups_end_to_end();
  const int64_t unit = eight_at_once ? 8 : 1;
  const int64_t per_task = (std::max<int64_t>(1, (nq + target_tasks - 1) / target_tasks) + unit - 1) / unit * unit;
  const int64_t num_tasks = (nq + per_task - 1) / per_task;
  std::vector<std::vector<float>> bufs(static_cast<std::size_t>(threads));
  parallel_for(num_tasks, threads, [&](int64_t task, int worker) {
    const int64_t q_end = std::min(nq, (task + 1) * per_task);
    int64_t q = task * per_task;
    if (eight_at_once) {
      const int64_t whole = (q_end - q) / 8 * 8;
      const std::size_t es = dtype_size(flat.dtype);
      const auto* x = static_cast<const unsigned char*>(flat.data) + static_cast<std::size_t>(flat.group_offset(q)) * es;
      // NaN: the per-group loop below redoes the task with the reference's propagation
      if (whole > 0 && minmax_groups_simd(level, x, flat.dtype, whole, len, mins + q, maxs + q)) {
        for (int64_t g = q; g < q + whole; ++g)
          if (mins[g] == 0.0f || maxs[g] == 0.0f) {
            // the zero's sign, from the group's values as floats
            const float* v = load_group(flat, contiguous, g, len, level, bufs[static_cast<std::size_t>(worker)]);
            settle_zero_signs(v, len, mins + g, maxs + g);
          }
        q += whole;
      }
    }
    for (; q < q_end; ++q) {
      const float* x = load_group(flat, contiguous, q, len, level, bufs[static_cast<std::size_t>(worker)]);
      double l, h;
      group_minmax(x, len, level, &l, &h);
      mins[q] = static_cast<float>(l);
      maxs[q] = static_cast<float>(h);
    }
  });
}

}  // namespace qobs::kernels::fast
