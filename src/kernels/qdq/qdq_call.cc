// Argument resolution of quantize / dequantize / fake_quantize (RULES §5.1-§5.4),
// shared by the scalar reference (kernels/qdq/qdq_ref.cc) and the fast path
// (kernels/qdq/qdq_cpu.cc): both start from the same QdqCall, so they can differ only in
// their loops.
#include "kernels/qdq/qdq_call.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/arith.h"
#include "core/check.h"
#include "kernels/kernels.h"

namespace qobs::kernels {

using qobs::detail::Arith;
using qobs::detail::QdqPlan;

Broadcaster::Broadcaster(const Shape& out, const Shape& in, const char* what) : out_shape(out) {
  QOBS_CHECK(in.size() <= out.size(), ShapeError, what, " of shape ", shape_str(in), " does not broadcast against ",
             shape_str(out), " (R5.2.1)");
  in_strides.assign(out.size(), 0);
  const Shape cs = contiguous_strides(in);
  const std::size_t shift = out.size() - in.size();
  for (std::size_t d = 0; d < in.size(); ++d) {
    QOBS_CHECK(in[d] == out[d + shift] || in[d] == 1, ShapeError, what, " of shape ", shape_str(in),
               " does not broadcast against ", shape_str(out), " (R5.2.1)");
    in_strides[d + shift] = in[d] == 1 ? 0 : cs[d];
  }
}

namespace {

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int64_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    const int64_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    QOBS_CHECK(da == db || da == 1 || db == 1, ShapeError, "shapes ", shape_str(a), " and ", shape_str(b),
               " do not broadcast (R5.2.1)");
    out[i] = std::max(da, db);
  }
  return out;
}

struct Prepared {
  Tensor scale;  // after the global division (step 1)
  bool scale_widens;
};

Prepared prepare_scale(const Tensor& scale, const Tensor* global_scale, NumericMode mode) {
  QOBS_CHECK(is_floating(scale.dtype()) && scale.dtype() != DType::kF8E4M3, TypeError,
             "scale must be a float tensor, got ", dtype_name(scale.dtype()), " (R5.1.1)");
  // An NVFP4 weight has a scale per 16 elements, so these are not small: the threaded
  // scan of the bit patterns, and the division by the global scale in one float loop.
  if (const int64_t bad = first_non_finite(scale.view()); bad >= 0)
    QOBS_THROW(InvalidArgument, "scale[", bad, "] = ", scale.get(bad),
               " is non-finite (R5.1.1: a NaN/Inf scale would produce garbage)");
  if (!global_scale) return {scale, scale.dim() > 0};
  const auto g = qobs::detail::global_scale_value(global_scale);
  const DType s_dt = qobs::detail::promote_float_dtypes(scale.dtype(), DType::kF32);
  if (s_dt == DType::kF32) {
    // Arith's f32 division: float(s) / float(g), one rounding (s is exactly a float)
    Tensor out = scale.to(DType::kF32);  // a copy of its own (Tensor copies its bytes)
    const float gf = static_cast<float>(*g);
    float* p = out.data_as<float>();
    for (int64_t i = 0, n = out.numel(); i < n; ++i) p[i] /= gf;
    return {std::move(out), true};
  }
  std::vector<double> v = scale.to_doubles();
  const Arith a{s_dt, mode};
  for (double& x : v) x = a.div(x, *g);
  return {Tensor::from_values(s_dt, scale.shape(), v), true};
}

/// Positions of columns after the activation-order permutation (R5.3.1 step 4):
/// rank[c] = position of column c in the stable ascending sort of g_idx, or identity.
std::vector<int64_t> column_ranks(const Tensor* g_idx, int64_t cols) {
  std::vector<int64_t> rank(static_cast<std::size_t>(cols));
  std::iota(rank.begin(), rank.end(), 0);
  if (!g_idx) return rank;
  QOBS_CHECK(g_idx->numel() == cols, InvalidArgument, "g_idx has ", g_idx->numel(), " entries for ", cols,
             " columns (R5.3.1)");
  std::vector<double> gi = g_idx->to_doubles();
  if (std::any_of(gi.begin(), gi.end(), [](double v) { return v == -1.0; })) return rank;
  std::vector<int64_t> perm(static_cast<std::size_t>(cols));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return gi[a] < gi[b]; });
  for (int64_t pos = 0; pos < cols; ++pos) rank[static_cast<std::size_t>(perm[pos])] = pos;
  return rank;
}

}  // namespace

QdqCall resolve_qdq(QdqOp op, const TensorView& x, const Tensor& scale_in, const Tensor* zero_point,
                    const QuantizationArgs& args_in, const Tensor* g_idx, const Tensor* global_scale,
                    std::optional<DType> out_dtype, NumericMode mode) {
  // the checks of the arguments before those of the scale's values, in this order
  const QuantizationArgs args = args_in.strategy ? args_in : args_in.validated();
  QOBS_CHECK(is_floating(x.dtype) || op == QdqOp::kDequantize, TypeError, "x must be a float tensor, got ",
             dtype_name(x.dtype), " (R5.1)");
  Prepared prep = prepare_scale(scale_in, global_scale, mode);
  if (zero_point)
    QOBS_CHECK(zero_point->shape() == scale_in.shape(), ShapeError, "zero_point shape ", shape_str(zero_point->shape()),
               " differs from scale shape ", shape_str(scale_in.shape()), " (R5.1)");
  QdqCall c = resolve_qdq_layout(op, x, prep.scale.dtype(), prep.scale.shape(), prep.scale_widens,
                                 zero_point != nullptr, args, g_idx, out_dtype, mode);
  c.scale = std::move(prep.scale);
  if (zero_point) c.zero_point = *zero_point;
  return c;
}

QdqCall resolve_qdq_layout(QdqOp op, const TensorView& x, DType s_dtype, const Shape& s_shape, bool scale_widens,
                           bool has_zp, const QuantizationArgs& args_in, const Tensor* g_idx,
                           std::optional<DType> out_dtype, NumericMode mode) {
  const QuantizationArgs args = args_in.strategy ? args_in : args_in.validated();
  QOBS_CHECK(is_floating(x.dtype) || op == QdqOp::kDequantize, TypeError, "x must be a float tensor, got ",
             dtype_name(x.dtype), " (R5.1)");
  const Strategy st = args.get_strategy();
  QdqCall c;
  c.op = op;
  c.has_zp = has_zp;
  // The dtype of x / s for quantization; dequantization reads integer / fp8 codes.
  const DType x_dt = op == QdqOp::kDequantize ? s_dtype : x.dtype;
  c.plan = QdqPlan::make(args, x_dt, s_dtype, scale_widens, c.has_zp, mode);
  const int64_t rank = x.dim();
  const DType natural = op == QdqOp::kQuantize ? c.plan.y_dt : s_dtype;

  if (st == Strategy::kGroup || st == Strategy::kTensorGroup) {
    // R5.3: output dtype := requested, else x's dtype
    c.layout = QdqCall::Layout::kGroup;
    const int64_t gs = *args.group_size;
    QOBS_CHECK(rank >= 1, ShapeError, "group quantization of a 0-dimensional tensor (R5.3)");
    const int64_t cols = x.shape[rank - 1];
    // compressed-tensors 0.20 raises for fewer columns than the group size too (Q20)
    QOBS_CHECK(cols % gs == 0, InvalidArgument, "tensor column shape must be divisble by the given group_size ", gs,
               " but got ", cols, " (R5.3.1 step 3)");
    c.group_size = gs;
    c.ngroups = cols / gs;
    Shape sshape = s_shape;
    while (sshape.size() < 2) sshape.insert(sshape.begin() + std::min<std::ptrdiff_t>(1, sshape.size()), 1);  // Q19
    Shape xs(x.shape.begin(), x.shape.end() - 1);
    xs.push_back(c.ngroups);
    Shape out_grouped = broadcast_shapes(xs, sshape);
    QOBS_CHECK(out_grouped == xs, ShapeError, "scale of shape ", shape_str(s_shape), " does not broadcast against ",
               shape_str(x.shape), " split into groups of ", gs, " (R5.3.1)");
    c.bs.emplace(xs, sshape, "scale");
    c.rank = column_ranks(g_idx, cols);
    c.out_dtype = out_dtype.value_or(op == QdqOp::kDequantize ? natural : x.dtype);
    c.out_shape = x.shape;
    return c;
  }

  if (st == Strategy::kBlock) {
    // R5.4: element (r, c) uses scale [r / bh, c / bw]; result dtype is the scale's.
    c.layout = QdqCall::Layout::kBlock;
    QOBS_CHECK(rank == 2, ShapeError, "block quantization needs a 2-D tensor, got ", shape_str(x.shape), " (R5.4)");
    c.bh = (*args.block_structure)[0];
    c.bw = (*args.block_structure)[1];
    const int64_t R = x.shape[0], C = x.shape[1];
    const int64_t nbr = (R + c.bh - 1) / c.bh;
    c.nbc = (C + c.bw - 1) / c.bw;
    QOBS_CHECK(s_shape.size() == 2 && s_shape[0] == nbr && s_shape[1] == c.nbc, ShapeError, "block scale of shape ",
               shape_str(s_shape), " does not match ", shape_str(x.shape), " in blocks of ", c.bh, "x", c.bw,
               " (expected ", shape_str({nbr, c.nbc}), ", R5.4)");
    c.out_dtype = out_dtype.value_or(natural);
    c.out_shape = x.shape;
    return c;
  }

  // R5.1 with plain broadcasting (tensor, channel, token, attn_head)
  c.layout = QdqCall::Layout::kBroadcast;
  c.out_shape = broadcast_shapes(x.shape, s_shape);
  c.bx.emplace(c.out_shape, x.shape, "x");
  c.bsc.emplace(c.out_shape, s_shape, "scale");
  c.out_dtype = out_dtype.value_or(natural);
  return c;
}

}  // namespace qobs::kernels
