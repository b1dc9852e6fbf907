// Chunked slot allocation for the expert cache.
#include "stream/slot_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace moeflux {

namespace {
constexpr uint64_t kChunkBytes = 64ull << 20;  // carve up to 64 MiB of slots per mapping
}

SlotPool::~SlotPool() {
  for (const Chunk& c : chunks_) {
    if (c.pinned) pinner_->unpin(c.p);
    ::munmap(c.p, c.bytes);
  }
}

uint64_t SlotPool::set_pinner(std::shared_ptr<HostPinner> p) {
  std::lock_guard lock(mu_);
  uint64_t pinned = 0;
  for (Chunk& c : chunks_) {
    if (c.pinned) pinner_->unpin(c.p);
    c.pinned = p && p->pin(c.p, c.bytes);
    pinned += c.pinned ? c.bytes : 0;
  }
  pinner_ = std::move(p);
  return pinned;
}

uint8_t* SlotPool::get(uint64_t size) {
  std::lock_guard lock(mu_);
  auto& fl = free_[size];
  if (fl.empty()) {
    const uint64_t room = limit_ > mapped_ ? limit_ - mapped_ : 0;
    const uint64_t slots = std::max<uint64_t>(1, std::min(kChunkBytes, room) / size);
    const uint64_t bytes = slots * size;
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("expert cache: cannot allocate ", bytes, " bytes: ", std::strerror(errno));
    // Huge pages where allowed, and every page faulted in now in one call rather than one
    // fault per 4 KiB during the first read into it.
    ::madvise(p, bytes, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
    ::madvise(p, bytes, MADV_POPULATE_WRITE);
#endif
    chunks_.push_back({static_cast<uint8_t*>(p), bytes, pinner_ && pinner_->pin(p, bytes)});
    mapped_ += bytes;
    for (uint64_t i = slots; i-- > 0;) fl.push_back(static_cast<uint8_t*>(p) + i * size);
  }
  uint8_t* s = fl.back();
  fl.pop_back();
  return s;
}

void SlotPool::put(uint8_t* p, uint64_t size) {
  std::lock_guard lock(mu_);
  free_[size].push_back(p);
}

uint64_t SlotPool::mapped_bytes() const {
  std::lock_guard lock(mu_);
  return mapped_;
}

}  // namespace moeflux
