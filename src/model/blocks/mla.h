// Multi-head latent attention (DeepSeek-V3 / Kimi-K2) over a latent cache that keeps, per
// token, only kv_a_layernorm(c) (kv_lora_rank) and the roped shared k_pe (qk_rope_head_dim).
// Two ways to attend over it, equal up to float rounding: Naive expands every cached c with
// kv_b_proj into per-head k_nope and v; Absorbed folds kv_b's key block into the query and its
// value block into the output, so attention runs in the latent space (the decode form).
#pragma once
#include <string>
#include <vector>

#include "model/model.h"
#include "backend/ref/ref.h"

namespace moeflux {

enum class MlaPath : uint8_t { Naive, Absorbed };

// "naive" | "absorbed"; Error naming `what` otherwise.
MlaPath parse_mla_path(const std::string& s, const std::string& what);
const char* mla_path_name(MlaPath p);

class LatentCache : public LayerState {
 public:
  LatentCache(int64_t rank, int64_t rope_dim) : rank_(rank), rope_dim_(rope_dim) {}
  void clear() override { c.clear(), k_pe.clear(); }
  size_t bytes() const override { return (c.size() + k_pe.size()) * sizeof(float); }
  std::vector<StateBuffer> buffers() override { return {{"c", &c, true}, {"k_pe", &k_pe, true}}; }
  // Cached positions; derived from c so that a restored cache needs nothing else.
  int64_t len() const { return int64_t(c.size()) / rank_; }
  std::vector<float> c;     // (len, kv_lora_rank), after kv_a_layernorm
  std::vector<float> k_pe;  // (len, qk_rope_head_dim), roped (de-interleaved when rope_interleave)
  int64_t rank_, rope_dim_;
};

struct MlaAttention : Mixer {
  int64_t dim = 0, n_heads = 0;
  int64_t q_lora_rank = 0;  // 0: one q_proj (q_lora_rank null in config.json)
  int64_t kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_dim = 0;
  float lora_norm_eps = 1e-6f;  // q_a_layernorm / kv_a_layernorm
  float scale = 0.0f;           // softmax scale: qk_head_dim^-0.5 * mscale^2
  bool rope_interleave = true;  // q_pe / k_pe come interleaved (x0, x1 pairs): de-interleave first
  MlaPath path = MlaPath::Absorbed;
  QWeight wq;                  // (n_heads * qk_head_dim, dim) when q_lora_rank == 0
  QWeight wq_a;                // (q_lora_rank, dim)
  std::vector<float> q_a_norm; // (q_lora_rank)
  QWeight wq_b;                // (n_heads * qk_head_dim, q_lora_rank)
  QWeight wkv_a;               // (kv_lora_rank + qk_rope_dim, dim)
  std::vector<float> kv_a_norm;  // (kv_lora_rank)
  QWeight wkv_b;               // (n_heads * (qk_nope_dim + v_dim), kv_lora_rank): per head k_nope rows, then v rows
  QWeight wo;                  // (dim, n_heads * v_dim)
  RopeTable rope;              // over qk_rope_dim

  int64_t qk_head_dim() const { return qk_nope_dim + qk_rope_dim; }
  std::unique_ptr<LayerState> make_state() const override {
    return std::make_unique<LatentCache>(kv_lora_rank, qk_rope_dim);
  }
  void forward(const float* x, int64_t T, int64_t pos0, LayerState& st, float* out) const override;

 private:
  // q (T, n_heads, qk_head_dim) roped; the cache already holds the T new positions.
  void attend_naive(const float* q, int64_t T, const LatentCache& lc, float* out) const;
  void attend_absorbed(const float* q, int64_t T, const LatentCache& lc, float* out) const;
};

// Sets the attention path of every MLA layer of `m`; returns how many layers it changed
// (0 for a model without MLA).
int set_mla_path(Model& m, MlaPath path);

}  // namespace moeflux
