// Tensor storage (docs/ARCHITECTURE.md, core): the allocator of Tensor's
// bytes. Two properties the kernels' speed depends on:
//  * default-initialization: growing the byte vector does not zero it, so a tensor that
//    a kernel overwrites entirely (Tensor::uninitialized) costs no extra pass; the
//    zero-filled constructor still zeroes explicitly;
//  * large blocks are recycled: freeing a block of 1 MiB or more keeps it in a small
//    process-wide cache for the next tensor of the same size class, instead of handing
//    it back to the kernel and faulting fresh zeroed pages in again on the next call
//    (an observer's outputs, or a CLI tensor after tensor, are mostly the same sizes).
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace qobs::detail {

/// n bytes, 64-byte aligned: a recycled block of the same size class when the cache has
/// one (n >= kStorageCachedMin), else fresh memory. Throws std::bad_alloc.
void* storage_allocate(std::size_t n);
/// Frees what storage_allocate(n) returned: into the cache while it holds less than its
/// bound, else back to the system.
void storage_deallocate(void* p, std::size_t n) noexcept;
/// Empties the cache (tests; callers that want the memory back).
void storage_release_cached() noexcept;
/// Bytes held by the cache now.
std::size_t storage_cached_bytes() noexcept;

inline constexpr std::size_t kStorageCachedMin = std::size_t{1} << 20;

template <class T>
struct StorageAllocator {
  using value_type = T;
  StorageAllocator() = default;
  template <class U>
  StorageAllocator(const StorageAllocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) { return static_cast<T*>(storage_allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { storage_deallocate(p, n * sizeof(T)); }
  /// Default-initialization for resize(n): the bytes are left as they are.
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
  friend bool operator==(const StorageAllocator&, const StorageAllocator&) { return true; }
};

}  // namespace qobs::detail
