#include "qobs/storage.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

namespace qobs::detail {

namespace {

constexpr std::align_val_t kAlign{64};
// The cache's bounds: 32 blocks (one CLI job holds a dozen sizes: weight copies,
// statistics, scales), at most 256 MiB (what it adds to a process's
// peak memory at worst). A block of another size class
// is not reused (so a huge tensor never pins a big block for small ones), and the
// oldest block leaves first when a new one does not fit.
constexpr std::size_t kMaxCachedBlocks = 32;
constexpr std::size_t kMaxCachedBytes = std::size_t{256} << 20;

/// Size classes of 1/8 of the power of two below n: at most 12.5% more than asked, so
/// that tensors of nearly the same size share blocks.
std::size_t size_class(std::size_t n) {
  const std::size_t step = std::max<std::size_t>(std::bit_floor(n) / 8, 4096);
  return (n + step - 1) / step * step;
}

struct Cache {
  std::mutex mu;
  std::vector<std::pair<std::size_t, void*>> blocks;  // (class, block), oldest first
  std::size_t bytes = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may be freed during static destruction
  return *c;
}

}  // namespace

void* storage_allocate(std::size_t n) {
  if (n < kStorageCachedMin) return ::operator new(std::max<std::size_t>(n, 1), kAlign);
  const std::size_t cls = size_class(n);
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    for (auto it = c.blocks.rbegin(); it != c.blocks.rend(); ++it)  // the newest (warmest) first
      if (it->first == cls) {
        void* p = it->second;
        c.bytes -= cls;
        c.blocks.erase(std::next(it).base());
        return p;
      }
  }
  return ::operator new(cls, kAlign);
}

void storage_deallocate(void* p, std::size_t n) noexcept {
  if (p == nullptr) return;
  if (n < kStorageCachedMin) {
    ::operator delete(p, kAlign);
    return;
  }
  const std::size_t cls = size_class(n);
  std::vector<void*> evicted;
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    if (cls > kMaxCachedBytes) {
      evicted.push_back(p);
    } else {
      while (!c.blocks.empty() && (c.blocks.size() >= kMaxCachedBlocks || c.bytes + cls > kMaxCachedBytes)) {
        evicted.push_back(c.blocks.front().second);
        c.bytes -= c.blocks.front().first;
        c.blocks.erase(c.blocks.begin());
      }
      c.blocks.emplace_back(cls, p);
      c.bytes += cls;
    }
  }
  for (void* e : evicted) ::operator delete(e, kAlign);  // outside the lock
}

void storage_release_cached() noexcept {
  std::vector<std::pair<std::size_t, void*>> blocks;
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    blocks.swap(c.blocks);
    c.bytes = 0;
  }
  for (auto& b : blocks) ::operator delete(b.second, kAlign);
}

std::size_t storage_cached_bytes() noexcept {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.bytes;
}

}  // namespace qobs::detail
