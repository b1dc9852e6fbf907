// Feed-forward blocks as a model layer's FFN: the dense SwiGLU MLP and the mixture of experts
// (backend/blocks.h: SwiGlu, MoeSpec), each one backend op.
#pragma once
#include "model/model.h"

namespace moeflux {

struct DenseMlp : FeedForward {
  int64_t dim = 0;
  SwiGlu mlp;
  void forward(Backend& be, Act x, Act out) const override { be.swiglu(mlp, x, out); }
};

struct MoeFfn : FeedForward, MoeSpec {
  void forward(Backend& be, Act x, Act out) const override { be.moe(spec(), x, out); }
  const MoeSpec& spec() const { return *this; }
};

}  // namespace moeflux
