// Session: one sequence of an Engine with the single-conversation API. Prefill and decode
// are the same call: forward() with T tokens appends them to the state and returns logits.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/engine.h"

namespace moeflux {

class Session {
 public:
  explicit Session(const Model& m) : engine_(m), seq_(engine_.new_sequence()) {}
  int64_t pos() const { return seq_->pos(); }
  const Model& model() const { return engine_.model(); }
  const std::vector<int32_t>& tokens() const { return seq_->tokens(); }
  void reset() { seq_->reset(); }
  size_t state_bytes() const { return seq_->state_bytes(); }
  Sequence& sequence() { return *seq_; }

  // Runs ids through the model at positions pos() .. pos() + T - 1 (Engine::step).
  std::vector<float> forward(std::span<const int32_t> ids, const ForwardOptions& opt = {}) {
    const StepItem item{seq_.get(), ids, opt};
    return std::move(engine_.step({&item, 1})[0]);
  }
  // Engine::kept_logits of the last forward's TopLogits.
  void kept_logits(const TopLogits& t, std::span<const int32_t> ids, float* out) const { engine_.kept_logits(t, ids, out); }

 private:
  Engine engine_;
  std::unique_ptr<Sequence> seq_;
};

}  // namespace moeflux
