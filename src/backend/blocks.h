// The blocks a backend runs, as data: the weights and shapes of one attention layer, one
// SwiGLU MLP, one mixture of experts. Architecture files fill them (src/model/archs/); the
// model's layers hold them; every backend implements each as one op (backend.h). Weights are
// QWeight views in the layout the backend prepared (Backend::prepare_weight).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/ref/ref.h"
#include "format/qweight.h"

namespace moeflux {

class ExpertSource;

struct SwiGlu {
  QWeight gate;  // (hidden, dim)
  QWeight up;    // (hidden, dim)
  QWeight down;  // (dim, hidden)
};

// Grouped-query attention with a KV cache (qwen3_moe, mixtral, the full-attention layers of
// the hybrids): q/k/v projections, optional per-head q/k RMSNorm, (partial) rotate-half RoPE,
// causal softmax attention, optional sigmoid output gate (qwen3_next), o projection.
struct GqaSpec {
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
};

// Multi-head latent attention (DeepSeek-V3 / Kimi-K2) over a latent cache that keeps, per
// token, only kv_a_layernorm(c) (kv_lora_rank) and the roped shared k_pe (qk_rope_head_dim).
// Two ways to attend over it, equal up to float rounding: Naive expands every cached c with
// kv_b_proj into per-head k_nope and v; Absorbed folds kv_b's key block into the query and its
// value block into the output, so attention runs in the latent space (the decode form).
enum class MlaPath : uint8_t { Naive, Absorbed };

struct MlaSpec {
  int64_t dim = 0, n_heads = 0;
  int64_t q_lora_rank = 0;  // 0: one q_proj (q_lora_rank null in config.json)
  int64_t kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_dim = 0;
  float lora_norm_eps = 1e-6f;  // q_a_layernorm / kv_a_layernorm
  float scale = 0.0f;           // softmax scale: qk_head_dim^-0.5 * mscale^2
  bool rope_interleave = true;  // q_pe / k_pe come interleaved (x0, x1 pairs): de-interleave first
  MlaPath path = MlaPath::Absorbed;
  QWeight wq;                    // (n_heads * qk_head_dim, dim) when q_lora_rank == 0
  QWeight wq_a;                  // (q_lora_rank, dim)
  std::vector<float> q_a_norm;   // (q_lora_rank)
  QWeight wq_b;                  // (n_heads * qk_head_dim, q_lora_rank)
  QWeight wkv_a;                 // (kv_lora_rank + qk_rope_dim, dim)
  std::vector<float> kv_a_norm;  // (kv_lora_rank)
  QWeight wkv_b;  // (n_heads * (qk_nope_dim + v_dim), kv_lora_rank): per head k_nope rows, then v rows
  QWeight wo;     // (dim, n_heads * v_dim)
  RopeTable rope;  // over qk_rope_dim

  int64_t qk_head_dim() const { return qk_nope_dim + qk_rope_dim; }
};

// One input projection of a GatedDeltaNet; its output row r lands at dst[r] of the per-token
// vector [q (n_k_heads * k_dim) | k (same) | v (n_v_heads * v_dim) | z (same) | b (n_v_heads) |
// a (same)], so packed checkpoint layouts (qwen3_next's grouped in_proj_qkvz / in_proj_ba) and
// separate ones (qwen3_5_moe) run the same code. The projections cover that vector exactly once.
struct GdnProjection {
  QWeight w;                 // (rows, dim)
  std::vector<int32_t> dst;  // (rows)
};

// GatedDeltaNet linear attention (the "linear_attention" layers of qwen3_next / qwen3_5_moe).
// Per token: input projections to q|k|v (conv channels), z (output gate), b (beta logits),
// a (decay input); causal depthwise conv1d + SiLU over q|k|v; L2-normalised q, k per key head
// (q also scaled by 1/sqrt(k_dim)); the gated delta rule per value head (value heads
// n_v_heads / n_k_heads at a time share one key head); gated RMSNorm; out_proj.
struct GdnSpec {
  int64_t dim = 0, n_k_heads = 0, n_v_heads = 0, k_dim = 0, v_dim = 0, conv_kernel = 0;
  float norm_eps = 1e-6f;  // of the gated RMSNorm
  std::vector<GdnProjection> in_proj;
  std::vector<float> conv_w;   // (conv_dim, conv_kernel)
  std::vector<float> A_log;    // (n_v_heads)
  std::vector<float> dt_bias;  // (n_v_heads)
  std::vector<float> norm;     // (v_dim): gated RMSNorm weight (plain, not zero-centred)
  QWeight out_proj;            // (dim, n_v_heads * v_dim)

  int64_t key_dim() const { return n_k_heads * k_dim; }
  int64_t value_dim() const { return n_v_heads * v_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  int64_t proj_dim() const { return conv_dim() + value_dim() + 2 * n_v_heads; }
};

// One token of a GatedDeltaNet before the delta rule, as the reference computes it: the causal
// conv1d step over proj's q | k | v (conv_state shifts), SiLU, then q and k L2-normalised per
// key head and q scaled by 1 / sqrt(k_dim), into mixed (conv_dim).
void gdn_conv_qk_ref(const GdnSpec& sp, const float* proj, float* conv_state, float* mixed);
// Value head h's decay exponent g = -exp(A_log[h]) * softplus(a + dt_bias[h]).
float gdn_decay_ref(const GdnSpec& sp, int64_t h, float a);

// How a router turns its logits (n_experts) into k expert ids and weights.
enum class RouteKind : uint8_t {
  SoftmaxTopK,     // softmax over all experts, top-k, renormalised when `renorm` (qwen3_moe, hybrids)
  TopKSoftmax,     // top-k logits, softmax over those k (mixtral)
  SigmoidGrouped,  // DeepSeek-V3 noaux_tc (GroupedRouteParams, with the selection bias)
};

struct RouterSpec {
  RouteKind kind = RouteKind::SoftmaxTopK;
  int64_t n_experts = 0, k = 0;
  bool renorm = false;          // SoftmaxTopK
  GroupedRouteParams grouped;   // SigmoidGrouped
  std::vector<float> bias;      // SigmoidGrouped: e_score_correction_bias (n_experts), or empty
};

// The reference routing of one token's logits: ids, weights (k each).
void route_ref(const RouterSpec& r, const float* logits, int32_t* ids, float* weights);

// Expert s's views moved from its record's bytes at `from` to a copy of the record at `to`
// (a streamed expert: MoeSpec::record_base to the fetched bytes).
SwiGlu rebased(const SwiGlu& s, const uint8_t* from, const uint8_t* to);

// A mixture of experts with its router and optional (gated) shared experts.
struct MoeSpec {
  int64_t dim = 0, n_experts = 0, n_experts_active = 0;
  QWeight router;  // (n_experts, dim)
  RouterSpec route;
  std::vector<SwiGlu> experts;  // (n_experts)
  // Shared experts run on every token; with shared_gate (1, dim) their output is scaled by
  // sigmoid(shared_gate x) (qwen3_next), otherwise added as is (deepseek_v3).
  std::vector<SwiGlu> shared;
  QWeight shared_gate;
  bool has_shared_gate = false;
  std::string prefix;  // the module, e.g. "model.layers.3.mlp"

  // Streaming. With a source, expert e's bytes come from source->acquire(source_layer, ...): the
  // pointers of experts[e] are rebased from record_base[e] onto the fetched record. `next`
  // (the following MoE layer) is prefetched with its own router applied to this layer's input.
  // Results are identical with or without a source: experts are summed in ascending id order
  // whatever order their bytes arrive in. prepared_records: the source's records went through
  // the backend's RecordTransform (Backend::expert_record_transform), so their views say so.
  ExpertSource* source = nullptr;
  int source_layer = -1;
  std::vector<const uint8_t*> record_base;
  const MoeSpec* next = nullptr;
  bool prepared_records = false;
};

}  // namespace moeflux
