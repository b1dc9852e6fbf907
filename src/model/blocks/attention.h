// Grouped-query attention (backend/blocks.h: GqaSpec) as a model layer's mixer.
#pragma once
#include "model/model.h"

namespace moeflux {

struct GqaAttention : Mixer, GqaSpec {
  std::unique_ptr<LayerState> make_state(const Backend& be) const override { return be.make_state(spec()); }
  void forward(Backend& be, Act x, std::span<const SeqRows> seqs, Act out) const override {
    be.gqa_attention(spec(), x, seqs, out);
  }
  const GqaSpec& spec() const { return *this; }
};

}  // namespace moeflux
