// The CUDA backend as the rest of the library sees it: plain C++, no CUDA headers.
// backend() is null in a build without CUDA (backend_none.cc) and when the CUDA runtime
// finds no usable device; otherwise it gives the device's memory, streams and kernels
// (backend_cuda.cu), a table the concept drivers (<concept>.cc) pick once per call, as
// they pick a SIMD level's table. The kernels' arguments and per-thread bodies are the
// QOBS_HD headers <concept>/<concept>_cuda.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/grid_search/grid_search_cuda.h"
#include "kernels/minmax/minmax_cuda.h"
#include "kernels/pack/pack_cuda.h"
#include "kernels/qdq/qdq_cuda.h"
#include "kernels/qparams/qparams_cuda.h"
#include "kernels/stats/stats_cuda.h"

namespace qobs::kernels::cuda {

/// A CUDA stream as an opaque handle (cudaStream_t); nullptr is the calling thread's
/// default stream (the per-thread default stream: qobs builds with it).
struct Stream {
  void* handle = nullptr;
};

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

class Backend {
 public:
  virtual ~Backend() = default;
  /// Devices the runtime sees (>= 1 when backend() is non-null).
  virtual int device_count() const = 0;
  /// The calling thread's current device, and setting it.
  virtual int current_device() const = 0;
  virtual void set_device(int device) const = 0;
  /// "NVIDIA H200 (sm_90, 132 SMs, 141 GiB)"-style description of a device.
  virtual std::string describe(int device) const = 0;
  /// The device a pointer is in (>= 0), or -1 for host memory (cudaPointerGetAttributes).
  virtual int device_of(const void* p) const = 0;

  /// Stream-ordered device memory (cudaMallocAsync / cudaFreeAsync).
  virtual void* allocate(std::size_t bytes, Stream s) const = 0;
  virtual void release(void* p, Stream s) const = 0;
  /// Page-locked host memory, for copies that overlap compute.
  virtual void* allocate_pinned(std::size_t bytes) const = 0;
  virtual void release_pinned(void* p) const = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind, Stream s) const = 0;
  virtual void fill(void* dst, int byte, std::size_t bytes, Stream s) const = 0;
  virtual void synchronize(Stream s) const = 0;
  /// A new stream and its release.
  virtual Stream create_stream() const = 0;
  virtual void destroy_stream(Stream s) const = 0;

  // The kernels, launched on s (the argument structs' pointers are device memory).
  virtual void minmax(const MinmaxArgs& a, Stream s) const = 0;
  virtual void qparams(const QParamsArgs& a, Stream s) const = 0;
  virtual void global_scale(const GlobalScaleArgs& a, Stream s) const = 0;
  virtual void grid_search(const GridSearchArgs& a, Stream s) const = 0;
  virtual void qdq(const QdqArgs& a, Stream s) const = 0;
  virtual void pack_int(const PackIntArgs& a, Stream s) const = 0;
  virtual void pack_fp4(const PackFp4Args& a, Stream s) const = 0;
  virtual void column_squares(const ColumnSquaresArgs& a, Stream s) const = 0;
  virtual void non_finite(const NonFiniteArgs& a, Stream s) const = 0;
  virtual void running_minmax(const RunningMinmaxArgs& a, Stream s) const = 0;
  virtual void importance(const ImportanceArgs& a, Stream s) const = 0;
  virtual void flag_non_finite(const FlagNonFiniteArgs& a, Stream s) const = 0;
  virtual void record_non_finite(const RecordNonFiniteArgs& a, Stream s) const = 0;
};

/// The backend, or nullptr (no CUDA in this build, no driver, or no device). Probed once.
const Backend* backend();

/// Why backend() is null ("" when it is not): the build, or the runtime's answer.
std::string unavailable_reason();

/// Tests: `b` stands in for the probed backend (backend() returns it, unavailable_reason()
/// is ""), until called again with nullptr, so that the code above the kernels runs its
/// device path on a host emulation where no GPU is present. Set it before the work that
/// uses it starts.
void set_backend_for_testing(const Backend* b);
/// The stand-in of set_backend_for_testing, or nullptr (backend() checks it first).
const Backend* backend_for_testing();

/// Device memory owned for the lifetime of the object, released on its stream.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const Backend& b, std::size_t bytes, Stream s) : b_(&b), s_(s), bytes_(bytes) {
    p_ = bytes ? b.allocate(bytes, s) : nullptr;
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : b_(o.b_), s_(o.s_), p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    reset();
    b_ = o.b_, s_ = o.s_, p_ = o.p_, bytes_ = o.bytes_;
    o.p_ = nullptr;
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  void* get() const { return p_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  std::size_t bytes() const { return bytes_; }
  /// Gives up ownership (the caller releases the memory).
  void* release() {
    void* p = p_;
    p_ = nullptr;
    return p;
  }

 private:
  void reset() noexcept {
    if (p_) {
      try {
        b_->release(p_, s_);
      } catch (...) {  // a failed release in a destructor: the memory is lost, nothing else
      }
    }
    p_ = nullptr;
  }
  const Backend* b_ = nullptr;
  Stream s_{};
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

/// One value of device memory read back to the host: the stream's work before it is
/// done when this returns (the kernels' flags and first-index results are read so).
template <typename T>
T read_back(const Backend& b, const void* p, Stream s) {
  T v{};
  b.copy(&v, p, sizeof v, CopyKind::kDeviceToHost, s);
  b.synchronize(s);
  return v;
}

}  // namespace qobs::kernels::cuda
