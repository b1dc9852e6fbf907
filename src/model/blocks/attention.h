// Grouped-query attention with a KV cache (qwen3_moe, mixtral, the full-attention layers of
// the hybrids): q/k/v projections, optional per-head q/k RMSNorm, (partial) rotate-half RoPE,
// causal softmax attention, optional sigmoid output gate (qwen3_next), o projection.
#pragma once
#include <vector>

#include "model/model.h"
#include "backend/ref/ref.h"

namespace moeflux {

class KvCache : public LayerState {
 public:
  KvCache(int64_t n_kv_heads, int64_t k_dim, int64_t v_dim) : n_kv_(n_kv_heads), kd_(k_dim), vd_(v_dim) {}
  void clear() override { k.clear(), v.clear(); }
  size_t bytes() const override { return (k.size() + v.size()) * sizeof(float); }
  std::vector<StateBuffer> buffers() override { return {{"k", &k, true}, {"v", &v, true}}; }
  // Cached positions; derived from k so that a restored cache needs nothing else.
  int64_t len() const { return int64_t(k.size()) / (n_kv_ * kd_); }
  std::vector<float> k;  // (len, n_kv_heads, k_dim)
  std::vector<float> v;  // (len, n_kv_heads, v_dim)
  int64_t n_kv_, kd_, vd_;
};

struct GqaAttention : Mixer {
  int64_t dim = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t window = 0;  // sliding window: attend to the last `window` positions (0: all)
  // Output gate: q_proj yields per head [query (head_dim), gate (head_dim)], and the attention
  // output is multiplied by sigmoid(gate) before o_proj.
  bool gated = false;
  float norm_eps = 1e-6f;
  QWeight wq;  // (n_heads * head_dim * (gated ? 2 : 1), dim)
  QWeight wk;  // (n_kv_heads * head_dim, dim)
  QWeight wv;  // (n_kv_heads * head_dim, dim)
  QWeight wo;  // (dim, n_heads * head_dim)
  std::vector<float> q_norm, k_norm;  // (head_dim) each, or empty
  RopeTable rope;

  std::unique_ptr<LayerState> make_state() const override {
    return std::make_unique<KvCache>(n_kv_heads, head_dim, head_dim);
  }
  void forward(const float* x, int64_t T, int64_t pos0, LayerState& st, float* out) const override;
};

}  // namespace moeflux
