// The CUDA launch of quantize / dequantize / fake_quantize (qdq_cuda.h): one thread per
// output element.
#include "kernels/cuda/launch.cuh"
#include "kernels/qdq/qdq_cuda.h"

namespace qobs::kernels::cuda {

namespace {

__global__ void qdq_kernel(QdqArgs a) { QOBS_CUDA_LOOP(i, a.n) qdq_elem_cuda(a, i); }

}  // namespace

void launch_qdq(const QdqArgs& a, void* stream) {
  qdq_kernel<<<blocks_for(a.n), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("quantize / dequantize");
}

}  // namespace qobs::kernels::cuda
