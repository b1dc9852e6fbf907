// Engine: runs a model on its backend for many sequences at once. A Sequence is one
// conversation's state (one LayerState per layer, the tokens so far). Engine::step takes
// tokens of several sequences (a prefill chunk of one, the next decode token of others) and
// runs them through the model together: each layer's mixer runs per sequence over its own
// state, and each FFN once over all rows, so that a routed expert that several sequences use
// is read once per step. Session (session.h) is one sequence with the single-sequence API.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/model.h"

namespace moeflux {

class Sequence {
 public:
  int64_t pos() const { return int64_t(tokens_.size()); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  void reset();
  size_t state_bytes() const;  // the layers' state and the checkpoints

  // The recurrent (fixed-size) state of a model's layers at one position, so that a sequence of
  // a hybrid model can go back there: a cache that grows with the sequence (KV, latent) is cut
  // instead, and needs none.
  struct Checkpoint {
    int64_t pos = 0;
    std::vector<std::vector<std::vector<float>>> layers;  // per layer, its fixed-size buffers
  };
  // A copy of the whole state (for a later restore into a sequence of the same model).
  struct Snapshot {
    std::vector<int32_t> tokens;
    std::vector<std::vector<std::vector<float>>> layers;  // per layer, per state buffer
    std::vector<Checkpoint> checkpoints;
    size_t bytes() const;
  };
  Snapshot save() const;
  // Error when the snapshot was taken from a model of another shape.
  void restore(const Snapshot& s);

  // True when some layer's state cannot be cut back to a shorter sequence (recurrent layers).
  bool recurrent() const;
  // Records the recurrent state at pos() (a turn boundary), so that rewind() can come back here;
  // nothing for a model without recurrent layers. The newest kMaxCheckpoints are kept.
  static constexpr size_t kMaxCheckpoints = 4;
  void checkpoint();
  std::vector<int64_t> checkpoint_positions() const;
  // Goes back to at most the first n tokens and returns how many it kept: n (or pos() when
  // shorter), or for a recurrent model the latest checkpoint at or before n, or 0.
  int64_t rewind(int64_t n);

 private:
  friend class Engine;
  std::vector<std::unique_ptr<LayerState>> states_;
  std::vector<bool> fixed_;  // per layer: its state has fixed-size buffers (made by Engine)
  std::vector<int32_t> tokens_;
  std::vector<Checkpoint> checkpoints_;  // ascending positions, all <= pos()
  bool broken_ = false;  // the state is out of step with tokens_ (a step failed midway)
};

// How many of `prompt`'s tokens a state holding `held` can serve (Sequence::rewind then keeps
// them): their common prefix, at most prompt.size() - 1 (the last prompt token is fed again for
// its logits); for a recurrent model only all of `held` or a checkpoint position (`marks`).
int64_t reusable_prefix(std::span<const int32_t> held, std::span<const int64_t> marks, bool recurrent,
                        std::span<const int32_t> prompt);
// The same with at most `at_most` tokens (all of `prompt`: prompt.size()).
int64_t reusable_prefix(std::span<const int32_t> held, std::span<const int64_t> marks, bool recurrent,
                        std::span<const int32_t> prompt, size_t at_most);

// An item's last logits left on the backend but for the n largest (a sampler's shortlist).
struct TopLogits {
  int64_t n = 0;              // in: how many come to the host (>= 1; more than the vocabulary: all)
  std::vector<float> vals;    // out: the largest logits, in logit_order_key's order
  std::vector<int32_t> ids;   // out: their tokens
  int pass = -1;              // out: where the backend keeps the row (Engine::kept_logits)
  int64_t row = -1;
};

struct ForwardOptions {
  bool all_logits = true;                // false: only the last position's logits
  std::vector<float>* hidden = nullptr;  // if set: (n_layers + 1, T, dim) as transformers'
                                         // output_hidden_states (last entry after final norm)
  TopLogits* top = nullptr;              // if set (with !all_logits): the step returns no logits
                                         // for the item but fills *top
};

// One sequence's part of a step.
struct StepItem {
  Sequence* seq = nullptr;
  std::span<const int32_t> ids;  // at positions seq->pos() ..
  ForwardOptions opt;
};

class Engine {
 public:
  // Runs `m` on m.backend. The model must outlive the engine.
  explicit Engine(const Model& m);
  const Model& model() const { return m_; }
  Backend& backend() const { return *m_.backend; }

  std::unique_ptr<Sequence> new_sequence() const;

  // Runs every item's ids through the model at its sequence's next positions, all in one
  // pass, and returns each item's logits ((T, vocab_size), or (1, vocab_size) when
  // !opt.all_logits). Error, with every state unchanged, for no tokens, ids outside the
  // vocabulary, a context longer than max_position_embeddings or a sequence given twice. An
  // error during the pass (an expert that cannot be read) leaves each sequence's tokens
  // unchanged: its next step first rebuilds its state from them.
  std::vector<std::vector<float>> step(std::span<const StepItem> items);
  // After a step, until the next: logits of a TopLogits item's row, out[i] that of token
  // ids[i], or with no ids all vocab_size of them.
  void kept_logits(const TopLogits& t, std::span<const int32_t> ids, float* out) const;

 private:
  std::vector<std::vector<float>> run(std::span<const StepItem> items);
  const Model& m_;
  // (rows, vocab_size): a head pass over several items' rows, kept between steps (a fresh
  // buffer each step was ~2 ms of page faults for 8 decoded sequences of a 30B MoE).
  std::vector<float> head_rows_;
};

// Index of the largest logit (ties to the lower id).
int32_t argmax(std::span<const float> logits);

}  // namespace moeflux
