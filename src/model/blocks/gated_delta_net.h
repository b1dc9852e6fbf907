// GatedDeltaNet linear attention (backend/blocks.h: GdnSpec) as a model layer's mixer.
#pragma once
#include "model/model.h"

namespace moeflux {

struct GatedDeltaNet : Mixer, GdnSpec {
  std::unique_ptr<LayerState> make_state(const Backend& be) const override { return be.make_state(spec()); }
  // Recurrent over each sequence's tokens; positions play no part.
  void forward(Backend& be, Act x, std::span<const SeqRows> seqs, Act out) const override {
    be.gated_delta_net(spec(), x, seqs, out);
  }
  const GdnSpec& spec() const { return *this; }
};

}  // namespace moeflux
