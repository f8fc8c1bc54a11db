// The CUDA launches of the column sums and the non-finite scan (stats_cuda.h).
#include "kernels/cuda/launch.cuh"
#include "kernels/stats/stats_cuda.h"

namespace qobs::kernels::cuda {

namespace {

__global__ void column_squares_kernel(ColumnSquaresArgs a) {
  QOBS_CUDA_LOOP(c, a.cols) column_squares(a, c);
}

__global__ void non_finite_kernel(NonFiniteArgs a) {
  QOBS_CUDA_LOOP(i, a.n) non_finite_elem(a, i, AtomicMinU64{});
}

}  // namespace

void launch_column_squares(const ColumnSquaresArgs& a, void* stream) {
  column_squares_kernel<<<blocks_for(a.cols), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("imatrix column sums");
}

void launch_non_finite(const NonFiniteArgs& a, void* stream) {
  non_finite_kernel<<<blocks_for(a.n), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("non-finite scan");
}

}  // namespace qobs::kernels::cuda
