// The CPU path of quantize / dequantize / fake_quantize behind kernels.h (qdq_cpu.cc):
// threaded, vectorized. Bit-identical to qdq_ref.cc at every level and thread count.
#pragma once

#include "kernels/kernels.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels::cpu {

Tensor qdq(QdqOp op, const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
           const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode,
           SimdLevel level, int num_threads);

}  // namespace qobs::kernels::cpu
