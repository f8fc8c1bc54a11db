// The CUDA launches of the grid search (grid_search_cuda.h).
//
// Step 2 is one thread per (group, candidate) pair where a block holds every candidate
// of its groups (S <= kThreads): the pair's error goes to shared memory, and the group's
// first thread turns the group's errors into improvement bits in candidate order. With
// more candidates than a block holds, one thread per group evaluates them in order into
// a scratch row.
#include "kernels/cuda/launch.cuh"
#include "kernels/grid_search/grid_search_cuda.h"

namespace qobs::kernels::cuda {

namespace {

__global__ void range_kernel(GridSearchArgs g) { QOBS_CUDA_LOOP(q, g.x.num_qparams) group_range(g, q); }

__global__ void pairs_kernel(GridSearchArgs g) {
  __shared__ double errs[kThreads];
  const int64_t per_block = kThreads / g.S;
  const int64_t local = threadIdx.x / g.S, i = threadIdx.x % g.S;
  const int64_t q = static_cast<int64_t>(blockIdx.x) * per_block + local;
  const bool active = local < per_block && q < g.x.num_qparams;
  if (active) errs[threadIdx.x] = candidate_error(g, q, i);
  __syncthreads();
  if (active && i == 0) group_improvements(g, q, errs + local * g.S, AtomicOrU32{});
}

__global__ void groups_kernel(GridSearchArgs g, double* scratch) {
  QOBS_CUDA_LOOP(q, g.x.num_qparams) {
    double* errs = scratch + q * g.S;
    for (int64_t i = 0; i < g.S; ++i) errs[i] = candidate_error(g, q, i);
    group_improvements(g, q, errs, AtomicOrU32{});
  }
}

__global__ void stop_kernel(GridSearchArgs g) { stop_of(g); }

__global__ void choose_kernel(GridSearchArgs g) { QOBS_CUDA_LOOP(q, g.x.num_qparams) choose(g, q); }

}  // namespace

void launch_grid_search(const GridSearchArgs& g, void* stream) {
  const cudaStream_t s = as_stream(stream);
  const int64_t nq = g.x.num_qparams;
  range_kernel<<<blocks_for(nq), kThreads, 0, s>>>(g);
  check_launch("grid search (ranges)");
  check(cudaMemsetAsync(g.any, 0, static_cast<size_t>(g.words()) * sizeof(uint32_t), s), "grid search (clear)");
  if (g.S <= kThreads) {
    const int64_t per_block = kThreads / g.S;
    const int64_t blocks = (nq + per_block - 1) / per_block;
    pairs_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(g);
    check_launch("grid search (candidate errors)");
  } else {
    double* scratch = nullptr;
    check(cudaMallocAsync(reinterpret_cast<void**>(&scratch), static_cast<size_t>(nq * g.S) * sizeof(double), s),
          "grid search (scratch)");
    groups_kernel<<<blocks_for(nq), kThreads, 0, s>>>(g, scratch);
    check_launch("grid search (candidate errors, one group per thread)");
    check(cudaFreeAsync(scratch, s), "grid search (scratch)");
  }
  stop_kernel<<<1, 1, 0, s>>>(g);
  check_launch("grid search (stop)");
  choose_kernel<<<blocks_for(nq), kThreads, 0, s>>>(g);
  check_launch("grid search (choose)");
}

}  // namespace qobs::kernels::cuda
