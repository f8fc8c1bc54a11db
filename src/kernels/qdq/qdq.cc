// The quantize / dequantize / fake_quantize driver (kernels.h): picks the
// implementation once per call -- the threaded CPU path at the active SIMD level
// (qdq_cpu.cc). Both it and the plain reference (qdq_ref.cc) start from the same
// resolved QdqCall (qdq_call.h), so they can differ only in their loops.
#include "kernels/kernels_cuda.h"
#include "kernels/kernels.h"
#include "kernels/qdq/qdq_cpu.h"
#include "kernels/qdq/qdq_cuda.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels {

Tensor qdq(QdqOp op, const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
           const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode,
           int num_threads) {
  return cpu::qdq(op, x, scale, zero_point, args, g_idx, global_scale, out_dtype, mode, active_simd_level(),
                  num_threads);
}

namespace cuda {

namespace {

bool axes_of(const Shape& sizes, const Shape& strides, AxisList& out) {
  if (sizes.size() > static_cast<std::size_t>(kMaxAxes)) return false;
  out.count = static_cast<int>(sizes.size());
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    out.size[d] = sizes[d];
    out.stride[d] = strides[d];
  }
  return true;
}

}  // namespace

std::optional<QdqArgs> cuda_qdq_args(const QdqCall& c, const TensorView& x, DType scale_dtype, NumericMode mode) {
  QdqArgs a;
  a.op = c.op;
  a.layout = c.layout;
  a.plan = c.plan;
  a.n = shape_numel(c.out_shape);
  a.x_dtype = x.dtype;
  if (!axes_of(x.shape, x.strides.empty() ? contiguous_strides(x.shape) : x.strides, a.x_view)) return std::nullopt;
  a.scale_dtype = scale_dtype;
  a.s_dt = c.plan.s_dt;
  a.mode = mode;
  a.out_dtype = c.out_dtype;
  switch (c.layout) {
    case QdqCall::Layout::kGroup:
      for (std::size_t col = 0; col < c.rank.size(); ++col)
        if (c.rank[col] != static_cast<int64_t>(col)) return std::nullopt;
      a.cols = x.shape.back();
      a.group_size = c.group_size;
      a.ngroups = c.ngroups;
      if (!axes_of(c.bs->out_shape, c.bs->in_strides, a.group_scale)) return std::nullopt;
      break;
    case QdqCall::Layout::kBlock:
      a.cols = x.shape[1];
      a.bh = c.bh;
      a.bw = c.bw;
      a.nbc = c.nbc;
      break;
    case QdqCall::Layout::kBroadcast:
      if (!axes_of(c.bx->out_shape, c.bx->in_strides, a.bx) || !axes_of(c.bsc->out_shape, c.bsc->in_strides, a.bsc))
        return std::nullopt;
      break;
  }
  return a;
}

}  // namespace cuda

namespace cuda {

void qdq(const Backend& b, const QdqArgs& a, Stream s) {
  if (a.n > 0) b.qdq(a, s);
}

}  // namespace cuda

}  // namespace qobs::kernels
