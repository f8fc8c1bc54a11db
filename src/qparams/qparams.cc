// RULES §4 (calculate_qparams, generate_gparam, dynamic scales). The per-element
// arithmetic lives in qparam_math.h; quantize / dequantize / fake_quantize (§5) are
// kernels (kernels/qdq.cc) so that they can use the SIMD and thread-pool fast paths.
#include "qobs/qparams.h"

#include <cmath>

#include "core/arith.h"
#include "core/check.h"
#include "qparams/qparam_math.h"

namespace qobs {

using detail::Arith;
using detail::QParamPlan;

DType promote_float(DType a, DType b) { return detail::promote_float_dtypes(a, b); }

namespace {

Tensor stats_as_float(const Tensor& t) {
  if (is_floating(t.dtype()) && t.dtype() != DType::kF8E4M3) return t;
  return t.to(DType::kF32);  // integer statistics: the reference's arithmetic yields f32
}

}  // namespace

namespace detail {

QParamsJob QParamsJob::prepare(const Tensor& min_in, const Tensor& max_in, const QuantizationArgs& args_in,
                               const Tensor* global_scale, NumericMode mode) {
  const QuantizationArgs args = args_in.strategy ? args_in : args_in.validated();
  QOBS_CHECK(min_in.shape() == max_in.shape(), InvalidArgument, "calculate_qparams: min shape ",
             shape_str(min_in.shape()), " != max shape ", shape_str(max_in.shape()), " (R4.1)");
  const Tensor mn = stats_as_float(min_in), mx = stats_as_float(max_in);
  QParamsJob job{QParamPlan::make(args, promote_float(mn.dtype(), mx.dtype()), detail::global_scale_value(global_scale),
                                  mode),
                 mn.shape(), mn.shape(), {}, {}};
  // Step 9: a 0-dimensional scale makes both results shape (1,). A global scale of shape
  // (1,) already broadcast a 0-dimensional scale to (1,) in step 4, and then the zero
  // point stays 0-dimensional, as in the reference.
  if (global_scale && job.scale_shape.empty()) job.scale_shape = {1};
  if (job.scale_shape.empty()) job.scale_shape = job.zp_shape = {1};
  // Typed loops over contiguous copies: one dtype switch per tensor, not per element.
  job.lo = mn.to_doubles();
  job.hi = mx.to_doubles();
  for (std::size_t i = 0; i < job.lo.size(); ++i)
    QOBS_CHECK(std::isfinite(job.lo[i]) && std::isfinite(job.hi[i]), InvalidArgument, "calculate_qparams: min/max[",
               i, "] = (", job.lo[i], ", ", job.hi[i],
               ") is non-finite; the reference would return a NaN/Inf scale (R4.1, docs/DEVIATIONS.md)");
  return job;
}

void QParamsJob::run(int64_t begin, int64_t end) {
  // lo / hi are overwritten in place by the scales / zero points
  for (int64_t i = begin; i < end; ++i) {
    const auto e = compute_qparams_elem(lo[static_cast<std::size_t>(i)], hi[static_cast<std::size_t>(i)], plan);
    lo[static_cast<std::size_t>(i)] = e.scale;
    hi[static_cast<std::size_t>(i)] = e.zero_point;
  }
}

ScaleZeroPoint QParamsJob::finish() && {
  return {Tensor::from_values(plan.scale_dt, std::move(scale_shape), lo),
          Tensor::from_values(plan.zp_dtype, std::move(zp_shape), hi)};
}

}  // namespace detail

ScaleZeroPoint calculate_qparams(const Tensor& min_in, const Tensor& max_in, const QuantizationArgs& args_in,
                                 const Tensor* global_scale, NumericMode mode) {
  auto job = detail::QParamsJob::prepare(min_in, max_in, args_in, global_scale, mode);
  job.run(0, job.size());
  return std::move(job).finish();
}

Tensor generate_gparam(const Tensor& min_in, const Tensor& max_in, NumericMode mode) {
  QOBS_CHECK(min_in.numel() == 1 && max_in.numel() == 1, InvalidArgument,
             "generate_gparam needs one-element min/max, got shapes ", shape_str(min_in.shape()), " and ",
             shape_str(max_in.shape()), " (R4.2 step 5)");
  const Tensor mn = stats_as_float(min_in), mx = stats_as_float(max_in);
  const DType dt = promote_float(mn.dtype(), mx.dtype());
  const Arith a{dt, mode};
  // NaN falls back to 1.0 below as in the reference (R4.2 step 4); an infinite range
  // would give a global scale of 0, which nothing downstream can use.
  QOBS_CHECK(!std::isinf(mn.get(0)) && !std::isinf(mx.get(0)), InvalidArgument, "generate_gparam: min/max (",
             mn.get(0), ", ", mx.get(0), ") is infinite; the reference would return a global scale of 0 (R4.2, docs/DEVIATIONS.md)");
  const double lo = detail::nan_min(mn.get(0), 0.0), hi = detail::nan_max(mx.get(0), 0.0);
  double amax = detail::nan_max(std::fabs(lo), std::fabs(hi));
  amax = detail::nan_max(amax, dtype_tiny(dt));
  // 2688 / a, the host scalar divided by the tensor in a's dtype (Q9: bf16 rounds to
  // 8 significant bits; Q10: f16 overflows for a < ~0.041).
  // PyTorch evaluates `scalar / tensor` as reciprocal(tensor) * scalar: two roundings.
  double g = a.mul(a.div(1.0, amax), 448.0 * 6.0);
  if (!std::isfinite(g)) g = 1.0;  // R4.2 step 4
  return Tensor::from_values(DType::kF32, {1}, {g});
}

Tensor generate_mx_scales(const Tensor& absmax, int num_bits) {
  QOBS_CHECK(is_floating(absmax.dtype()) && absmax.dtype() != DType::kF8E4M3, TypeError,
             "generate_mx_scales needs a bf16/f16/f32/f64 tensor, got ", dtype_name(absmax.dtype()), " (R2.4.1)");
  const Arith a{absmax.dtype()};
  const double off = num_bits == 4 ? 2.0 : 8.0;
  Tensor out(absmax.dtype(), absmax.shape());
  for (int64_t i = 0; i < absmax.numel(); ++i) {
    const double rp2 = round_to_power_2(absmax.dtype(), absmax.get(i));
    out.set(i, a.sub(a.add(127.0, std::floor(std::log2(rp2))), off));
  }
  return out;
}

ScaleZeroPoint compute_dynamic_scales_and_zp(const TensorView& value, const QuantizationArgs& args_in,
                                             const Tensor* global_scale, NumericMode mode) {
  const QuantizationArgs args = args_in.strategy ? args_in : args_in.validated();
  const Strategy st = args.get_strategy();
  const int64_t rank = value.dim();
  Shape qshape;
  int64_t group = 0;  // elements reduced per qparam when contiguous trailing
  std::vector<int64_t> owner(static_cast<std::size_t>(value.numel()));
  if (st == Strategy::kToken && rank > 2) {
    // reduce all dims but 0 and 1, keeping dims: (B, S, 1, ...)
    qshape = {value.shape[0], value.shape[1]};
    for (int64_t d = 2; d < rank; ++d) qshape.push_back(1);
    group = value.numel() / (value.shape[0] * value.shape[1]);
  } else if (st == Strategy::kToken || st == Strategy::kTensor) {
    qshape = {};  // Q16: <= 2-D token input falls back to whole-tensor min/max
    group = value.numel();
  } else if (st == Strategy::kGroup || st == Strategy::kTensorGroup) {
    const int64_t gs = *args.group_size;
    QOBS_CHECK(rank >= 1 && value.shape[rank - 1] % gs == 0, ShapeError, "dynamic group quantization: group_size ", gs,
               " does not divide the last dim of shape ", shape_str(value.shape), " (R4.3)");
    qshape.assign(value.shape.begin(), value.shape.end() - 1);
    qshape.push_back(value.shape[rank - 1] / gs);
    group = gs;
  } else {
    QOBS_THROW(InvalidArgument, "dynamic quantization does not support strategy ", to_string(st), " (R4.3)");
  }
  const int64_t nq = shape_numel(qshape);
  std::vector<double> mins(static_cast<std::size_t>(nq), INFINITY), maxs(static_cast<std::size_t>(nq), -INFINITY);
  for (int64_t i = 0; i < value.numel(); ++i) {
    const double v = value.get(i);
    const std::size_t q = static_cast<std::size_t>(i / group);
    mins[q] = detail::nan_min(mins[q], v);
    maxs[q] = detail::nan_max(maxs[q], v);
  }
  return calculate_qparams(Tensor::from_values(value.dtype, qshape, mins), Tensor::from_values(value.dtype, qshape, maxs),
                           args, global_scale, mode);
}

}  // namespace qobs
