// The public quantize / dequantize / fake_quantize (qobs/qparams.h, RULES §5) and the
// choice of implementation, made once per call (STYLE habit 8): the threaded fast path
// at the active SIMD level, or the scalar reference when the fast kernels are not
// built (QOBS_FAST_KERNELS=OFF).
#include "kernels/kernels.h"
#include "qobs/qparams.h"
#if QOBS_HAVE_FAST_KERNELS
#include "kernels/qdq_fast.h"
#endif

namespace qobs {
namespace kernels {

Tensor qdq(QdqOp op, const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
           const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode,
           int num_threads) {
#if QOBS_HAVE_FAST_KERNELS
  return fast::qdq(op, x, scale, zero_point, args, g_idx, global_scale, out_dtype, mode, active_simd_level(),
                   num_threads);
#else
  (void)num_threads;
  return ref::qdq(op, x, scale, zero_point, args, g_idx, global_scale, out_dtype, mode);
#endif
}

}  // namespace kernels

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

}  // namespace qobs
