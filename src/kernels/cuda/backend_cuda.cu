// The CUDA backend (backend.h) over the CUDA runtime, linked statically: a process on a
// machine without a driver or device gets backend() == nullptr and runs everything else.
#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "core/check.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/launch.cuh"

namespace qobs::kernels::cuda {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  // clear a sticky launch error so that the next call reports its own
  cudaGetLastError();
  if (e == cudaErrorMemoryAllocation)
    QOBS_THROW(IoError, "CUDA: ", what, ": out of device memory (", cudaGetErrorString(e), ")");
  QOBS_THROW(IoError, "CUDA: ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

namespace {

cudaStream_t st(Stream s) { return s.handle ? static_cast<cudaStream_t>(s.handle) : cudaStreamPerThread; }

cudaMemcpyKind kind_of(CopyKind k) {
  switch (k) {
    case CopyKind::kHostToDevice:
      return cudaMemcpyHostToDevice;
    case CopyKind::kDeviceToHost:
      return cudaMemcpyDeviceToHost;
    case CopyKind::kDeviceToDevice:
      return cudaMemcpyDeviceToDevice;
  }
  return cudaMemcpyDefault;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int count) : count_(count) {}
  int device_count() const override { return count_; }
  int current_device() const override {
    int d = 0;
    check(cudaGetDevice(&d), "cudaGetDevice");
    return d;
  }
  void set_device(int device) const override {
    QOBS_CHECK(device >= 0 && device < count_, InvalidArgument, "CUDA device ", device, " does not exist (", count_,
               " device", count_ == 1 ? "" : "s", " present)");
    check(cudaSetDevice(device), "cudaSetDevice");
  }
  std::string describe(int device) const override {
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
    const auto gib = static_cast<long long>(static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0) + 0.5);
    return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
           std::to_string(p.multiProcessorCount) + " SMs, " + std::to_string(gib) + " GiB)";
  }
  int device_of(const void* ptr) const override {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
      cudaGetLastError();
      return -1;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
  }
  void* allocate(std::size_t bytes, Stream s) const override {
    void* p = nullptr;
    check(cudaMallocAsync(&p, bytes, st(s)), "device allocation");
    return p;
  }
  void release(void* p, Stream s) const override { check(cudaFreeAsync(p, st(s)), "device release"); }
  void* allocate_pinned(std::size_t bytes) const override {
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "pinned host allocation");
    return p;
  }
  void release_pinned(void* p) const override { check(cudaFreeHost(p), "pinned host release"); }
  void copy(void* dst, const void* src, std::size_t bytes, CopyKind k, Stream s) const override {
    check(cudaMemcpyAsync(dst, src, bytes, kind_of(k), st(s)), "copy");
  }
  void fill(void* dst, int byte, std::size_t bytes, Stream s) const override {
    check(cudaMemsetAsync(dst, byte, bytes, st(s)), "fill");
  }
  void synchronize(Stream s) const override { check(cudaStreamSynchronize(st(s)), "stream synchronize"); }
  Stream create_stream() const override {
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream create");
    return Stream{s};
  }
  void destroy_stream(Stream s) const override {
    if (s.handle) check(cudaStreamDestroy(static_cast<cudaStream_t>(s.handle)), "stream destroy");
  }

  void minmax(const MinmaxArgs& a, Stream s) const override { launch_minmax(a, st(s)); }
  void qparams(const QParamsArgs& a, Stream s) const override { launch_qparams(a, st(s)); }
  void global_scale(const GlobalScaleArgs& a, Stream s) const override { launch_global_scale(a, st(s)); }
  void grid_search(const GridSearchArgs& a, Stream s) const override { launch_grid_search(a, st(s)); }
  void qdq(const QdqArgs& a, Stream s) const override { launch_qdq(a, st(s)); }
  void pack_int(const PackIntArgs& a, Stream s) const override { launch_pack_int(a, st(s)); }
  void pack_fp4(const PackFp4Args& a, Stream s) const override { launch_pack_fp4(a, st(s)); }
  void column_squares(const ColumnSquaresArgs& a, Stream s) const override { launch_column_squares(a, st(s)); }
  void non_finite(const NonFiniteArgs& a, Stream s) const override { launch_non_finite(a, st(s)); }
  void running_minmax(const RunningMinmaxArgs& a, Stream s) const override { launch_running_minmax(a, st(s)); }
  void importance(const ImportanceArgs& a, Stream s) const override { launch_importance(a, st(s)); }
  void flag_non_finite(const FlagNonFiniteArgs& a, Stream s) const override { launch_flag_non_finite(a, st(s)); }
  void record_non_finite(const RecordNonFiniteArgs& a, Stream s) const override { launch_record_non_finite(a, st(s)); }

 private:
  int count_;
};

struct Probe {
  std::unique_ptr<CudaBackend> backend;
  std::string reason;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      cudaGetLastError();
      r.reason = std::string("the CUDA runtime found no usable device: ") + cudaGetErrorName(e) + " (" +
                 cudaGetErrorString(e) + ")";
    } else if (count == 0) {
      r.reason = "the CUDA runtime found no device";
    } else {
      r.backend = std::make_unique<CudaBackend>(count);
    }
    return r;
  }();
  return p;
}

}  // namespace

const Backend* backend() {
  if (const Backend* t = backend_for_testing()) return t;
  return probe().backend.get();
}

std::string unavailable_reason() { return backend_for_testing() ? std::string() : probe().reason; }

}  // namespace qobs::kernels::cuda
