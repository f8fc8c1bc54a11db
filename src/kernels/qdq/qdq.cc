// The quantize / dequantize / fake_quantize driver (kernels.h): picks the
// implementation once per call -- the threaded CPU path at the active SIMD level
// (qdq_cpu.cc). Both it and the plain reference (qdq_ref.cc) start from the same
// resolved QdqCall (qdq_call.h), so they can differ only in their loops.
#include "kernels/kernels.h"
#include "kernels/qdq/qdq_cpu.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels {

Tensor qdq(QdqOp op, const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
           const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode,
           int num_threads) {
  return cpu::qdq(op, x, scale, zero_point, args, g_idx, global_scale, out_dtype, mode, active_simd_level(),
                  num_threads);
}

}  // namespace qobs::kernels
