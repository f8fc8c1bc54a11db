// Element-level qparam and fake-quantization arithmetic, header-inline (and QOBS_HD, so
// that the CUDA kernels compile the same source) so that the reference kernels, the
// fused CPU kernels and the CUDA kernels evaluate exactly the same sequence of rounded
// operations, written down next to the code in the reference's order (divide or
// multiply, round before clamp, dtype of intermediates). Every step cites RULES §4/§5.
#pragma once

#include <cmath>
#include <optional>
#include <vector>

#include "core/arith.h"
#include "core/check.h"
#include "qobs/args.h"
#include "qobs/formats.h"
#include "qobs/host_device.h"
#include "qobs/qparams.h"
#include "qobs/tensor.h"

namespace qobs::detail {

/// R2.5 round_to_dtype's target, resolved once per call: the per-element step then
/// costs a clamp and a rounding, not dtype-table lookups.
struct RoundTarget {
  DType dt = DType::kF32;
  bool floating = true;
  double lo = 0, hi = 0;
  static RoundTarget of(DType target) {
    RoundTarget t;
    t.dt = target;
    t.floating = is_floating(target);
    t.hi = dtype_max(target);
    t.lo = t.floating ? -t.hi : dtype_min(target);
    return t;
  }
};

/// Everything calculate_qparams needs per element, resolved once per call.
struct QParamPlan {
  DType stat_dt;   ///< dtype of min/max (float; integer stats are converted to f32 first)
  DType scale_dt;  ///< dtype of the scale result (f32 when a global scale is applied)
  bool symmetric;
  bool mx;
  int num_bits;
  int mx_offset = 2;         ///< R2.4.2: floor(log2(element max)) of an MX plan
  int mx_elem_mantissa = 1;  ///< R2.4.5: round_to_power_2's element mantissa of an MX plan
  double q_min, q_max;
  double range;       ///< W = q_max - q_min
  double half_range;  ///< W / 2
  std::optional<DType> scale_dtype;
  DType zp_dtype;
  RoundTarget scale_target, zp_target;  ///< scale_dtype (when set) and zp_dtype
  bool has_global = false;
  double global_scale = 1.0;
  double eps;  ///< R2.7 in scale_dt
  NumericMode mode = NumericMode::kParity;

  static QParamPlan make(const QuantizationArgs& args, DType stat_dt, std::optional<double> global_scale,
                         NumericMode mode) {
    QParamPlan p;
    QOBS_CHECK(args.strategy.has_value() && args.zp_dtype.has_value(), PreconditionError,
               "calculate_qparams: args are not validated (call QuantizationArgs::validated)");
    if (!is_floating(stat_dt) || stat_dt == DType::kF8E4M3) stat_dt = DType::kF32;
    p.stat_dt = stat_dt;
    p.symmetric = args.symmetric;
    p.mx = args.is_mx();
    p.num_bits = args.num_bits;
    p.mx_offset = qobs::mx_exponent_offset(args.num_bits);
    p.mx_elem_mantissa = qobs::mx_elem_mantissa(args.num_bits);
    const auto [lo, hi] = args.q_range();  // NotImplementedError for float bits not in {4, 6, 8}
    p.q_min = lo;
    p.q_max = hi;
    p.range = static_cast<double>(static_cast<float>(hi) - static_cast<float>(lo));
    p.half_range = p.range / 2.0;
    if (!args.symmetric && (args.is_fp4() || args.is_fp6()))
      QOBS_THROW(NotImplementedError, "Asymmetric Quantization is not supported for FP4 and FP6: float num_bits ",
                 args.num_bits, " with symmetric=false (R4.1 step 3)");
    p.scale_dtype = args.scale_dtype;
    p.zp_dtype = *args.zp_dtype;
    if (p.scale_dtype) p.scale_target = RoundTarget::of(*p.scale_dtype);
    p.zp_target = RoundTarget::of(p.zp_dtype);
    p.has_global = global_scale.has_value();
    p.global_scale = global_scale.value_or(1.0);
    p.scale_dt = p.has_global ? promote_float_dtypes(stat_dt, DType::kF32) : stat_dt;
    p.eps = round_to_float_dtype(p.scale_dt, zero_scale_eps(p.scale_dtype.value_or(p.scale_dt)));
    p.mode = mode;
    return p;
  }
};

/// The global scale of R4.1 step 4 / R5.1.1 step 1 as a host value, validated once for
/// calculate_qparams and the QDQ kernels alike (nullopt without one).
inline std::optional<double> global_scale_value(const Tensor* g) {
  if (!g) return std::nullopt;
  QOBS_CHECK(g->numel() == 1, InvalidArgument, "global_scale must have exactly one element, got shape ",
             shape_str(g->shape()), " (R4.1 step 4)");
  const double v = g->get(0);
  QOBS_CHECK(std::isfinite(v) && v > 0, InvalidArgument, "global_scale ", v,
             " is not a finite positive number (R4.2 produces only such values)");
  return static_cast<double>(static_cast<float>(v));
}

/// R4.2 generate_gparam's element step for a range (min, max) in the statistics dtype
/// dt: 2688 / amax as PyTorch evaluates `scalar / tensor` (reciprocal, then the
/// product: two roundings, Q9 / Q10), amax at least dt's smallest normal, and 1.0 where
/// that is not finite (step 4). The caller rejects infinite min / max first.
QOBS_HD inline double global_scale_of_range(double mn, double mx, DType dt, NumericMode mode) {
  const Arith a{dt, mode};
  const double lo = nan_min(mn, 0.0), hi = nan_max(mx, 0.0);
  double amax = nan_max(std::fabs(lo), std::fabs(hi));
  amax = nan_max(amax, dtype_tiny(dt));
  const double g = a.mul(a.div(1.0, amax), kNvfp4GlobalScaleNumerator);
  return std::isfinite(g) ? g : 1.0;
}

/// R2.5 round_to_dtype for one value; returns the value as a double.
QOBS_HD inline double round_to_dtype_value(double v, const RoundTarget& t) {
  if (t.floating) return round_to_float_dtype(t.dt, clamp_nan(v, t.lo, t.hi));
  if (std::isnan(v)) return 0.0;  // Q23: defined as 0 (the reference's x86 cast gives 0)
  return round_half_even(clamp_nan(v, t.lo, t.hi));
}

struct ElemQParams {
  double scale;       ///< on scale_dt's grid
  double zero_point;  ///< on zp_dtype's grid
};

/// R4.1 steps 1-8 for one element.
QOBS_HD inline ElemQParams compute_qparams_elem(double mn, double mx, const QParamPlan& p) {
  const Arith a{p.stat_dt, p.mode};
  // step 1: 0 is always representable
  mn = nan_min(mn, 0.0);
  mx = nan_max(mx, 0.0);
  double scale, zp;
  if (p.symmetric) {
    // step 3, symmetric
    const double amax = nan_max(std::fabs(mn), std::fabs(mx));
    if (p.mx) {
      // R2.4.2: E = 127 + floor(log2(round_to_power_2(a, m))) - off, in a's dtype (exact);
      // m the element mantissa of R2.4.5 (FP6: 3, else 1)
      const double rp2 = round_to_power_2(p.stat_dt == DType::kF64 ? DType::kF64 : p.stat_dt, amax, p.mx_elem_mantissa);
      scale = a.sub(a.add(kE8M0Bias, log2_of_power_of_2(rp2)), static_cast<double>(p.mx_offset));
    } else {
      // divide by the host scalar W/2 (127.5 for int8; Q13 clips the positive extreme)
      scale = a.div(amax, p.half_range);
    }
    zp = 0.0;
  } else {
    // step 3, asymmetric: zp = q_min - min / scale, before the zero replacement (Q23)
    scale = a.div(a.sub(mx, mn), p.range);
    zp = a.sub(p.q_min, a.div(mn, scale));
    zp = clamp_nan(zp, p.q_min, p.q_max);
  }
  // step 4: global scale x scale widens to f32
  const Arith s{p.scale_dt, p.mode};
  if (p.has_global) scale = s.mul(p.global_scale, scale);
  // step 5: round to scale_dtype and back (keep = true)
  if (p.scale_dtype) scale = s.cast(round_to_dtype_value(scale, p.scale_target));
  // step 6: MX exponent -> power of two, computed in f32 then cast back
  if (p.mx) scale = s.cast(static_cast<double>(std::ldexp(1.0f, static_cast<int>(scale) - kE8M0Bias)));
  // step 7: zero scales become eps of (scale_dtype or scale dtype)
  if (scale == 0.0) scale = p.eps;
  // step 8: zero point to zp_dtype. A zero range gives 0/0 = NaN before the eps
  // replacement (Q23); the reference's x86 int cast yields 0, its fp8 cast NaN. qobs
  // defines 0 for every zp dtype (docs/DEVIATIONS.md).
  zp = std::isnan(zp) ? 0.0 : round_to_dtype_value(zp, p.zp_target);
  return {scale, zp};
}

/// compute_qparams_elem for the S shrunk ranges (m0 p_i, M0 p_i) of one grid-search
/// group, and (shrink 1) for the common plans of calculate_qparams: f32 / bf16 / f16
/// statistics, not MX, no scale_dtype other than FP8 E4M3, an integer zero-point dtype
/// unless symmetric. The same f32 operations in the same order (steps 1, 3, 4, 5, 7,
/// 8), each rounded to a 16-bit statistics dtype in parity mode (R0.4b), written
/// without branches or double round trips: the general function's per-candidate
/// branches cost a third of the fused search's time. The vector kernels have the same
/// steps lane-wise (shrunk_qparams_lanes). Tested against compute_qparams_elem value
/// for value.
struct ShrunkQParams {
  bool usable = false;
  bool symmetric = true;
  float half_range = 0, range = 0, q_min = 0, q_max = 0, eps = 0;
  float zp_lo = 0, zp_hi = 0;  ///< the zero-point dtype's range
  bool has_global = false;     ///< step 4: scale = global_scale * scale (NVFP4)
  float global_scale = 1;
  bool fp8_scale = false;  ///< step 5: scale rounded to FP8 E4M3 (clamped to 448)
  /// the statistics' ops round to this dtype (bf16 / f16 in parity mode, else f32)
  DType stat_round = DType::kF32;

  static ShrunkQParams make(const QParamPlan& p) {
    ShrunkQParams q;
    // symmetric zero points are exactly 0 in any zero-point dtype (FP4's is a float);
    // scales stay in the statistics' dtype, or f32 with a global scale (scale_dt)
    const bool stat_ok = p.stat_dt == DType::kF32 || p.stat_dt == DType::kBF16 || p.stat_dt == DType::kF16;
    q.usable = stat_ok && !p.mx && (!p.scale_dtype || *p.scale_dtype == DType::kF8E4M3) &&
               (!p.zp_target.floating || p.symmetric);
    q.stat_round = p.mode == NumericMode::kParity && stat_ok ? p.stat_dt : DType::kF32;
    q.has_global = p.has_global;
    q.global_scale = static_cast<float>(p.global_scale);
    q.fp8_scale = p.scale_dtype.has_value();
    q.symmetric = p.symmetric;
    q.half_range = static_cast<float>(p.half_range);
    q.range = static_cast<float>(p.range);
    q.q_min = static_cast<float>(p.q_min);
    q.q_max = static_cast<float>(p.q_max);
    q.eps = static_cast<float>(p.eps);
    q.zp_lo = static_cast<float>(p.zp_target.lo);
    q.zp_hi = static_cast<float>(p.zp_target.hi);
    return q;
  }

  /// scale[i], zp[i] for finite m0, M0 and host shrink factors already in f32. (The
  /// zero point's rounding below assumes an integer dtype; a float one occurs only with
  /// symmetric plans, whose zero point is 0 either way.)
  QOBS_HD void compute(float m0, float M0, const float* shrink, int64_t n, float* scale, float* zp) const {
    // Arith::narrow of the statistics' dtype
    const DType round_dt = stat_round;
    auto rnd = [round_dt](float v) { return round_dt == DType::kF32 ? v : round_to_float_dtype(round_dt, v); };
    for (int64_t i = 0; i < n; ++i) {
      // R6.6.6 step 1 (Arith::mul), R4.1 step 1 as nan_min / nan_max
      const float cm = rnd(m0 * shrink[i]), cM = rnd(M0 * shrink[i]);
      const float mn = cm < 0.0f ? cm : 0.0f, mx = cM > 0.0f ? cM : 0.0f;
      float s, z = 0.0f;
      bool zero_range = false;
      if (symmetric) {
        const float am = std::fabs(mn), aM = std::fabs(mx);
        s = rnd((am > aM ? am : aM) / half_range);
      } else {
        s = rnd(rnd(mx - mn) / range);
        z = rnd(q_min - rnd(mn / s));
        zero_range = z != z;  // 0 / 0 for a zero range: the zero point is defined as 0 (Q23)
        z = z > q_min ? z : q_min;
        z = z < q_max ? z : q_max;
      }
      if (has_global) s = global_scale * s;
      if (fp8_scale) s = round_to_float_dtype(DType::kF8E4M3, s < kFp8E4M3Max ? s : kFp8E4M3Max);
      s = s == 0.0f ? eps : s;
      // step 8: RNE to the integer zero-point dtype (|z| < 2^23 after the clamps)
      z = z > zp_lo ? z : zp_lo;
      z = z < zp_hi ? z : zp_hi;
      const float r = std::copysign((std::fabs(z) + 0x1p23f) - 0x1p23f, z);
      scale[i] = s;
      zp[i] = zero_range ? 0.0f : r;
    }
  }
};

/// min / max statistics in the dtype R4.1 / R4.2 compute in: float statistics as they
/// are, integer (and FP8) ones as f32, which the reference's arithmetic yields for them.
inline Tensor stats_as_float(const Tensor& t) {
  if (is_floating(t.dtype()) && t.dtype() != DType::kF8E4M3) return t;
  return t.to(DType::kF32);
}

/// calculate_qparams (R4.1) in three steps, so that the kernels layer can spread the
/// element-wise middle one over threads (kernels::calculate_qparams) while this layer
/// keeps the single definition (qparams_job.cc): prepare (validation, plan, shapes,
/// the statistics as doubles), run over any split of [0, size()) (elements are
/// independent), finish.
struct QParamsJob {
  QParamPlan plan;
  Shape scale_shape, zp_shape;
  std::vector<double> lo, hi;  ///< min / max in, scale / zero point out

  static QParamsJob prepare(const Tensor& min_vals, const Tensor& max_vals, const QuantizationArgs& args,
                            const Tensor* global_scale, NumericMode mode);
  int64_t size() const { return static_cast<int64_t>(lo.size()); }
  void run(int64_t begin, int64_t end);
  ScaleZeroPoint finish() &&;
};

enum class GridKind { kInt, kFp8, kFp4, kFp6 };

/// Per-call constants of the R5.1 QDQ.
struct QdqPlan {
  DType x_dt;  ///< dtype of x
  DType s_dt;  ///< dtype of the scale after the global-scale division (step 1)
  DType y_dt;  ///< dtype of x / s
  bool has_zp;
  GridKind grid;
  double q_min, q_max;
  NumericMode mode = NumericMode::kParity;

  static QdqPlan make(const QuantizationArgs& args, DType x_dt, DType s_dt, bool scale_widens, bool has_zp,
                      NumericMode mode) {
    QdqPlan p;
    p.x_dt = x_dt;
    p.s_dt = s_dt;
    p.y_dt = scale_widens ? promote_float_dtypes(x_dt, s_dt) : x_dt;
    p.has_zp = has_zp;
    if (args.type == QuantType::kInt) p.grid = GridKind::kInt;
    else if (args.num_bits == 8) p.grid = GridKind::kFp8;
    else if (args.num_bits == 4) p.grid = GridKind::kFp4;
    else if (args.num_bits == 6) p.grid = GridKind::kFp6;
    else
      QOBS_THROW(NotImplementedError, "float quantization with num_bits=", args.num_bits,
                 ": only num_bits in (4, 6, 8) are supported (R2.6)");
    const auto [lo, hi] = args.q_range();
    p.q_min = lo;
    p.q_max = hi;
    p.mode = mode;
    return p;
  }
};

/// R2.6 round_to_grid on a value of dtype y_dt (already on its grid).
QOBS_HD inline double round_to_grid(double y, const QdqPlan& p) {
  const double c = clamp_nan(y, p.q_min, p.q_max);
  switch (p.grid) {
    case GridKind::kInt:
      return round_half_even(c);
    case GridKind::kFp8:
      return fp8_e4m3_to_float(fp8_e4m3_from_double(c));
    case GridKind::kFp4:
      return fp4_round(static_cast<float>(c));
    // R2.8.1: the cast takes |c| in f32 (a rounding for f64 data, as the reference's)
    case GridKind::kFp6:
      return fp6_round(static_cast<float>(c));
  }
  return c;
}

/// R5.1.1 steps 2-4: the quantized value (in y_dt) of x for scale s (s_dt) and zero
/// point z (any dtype; ignored without zero point).
QOBS_HD inline double quantize_elem(double x, double s, double z, const QdqPlan& p) {
  const Arith ay{p.y_dt, p.mode};
  double y = ay.div(x, s);  // division, never a reciprocal multiply
  if (p.has_zp) {
    const Arith ax{p.x_dt, p.mode};
    y = ay.add(y, ax.cast(z));  // z converted to x's dtype first
  }
  return round_to_grid(y, p);
}

/// R5.1.3 for one quantized value q.
QOBS_HD inline double dequantize_elem(double q, double s, double z, const QdqPlan& p) {
  const Arith as{p.s_dt, p.mode};
  double d = as.cast(q);
  if (p.has_zp) d = as.sub(d, as.cast(z));
  return as.mul(d, s);
}

/// R5.1.1 fused QDQ for one element; result in s_dt.
QOBS_HD inline double qdq_elem(double x, double s, double z, const QdqPlan& p) {
  return dequantize_elem(quantize_elem(x, s, z, p), s, z, p);
}

}  // namespace qobs::detail
