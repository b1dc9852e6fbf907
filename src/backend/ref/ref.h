// Reference CPU ops: plain scalar loops with f32 accumulation. They are the spec: every
// optimised CPU or CUDA op is tested against these (tests/ops/). Shapes in comments.
#pragma once
#include <cstdint>
#include <vector>

#include "format/config.h"
#include "format/qweight.h"

namespace moeflux {

// y (w.rows) = W x (w.cols)
void matvec_ref(const QWeight& w, const float* x, float* y);

// out (n) = x * rsqrt(mean(x^2) + eps) * w; w may be null (no weight). out may alias x.
void rmsnorm_ref(const float* x, const float* w, int64_t n, float eps, float* out);

float silu_ref(float x);
// out (n) = silu(gate) * up; out may alias gate.
void swiglu_ref(const float* gate, const float* up, int64_t n, float* out);

// In place softmax over n values (max-subtracted, f32).
void softmax_ref(float* x, int64_t n);

// The k largest of x (n): ids in descending value order, ties to the lower index.
void topk_ref(const float* x, int64_t n, int64_t k, int32_t* ids);

// RoPE tables: inverse frequencies (rot_dim / 2) and the scaling applied to cos / sin
// (1 except for YaRN), computed in f32 as transformers does.
struct RopeTable {
  int64_t rot_dim = 0;
  std::vector<float> inv_freq;  // (rot_dim / 2)
  float attn_factor = 1.0f;
};
RopeTable make_rope_table(const RopeConfig& cfg, int64_t head_dim);

// Rotate-half ("NeoX") RoPE of the first t.rot_dim values of one head vector at `pos`:
// dim i pairs with i + rot_dim / 2.
void rope_ref(float* v, const RopeTable& t, int64_t pos);
// The same in two steps, so that all heads of a position share one table: cs (rot_dim) =
// cos (first half) and sin (second half) of the angles at pos, then the rotation.
void rope_angles(const RopeTable& t, int64_t pos, float* cs);
void rope_apply(float* v, const RopeTable& t, const float* cs);

// Causal GQA attention of one query position against n_ctx cached positions.
// q (n_heads, head_dim); k (n_ctx, n_kv_heads, head_dim); v (n_ctx, n_kv_heads, v_dim);
// out (n_heads, v_dim). Query head h reads kv head h / (n_heads / n_kv_heads).
void attention_ref(const float* q, const float* k, const float* v, int64_t n_ctx, int64_t n_heads,
                   int64_t n_kv_heads, int64_t head_dim, int64_t v_dim, float scale, float* out);

// MLA (multi-head latent attention) pieces.
// y (n) = rows r0 .. r0 + n - 1 of W times x (w.cols).
void matvec_rows_ref(const QWeight& w, int64_t r0, int64_t n, const float* x, float* y);
// y (w.cols) = (rows r0 .. r0 + n - 1 of W)^T x (n).
void matvec_t_rows_ref(const QWeight& w, int64_t r0, int64_t n, const float* x, float* y);
// Absorbed attention of one query position over n_ctx latent cache entries. Per head h:
// score_t = (q_c[h] . c_t + q_pe[h] . k_pe_t) * scale, p = softmax(score), out[h] = sum_t p_t c_t.
// q_c (n_heads, rank) is the query folded through kv_b's key block (W_kb^T q_nope);
// q_pe (n_heads, rope_dim); c (n_ctx, rank); k_pe (n_ctx, rope_dim); out (n_heads, rank).
void mla_attention_absorbed_ref(const float* q_c, const float* q_pe, const float* c, const float* k_pe,
                                int64_t n_ctx, int64_t n_heads, int64_t rank, int64_t rope_dim, float scale,
                                float* out);

// Routers: logits (n_experts) -> ids / weights (k).
// softmax over all experts, top-k, optional renormalisation of the k weights (qwen3_moe).
void route_softmax_topk_ref(const float* logits, int64_t n_experts, int64_t k, bool renorm,
                            int32_t* ids, float* weights);
// top-k of the logits, then softmax over those k (mixtral).
void route_topk_softmax_ref(const float* logits, int64_t n_experts, int64_t k, int32_t* ids,
                            float* weights);
// DeepSeek-V3 "noaux_tc": s = sigmoid(logits); choice = s + bias (selection only); the n_group
// groups are scored by the sum of their two best choice scores and the best topk_group kept;
// top-k experts of the kept groups by choice score; weights = s of those, divided by their sum
// when renorm, times `scaling` (routed_scaling_factor). ids in descending choice order.
struct GroupedRouteParams {
  int64_t n_experts = 0, n_group = 1, topk_group = 1, k = 0;
  bool renorm = true;
  float scaling = 1.0f;
};
// bias (n_experts) may be null (all zero).
void route_sigmoid_grouped_ref(const float* logits, const float* bias, const GroupedRouteParams& p,
                               int32_t* ids, float* weights);

}  // namespace moeflux
