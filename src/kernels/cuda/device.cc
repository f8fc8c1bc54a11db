#include <atomic>

#include "core/check.h"
#include "kernels/kernels_cuda.h"

namespace qobs::kernels::cuda {

namespace {
std::atomic<const Backend*> g_testing_backend{nullptr};
}  // namespace

void set_backend_for_testing(const Backend* b) { g_testing_backend.store(b); }
const Backend* backend_for_testing() { return g_testing_backend.load(); }

const Backend& require_backend() {
  const Backend* b = backend();
  QOBS_CHECK(b != nullptr, IoError, "no CUDA device: ", unavailable_reason());
  return *b;
}

}  // namespace qobs::kernels::cuda
