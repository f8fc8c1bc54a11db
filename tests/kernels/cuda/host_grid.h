// Running the CUDA kernels' per-thread bodies (QOBS_HD, src/kernels/<concept>/<concept>_cuda.h)
// on the CPU, index by index over the launch grid, with host stand-ins for the device
// atomics: the tests then compare the device's arithmetic with the plain references
// on every machine, with or without a GPU. What this cannot show (the launches, the
// device memory, the atomics themselves) the device tests check where a GPU is present.
#pragma once

#include <cstdint>

namespace qobs::kernels::cuda::testing {

struct HostOrU32 {
  void operator()(uint32_t* p, uint32_t v) const { *p |= v; }
};
struct HostMinU64 {
  void operator()(unsigned long long* p, unsigned long long v) const {
    if (v < *p) *p = v;
  }
};

}  // namespace qobs::kernels::cuda::testing
