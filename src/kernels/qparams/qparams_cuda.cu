// The CUDA launch of calculate_qparams (qparams_cuda.h): one thread per element.
#include "kernels/cuda/launch.cuh"
#include "kernels/qparams/qparams_cuda.h"

namespace qobs::kernels::cuda {

namespace {

__global__ void qparams_kernel(QParamsArgs a) { QOBS_CUDA_LOOP(i, a.n) qparams_elem(a, i); }

__global__ void global_scale_kernel(GlobalScaleArgs a) { global_scale_body(a); }

}  // namespace

void launch_qparams(const QParamsArgs& a, void* stream) {
  qparams_kernel<<<blocks_for(a.n), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("calculate_qparams");
}

void launch_global_scale(const GlobalScaleArgs& a, void* stream) {
  global_scale_kernel<<<1, 1, 0, as_stream(stream)>>>(a);
  check_launch("global scale");
}

}  // namespace qobs::kernels::cuda
