// The scalar reference of quantize / dequantize / fake_quantize (RULES §5): the
// element-by-element loops through Tensor::get / set over a call resolved by
// resolve_qdq (kernels/qdq/qdq_call.cc), the executable specification the fast path is
// tested against.
#include "kernels/qdq/qdq_call.h"

namespace qobs::kernels {

Tensor run_reference(const QdqCall& c, const TensorView& x) {
  const Tensor& s = c.scale;
  const Tensor& z = c.zero_point;
  auto elem = [&](double xv, int64_t so) {
    return qdq_element(c.op, xv, s.get(so), c.has_zp ? z.get(so) : 0.0, c.plan);
  };
  Tensor out(c.out_dtype, c.out_shape);
  switch (c.layout) {
    case QdqCall::Layout::kGroup: {
      const int64_t cols = x.shape.back(), rows = x.numel() / cols;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t col = 0; col < cols; ++col) {
          const int64_t i = r * cols + col;
          const int64_t gi = r * c.ngroups + c.rank[static_cast<std::size_t>(col)] / c.group_size;
          out.set(i, elem(x.get(i), c.bs->offset(gi)));
        }
      break;
    }
    case QdqCall::Layout::kBlock: {
      const int64_t R = x.shape[0], C = x.shape[1];
      for (int64_t r = 0; r < R; ++r)
        for (int64_t col = 0; col < C; ++col)
          out.set(r * C + col, elem(x.get(r * C + col), (r / c.bh) * c.nbc + col / c.bw));
      break;
    }
    case QdqCall::Layout::kBroadcast: {
      const int64_t n = shape_numel(c.out_shape);
      for (int64_t i = 0; i < n; ++i) out.set(i, elem(x.get(c.bx->offset(i)), c.bsc->offset(i)));
      break;
    }
  }
  return out;
}

namespace ref {

Tensor qdq(QdqOp op, const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
           const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode) {
  return run_reference(resolve_qdq(op, x, scale, zero_point, args, g_idx, global_scale, out_dtype, mode), x);
}

}  // namespace ref
}  // namespace qobs::kernels
