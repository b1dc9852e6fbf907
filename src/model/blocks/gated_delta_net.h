// GatedDeltaNet linear attention (backend/blocks.h: GdnSpec) as a model layer's mixer.
#pragma once
#include "model/model.h"

namespace moeflux {

struct GatedDeltaNet : Mixer, GdnSpec {
  std::unique_ptr<LayerState> make_state(const Backend& be) const override { return be.make_state(spec()); }
  // Recurrent over the T tokens; positions play no part.
  void forward(Backend& be, Act x, int64_t /*pos0*/, LayerState& st, Act out) const override {
    be.gated_delta_net(spec(), x, st, out);
  }
  const GdnSpec& spec() const { return *this; }
};

}  // namespace moeflux
