// The validated, resolved form of one quantize / dequantize / fake_quantize call
// (R5.1-R5.4), built by resolve_qdq (kernels/qdq/qdq_call.cc) and shared by the scalar
// reference (kernels/qdq/qdq_ref.cc) and the fast path (kernels/qdq/qdq_cpu.cc):
// argument checks, the global-scale division (R5.1.1 step 1), the QdqPlan, the result
// dtype and shape, and where each element's scale lives. Both implementations start
// from it, so they cannot disagree on anything but the loops, which the tests compare
// bit for bit.
#pragma once

#include <optional>
#include <vector>

#include "kernels/kernels.h"
#include "qobs/host_device.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels {

/// Offset into a (broadcast) operand for each output index (numpy right alignment).
struct Broadcaster {
  Shape out_shape;
  Shape in_strides;  // per out dim; 0 where broadcast

  Broadcaster(const Shape& out, const Shape& in, const char* what);
  int64_t offset(int64_t flat) const { return strided_offset(out_shape, in_strides, flat); }
};

struct QdqCall {
  enum class Layout { kGroup, kBlock, kBroadcast };

  QdqOp op = QdqOp::kFakeQuantize;
  Layout layout = Layout::kBroadcast;
  Tensor scale;       ///< after the global-scale division (R5.1.1 step 1), dtype plan.s_dt
  Tensor zero_point;  ///< as given (undefined without one)
  bool has_zp = false;
  qobs::detail::QdqPlan plan;
  DType out_dtype = DType::kF32;
  Shape out_shape;

  // kGroup (R5.3): element (r, c) of the rows x cols view of x uses the scale at
  // bs.offset(r * ngroups + rank[c] / group_size).
  int64_t group_size = 0, ngroups = 0;
  std::optional<Broadcaster> bs;
  std::vector<int64_t> rank;  ///< column positions after the g_idx permutation (R5.3.1 step 4)
  // kBlock (R5.4): element (r, c) uses scale [r / bh, c / bw] of an (nbr, nbc) grid.
  int64_t bh = 0, bw = 0, nbc = 0;
  // kBroadcast (R5.1, R5.2.1): output index i reads x at bx.offset(i), the scale at
  // bsc.offset(i).
  std::optional<Broadcaster> bx, bsc;
};

/// Validates the arguments of quantize / dequantize / fake_quantize and resolves them.
QdqCall resolve_qdq(QdqOp op, const TensorView& x, const Tensor& scale, const Tensor* zero_point,
                    const QuantizationArgs& args, const Tensor* g_idx, const Tensor* global_scale,
                    std::optional<DType> out_dtype, NumericMode mode);

/// resolve_qdq without the scale's and zero point's values: the layout, plan and result
/// of a call whose scale has dtype s_dtype and shape s_shape after R5.1.1 step 1
/// (scale_widens: that step or a scale of rank >= 1 widens the division's dtype). For
/// operands in device memory (qdq_cuda.h), whose values the host does not read; the
/// returned call's scale and zero_point are left undefined.
QdqCall resolve_qdq_layout(QdqOp op, const TensorView& x, DType s_dtype, const Shape& s_shape, bool scale_widens,
                           bool has_zp, const QuantizationArgs& args, const Tensor* g_idx,
                           std::optional<DType> out_dtype, NumericMode mode);

/// The reference loops over a resolved call: element by element through Tensor::get /
/// set (x is the call's input).
Tensor run_reference(const QdqCall& c, const TensorView& x);

/// R5.1.1-R5.1.3 for one element of `op` (x: the input element, s / z: its scale and raw
/// zero point).
QOBS_HD inline double qdq_element(QdqOp op, double x, double s, double z, const qobs::detail::QdqPlan& plan) {
  switch (op) {
    case QdqOp::kFakeQuantize:
      return qobs::detail::qdq_elem(x, s, z, plan);
    case QdqOp::kQuantize:
      return qobs::detail::quantize_elem(x, s, z, plan);
    case QdqOp::kDequantize:
      return qobs::detail::dequantize_elem(x, s, z, plan);
  }
  return 0.0;
}

}  // namespace qobs::kernels
