#include "kernels/cuda/flat_map.h"

namespace qobs::kernels::cuda {

namespace {

bool fill(AxisList& out, const std::vector<Axis>& a, const std::vector<Axis>* b = nullptr) {
  out.count = 0;
  for (const auto* list : {&a, b}) {
    if (!list) continue;
    for (const Axis& ax : *list) {
      if (out.count == kMaxAxes) return false;
      out.size[out.count] = ax.size;
      out.stride[out.count] = ax.stride;
      ++out.count;
    }
  }
  return true;
}

}  // namespace

std::optional<FlatMap> flat_map_of(const FlatView& view) {
  FlatMap m;
  m.data = view.data;
  m.dtype = view.dtype;
  m.num_qparams = view.layout.num_qparams();
  m.len = view.layout.num_obs() * view.layout.group_len();
  if (!fill(m.qparam_axes, view.layout.qparam_axes)) return std::nullopt;
  if (!fill(m.value_axes, view.layout.obs_axes, &view.layout.group_axes)) return std::nullopt;
  m.end_to_end = view.groups_end_to_end();
  m.base = m.end_to_end ? view.group_offset(0) : 0;
  return m;
}

}  // namespace qobs::kernels::cuda
