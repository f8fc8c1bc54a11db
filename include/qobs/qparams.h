// Quantization-parameter math (RULES §4) and quantize / dequantize / fake-quantize (§5).
#pragma once

#include <optional>
#include <span>

#include "qobs/args.h"
#include "qobs/numeric.h"
#include "qobs/tensor.h"

namespace qobs {

struct ScaleZeroPoint {
  Tensor scale;       ///< promoted float dtype (R4.1 "Output dtypes")
  Tensor zero_point;  ///< zp_dtype
};

/// R4.1 calculate_qparams(min, max, args, global_scale). min/max: identical shapes, any
/// numeric dtype; global_scale: f32 of one element. Shapes of the results equal min's
/// (a 0-dimensional min gives shape (1,)).
ScaleZeroPoint calculate_qparams(const Tensor& min_vals, const Tensor& max_vals, const QuantizationArgs& args,
                                 const Tensor* global_scale = nullptr, NumericMode mode = NumericMode::kParity);

/// R4.2 generate_gparam(min, max): f32 tensor of shape (1,). Inputs must have exactly one
/// element. NaN or infinite results fall back to 1.0 as the reference does.
Tensor generate_gparam(const Tensor& min_vals, const Tensor& max_vals, NumericMode mode = NumericMode::kParity);

/// R4.3 dynamic (run-time) scales for token / tensor / group / tensor_group.
ScaleZeroPoint compute_dynamic_scales_and_zp(const TensorView& value, const QuantizationArgs& args,
                                             const Tensor* global_scale = nullptr,
                                             NumericMode mode = NumericMode::kParity);

/// R5.1-R5.4 fake_quantize(x, scale, zero_point, args, g_idx, global_scale). The result
/// dtype follows Q18: x's dtype for group / tensor_group, otherwise the (promoted) scale
/// dtype.
Tensor fake_quantize(const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
                     const Tensor* g_idx = nullptr, const Tensor* global_scale = nullptr,
                     NumericMode mode = NumericMode::kParity);

/// R5.1.2 quantize: values on the quantized grid, in `out_dtype` (default: the dtype of
/// x / scale). Block strategy pads, quantizes and crops back (R8.4.1).
Tensor quantize(const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
                const Tensor* g_idx = nullptr, const Tensor* global_scale = nullptr,
                std::optional<DType> out_dtype = std::nullopt, NumericMode mode = NumericMode::kParity);

/// R5.1.3 dequantize with known args; result dtype `out_dtype` (default scale's dtype
/// after division by the global scale).
Tensor dequantize(const TensorView& x_q, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
                  const Tensor* g_idx = nullptr, const Tensor* global_scale = nullptr,
                  std::optional<DType> out_dtype = std::nullopt, NumericMode mode = NumericMode::kParity);

/// R2.4.2 generate_mx_scales over a tensor of per-group absmax values (float result:
/// biased exponents, -inf for 0).
Tensor generate_mx_scales(const Tensor& absmax, int num_bits);

/// R0.4c result dtype of a binary element-wise op between two >=1-dim float tensors.
DType promote_float(DType a, DType b);

}  // namespace qobs
