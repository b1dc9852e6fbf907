// Feed-forward blocks: the SwiGLU MLP (dense layers, each expert, shared experts) and the
// mixture of experts with a pluggable router and optional (gated) shared experts.
#pragma once
#include <functional>
#include <vector>

#include "model/model.h"

namespace moeflux {

class ExpertCache;

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
  std::string prefix;  // the module, e.g. "model.layers.3.mlp"

  // Expert streaming (stream/streaming.h). With a cache, expert e's bytes come from
  // cache->fetch(cache_layer, ...): the pointers of experts[e] are rebased from record_base[e]
  // onto the fetched record. `next` (the following MoE layer) is prefetched with its own
  // router applied to this layer's input. Results are identical with or without a cache:
  // experts are summed in ascending id order whatever order their bytes arrive in.
  // lanes_slots: the cache's records hold the 4-bit affine experts in the group-lane code
  // layout (Repack; to_lanes_in_slot rewrote each as it was read), so their views say so.
  ExpertCache* cache = nullptr;
  int cache_layer = -1;
  std::vector<const uint8_t*> record_base;
  const MoeFfn* next = nullptr;
  bool lanes_slots = false;
  // Rewrites expert e's eligible weights in `slot` (a copy of its record, file order) into the
  // group-lane layout, on the calling thread.
  void to_lanes_in_slot(int expert, uint8_t* slot) const;

  void forward(const float* x, int64_t T, float* out) const override;
  // Routes x (T, dim): ids and weights (T, n_experts_active).
  void route_tokens(const float* x, int64_t T, int32_t* ids, float* weights) const;

 private:
  void prefetch_next(const float* x, int64_t T) const;
  // out (T, dim) += the shared experts' outputs (gated by shared_gate where it exists).
  void add_shared(const float* x, int64_t T, float* out) const;
};

}  // namespace moeflux
