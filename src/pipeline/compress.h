// One module's weight -> its compressed-tensors state (RULES §8.2-8.6): the private core
// of quantize_checkpoint, exposed to the tests.
#pragma once

#include <optional>
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

/// What compress_weight settles before it quantizes: the planned tensors, the scale as
/// the module parameter holds it (R5.7.5; quantization uses exactly that value, R8.2.5)
/// and the dtype quantize() gives the weight. Shared by the CPU and the device path.
struct CompressSetup {
  std::vector<PlannedTensor> plan;
  Tensor scale;                         ///< qp.scale in the module dtype
  std::optional<DType> q_dtype;         ///< quantize()'s out_dtype (int8/16/32, fp8), else its default
  const PlannedTensor* packed() const;  ///< weight_packed of `plan`, or null when the format stores q itself
};
CompressSetup compress_setup(DType weight_dtype, const Shape& weight_shape, const QParams& qp,
                             const QuantizationArgs& args, const std::string& format, std::string_view label);

/// True for the formats whose weight_packed holds FP4 codes (R8.5.1); the other packing
/// formats pack FP6 codes (packs_fp6, R8.10.1) or int rows (R8.3.1).
bool packs_fp4(const std::string& format);
/// True for mxfp6-pack-quantized: weight_packed holds FP6 codes, four in three bytes (R8.10.1).
bool packs_fp6(const std::string& format);

/// The quantized weight as the format stores it, and the report's sums: the weight
/// against dequantize(q) with the stored qparams (what a loader reconstructs).
struct Quantized {
  Tensor q;       ///< the whole quantized weight, when the format stores it or packing was not by blocks
  Tensor packed;  ///< weight_packed, when the format packs and it was packed already
  kernels::ErrorSums error;
};

/// compress_weight's last step: the format's tensors (plan order) from the quantized
/// weight and the qparams.
Compressed assemble_compressed(const CompressSetup& setup, Quantized&& quantized, const QParams& qp,
                               const QuantizationArgs& args, const std::string& format, const Shape& weight_shape,
                               std::string_view label);

/// Quantizes `weight` with calibrated qparams for storage. The scale is first converted
/// to the module parameter dtype (R5.7.5) and that stored value is the one used to
/// quantize (R8.2.5); the module's zero point (zeros when symmetric) takes part as in the
/// reference compressor, which decides the sign of FP4 zeros (Q17).
Compressed compress_weight(const TensorView& weight, const QParams& qp, const QuantizationArgs& args,
                           const std::string& format, std::string_view label);

}  // namespace qobs::detail
