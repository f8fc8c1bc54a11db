// The plain reference of min-max (R6.3.1): each group gathered, then the sequential
// nan_min / nan_max loop, so NaN propagates and among equal zeros the sign of the last
// one wins. The CPU path (minmax_cpu.cc) must reproduce it bit for bit.
#include <cmath>
#include <vector>

#include "kernels/kernels.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::ref {

void minmax(const FlatView& flat, float* mins, float* maxs) {
  const int64_t nq = flat.layout.num_qparams();
  const int64_t len = flat.layout.num_obs() * flat.layout.group_len();
  std::vector<float> buf(static_cast<std::size_t>(len));
  for (int64_t q = 0; q < nq; ++q) {
    flat.gather(q, buf.data());
    double lo = INFINITY, hi = -INFINITY;
    for (float v : buf) {
      lo = detail::nan_min(lo, v);
      hi = detail::nan_max(hi, v);
    }
    mins[q] = static_cast<float>(lo);
    maxs[q] = static_cast<float>(hi);
  }
}

}  // namespace qobs::kernels::ref
