// The CUDA backend of a build without CUDA (QOBS_CUDA=OFF or no CUDA compiler): there
// is none. CMake compiles this file instead of backend_cuda.cu.
#include "kernels/cuda/backend.h"

namespace qobs::kernels::cuda {

const Backend* backend() { return backend_for_testing(); }

std::string unavailable_reason() {
  if (backend_for_testing()) return "";
  return "qobs was built without CUDA (QOBS_CUDA=OFF, or no CUDA compiler at build time)";
}

}  // namespace qobs::kernels::cuda
