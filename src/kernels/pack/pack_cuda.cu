// The CUDA launches of the row packing (pack_cuda.h): one thread per output word (INT
// rows) or byte (FP4).
#include "kernels/cuda/launch.cuh"
#include "kernels/pack/pack_cuda.h"

namespace qobs::kernels::cuda {

namespace {

__global__ void pack_int_kernel(PackIntArgs a) {
  QOBS_CUDA_LOOP(t, a.rows * a.words) pack_int_word(a, t / a.words, t % a.words, AtomicMinU64{});
}

__global__ void pack_fp4_kernel(PackFp4Args a) { QOBS_CUDA_LOOP(b, a.n / 2) pack_fp4_byte(a, b, AtomicMinU64{}); }

}  // namespace

void launch_pack_int(const PackIntArgs& a, void* stream) {
  pack_int_kernel<<<blocks_for(a.rows * a.words), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("INT row packing");
}

void launch_pack_fp4(const PackFp4Args& a, void* stream) {
  pack_fp4_kernel<<<blocks_for(a.n / 2), kThreads, 0, as_stream(stream)>>>(a);
  check_launch("FP4 packing");
}

}  // namespace qobs::kernels::cuda
