#include "core/check.h"
#include "kernels/kernels_cuda.h"

namespace qobs::kernels::cuda {

const Backend& require_backend() {
  const Backend* b = backend();
  QOBS_CHECK(b != nullptr, IoError, "no CUDA device: ", unavailable_reason());
  return *b;
}

}  // namespace qobs::kernels::cuda
