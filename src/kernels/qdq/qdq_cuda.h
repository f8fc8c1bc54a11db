// quantize / dequantize / fake_quantize (R5.1-R5.4) on a CUDA device: one output
// element per thread through the reference's element step (qdq_element, QOBS_HD), with
// the scale and zero point found where the resolved call (QdqCall, qdq_call.h) says.
// Host and device code: the tests run qdq_elem_cuda on the CPU over every index against
// ref::qdq (tests/kernels/qdq), the device runs the same source (qdq_cuda.cu).
//
// The global-scale division of R5.1.1 step 1 (prepare_scale on the CPU path: s / g in
// the scale's promoted dtype, one rounding) happens per element here; its value is the
// same.
#pragma once

#include <cstdint>
#include <optional>

#include "core/arith.h"
#include "core/element.h"
#include "kernels/cuda/flat_map.h"
#include "kernels/qdq/qdq_call.h"
#include "qobs/host_device.h"

namespace qobs::kernels::cuda {

struct QdqArgs {
  QdqOp op = QdqOp::kFakeQuantize;
  QdqCall::Layout layout = QdqCall::Layout::kBroadcast;
  qobs::detail::QdqPlan plan;
  int64_t n = 0;            ///< output elements
  const void* x = nullptr;  ///< device
  DType x_dtype = DType::kF32;
  AxisList x_view;              ///< x's shape and strides: flat row-major index -> storage offset
  const void* scale = nullptr;  ///< device, contiguous, dtype scale_dtype (before step 1)
  DType scale_dtype = DType::kF32;
  const float* global_scale = nullptr;  ///< device, or nullptr
  DType s_dt = DType::kF32;             ///< the scale's dtype after step 1 (the plan's s_dt)
  NumericMode mode = NumericMode::kParity;
  const void* zero_point = nullptr;  ///< device, contiguous like scale, or nullptr
  DType zp_dtype = DType::kI8;
  void* out = nullptr;  ///< device, contiguous
  DType out_dtype = DType::kF32;
  // kGroup: element (r, c) of the rows x cols view uses scale offset group_scale.offset(r * ngroups + c / group_size)
  int64_t cols = 0, group_size = 0, ngroups = 0;
  AxisList group_scale;
  // kBlock: element (r, c) uses scale (r / bh) * nbc + c / bw
  int64_t bh = 0, bw = 0, nbc = 0;
  // kBroadcast: output index i reads x at flat index bx.offset(i) and the scale at bsc.offset(i)
  AxisList bx, bsc;

  QOBS_HD double scale_at(int64_t so) const {
    const double s = qobs::detail::load_element(scale, scale_dtype, so);
    if (!global_scale) return s;
    return qobs::detail::Arith{s_dt, mode}.div(s, static_cast<double>(*global_scale));
  }
};

QOBS_HD inline void qdq_elem_cuda(const QdqArgs& a, int64_t i) {
  int64_t xi = i, so = 0;
  switch (a.layout) {
    case QdqCall::Layout::kGroup: {
      const int64_t r = i / a.cols, c = i % a.cols;
      so = a.group_scale.offset(r * a.ngroups + c / a.group_size);
      break;
    }
    case QdqCall::Layout::kBlock: {
      const int64_t r = i / a.cols, c = i % a.cols;
      so = (r / a.bh) * a.nbc + c / a.bw;
      break;
    }
    case QdqCall::Layout::kBroadcast:
      xi = a.bx.offset(i);
      so = a.bsc.offset(i);
      break;
  }
  const double xv = qobs::detail::load_element(a.x, a.x_dtype, a.x_view.offset(xi));
  const double z = a.zero_point ? qobs::detail::load_element(a.zero_point, a.zp_dtype, so) : 0.0;
  qobs::detail::store_element(a.out, a.out_dtype, i, qdq_element(a.op, xv, a.scale_at(so), z, a.plan));
}

/// Launches qdq_elem_cuda over [0, n) on `stream` (a cudaStream_t). qdq_cuda.cu.
void launch_qdq(const QdqArgs& a, void* stream);

/// The arguments of a call resolved by resolve_qdq_layout (qdq.cc): layout, plan and
/// shapes, with x's shape and strides; the operand and output pointers are the
/// caller's to set. nullopt where the device path does not apply: a g_idx column order
/// (R5.3.1 step 4) or more than kMaxAxes dimensions.
std::optional<QdqArgs> cuda_qdq_args(const QdqCall& call, const TensorView& x, DType scale_dtype, NumericMode mode);

}  // namespace qobs::kernels::cuda
