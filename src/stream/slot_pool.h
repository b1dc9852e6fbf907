// SlotPool: page-aligned buffers for expert records, carved from large mappings that are
// faulted in once and reused: an evicted record's slot serves the next record of the same size
// with no munmap / mmap / page faults, which on virtual machines cost more than the copy.
// Thread-safe. Slots are never returned to the OS before the pool is destroyed, so the memory
// held is the peak in use (rounded up to a chunk, which never exceeds `limit`).
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace moeflux {

class SlotPool {
 public:
  // limit: bytes of slots to carve at most in chunks (single slots beyond it still come).
  explicit SlotPool(uint64_t limit) : limit_(limit) {}
  ~SlotPool();
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  uint8_t* get(uint64_t size);  // Error when memory cannot be had
  void put(uint8_t* p, uint64_t size);
  uint64_t mapped_bytes() const;

 private:
  mutable std::mutex mu_;
  uint64_t limit_, mapped_ = 0;
  std::map<uint64_t, std::vector<uint8_t*>> free_;  // size -> free slots
  std::vector<std::pair<uint8_t*, uint64_t>> chunks_;
};

}  // namespace moeflux
