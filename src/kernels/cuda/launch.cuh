// CUDA-only helpers of the kernel launchers (*_cuda.cu): grid-stride loops, grid sizes,
// launch checks, and the device atomics the kernel bodies take as functors.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace qobs::kernels::cuda {

inline constexpr int kThreads = 256;

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

/// Blocks of kThreads for n items, capped: the kernels loop over the rest (grid-stride).
inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (int64_t{1} << 20) ? (int64_t{1} << 20) : b));
}

/// Throws the qobs error for a failed CUDA call, naming it (backend_cuda.cu).
void check(cudaError_t e, const char* what);
/// check(cudaGetLastError()) after a launch.
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

struct AtomicOrU32 {
  __device__ void operator()(uint32_t* p, uint32_t v) const { atomicOr(p, v); }
};
struct AtomicMinU64 {
  __device__ void operator()(unsigned long long* p, unsigned long long v) const { atomicMin(p, v); }
};

}  // namespace qobs::kernels::cuda

/// for (i = this thread's first index; i < n; i += the grid's thread count)
#define QOBS_CUDA_LOOP(i, n)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
