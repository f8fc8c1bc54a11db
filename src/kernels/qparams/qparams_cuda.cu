// The CUDA launch of calculate_qparams (qparams_cuda.h): one thread per element.
#include "kernels/cuda/launch.cuh"
#include "kernels/qparams/qparams_cuda.h"

namespace qobs::kernels::cuda {

namespace {

__global__ void qparams_kernel(QParamsArgs a) {
  QOBS_CUDA_LOOP(i, a.n) qparams_elem(a, i);
}

}  // namespace

void launch_qparams(const QParamsArgs& a, void* stream) {
  qparams_kernel<<<blocks_for(a.n), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("calculate_qparams");
}

}  // namespace qobs::kernels::cuda
