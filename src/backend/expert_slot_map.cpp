// ExpertSlotMap: an LRU list threaded through the slots; a step's slots are kept from eviction
// by the step number they were placed in.
#include "backend/expert_slot_map.h"

#include "core/error.h"

namespace moeflux {

ExpertSlotMap::ExpertSlotMap(int64_t slots, int layers, int experts) : layers_(layers), experts_(experts) {
  if (slots < 1) fail("the GPU expert cache has room for no expert (", slots, " slots)");
  if (layers < 1 || experts < 1) fail("expert slots: ", layers, " layers of ", experts, " experts");
  where_.assign(size_t(layers) * size_t(experts), -1);
  slot_key_.assign(size_t(slots), -1);
  used_in_.assign(size_t(slots), 0);
  pinned_slot_.assign(size_t(slots), false);
  prev_.assign(size_t(slots), -1);
  next_.assign(size_t(slots), -1);
  for (int64_t s = slots - 1; s >= 0; --s) free_.push_back(s);
}

void ExpertSlotMap::unlink(int64_t s) {
  const int64_t p = prev_[size_t(s)], n = next_[size_t(s)];
  (p >= 0 ? next_[size_t(p)] : head_) = n;
  (n >= 0 ? prev_[size_t(n)] : tail_) = p;
  prev_[size_t(s)] = next_[size_t(s)] = -1;
}

void ExpertSlotMap::touch(int64_t s) {
  if (pinned_slot_[size_t(s)]) return;
  if (prev_[size_t(s)] >= 0 || head_ == s) unlink(s);
  prev_[size_t(s)] = tail_;
  (tail_ >= 0 ? next_[size_t(tail_)] : head_) = s;
  tail_ = s;
}

void ExpertSlotMap::demote(int64_t s) {
  if (pinned_slot_[size_t(s)]) return;
  if (prev_[size_t(s)] >= 0 || head_ == s) unlink(s);
  next_[size_t(s)] = head_;
  (head_ >= 0 ? prev_[size_t(head_)] : tail_) = s;
  head_ = s;
}

int64_t ExpertSlotMap::victim(uint64_t step, bool scan) const {
  // From the least recently used on, the first not placed by this step. The step's slots were
  // moved to the tail as they were placed (a scan's misses to the head: the walk passes at
  // most its own and the previous step's).
  if (scan)
    for (int64_t s = head_; s >= 0; s = next_[size_t(s)])
      if (used_in_[size_t(s)] + 1 < step) return s;
  for (int64_t s = head_; s >= 0; s = next_[size_t(s)])
    if (used_in_[size_t(s)] != step) return s;
  return -1;
}

void ExpertSlotMap::drop(int layer, int expert) {
  if (layer < 0 || layer >= layers_ || expert < 0 || expert >= experts_) return;
  const size_t k = key(layer, expert);
  const int64_t s = where_[k];
  if (s < 0 || pinned_slot_[size_t(s)]) return;
  unlink(s);
  where_[k] = -1;
  slot_key_[size_t(s)] = -1;
  free_.push_back(s);
}

void ExpertSlotMap::grow(int layers) {
  if (layers <= layers_) return;
  // Keys are layer-major: the existing ones keep their values.
  layers_ = layers;
  where_.resize(size_t(layers_) * size_t(experts_), -1);
}

std::vector<ExpertSlotMap::Placement> ExpertSlotMap::place(int layer, std::span<const int32_t> experts, bool scan) {
  if (layer < 0 || layer >= layers_) fail("expert slots: layer ", layer, " of ", layers_);
  const uint64_t step = ++step_;
  std::vector<Placement> out;
  out.reserve(experts.size());
  for (const int32_t e : experts) {
    if (e < 0 || e >= experts_) fail("expert slots: expert ", e, " of ", experts_);
    const size_t k = key(layer, e);
    ++stats_.lookups;
    int64_t s = where_[k];
    if (s >= 0) {
      if (used_in_[size_t(s)] == step) fail("expert slots: expert ", e, " asked for twice in one step");
      ++stats_.hits;
      used_in_[size_t(s)] = step;
      touch(s);
      out.push_back({s, true});
      continue;
    }
    ++stats_.misses;
    int64_t evicted = -1;
    if (!free_.empty()) {
      s = free_.back();
      free_.pop_back();
    } else {
      s = victim(step, scan);
      if (s < 0)
        fail("the GPU expert cache's ", slots(), " slots (", pinned_, " pinned) cannot hold the ", experts.size(),
             " experts one step of layer ", layer, " uses");
      evicted = slot_key_[size_t(s)];
      where_[size_t(evicted)] = -1;
      ++stats_.evictions;
    }
    where_[k] = s;
    slot_key_[size_t(s)] = int64_t(k);
    used_in_[size_t(s)] = step;
    if (scan) demote(s);
    else touch(s);
    Placement p{s, false};
    if (evicted >= 0) p.evicted_layer = int(evicted / experts_), p.evicted_expert = int(evicted % experts_);
    out.push_back(p);
  }
  return out;
}

bool ExpertSlotMap::pin(int layer, int expert, Placement* where) {
  if (layer < 0 || layer >= layers_ || expert < 0 || expert >= experts_)
    fail("expert slots: cannot pin layer ", layer, " expert ", expert);
  const size_t k = key(layer, expert);
  int64_t s = where_[k];
  const bool hit = s >= 0;
  if (!hit) {
    if (!free_.empty()) {
      s = free_.back();
      free_.pop_back();
    } else {
      s = head_;  // any unpinned slot will do: nothing is in flight between steps
      if (s < 0) return false;
      where_[size_t(slot_key_[size_t(s)])] = -1;
      ++stats_.evictions;
    }
    where_[k] = s;
    slot_key_[size_t(s)] = int64_t(k);
  }
  if (!pinned_slot_[size_t(s)]) {
    if (prev_[size_t(s)] >= 0 || head_ == s) unlink(s);
    pinned_slot_[size_t(s)] = true;
    ++pinned_;
  }
  *where = {s, hit};
  return true;
}

}  // namespace moeflux
