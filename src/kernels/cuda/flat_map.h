// A flattened view (FlatView, R3) as a plain value the CUDA kernels take by value: the
// storage pointer, the dtype and the index maps of the qparam elements and of the
// values of one element, with at most kMaxAxes axes each. Host and device code
// (QOBS_HD); the host builds it from a FlatView (flat_map_of).
#pragma once

#include <cstdint>
#include <optional>

#include "core/element.h"
#include "qobs/formats.h"
#include "qobs/host_device.h"
#include "qobs/layout.h"

namespace qobs::kernels::cuda {

inline constexpr int kMaxAxes = 8;

/// Row-major index -> storage offset over up to kMaxAxes axes (last fastest).
struct AxisList {
  int count = 0;
  int64_t size[kMaxAxes] = {};
  int64_t stride[kMaxAxes] = {};
  QOBS_HD int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = count; d-- > 0;) {
      off += (i % size[d]) * stride[d];
      i /= size[d];
    }
    return off;
  }
};

struct FlatMap {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t num_qparams = 0;
  int64_t len = 0;  ///< values per qparam element: num_obs * group_len
  AxisList qparam_axes;
  AxisList value_axes;  ///< the observation axes, then the group axes (FlatView::gather's order)
  /// Group q is the elements [base + q * len, base + (q + 1) * len) of storage
  /// (FlatView::groups_end_to_end): no index arithmetic per value.
  bool end_to_end = false;
  int64_t base = 0;

  /// Storage offset of value j of qparam element q.
  QOBS_HD int64_t offset(int64_t q, int64_t j) const {
    return end_to_end ? base + q * len + j : qparam_axes.offset(q) + value_axes.offset(j);
  }
  /// Value j of qparam element q widened to float, as FlatView::gather reads it.
  QOBS_HD float load(int64_t q, int64_t j) const {
    return static_cast<float>(qobs::detail::load_element(data, dtype, offset(q, j)));
  }
};

/// The FlatMap of a view whose layout fits (at most kMaxAxes axes per part); nullopt
/// otherwise. The view's data may be device memory: nothing is read.
std::optional<FlatMap> flat_map_of(const FlatView& view);

}  // namespace qobs::kernels::cuda
