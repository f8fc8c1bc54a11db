// What the least-squares search (docs/LSQ.md) resolves once per call, and the steps of
// the spec that its two implementations share as definitions: the CPU path
// (lsq_cpu.cc) and the plain reference (lsq_ref.cc) take from here which candidates
// exist (the observer candidate lists, the format windows, the ideal grid, the log
// grid), how a raw value is stored (scale and zero point) and the least-squares refit
// step. How candidates are scored, pruned, remembered and selected is each
// implementation's own.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::detail {

/// A stored (scale, zero point) candidate.
using LsqPair = std::pair<double, double>;

/// One observer candidate list: a group's (min, max) times `expand`, then times each
/// shrink factor, as the grid-search observers form their candidate ranges.
struct ObserverList {
  double expand;
  std::vector<double> factors;
};

/// The exponents of the E8M0 codes 0..254 (R2.4.2 after step 5's uint8 clamp; 255 is NaN).
inline constexpr int kE8M0MinExp = -127, kE8M0MaxExp = 127;
/// The refits start from this many least scored pairs (docs/LSQ.md#L1 step 3).
inline constexpr std::size_t kRefits = 6;
/// Each refit chain runs at most this many steps (docs/LSQ.md#L2).
inline constexpr int kRefitSteps = 8;
/// The ideal-quantizer proxies pass this many candidates on (docs/LSQ.md#L2).
inline constexpr std::size_t kIdealBest = 4;

/// The per-call constants of the search, as the spec defines them.
struct LsqPlan {
  DType dt;
  qobs::detail::QParamPlan qplan;  ///< calculate_qparams of the real args with the global scale
  qobs::detail::QdqPlan dplan;     ///< the QDQ the stored qparams will see
  std::optional<double> global;
  DType scale_dt;               ///< dtype of the stored scale
  bool fp_scale_codes = false;  ///< NVFP4-like: FP8 E4M3 scale_dtype on a float type
  bool mx = false;
  bool symmetric = true;
  /// memoryless_mse's and imatrix_mse's lists (and, with a global scale,
  /// nvfp4_expanded_mse's), eager and chunked
  std::vector<ObserverList> observer_lists;
  /// INT asymmetric: the log grid's factors of the range (weighted: 0.04x .. 1.25x in
  /// 48 steps; unweighted: 0.5x .. 1.25x in 16), the same for every group
  std::vector<double> log_grid;
  /// fp_scale_codes: the stored scale of each E4M3 code 0..126 (index = code)
  std::vector<double> code_scale;
  /// mx: the stored scale of each E8M0 exponent kE8M0MinExp..kE8M0MaxExp (index e + 127)
  std::vector<double> mx_scale;
  /// the smallest positive value of the FP grid (FP4 0.5, FP6 1/8, FP8 E4M3 2^-9)
  double grid_min = 0.5;
  LsqSearchConfig cfg;

  /// Checks the observed dtype and resolves the plan (docs/LSQ.md#L1).
  static LsqPlan make(DType observed, const QuantizationArgs& args, const LsqSearchConfig& cfg,
                      const Tensor* global_scale);

  /// The stored scale of a raw scale value (R4.1 steps 5 and 7, in the scale dtype).
  double stored_scale(double s) const;
  /// The stored zero point of a raw value (R4.1 steps 3 and 8).
  double stored_zero_point(double z) const;
  /// The scale as the QDQ applies it: stored / global in f32 (R5.1.1 step 1).
  double applied(double s) const {
    if (!global) return s;
    return qobs::detail::Arith{dplan.s_dt, cfg.mode}.div(s, *global);
  }
  /// Whether the searches of stored block scales apply (L1 step 2: E4M3 codes, E8M0
  /// exponents); every other plan takes the integer searches (ideal grid, refits).
  bool block_scale_codes() const { return mx || fp_scale_codes; }
};

/// Checks that the importance view (imatrix_lsq) matches the observed one (docs/LSQ.md#L3).
void check_lsq_weights(const FlatView& flat, const FlatView* weights);

/// L1 step 2 for block scales: the indices tried first, [lo, hi], and the range
/// [min, max] the search extends over (NVFP4: E4M3 codes 1..126; MX: E8M0 exponents).
struct ScaleWindow {
  int lo = 0, hi = -1, min = 0, max = -1;
};
/// The window of a group with min-max qparams scale `minmax_scale` and amax `amax`.
ScaleWindow scale_window(const LsqPlan& P, double minmax_scale, double amax);
/// The stored scale of window index i.
inline double window_scale(const LsqPlan& P, int i) {
  return P.mx ? P.mx_scale[static_cast<std::size_t>(i - kE8M0MinExp)] : P.code_scale[static_cast<std::size_t>(i)];
}

/// The symmetric ideal-quantizer grid (docs/LSQ.md#L2): every bf16 value in
/// [f_lo x base, f_hi x base] that is a positive normal float with a finite
/// reciprocal, as `count` consecutive bf16 bit patterns from `first`.
struct IdealGrid {
  uint32_t first = 0;
  std::size_t count = 0;
  static float value(uint32_t pattern) { return std::bit_cast<float>(pattern << 16); }
  static uint32_t pattern_of(double v) { return std::bit_cast<uint32_t>(static_cast<float>(v)) >> 16; }
  /// The grid for amax: base = amax / half_range, f_lo 0.5 (weighted 0.04), f_hi 2.
  static IdealGrid of(const LsqPlan& P, double amax);
  /// A picked pattern's scales: the pattern and its two neighbours, those that are
  /// positive normal bf16 values, in ascending order.
  template <class Emit>
  static void neighbours(uint32_t p, Emit emit) {
    for (uint32_t q : {p - 1, p, p + 1})
      if (q >= 0x0080u && q < 0x7F80u) emit(static_cast<double>(value(q)));
  }
};

/// The INT asymmetric log grid's candidates of a group with range [lo, hi]
/// (docs/LSQ.md#L1 step 2), in the order of P.log_grid, into `out` (cleared first).
void log_grid_candidates(const LsqPlan& P, double lo, double hi, std::vector<LsqPair>& out);
/// Whether the asymmetric proxy takes a candidate: its scale a normal f32 with a finite
/// reciprocal, its zero point within f32's integers. Others pass the proxy untouched.
inline bool asym_proxy_takes(const LsqPair& c) {
  const double s = c.first;
  return s >= 0x1p-126 && s <= 0x1p126 && static_cast<double>(static_cast<float>(s)) == s &&
         std::fabs(c.second) <= 0x1p24;
}

/// One least-squares refit step (docs/LSQ.md#L2): from the sums of
/// lsq_refit_sums_scalar over the codes of the stored (s, z) (symmetric plans read only
/// kSumWQQ and kSumWQX), the next stored pair, or nullopt where the refit stops (a
/// singular system, a scale that is not finite and positive, or the same pair).
std::optional<LsqPair> refit_step(const LsqPlan& P, const double* sums, double s, double z);

}  // namespace qobs::kernels::detail
