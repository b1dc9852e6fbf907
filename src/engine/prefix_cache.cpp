// PrefixCache: put with eviction, find by the longest prefix served.
#include "engine/prefix_cache.h"

namespace moeflux {

int64_t PrefixCache::serves(const Entry& e, std::span<const int32_t> prompt) const {
  return reusable_prefix(e.snap.tokens, e.marks, recurrent_, prompt);
}

void PrefixCache::put(Sequence::Snapshot s) {
  Entry e;
  e.bytes = s.bytes();
  if (e.bytes > max_bytes_ || s.tokens.empty()) return;
  for (const auto& c : s.checkpoints) e.marks.push_back(c.pos);
  e.snap = std::move(s);
  // An entry is redundant when the new one holds its tokens and can go back to all of them.
  for (auto it = entries_.begin(); it != entries_.end();) {
    const auto& old = it->snap.tokens;
    if (old.size() <= e.snap.tokens.size() &&
        reusable_prefix(e.snap.tokens, e.marks, recurrent_, old, old.size()) == int64_t(old.size())) {
      bytes_ -= it->bytes;
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  bytes_ += e.bytes;
  entries_.push_front(std::move(e));
  while (bytes_ > max_bytes_) {
    bytes_ -= entries_.back().bytes;
    entries_.pop_back();
  }
}

PrefixCache::Match PrefixCache::find(std::span<const int32_t> prompt) {
  auto best = entries_.end();
  int64_t n = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (const int64_t k = serves(*it, prompt); k > n) best = it, n = k;
  if (best == entries_.end()) return {};
  entries_.splice(entries_.begin(), entries_, best);
  return {&entries_.front().snap, n};
}

}  // namespace moeflux
