// The public qobs/qparams.h (RULES §4, §5) over tensors. calculate_qparams, quantize,
// dequantize and fake_quantize are the kernels the observers call (kernels.h: threaded,
// at the active SIMD level), so a caller of the public API and an observer run the same
// code; generate_gparam and the MX scales are one-element or per-group scalar steps.
#include "qobs/qparams.h"

#include <cmath>

#include "core/arith.h"
#include "core/check.h"
#include "kernels/kernels.h"
#include "qparams/qparam_math.h"

namespace qobs {

using detail::Arith;
using detail::stats_as_float;

DType promote_float(DType a, DType b) { return detail::promote_float_dtypes(a, b); }

ScaleZeroPoint calculate_qparams(const Tensor& min_vals, const Tensor& max_vals, const QuantizationArgs& args,
                                 const Tensor* global_scale, NumericMode mode) {
  return kernels::calculate_qparams(min_vals, max_vals, args, global_scale, mode);
}

Tensor fake_quantize(const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
                     const Tensor* g_idx, const Tensor* global_scale, NumericMode mode) {
  return kernels::qdq(kernels::QdqOp::kFakeQuantize, x, scale, zero_point, args, g_idx, global_scale, std::nullopt,
                      mode);
}

Tensor quantize(const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
                const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode) {
  return kernels::qdq(kernels::QdqOp::kQuantize, x, scale, zero_point, args, g_idx, global_scale, out_dtype, mode);
}

Tensor dequantize(const TensorView& x_q, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
                  const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode) {
  return kernels::qdq(kernels::QdqOp::kDequantize, x_q, scale, zero_point, args, g_idx, global_scale, out_dtype, mode);
}

Tensor generate_gparam(const Tensor& min_in, const Tensor& max_in, NumericMode mode) {
  QOBS_CHECK(min_in.numel() == 1 && max_in.numel() == 1, InvalidArgument,
             "generate_gparam needs one-element min/max, got shapes ", shape_str(min_in.shape()), " and ",
             shape_str(max_in.shape()), " (R4.2 step 5)");
  const Tensor mn = stats_as_float(min_in), mx = stats_as_float(max_in);
  const DType dt = promote_float(mn.dtype(), mx.dtype());
  // NaN falls back to 1.0 below as in the reference (R4.2 step 4); an infinite range
  // would give a global scale of 0, which nothing downstream can use.
  QOBS_CHECK(!std::isinf(mn.get(0)) && !std::isinf(mx.get(0)), InvalidArgument, "generate_gparam: min/max (", mn.get(0),
             ", ", mx.get(0),
             ") is infinite; the reference would return a global scale of 0 (R4.2, docs/DEVIATIONS.md)");
  const double g = detail::global_scale_of_range(mn.get(0), mx.get(0), dt, mode);
  return Tensor::from_values(DType::kF32, {1}, {g});
}

Tensor generate_mx_scales(const Tensor& absmax, int num_bits) {
  QOBS_CHECK(is_floating(absmax.dtype()) && absmax.dtype() != DType::kF8E4M3, TypeError,
             "generate_mx_scales needs a bf16/f16/f32/f64 tensor, got ", dtype_name(absmax.dtype()), " (R2.4.1)");
  QOBS_CHECK(num_bits == 4 || num_bits == 6 || num_bits == 8, UnknownName, "generate_mx_scales: num_bits ", num_bits,
             " has no MX element format (4: FP4, 6: FP6, 8: FP8; R2.4.2)");
  const Arith a{absmax.dtype()};
  const double off = mx_exponent_offset(num_bits);
  const int m = mx_elem_mantissa(num_bits);
  Tensor out(absmax.dtype(), absmax.shape());
  const bool f16 = absmax.dtype() == DType::kF16;
  for (int64_t i = 0; i < absmax.numel(); ++i) {
    // f16 from its stored bits: a NaN's payload can carry into the sign bit (0x7FC0 + 2^6
    // is -0.0), and a double holds no f16 NaN payload
    const double rp2 = f16 ? f16_to_float(round_to_power_2_bits16(absmax.data_as<uint16_t>()[i], 10, m))
                           : round_to_power_2(absmax.dtype(), absmax.get(i), m);
    out.set(i, a.sub(a.add(kE8M0Bias, std::floor(std::log2(rp2))), off));
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
  return calculate_qparams(Tensor::from_values(value.dtype, qshape, mins),
                           Tensor::from_values(value.dtype, qshape, maxs), args, global_scale, mode);
}

}  // namespace qobs
