// std::vector storage aligned to a cache line: SIMD kernels read their prepared operands
// (x, decoded rows, scales) with full-width loads, and a load that straddles two lines costs
// two (measured: unaligned x halved the 4-bit matvec's DRAM rate, 17.9 -> 8.0 GB/s a core).
#pragma once
#include <cstddef>
#include <new>
#include <vector>

namespace moeflux {

template <typename T, std::size_t Align = 64>
struct AlignedAllocator {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = AlignedAllocator<U, Align>;
  };
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, Align>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(Align))); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t(Align)); }
  template <typename U>
  bool operator==(const AlignedAllocator<U, Align>&) const { return true; }
};

template <typename T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace moeflux
