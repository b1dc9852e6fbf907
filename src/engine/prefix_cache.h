// PrefixCache: snapshots of sequences in host memory, so that a request whose prompt starts
// as an earlier conversation did (the next turn of a chat that lost its slot, a long system
// prompt shared by many requests) continues that state instead of prefilling it again. Bounded
// in bytes; the least recently used snapshot goes first.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <span>

#include "engine/engine.h"

namespace moeflux {

class PrefixCache {
 public:
  // max_bytes 0: the cache keeps nothing. `recurrent`: the model's sequences are (Sequence::recurrent).
  PrefixCache(size_t max_bytes, bool recurrent) : max_bytes_(max_bytes), recurrent_(recurrent) {}

  // Keeps `s` (not when it alone exceeds the budget), dropping the snapshots it serves as
  // well (those whose tokens `s` can rewind to), then the least recently used ones beyond the
  // budget.
  void put(Sequence::Snapshot s);

  struct Match {
    const Sequence::Snapshot* snapshot = nullptr;  // valid until the next put
    int64_t tokens = 0;                            // how many of the prompt's tokens it serves
  };
  // The snapshot serving the most of `prompt` (reusable_prefix), marked as used; tokens 0 when
  // none serves any.
  Match find(std::span<const int32_t> prompt);

  size_t bytes() const { return bytes_; }
  size_t entries() const { return entries_.size(); }

 private:
  struct Entry {
    Sequence::Snapshot snap;
    std::vector<int64_t> marks;  // its checkpoint positions
    size_t bytes = 0;
  };
  int64_t serves(const Entry& e, std::span<const int32_t> prompt) const;
  size_t max_bytes_, bytes_ = 0;
  bool recurrent_;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace moeflux
