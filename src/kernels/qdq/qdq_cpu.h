// The threaded, vectorized quantize / dequantize / fake_quantize and packing behind
// kernels.h (qdq_fast.cc; packing in packing.cc). Bit-identical to the references in
// kernels/ref at every level and thread count.
#pragma once

#include "kernels/kernels.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels::fast {

Tensor qdq(QdqOp op, const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
           const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode,
           SimdLevel level, int num_threads);

}  // namespace qobs::kernels::fast
