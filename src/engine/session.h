// Session: the per-sequence state of one conversation with a model (one LayerState per
// layer, the position, the tokens so far) and the forward pass over it. Prefill and decode
// are the same call: forward() with T tokens appends them to the state and returns logits.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/model.h"

namespace moeflux {

struct ForwardOptions {
  bool all_logits = true;               // false: only the last position's logits
  std::vector<float>* hidden = nullptr;  // if set: (n_layers + 1, T, dim) as transformers'
                                         // output_hidden_states (last entry after final norm)
};

class Session {
 public:
  explicit Session(const Model& m);
  int64_t pos() const { return int64_t(tokens_.size()); }
  const Model& model() const { return m_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  void reset();
  size_t state_bytes() const;

  // Runs ids through the model at positions pos() .. pos() + T - 1. Returns logits
  // (T, vocab_size), or (1, vocab_size) when !opt.all_logits. Error (state unchanged) for ids
  // outside the vocabulary or a context longer than max_position_embeddings. An error during
  // the pass (an expert that cannot be read) leaves the tokens so far unchanged: the next call
  // first rebuilds the state from them.
  std::vector<float> forward(std::span<const int32_t> ids, const ForwardOptions& opt = {});

 private:
  std::vector<float> run(std::span<const int32_t> ids, const ForwardOptions& opt);
  bool broken_ = false;  // the state is out of step with tokens_ (a pass failed midway)
  const Model& m_;
  std::vector<std::unique_ptr<LayerState>> states_;
  std::vector<int32_t> tokens_;
};

// Index of the largest logit (ties to the lower id).
int32_t argmax(std::span<const float> logits);

}  // namespace moeflux
