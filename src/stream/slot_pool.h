// SlotPool: page-aligned buffers for expert records, carved from large mappings that are
// faulted in once and reused: an evicted record's slot serves the next record of the same size
// with no munmap / mmap / page faults, which on virtual machines cost more than the copy.
// Thread-safe. Slots are never returned to the OS before the pool is destroyed, so the memory
// held is the peak in use (rounded up to a chunk, which never exceeds `limit`). With a
// HostPinner set, every mapping is page-locked for device copies.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/host_pinner.h"

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
  // Pins the mappings made so far and those to come with `p` (unpinning them from the
  // previous pinner); nullptr unpins them. Returns the bytes pinned.
  uint64_t set_pinner(std::shared_ptr<HostPinner> p);

 private:
  mutable std::mutex mu_;
  uint64_t limit_, mapped_ = 0;
  std::map<uint64_t, std::vector<uint8_t*>> free_;  // size -> free slots
  struct Chunk {
    uint8_t* p;
    uint64_t bytes;
    bool pinned;
  };
  std::vector<Chunk> chunks_;
  std::shared_ptr<HostPinner> pinner_;
};

}  // namespace moeflux
