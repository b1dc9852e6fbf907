// Grouped-query attention (backend/blocks.h: GqaSpec) as a model layer's mixer.
#pragma once
#include "model/model.h"

namespace moeflux {

struct GqaAttention : Mixer, GqaSpec {
  std::unique_ptr<LayerState> make_state(const Backend& be) const override { return be.make_state(spec()); }
  void forward(Backend& be, Act x, int64_t pos0, LayerState& st, Act out) const override {
    be.gqa_attention(spec(), x, pos0, st, out);
  }
  const GqaSpec& spec() const { return *this; }
};

}  // namespace moeflux
