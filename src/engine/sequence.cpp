// Sequence: a conversation's state, saved, restored, checkpointed and rewound.
#include <algorithm>

#include "core/error.h"
#include "engine/engine.h"

namespace moeflux {

namespace {
size_t nested_bytes(const std::vector<std::vector<std::vector<float>>>& layers) {
  size_t b = 0;
  for (const auto& l : layers)
    for (const auto& v : l) b += v.size() * sizeof(float);
  return b;
}
}  // namespace

size_t Sequence::Snapshot::bytes() const {
  size_t b = tokens.size() * sizeof(int32_t) + nested_bytes(layers);
  for (const Checkpoint& c : checkpoints) b += nested_bytes(c.layers);
  return b;
}

void Sequence::reset() {
  for (auto& s : states_) s->clear();
  tokens_.clear();
  checkpoints_.clear();
  broken_ = false;
}

size_t Sequence::state_bytes() const {
  size_t b = 0;
  for (const auto& s : states_) b += s->bytes();
  for (const Checkpoint& c : checkpoints_) b += nested_bytes(c.layers);
  return b;
}

Sequence::Snapshot Sequence::save() const {
  Snapshot snap;
  snap.tokens = tokens_;
  for (const auto& s : states_) {
    auto& layer = snap.layers.emplace_back();
    for (const StateBuffer& b : s->buffers()) layer.push_back(*b.data);
  }
  snap.checkpoints = checkpoints_;
  return snap;
}

void Sequence::restore(const Snapshot& snap) {
  if (snap.layers.size() != states_.size())
    fail("restore: the snapshot has ", snap.layers.size(), " layers, the model ", states_.size());
  for (size_t l = 0; l < states_.size(); ++l) {
    const auto bufs = states_[l]->buffers();
    if (bufs.size() != snap.layers[l].size()) fail("restore: layer ", l, " holds another kind of state");
    for (size_t i = 0; i < bufs.size(); ++i)
      if (!bufs[i].grows && bufs[i].data->size() != snap.layers[l][i].size())
        fail("restore: layer ", l, " state '", bufs[i].name, "' has ", snap.layers[l][i].size(), " values, expected ",
             bufs[i].data->size());
  }
  int64_t prev = 0;
  for (const Checkpoint& c : snap.checkpoints) {
    if (c.pos <= prev || c.pos > int64_t(snap.tokens.size()))
      fail("restore: a checkpoint at position ", c.pos, " is out of order or beyond the ", snap.tokens.size(), " tokens");
    prev = c.pos;
    if (c.layers.size() != states_.size()) fail("restore: a checkpoint has ", c.layers.size(), " layers");
    for (size_t l = 0; l < states_.size(); ++l) {
      size_t i = 0;
      for (const StateBuffer& b : states_[l]->buffers()) {
        if (b.grows) continue;
        if (i >= c.layers[l].size() || c.layers[l][i].size() != b.data->size())
          fail("restore: the checkpoint at position ", c.pos, " does not match layer ", l, "'s state");
        ++i;
      }
      if (i != c.layers[l].size()) fail("restore: the checkpoint at position ", c.pos, " does not match layer ", l);
    }
  }
  for (size_t l = 0; l < states_.size(); ++l) {
    const auto bufs = states_[l]->buffers();
    for (size_t i = 0; i < bufs.size(); ++i) *bufs[i].data = snap.layers[l][i];
    states_[l]->buffers_written();
  }
  tokens_ = snap.tokens;
  checkpoints_ = snap.checkpoints;
  broken_ = false;
}

bool Sequence::recurrent() const { return std::find(fixed_.begin(), fixed_.end(), true) != fixed_.end(); }

void Sequence::checkpoint() {
  if (!recurrent() || broken_ || tokens_.empty()) return;
  if (!checkpoints_.empty() && checkpoints_.back().pos == pos()) return;
  Checkpoint c{pos(), {}};
  for (size_t l = 0; l < states_.size(); ++l) {
    auto& layer = c.layers.emplace_back();
    if (!fixed_[l]) continue;
    for (const StateBuffer& b : states_[l]->buffers())
      if (!b.grows) layer.push_back(*b.data);
  }
  checkpoints_.push_back(std::move(c));
  if (checkpoints_.size() > kMaxCheckpoints) checkpoints_.erase(checkpoints_.begin());
}

std::vector<int64_t> Sequence::checkpoint_positions() const {
  std::vector<int64_t> p;
  for (const Checkpoint& c : checkpoints_) p.push_back(c.pos);
  return p;
}

int64_t Sequence::rewind(int64_t n) {
  n = std::max<int64_t>(0, n);
  if (n >= pos()) return pos();
  const Checkpoint* from = nullptr;
  if (recurrent()) {
    for (const Checkpoint& c : checkpoints_)
      if (c.pos <= n) from = &c;
    n = from ? from->pos : 0;
  }
  bool cut = n > 0 && !broken_;
  for (size_t l = 0; cut && l < states_.size(); ++l)
    if (!fixed_[l]) cut = states_[l]->truncate(n);
  if (!cut) {
    reset();
    return 0;
  }
  if (from) {
    for (size_t l = 0; l < states_.size(); ++l) {
      if (!fixed_[l]) continue;
      size_t i = 0;
      for (const StateBuffer& b : states_[l]->buffers())
        if (!b.grows) *b.data = from->layers[l][i++];
      states_[l]->buffers_written();
    }
  }
  tokens_.resize(size_t(n));
  while (!checkpoints_.empty() && checkpoints_.back().pos > n) checkpoints_.pop_back();
  return n;
}

int64_t reusable_prefix(std::span<const int32_t> held, std::span<const int64_t> marks, bool recurrent,
                        std::span<const int32_t> prompt) {
  return reusable_prefix(held, marks, recurrent, prompt, prompt.empty() ? 0 : prompt.size() - 1);
}

int64_t reusable_prefix(std::span<const int32_t> held, std::span<const int64_t> marks, bool recurrent,
                        std::span<const int32_t> prompt, size_t at_most) {
  const size_t limit = std::min({held.size(), prompt.size(), at_most});
  size_t common = 0;
  while (common < limit && held[common] == prompt[common]) ++common;
  if (!recurrent || common == held.size()) return int64_t(common);
  int64_t best = 0;
  for (int64_t m : marks)
    if (m <= int64_t(common)) best = std::max(best, m);
  return best;
}

}  // namespace moeflux
