// When a kernel writes its output by non-temporal (streaming) stores. A store that
// misses the cache first reads the line it writes to; an output much larger than the
// caches gains nothing from that read, and the caller's next pass reads it from memory
// either way. NVFP4's min-max statistics of a 4096x4096 bf16 weight are 4 MiB: written
// by ordinary stores (and read back for the extremes) the observer ran at a median 57%
// of a plain read of the weight, streamed (extremes from the registers) at 73%
// (docs/PERFORMANCE.md, min-max against a plain read). Outputs below the threshold
// (INT4 g128's 0.5 MiB of statistics) stay in the cache for the pass that reads them
// next. Streaming the f32 scales as well measured slower. Streaming changes no value:
// the results are the same bytes.
#pragma once

#include <atomic>
#include <cstdint>

namespace qobs::kernels {

/// Outputs of at least this many bytes are streamed (default 2 MiB, about twice a
/// core's L2 on current x86 server parts). Tests lower it to 0 to run the streaming paths on small tensors.
inline std::atomic<int64_t> stream_store_min_bytes{int64_t{2} << 20};

/// Whether an output of `bytes` is written by streaming stores.
inline bool stream_output(int64_t bytes) { return bytes >= stream_store_min_bytes.load(std::memory_order_relaxed); }

/// RAII override of the threshold (tests). Not thread-safe against concurrent kernel
/// calls that start while the guard is being constructed / destroyed.
class ScopedStreamStoreMinBytes {
 public:
  explicit ScopedStreamStoreMinBytes(int64_t bytes) : previous_(stream_store_min_bytes.exchange(bytes)) {}
  ~ScopedStreamStoreMinBytes() { stream_store_min_bytes.store(previous_); }
  ScopedStreamStoreMinBytes(const ScopedStreamStoreMinBytes&) = delete;
  ScopedStreamStoreMinBytes& operator=(const ScopedStreamStoreMinBytes&) = delete;

 private:
  int64_t previous_;
};

}  // namespace qobs::kernels
