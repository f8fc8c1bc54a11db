// A CUDA backend (kernels/cuda/backend.h) emulated on the host, so that the code above
// the kernels -- qobs/cuda.h and the pipeline's device path -- runs its device branch on
// every machine: "device" memory is host memory the backend tracks (two devices), the
// kernels are the QOBS_HD bodies run over every index of their launch grid (as the
// kernel tests run them, tests/kernels/cuda/host_grid.h), in the launchers' order.
//
// Streams are lazy: work enqueued on a stream runs only when the stream is synchronized
// (or destroyed), so a caller that reads a pinned result before synchronizing, or that
// refills a pinned buffer a queued copy still reads from, sees the wrong bytes here
// every time instead of once in a while on a GPU. Copies follow the CUDA runtime's
// rules for pageable host memory: a copy from it is staged when enqueued, a copy to it
// waits for the stream. Fresh device and pinned memory is filled with 0xA5, not zeros.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/host_grid.h"

namespace qobs::testing {

class HostBackend final : public kernels::cuda::Backend {
 public:
  using Stream = kernels::cuda::Stream;
  using CopyKind = kernels::cuda::CopyKind;

  static constexpr int kDevices = 2;

  HostBackend() = default;
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;
  ~HostBackend() override {
    // work still queued on this thread's default stream (a release, say) refers to this
    // backend: run it now, as a device would have, so that it cannot run under the next one
    synchronize(Stream{});
    for (auto& [p, a] : blocks_) std::free(const_cast<void*>(p));
  }

  int device_count() const override { return kDevices; }
  int current_device() const override { return current(); }
  void set_device(int device) const override {
    QOBS_CHECK(device >= 0 && device < kDevices, InvalidArgument, "CUDA device ", device, " does not exist (", kDevices,
               " devices present)");
    current() = device;
  }
  std::string describe(int device) const override { return "host emulation of CUDA device " + std::to_string(device); }
  int device_of(const void* p) const override {
    const std::lock_guard<std::mutex> lock(mu_);
    const Block* b = block_of(p);
    return b && !b->pinned ? b->device : -1;
  }

  void* allocate(std::size_t bytes, Stream) const override { return track(bytes, false); }
  void release(void* p, Stream s) const override {
    enqueue(s, [this, p] { untrack(p); });
  }
  void* allocate_pinned(std::size_t bytes) const override { return track(bytes, true); }
  void release_pinned(void* p) const override { untrack(p); }

  void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind, Stream s) const override {
    if (kind == CopyKind::kHostToDevice && !is_pinned(src)) {
      // staged: the source may change or go once the call returns
      auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                                 static_cast<const unsigned char*>(src) + bytes);
      enqueue(s, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
      return;
    }
    if (kind == CopyKind::kDeviceToHost && !is_pinned(dst)) {
      // to pageable memory the copy is done when the call returns
      synchronize(s);
      std::memcpy(dst, src, bytes);
      return;
    }
    enqueue(s, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }
  void fill(void* dst, int byte, std::size_t bytes, Stream s) const override {
    enqueue(s, [dst, byte, bytes] { std::memset(dst, byte, bytes); });
  }
  void synchronize(Stream s) const override {
    Queue& q = queue(s);
    for (;;) {
      std::vector<std::function<void()>> ops;
      {
        const std::lock_guard<std::mutex> lock(q.mu);
        ops.swap(q.ops);
      }
      if (ops.empty()) return;
      for (auto& op : ops) op();
    }
  }
  Stream create_stream() const override { return Stream{new Queue}; }
  void destroy_stream(Stream s) const override {
    synchronize(s);
    delete static_cast<Queue*>(s.handle);
  }

  void minmax(const kernels::cuda::MinmaxArgs& a, Stream s) const override {
    enqueue(s, [a] {
      for (int64_t t = 0; t < a.x.num_qparams * a.chunks; ++t)
        kernels::cuda::minmax_chunk(a, t / a.chunks, t % a.chunks);
      for (int64_t q = 0; q < a.x.num_qparams; ++q) kernels::cuda::minmax_fold(a, q);
    });
  }
  void qparams(const kernels::cuda::QParamsArgs& a, Stream s) const override {
    enqueue(s, [a] {
      for (int64_t i = 0; i < a.n; ++i) kernels::cuda::qparams_elem(a, i);
    });
  }
  void global_scale(const kernels::cuda::GlobalScaleArgs& a, Stream s) const override {
    enqueue(s, [a] { kernels::cuda::global_scale_body(a); });
  }
  void grid_search(const kernels::cuda::GridSearchArgs& g, Stream s) const override {
    enqueue(s, [g] {
      const int64_t nq = g.x.num_qparams;
      for (int64_t q = 0; q < nq; ++q) kernels::cuda::group_range(g, q);
      std::memset(g.any, 0, static_cast<std::size_t>(g.words()) * sizeof(uint32_t));
      std::vector<double> errs(static_cast<std::size_t>(g.S));
      for (int64_t q = 0; q < nq; ++q) {
        for (int64_t i = 0; i < g.S; ++i) errs[static_cast<std::size_t>(i)] = kernels::cuda::candidate_error(g, q, i);
        kernels::cuda::group_improvements(g, q, errs.data(), kernels::cuda::testing::HostOrU32{});
      }
      kernels::cuda::stop_of(g);
      for (int64_t q = 0; q < nq; ++q) kernels::cuda::choose(g, q);
    });
  }
  void qdq(const kernels::cuda::QdqArgs& a, Stream s) const override {
    enqueue(s, [a] {
      for (int64_t i = 0; i < a.n; ++i) kernels::cuda::qdq_elem_cuda(a, i);
    });
  }
  void pack_int(const kernels::cuda::PackIntArgs& a, Stream s) const override {
    enqueue(s, [a] {
      for (int64_t t = 0; t < a.rows * a.words; ++t)
        kernels::cuda::pack_int_word(a, t / a.words, t % a.words, kernels::cuda::testing::HostMinU64{});
    });
  }
  void pack_fp4(const kernels::cuda::PackFp4Args& a, Stream s) const override {
    enqueue(s, [a] {
      for (int64_t b = 0; b < a.n / 2; ++b) kernels::cuda::pack_fp4_byte(a, b, kernels::cuda::testing::HostMinU64{});
    });
  }
  void column_squares(const kernels::cuda::ColumnSquaresArgs& a, Stream s) const override {
    enqueue(s, [a] {
      for (int64_t c = 0; c < a.cols; ++c) kernels::cuda::column_squares(a, c);
    });
  }
  void non_finite(const kernels::cuda::NonFiniteArgs& a, Stream s) const override {
    enqueue(s, [a] {
      for (int64_t i = 0; i < a.n; ++i) kernels::cuda::non_finite_elem(a, i, kernels::cuda::testing::HostMinU64{});
    });
  }
  void running_minmax(const kernels::cuda::RunningMinmaxArgs& a, Stream s) const override {
    enqueue(s, [a] {
      for (int64_t i = 0; i < a.n; ++i) kernels::cuda::running_minmax_elem(a, i);
    });
  }
  void importance(const kernels::cuda::ImportanceArgs& a, Stream s) const override {
    enqueue(s, [a] {
      for (int64_t c = 0; c < a.sums.cols; ++c) kernels::cuda::importance_column(a, c);
    });
  }
  void flag_non_finite(const kernels::cuda::FlagNonFiniteArgs& a, Stream s) const override {
    enqueue(s, [a] {
      for (int64_t i = 0; i < a.n; ++i) kernels::cuda::flag_non_finite_elem(a, i, kernels::cuda::testing::HostOrU32{});
    });
  }
  void record_non_finite(const kernels::cuda::RecordNonFiniteArgs& a, Stream s) const override {
    enqueue(s, [a] {
      // the scan kernel returns at once unless the batch was flagged (stats_cuda.cu)
      if (a.record->state == 1)
        for (int64_t i = 0; i < a.scan.n; ++i)
          kernels::cuda::record_scan_elem(a, i, kernels::cuda::testing::HostMinU64{});
      kernels::cuda::record_finish(a);
    });
  }

  /// Bytes of device and pinned memory held now (what was allocated and not released).
  std::size_t held_bytes() const {
    const std::lock_guard<std::mutex> lock(mu_);
    std::size_t n = 0;
    for (const auto& [p, b] : blocks_) n += b.bytes;
    return n;
  }

 private:
  struct Queue {
    std::mutex mu;
    std::vector<std::function<void()>> ops;
  };
  struct Block {
    std::size_t bytes = 0;
    int device = 0;
    bool pinned = false;
  };

  static int& current() {
    thread_local int device = 0;
    return device;
  }
  Queue& queue(Stream s) const {
    thread_local Queue per_thread;  // the per-thread default stream
    return s.handle ? *static_cast<Queue*>(s.handle) : per_thread;
  }
  void enqueue(Stream s, std::function<void()> op) const {
    Queue& q = queue(s);
    const std::lock_guard<std::mutex> lock(q.mu);
    q.ops.push_back(std::move(op));
  }
  void* track(std::size_t bytes, bool pinned) const {
    void* p = std::aligned_alloc(256, (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256);
    QOBS_CHECK(p != nullptr, IoError, "CUDA: ", pinned ? "pinned host" : "device", " allocation: out of memory");
    std::memset(p, 0xA5, bytes);
    const std::lock_guard<std::mutex> lock(mu_);
    blocks_[p] = Block{bytes, current(), pinned};
    return p;
  }
  void untrack(void* p) const {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      QOBS_CHECK(blocks_.erase(p) == 1, IoError, "CUDA: release of memory that was not allocated");
    }
    std::free(p);
  }
  // the block holding p (its end included: an empty tensor's view), or null; mu_ held
  const Block* block_of(const void* p) const {
    auto it = blocks_.upper_bound(p);
    if (it == blocks_.begin()) return nullptr;
    --it;
    const auto* base = static_cast<const unsigned char*>(it->first);
    return static_cast<const unsigned char*>(p) <= base + it->second.bytes ? &it->second : nullptr;
  }
  bool is_pinned(const void* p) const {
    const std::lock_guard<std::mutex> lock(mu_);
    const Block* b = block_of(p);
    return b && b->pinned;
  }

  mutable std::mutex mu_;
  mutable std::map<const void*, Block> blocks_;
};

/// Makes a HostBackend the library's CUDA backend for the scope (and restores the probed
/// one after).
class EmulatedDevice {
 public:
  EmulatedDevice() { kernels::cuda::set_backend_for_testing(&backend_); }
  ~EmulatedDevice() { kernels::cuda::set_backend_for_testing(nullptr); }
  EmulatedDevice(const EmulatedDevice&) = delete;
  EmulatedDevice& operator=(const EmulatedDevice&) = delete;
  HostBackend& backend() { return backend_; }

 private:
  HostBackend backend_;
};

}  // namespace qobs::testing
