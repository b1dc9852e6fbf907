// Feed-forward blocks: the SwiGLU MLP (dense layers, each expert, shared experts) and the
// mixture of experts with a pluggable router and optional (gated) shared experts.
#pragma once
#include <functional>
#include <vector>

#include "model/model.h"

namespace moeflux {

struct SwiGlu {
  QWeight gate;  // (hidden, dim)
  QWeight up;    // (hidden, dim)
  QWeight down;  // (dim, hidden)
  // out (dim) = down(silu(gate x) * up x)
  void apply(const float* x, float* out) const;
  // The same for T tokens: x (T, dim) -> out (T, dim), each weight row read once.
  void apply_batch(const float* x, int64_t T, float* out) const;
};

struct DenseMlp : FeedForward {
  int64_t dim = 0;
  SwiGlu mlp;
  void forward(const float* x, int64_t T, float* out) const override;
};

// Router: logits (n_experts) -> ids, weights (n_experts_active).
using RouterFn = std::function<void(const float* logits, int32_t* ids, float* weights)>;

struct MoeFfn : FeedForward {
  int64_t dim = 0, n_experts = 0, n_experts_active = 0;
  QWeight router;  // (n_experts, dim)
  RouterFn route;
  std::vector<SwiGlu> experts;  // (n_experts)
  // Shared experts run on every token; with shared_gate (1, dim) their output is scaled by
  // sigmoid(shared_gate x) (qwen3_next), otherwise added as is (deepseek_v3).
  std::vector<SwiGlu> shared;
  QWeight shared_gate;
  bool has_shared_gate = false;
  void forward(const float* x, int64_t T, float* out) const override;
};

}  // namespace moeflux
