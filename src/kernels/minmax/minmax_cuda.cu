// The CUDA launches of min-max (minmax_cuda.h): one thread per (group, chunk), then one
// per group folding the chunks in order; one thread per element of the running
// statistics.
#include "kernels/cuda/launch.cuh"
#include "kernels/minmax/minmax_cuda.h"

namespace qobs::kernels::cuda {

namespace {

__global__ void minmax_chunks_kernel(MinmaxArgs a) {
  QOBS_CUDA_LOOP(t, a.x.num_qparams * a.chunks) minmax_chunk(a, t / a.chunks, t % a.chunks);
}

__global__ void minmax_fold_kernel(MinmaxArgs a) { QOBS_CUDA_LOOP(q, a.x.num_qparams) minmax_fold(a, q); }

__global__ void running_minmax_kernel(RunningMinmaxArgs a) { QOBS_CUDA_LOOP(i, a.n) running_minmax_elem(a, i); }

}  // namespace

void launch_minmax(const MinmaxArgs& a, void* stream) {
  const cudaStream_t s = as_stream(stream);
  minmax_chunks_kernel<<<blocks_for(a.x.num_qparams * a.chunks), kThreads, 0, s>>>(a);
  check_launch("min-max (chunks)");
  minmax_fold_kernel<<<blocks_for(a.x.num_qparams), kThreads, 0, s>>>(a);
  check_launch("min-max (fold)");
}

void launch_running_minmax(const RunningMinmaxArgs& a, void* stream) {
  running_minmax_kernel<<<blocks_for(a.n), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("running min-max");
}

}  // namespace qobs::kernels::cuda
