// Device memory of the CUDA backend: a caching pool for activations and op scratch (freed
// blocks are reused by later work on the same stream, which runs after the work that used
// them), and the mirror of host data on the device (weights and float vectors, copied on first
// use, keyed by their host address).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace moeflux::cuda {

// Blocks of power-of-two sizes (256 bytes and up), kept for reuse when released.
class DevicePool {
 public:
  DevicePool() = default;
  DevicePool(const DevicePool&) = delete;
  ~DevicePool();
  void* get(size_t bytes);
  void put(void* p);
  size_t held_bytes() const { return held_; }

 private:
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // by block size
  std::unordered_map<void*, size_t> size_;     // every block handed out or free
  size_t held_ = 0;
};

// Device memory for one op's temporaries, returned to the pool when the op is done (the
// stream orders any later reuse after this op's kernels).
class Scratch {
 public:
  explicit Scratch(DevicePool& pool) : pool_(pool) {}
  Scratch(const Scratch&) = delete;
  ~Scratch() {
    for (void* p : blocks_) pool_.put(p);
  }
  template <typename T>
  T* get(size_t n) {
    blocks_.push_back(pool_.get(n * sizeof(T)));
    return static_cast<T*>(blocks_.back());
  }

 private:
  DevicePool& pool_;
  std::vector<void*> blocks_;
};

// A page-locked host buffer for asynchronous copies, grown on demand (its contents are not
// kept when it grows); the caller keeps what it holds until the copies from it are done.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
  template <typename T>
  T* get(size_t n) {
    return static_cast<T*>(grow(n * sizeof(T)));
  }

 private:
  void* grow(size_t bytes);
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Host bytes copied to the device once, found again by their host address and length.
class Mirror {
 public:
  Mirror() = default;
  Mirror(const Mirror&) = delete;
  ~Mirror();
  // The device copy of [p, p + bytes); copies it (synchronously) the first time.
  const void* get(const void* p, size_t bytes);
  size_t bytes() const { return bytes_; }

 private:
  struct Entry {
    void* dev;
    size_t bytes;
  };
  std::mutex mu_;
  std::unordered_map<const void*, Entry> map_;
  size_t bytes_ = 0;
};

}  // namespace moeflux::cuda
