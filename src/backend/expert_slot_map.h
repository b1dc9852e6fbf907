// ExpertSlotMap: which expert records occupy the slots of a fixed arena: the bookkeeping of the
// GPU expert cache, free of CUDA so that it is tested on any machine. One layer's step asks for
// the experts it uses; each gets its slot: a hit, or a miss given a free slot or the least
// recently used one that this step does not use (the caller then copies the record in).
// Pinned records (a routing profile's most used) are never evicted. A scan (a prefill, which
// uses nearly every expert of every layer in turn: more than the cache when it is partial)
// puts its misses at the least recently used end, so that they go first and the records that
// were there before stay; its victims are not those of the call before either (the layer
// whose kernels may still read them).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace moeflux {

struct SlotStats {
  uint64_t lookups = 0, hits = 0, misses = 0, evictions = 0;
  double hit_rate() const { return lookups ? double(hits) / double(lookups) : 0.0; }
};

class ExpertSlotMap {
 public:
  // `slots` slots for `layers` layers of `experts` experts each. Error when slots < 1.
  ExpertSlotMap(int64_t slots, int layers, int experts);

  struct Placement {
    int64_t slot = -1;
    bool hit = false;  // false: the caller must copy the record into the slot
    int evicted_layer = -1, evicted_expert = -1;  // a miss's slot's previous record (-1: it was free)
  };
  // The slots of `experts` (distinct, of `layer`), in their order. Error when they are more
  // than the slots that are neither pinned nor held by the same call, or out of range.
  std::vector<Placement> place(int layer, std::span<const int32_t> experts, bool scan = false);
  // Places (layer, expert) and keeps it: a miss the caller fills. False when every slot is
  // pinned already.
  bool pin(int layer, int expert, Placement* where);

  // Frees the slot of (layer, expert) unless it is pinned (a record whose copy failed).
  void drop(int layer, int expert);
  // Room for layers [0, layers) (keys of layers beyond the constructor's).
  void grow(int layers);
  int64_t slots() const { return int64_t(slot_key_.size()); }
  int64_t pinned() const { return pinned_; }
  // The slot holding (layer, expert), or -1.
  int64_t slot_of(int layer, int expert) const { return where_[key(layer, expert)]; }
  const SlotStats& stats() const { return stats_; }

 private:
  size_t key(int layer, int expert) const { return size_t(layer) * size_t(experts_) + size_t(expert); }
  void touch(int64_t s);  // most recently used
  void demote(int64_t s);  // least recently used
  void unlink(int64_t s);
  // Least recently used, unpinned, not used by `step` (scan: preferably not by the step before
  // either); -1 if none.
  int64_t victim(uint64_t step, bool scan) const;

  int layers_, experts_;
  std::vector<int64_t> where_;     // key -> slot, or -1
  std::vector<int64_t> slot_key_;  // slot -> key, or -1 (free)
  std::vector<uint64_t> used_in_;  // slot -> the last step that placed it
  std::vector<bool> pinned_slot_;
  // LRU list of the unpinned occupied slots: prev / next, head = least recently used.
  std::vector<int64_t> prev_, next_;
  int64_t head_ = -1, tail_ = -1;
  std::vector<int64_t> free_;
  int64_t pinned_ = 0;
  uint64_t step_ = 0;
  SlotStats stats_;
};

}  // namespace moeflux
