// One module's weight -> its compressed-tensors state (RULES §8.2-8.6): the private core
// of quantize_checkpoint, exposed to the tests.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/kernels.h"  // ErrorSums
#include "qobs/args.h"
#include "qobs/observer.h"
#include "qobs/tensor.h"

namespace qobs::detail {

/// A tensor the compressor will produce: local name (R8.2.1), dtype, shape.
struct PlannedTensor {
  std::string local;
  DType dtype;
  Shape shape;
};

/// R5.7.4: the dtype of a module's qparam parameters (and so of stored scales, R8.2.4).
DType model_dtype_of(DType weight_dtype);

/// The tensors that replace `<module>.weight` for `format`, known before any data is
/// read (so the safetensors header can be written first). Checks the weight's shape
/// against the args (group divisibility R5.3.1, even columns for FP4 R8.5.1, 2-D) and
/// throws InvalidArgument naming `label` when they do not fit.
std::vector<PlannedTensor> plan_compressed(const QuantizationArgs& args, const std::string& format, DType weight_dtype,
                                           const Shape& weight_shape, std::string_view label);

struct Compressed {
  std::vector<std::pair<std::string, Tensor>> tensors;  ///< local name -> tensor, in plan order
  /// The report's sums: the weight against what a loader reconstructs from `tensors`
  /// (kernels::error_sums of the weight and its dequantized copy, in the weight's dtype).
  kernels::ErrorSums error;
};

/// Quantizes `weight` with calibrated qparams for storage. The scale is first converted
/// to the module parameter dtype (R5.7.5) and that stored value is the one used to
/// quantize (R8.2.5); the module's zero point (zeros when symmetric) takes part as in the
/// reference compressor, which decides the sign of FP4 zeros (Q17).
Compressed compress_weight(const TensorView& weight, const QParams& qp, const QuantizationArgs& args,
                           const std::string& format, std::string_view label);

}  // namespace qobs::detail
