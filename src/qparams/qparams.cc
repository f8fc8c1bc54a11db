// SPEC §4 (calculate_qparams, generate_gparam, dynamic scales) and §5 (quantize,
// dequantize, fake_quantize). The per-element arithmetic lives in qparam_math.h.
#include "qobs/qparams.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/arith.h"
#include "core/check.h"
#include "qparams/qparam_math.h"

namespace qobs {

using detail::Arith;
using detail::QdqPlan;
using detail::QParamPlan;

DType promote_float(DType a, DType b) { return detail::promote_float_dtypes(a, b); }

namespace {

std::optional<double> global_value(const Tensor* g) {
  if (!g) return std::nullopt;
  QOBS_CHECK(g->numel() == 1, InvalidArgument, "global_scale must have exactly one element, got shape ",
             shape_str(g->shape()), " (R4.1 step 4)");
  const double v = g->get(0);
  QOBS_CHECK(std::isfinite(v) && v > 0, InvalidArgument, "global_scale ", v,
             " is not a finite positive number (R4.2 produces only such values)");
  return static_cast<double>(static_cast<float>(v));
}

Tensor stats_as_float(const Tensor& t) {
  if (is_floating(t.dtype()) && t.dtype() != DType::kF8E4M3) return t;
  return t.to(DType::kF32);  // integer statistics: the reference's arithmetic yields f32
}

}  // namespace

ScaleZeroPoint calculate_qparams(const Tensor& min_in, const Tensor& max_in, const QuantizationArgs& args_in,
                                 const Tensor* global_scale, NumericMode mode) {
  const QuantizationArgs args = args_in.strategy ? args_in : args_in.validated();
  QOBS_CHECK(min_in.shape() == max_in.shape(), InvalidArgument, "calculate_qparams: min shape ",
             shape_str(min_in.shape()), " != max shape ", shape_str(max_in.shape()), " (R4.1)");
  const Tensor mn = stats_as_float(min_in), mx = stats_as_float(max_in);
  const QParamPlan plan = QParamPlan::make(args, promote_float(mn.dtype(), mx.dtype()), global_value(global_scale), mode);
  // Step 9: a 0-dimensional scale makes both results shape (1,). A global scale of shape
  // (1,) already broadcast a 0-dimensional scale to (1,) in step 4, and then the zero
  // point stays 0-dimensional, as in the reference.
  Shape scale_shape = mn.shape(), zp_shape = mn.shape();
  if (global_scale && scale_shape.empty()) scale_shape = {1};
  if (scale_shape.empty()) scale_shape = zp_shape = {1};
  // Typed loops over contiguous copies: one dtype switch per tensor, not per element.
  std::vector<double> lo = mn.to_doubles(), hi = mx.to_doubles();
  const std::size_t n = lo.size();
  for (std::size_t i = 0; i < n; ++i)
    QOBS_CHECK(std::isfinite(lo[i]) && std::isfinite(hi[i]), InvalidArgument, "calculate_qparams: min/max[", i,
               "] = (", lo[i], ", ", hi[i],
               ") is non-finite; the reference would return a NaN/Inf scale (R4.1, docs/DEVIATIONS.md)");
  // lo / hi are overwritten in place by the scales / zero points
  for (std::size_t i = 0; i < n; ++i) {
    const auto e = detail::compute_qparams_elem(lo[i], hi[i], plan);
    lo[i] = e.scale;
    hi[i] = e.zero_point;
  }
  return {Tensor::from_values(plan.scale_dt, std::move(scale_shape), lo),
          Tensor::from_values(plan.zp_dtype, std::move(zp_shape), hi)};
}

Tensor generate_gparam(const Tensor& min_in, const Tensor& max_in, NumericMode mode) {
  QOBS_CHECK(min_in.numel() == 1 && max_in.numel() == 1, InvalidArgument,
             "generate_gparam needs one-element min/max, got shapes ", shape_str(min_in.shape()), " and ",
             shape_str(max_in.shape()), " (R4.2 step 5)");
  const Tensor mn = stats_as_float(min_in), mx = stats_as_float(max_in);
  const DType dt = promote_float(mn.dtype(), mx.dtype());
  const Arith a{dt, mode};
  // NaN falls back to 1.0 below as in the reference (R4.2 step 4); an infinite range
  // would give a global scale of 0, which nothing downstream can use.
  QOBS_CHECK(!std::isinf(mn.get(0)) && !std::isinf(mx.get(0)), InvalidArgument, "generate_gparam: min/max (",
             mn.get(0), ", ", mx.get(0), ") is infinite; the reference would return a global scale of 0 (R4.2, docs/DEVIATIONS.md)");
  const double lo = detail::nan_min(mn.get(0), 0.0), hi = detail::nan_max(mx.get(0), 0.0);
  double amax = detail::nan_max(std::fabs(lo), std::fabs(hi));
  amax = detail::nan_max(amax, dtype_tiny(dt));
  // 2688 / a, the host scalar divided by the tensor in a's dtype (Q9: bf16 rounds to
  // 8 significant bits; Q10: f16 overflows for a < ~0.041).
  // PyTorch evaluates `scalar / tensor` as reciprocal(tensor) * scalar: two roundings.
  double g = a.mul(a.div(1.0, amax), 448.0 * 6.0);
  if (!std::isfinite(g)) g = 1.0;  // R4.2 step 4
  return Tensor::from_values(DType::kF32, {1}, {g});
}

Tensor generate_mx_scales(const Tensor& absmax, int num_bits) {
  QOBS_CHECK(is_floating(absmax.dtype()) && absmax.dtype() != DType::kF8E4M3, TypeError,
             "generate_mx_scales needs a bf16/f16/f32/f64 tensor, got ", dtype_name(absmax.dtype()), " (R2.4.1)");
  const Arith a{absmax.dtype()};
  const double off = num_bits == 4 ? 2.0 : 8.0;
  Tensor out(absmax.dtype(), absmax.shape());
  for (int64_t i = 0; i < absmax.numel(); ++i) {
    const double rp2 = round_to_power_2(absmax.dtype(), absmax.get(i));
    out.set(i, a.sub(a.add(127.0, std::floor(std::log2(rp2))), off));
  }
  return out;
}

ScaleZeroPoint compute_dynamic_scales_and_zp(const TensorView& value, const QuantizationArgs& args_in,
                                             const Tensor* global_scale, NumericMode mode) {
  const QuantizationArgs args = args_in.strategy ? args_in : args_in.validated();
  const Strategy st = args.get_strategy();
  const int64_t rank = value.dim();
  Shape qshape;
  int64_t group = 0;  // elements reduced per qparam when contiguous trailing
  std::vector<int64_t> owner(static_cast<std::size_t>(value.numel()));
  if (st == Strategy::kToken && rank > 2) {
    // reduce all dims but 0 and 1, keeping dims: (B, S, 1, ...)
    qshape = {value.shape[0], value.shape[1]};
    for (int64_t d = 2; d < rank; ++d) qshape.push_back(1);
    group = value.numel() / (value.shape[0] * value.shape[1]);
  } else if (st == Strategy::kToken || st == Strategy::kTensor) {
    qshape = {};  // Q16: <= 2-D token input falls back to whole-tensor min/max
    group = value.numel();
  } else if (st == Strategy::kGroup || st == Strategy::kTensorGroup) {
    const int64_t gs = *args.group_size;
    QOBS_CHECK(rank >= 1 && value.shape[rank - 1] % gs == 0, ShapeError, "dynamic group quantization: group_size ", gs,
               " does not divide the last dim of shape ", shape_str(value.shape), " (R4.3)");
    qshape.assign(value.shape.begin(), value.shape.end() - 1);
    qshape.push_back(value.shape[rank - 1] / gs);
    group = gs;
  } else {
    QOBS_THROW(InvalidArgument, "dynamic quantization does not support strategy ", to_string(st), " (R4.3)");
  }
  const int64_t nq = shape_numel(qshape);
  std::vector<double> mins(static_cast<std::size_t>(nq), INFINITY), maxs(static_cast<std::size_t>(nq), -INFINITY);
  for (int64_t i = 0; i < value.numel(); ++i) {
    const double v = value.get(i);
    const std::size_t q = static_cast<std::size_t>(i / group);
    mins[q] = detail::nan_min(mins[q], v);
    maxs[q] = detail::nan_max(maxs[q], v);
  }
  return calculate_qparams(Tensor::from_values(value.dtype, qshape, mins), Tensor::from_values(value.dtype, qshape, maxs),
                           args, global_scale, mode);
}

// ---- quantize / dequantize / fake_quantize ------------------------------------------

namespace {

enum class Op { kQdq, kQuantize, kDequantize };

/// Offset into a (broadcast) operand for each output index (numpy right alignment).
struct Broadcaster {
  Shape out_shape;
  Shape in_strides;  // per out dim; 0 where broadcast

  Broadcaster(const Shape& out, const Shape& in, const char* what) : out_shape(out) {
    QOBS_CHECK(in.size() <= out.size(), ShapeError, what, " of shape ", shape_str(in),
               " does not broadcast against ", shape_str(out), " (R5.2.1)");
    in_strides.assign(out.size(), 0);
    const Shape cs = contiguous_strides(in);
    const std::size_t shift = out.size() - in.size();
    for (std::size_t d = 0; d < in.size(); ++d) {
      QOBS_CHECK(in[d] == out[d + shift] || in[d] == 1, ShapeError, what, " of shape ", shape_str(in),
                 " does not broadcast against ", shape_str(out), " (R5.2.1)");
      in_strides[d + shift] = in[d] == 1 ? 0 : cs[d];
    }
  }
  int64_t offset(int64_t flat) const {
    int64_t off = 0;
    for (std::size_t d = out_shape.size(); d-- > 0;) {
      const int64_t idx = flat % out_shape[d];
      flat /= out_shape[d];
      off += idx * in_strides[d];
    }
    return off;
  }
};

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
  for (int64_t i = 0; i < scale.numel(); ++i)
    QOBS_CHECK(std::isfinite(scale.get(i)), InvalidArgument, "scale[", i, "] = ", scale.get(i),
               " is non-finite (R5.1.1: a NaN/Inf scale would produce garbage)");
  if (!global_scale) return {scale, scale.dim() > 0};
  const auto g = global_value(global_scale);
  const DType s_dt = promote_float(scale.dtype(), DType::kF32);
  const Arith a{s_dt, mode};
  Tensor s(s_dt, scale.shape());
  for (int64_t i = 0; i < scale.numel(); ++i) s.set(i, a.div(scale.get(i), *g));
  return {std::move(s), true};
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

Tensor apply(Op op, const TensorView& x, const Tensor& scale_in, const Tensor* zero_point, const QuantizationArgs& args_in,
             const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode) {
  const QuantizationArgs args = args_in.strategy ? args_in : args_in.validated();
  QOBS_CHECK(is_floating(x.dtype) || op == Op::kDequantize, TypeError, "x must be a float tensor, got ",
             dtype_name(x.dtype), " (R5.1)");
  const Strategy st = args.get_strategy();
  Prepared prep = prepare_scale(scale_in, global_scale, mode);
  const Tensor& s = prep.scale;
  const bool has_zp = zero_point != nullptr;
  Tensor z = has_zp ? *zero_point : Tensor();
  if (has_zp) QOBS_CHECK(z.shape() == scale_in.shape(), ShapeError, "zero_point shape ", shape_str(z.shape()),
                         " differs from scale shape ", shape_str(scale_in.shape()), " (R5.1)");
  // The dtype of x / s for quantization; dequantization reads integer / fp8 codes.
  const DType x_dt = op == Op::kDequantize ? s.dtype() : x.dtype;
  const QdqPlan plan = QdqPlan::make(args, x_dt, s.dtype(), prep.scale_widens, has_zp, mode);
  const int64_t rank = x.dim();

  auto elem = [&](double xv, double sv, double zv) {
    switch (op) {
      case Op::kQdq: return detail::qdq_elem(xv, sv, zv, plan);
      case Op::kQuantize: return detail::quantize_elem(xv, sv, zv, plan);
      case Op::kDequantize: return detail::dequantize_elem(xv, sv, zv, plan);
    }
    return 0.0;
  };
  const DType natural = op == Op::kQuantize ? plan.y_dt : s.dtype();

  if (st == Strategy::kGroup || st == Strategy::kTensorGroup) {
    // R5.3: output dtype := requested, else x's dtype
    const int64_t gs = *args.group_size;
    QOBS_CHECK(rank >= 1, ShapeError, "group quantization of a 0-dimensional tensor (R5.3)");
    const int64_t cols = x.shape[rank - 1];
    QOBS_CHECK(!(cols >= gs && cols % gs != 0), InvalidArgument, "group_size ", gs, " does not divide ", cols,
               " columns (R5.3.1 step 3)");
    QOBS_CHECK(cols >= gs, ShapeError, "tensor with ", cols, " columns cannot be split into groups of ", gs,
               " (R5.3.1, Q20)");
    const int64_t ngroups = cols / gs;
    Shape sshape = s.shape();
    while (sshape.size() < 2) sshape.insert(sshape.begin() + std::min<std::ptrdiff_t>(1, sshape.size()), 1);  // Q19
    Shape xs(x.shape.begin(), x.shape.end() - 1);
    xs.push_back(ngroups);
    Shape out_grouped = broadcast_shapes(xs, sshape);
    QOBS_CHECK(out_grouped == xs, ShapeError, "scale of shape ", shape_str(s.shape()), " does not broadcast against ",
               shape_str(x.shape), " split into groups of ", gs, " (R5.3.1)");
    Broadcaster bs(xs, sshape, "scale");
    const std::vector<int64_t> rankc = column_ranks(g_idx, cols);
    Tensor out(out_dtype.value_or(op == Op::kDequantize ? natural : x.dtype), x.shape);
    const int64_t rows = x.numel() / cols;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        const int64_t gi = r * ngroups + rankc[static_cast<std::size_t>(c)] / gs;
        const int64_t so = bs.offset(gi);
        out.set(i, elem(x.get(i), s.get(so), has_zp ? z.get(so) : 0.0));
      }
    return out;
  }

  if (st == Strategy::kBlock) {
    // R5.4: element (r, c) uses scale [r / bh, c / bw]; result dtype is the scale's.
    QOBS_CHECK(rank == 2, ShapeError, "block quantization needs a 2-D tensor, got ", shape_str(x.shape), " (R5.4)");
    const int64_t bh = (*args.block_structure)[0], bw = (*args.block_structure)[1];
    const int64_t R = x.shape[0], C = x.shape[1];
    const int64_t nbr = (R + bh - 1) / bh, nbc = (C + bw - 1) / bw;
    QOBS_CHECK(s.dim() == 2 && s.shape()[0] == nbr && s.shape()[1] == nbc, ShapeError, "block scale of shape ",
               shape_str(s.shape()), " does not match ", shape_str(x.shape), " in blocks of ", bh, "x", bw,
               " (expected ", shape_str({nbr, nbc}), ", R5.4)");
    Tensor out(out_dtype.value_or(natural), x.shape);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t so = (r / bh) * nbc + c / bw;
        out.set(r * C + c, elem(x.get(r * C + c), s.get(so), has_zp ? z.get(so) : 0.0));
      }
    return out;
  }

  // R5.1 with plain broadcasting (tensor, channel, token, attn_head)
  const Shape out_shape = broadcast_shapes(x.shape, s.shape());
  Broadcaster bx(out_shape, x.shape, "x"), bsc(out_shape, s.shape(), "scale");
  Tensor out(out_dtype.value_or(natural), out_shape);
  const int64_t n = shape_numel(out_shape);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t so = bsc.offset(i);
    out.set(i, elem(x.get(bx.offset(i)), s.get(so), has_zp ? z.get(so) : 0.0));
  }
  return out;
}

}  // namespace

Tensor fake_quantize(const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
                     const Tensor* g_idx, const Tensor* global_scale, NumericMode mode) {
  return apply(Op::kQdq, x, scale, zero_point, args, g_idx, global_scale, std::nullopt, mode);
}

Tensor quantize(const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
                const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode) {
  return apply(Op::kQuantize, x, scale, zero_point, args, g_idx, global_scale, out_dtype, mode);
}

Tensor dequantize(const TensorView& x_q, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
                  const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode) {
  return apply(Op::kDequantize, x_q, scale, zero_point, args, g_idx, global_scale, out_dtype, mode);
}

}  // namespace qobs
