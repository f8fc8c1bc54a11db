// Pieces of the MSE grid search shared by every implementation (scalar reference and
// fast kernels): the candidate list, the per-element error model and the selection
// rule with its tensor-wide patience. Evaluating every candidate for every group first
// and then replaying the reference's sequential early-stopping rule over the error
// matrix gives exactly the reference's answer (R6.6.6 / R6.8.6 / R6.6.7), because a
// candidate's error never depends on the search state.
#pragma once

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <limits>
#include <vector>

#include "core/arith.h"
#include "kernels/kernels.h"
#include "qobs/host_device.h"

namespace qobs::detail {

/// The shrink factors multiplied into (m0, M0), as the multiplication sees them:
/// eager p_i = 1 - i/grid in double, converted to f32 as a host scalar (R0.4c);
/// chunked p_i materialized in the observed dtype (Q5).
inline std::vector<double> search_shrink_factors(const kernels::GridSearchConfig& cfg, DType dt) {
  std::vector<double> out;
  for (double p : kernels::grid_candidates(cfg)) {
    if (cfg.chunked) out.push_back(round_to_float_dtype(dt, p));
    else out.push_back(dt == DType::kF64 ? p : static_cast<double>(static_cast<float>(p)));
  }
  return out;
}

/// Elements per canonical summation block (kept equal to the SIMD kernels' constant).
inline constexpr int64_t kErrorSumBlock = 4096;

/// The canonical summation order of one candidate's error (R6.6.6 step 4, R6.8.6).
/// R0.4e leaves the order unspecified; qobs fixes one so that every implementation --
/// the reference, the fused scalar path, AVX2, AVX-512, any thread count -- gives the
/// same bits: the terms of one (qparam, candidate) pair, in flat (obs, group) index
/// order j, are cut into blocks of kErrorSumBlock; inside a block term j is added, in
/// order, to lane sum j % 8 (f64); a block's value is ((l0+l4) + (l1+l5)) + ((l2+l6) +
/// (l3+l7)); block values are added in block order to a running f64 total starting at
/// 0, which ErrorModel::round rounds once to the error dtype (A2). One ErrorSum per
/// candidate evaluation, owned by the caller.
class ErrorSum {
 public:
  QOBS_HD void add(double term) {
    lanes_[count_ % 8] += term;
    if (++count_ % kErrorSumBlock == 0) flush();
  }
  /// The f64 total of the terms added so far, in the canonical order.
  QOBS_HD double total() {
    if (count_ % kErrorSumBlock != 0) flush();
    return blocks_;
  }

 private:
  QOBS_HD void flush() {
    const double* l = lanes_;
    blocks_ += ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
    for (double& l : lanes_) l = 0;
  }
  double lanes_[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  double blocks_ = 0;
  int64_t count_ = 0;
};

/// What one candidate's error is (R6.6.6 step 4, R6.8.6): the per-element term, the
/// dtype errors are compared in, and the initial best. Summed in ErrorSum's order.
struct ErrorModel {
  DType err_dt;   ///< dtype in which errors are compared
  DType elem_dt;  ///< dtype of the per-element terms
  double norm;
  bool weighted;
  NumericMode mode;

  static ErrorModel make(const kernels::GridSearchConfig& cfg, DType dt) {
    // imatrix: f32 always; MSE: the observed dtype (Q3) unless the f32 option is set
    const DType err_dt = (cfg.imatrix || cfg.f32_errors) && dt != DType::kF64 ? DType::kF32 : dt;
    return ErrorModel{.err_dt = err_dt, .elem_dt = err_dt, .norm = cfg.norm, .weighted = cfg.imatrix, .mode = cfg.mode};
  }
  /// The term of one element: r the fake-quantized value, x the original, w the
  /// importance weight.
  double term(double r, double x, float w) const {
    const Arith a{elem_dt, mode};
    double e = a.pow_abs(a.sub(r, x), norm);
    if (weighted) e = a.mul(w, e);
    return e;
  }
  /// A canonical f64 sum (ErrorSum::total) rounded once to the error dtype (A2).
  double round(double sum) const { return round_to_float_dtype(err_dt, sum); }
  /// best_err's initial value: the largest finite value of the error dtype (R6.6.4).
  double initial_best() const { return dtype_max(err_dt); }
};

/// What the reference's early-stopping rule reads of a GridSearchConfig, as a plain value
/// that device code can hold.
struct StopRule {
  bool chunked = false;
  bool imatrix = false;
  int64_t patience = 5;
  int64_t chunk_size = 5;
  static StopRule of(const kernels::GridSearchConfig& cfg) {
    return {.chunked = cfg.chunked, .imatrix = cfg.imatrix, .patience = cfg.patience, .chunk_size = cfg.chunk_size};
  }
};

/// The reference's early-stopping rule, driven only by whether any qparam element
/// improved at each candidate (improved(i) for i < S): a candidate's improvement for
/// element q depends only on q's own earlier errors, so these flags can be computed group
/// by group before the rule is replayed. Returns the number of candidates the reference
/// evaluates. Eager: stop after `patience` consecutive candidates without improvement
/// (patience <= 0 stops at the first one); imatrix: patience 0 never stops (Q7);
/// chunked: the counter advances by whole chunks (R6.6.7).
QOBS_NO_EXEC_CHECK
template <class Improved>
QOBS_HD int64_t stop_point(const StopRule& rule, Improved improved, int64_t S) {
  int64_t counter = 0;
  if (rule.chunked && !rule.imatrix) {
    const int64_t cs = rule.chunk_size;
    for (int64_t start = 0; start < S; start += cs) {
      const int64_t end = S < start + cs ? S : start + cs;
      bool any = false;
      for (int64_t i = start; i < end; ++i) any = any || improved(i);
      if (!any) {
        counter += end - start;
        if (counter >= rule.patience) return end;
      } else {
        counter = 0;
      }
    }
    return S;
  }
  for (int64_t i = 0; i < S; ++i) {
    if (improved(i)) {
      counter = 0;
    } else {
      ++counter;
      const bool stop = rule.imatrix ? (rule.patience > 0 && counter >= rule.patience) : counter >= rule.patience;
      if (stop) return i + 1;
    }
  }
  return S;
}
inline int64_t stop_point(const kernels::GridSearchConfig& cfg, const std::vector<uint8_t>& any_improved, int64_t S) {
  return stop_point(
      StopRule::of(cfg), [&](int64_t i) { return any_improved[static_cast<std::size_t>(i)] != 0; }, S);
}

/// Replays the reference's selection over errs[candidate * nq + q]; writes the chosen
/// candidate per q (-1 = none improved: keep (m0, M0)) and returns how many candidates
/// the reference evaluated before stopping.
inline int64_t select_candidates(const kernels::GridSearchConfig& cfg, const ErrorModel& em,
                                 const std::vector<double>& errs, int64_t nq, int64_t S, std::vector<int64_t>& chosen) {
  // Pass 1: which candidates improve some element (strict <; NaN never improves).
  std::vector<double> best(static_cast<std::size_t>(nq), em.initial_best());
  std::vector<uint8_t> any_improved(static_cast<std::size_t>(S), 0);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t q = 0; q < nq; ++q) {
      const double e = errs[static_cast<std::size_t>(i * nq + q)];
      if (e < best[static_cast<std::size_t>(q)]) {
        best[static_cast<std::size_t>(q)] = e;
        any_improved[static_cast<std::size_t>(i)] = 1;
      }
    }
  const int64_t stop = stop_point(cfg, any_improved, S);
  // Pass 2: each element keeps its last improving candidate before the stop.
  chosen.assign(static_cast<std::size_t>(nq), -1);
  best.assign(static_cast<std::size_t>(nq), em.initial_best());
  for (int64_t i = 0; i < stop; ++i)
    for (int64_t q = 0; q < nq; ++q) {
      const double e = errs[static_cast<std::size_t>(i * nq + q)];
      if (e < best[static_cast<std::size_t>(q)]) {
        best[static_cast<std::size_t>(q)] = e;
        chosen[static_cast<std::size_t>(q)] = i;
      }
    }
  return stop;
}

}  // namespace qobs::detail
