// Multi-head latent attention (backend/blocks.h: MlaSpec) as a model layer's mixer, and the
// choice of its attention path.
#pragma once
#include <string>

#include "model/model.h"

namespace moeflux {

// "naive" | "absorbed"; Error naming `what` otherwise.
MlaPath parse_mla_path(const std::string& s, const std::string& what);
const char* mla_path_name(MlaPath p);

struct MlaAttention : Mixer, MlaSpec {
  std::unique_ptr<LayerState> make_state(const Backend& be) const override { return be.make_state(spec()); }
  void forward(Backend& be, Act x, std::span<const SeqRows> seqs, Act out) const override {
    be.mla_attention(spec(), x, seqs, out);
  }
  const MlaSpec& spec() const { return *this; }
};

// Sets the attention path of every MLA layer of `m`; returns how many layers it changed
// (0 for a model without MLA).
int set_mla_path(Model& m, MlaPath path);

}  // namespace moeflux
