// deepseek_v3 (DeepSeek-V3 / R1, Kimi-K2, Cogito-V2): MLA with a latent cache (q LoRA or a plain
// q_proj), YaRN RoPE on the rope part with the mscale_all_dim softmax-scale correction, the
// "noaux_tc" grouped sigmoid router with routed_scaling_factor, shared experts added unscaled,
// and dense MLPs in the first `first_k_dense_replace` layers. Ground truth: transformers'
// modeling_deepseek_v3.py.
#include <cmath>

#include "core/error.h"
#include "model/archs/archs.h"
#include "model/archs/common.h"
#include "model/blocks/mla.h"
#include "backend/ref/ref.h"

namespace moeflux {

namespace {

struct MlaDims {
  int64_t q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_dim;
  bool rope_interleave;
  float scale;
};

MlaDims read_mla_dims(const ModelConfig& c) {
  ConfigReader r = c.reader();
  MlaDims d;
  d.q_lora_rank = r.has("q_lora_rank") ? r.get_pos_int("q_lora_rank") : 0;
  d.kv_lora_rank = r.get_pos_int("kv_lora_rank");
  d.qk_nope = r.get_pos_int("qk_nope_head_dim");
  d.qk_rope = r.get_pos_int("qk_rope_head_dim");
  d.v_dim = r.get_pos_int("v_head_dim");
  d.rope_interleave = r.get_bool("rope_interleave", true);
  if (d.qk_rope % 2 != 0) fail(c.path, ": qk_rope_head_dim (", d.qk_rope, ") must be even");
  const int64_t qk = d.qk_nope + d.qk_rope;
  if (r.has("qk_head_dim") && r.get_int("qk_head_dim") != qk)
    fail(c.path, ": qk_head_dim (", r.get_int("qk_head_dim"), ") != qk_nope_head_dim + qk_rope_head_dim (", qk, ")");
  if (c.n_kv_heads != c.n_heads)
    fail(c.path, ": MLA needs num_key_value_heads (", c.n_kv_heads, ") == num_attention_heads (", c.n_heads, ")");
  if (c.rope.partial_rotary_factor != 1.0)
    fail(c.path, ": partial_rotary_factor must be 1 for MLA (qk_rope_head_dim is the rotated part)");
  // transformers' DeepseekV3Attention: with a scaled rope and mscale_all_dim, the softmax scale
  // is multiplied by mscale^2, mscale = 0.1 * mscale_all_dim * ln(factor) + 1 (1 when factor <= 1).
  double scale = 1.0 / std::sqrt(double(qk));
  if (c.rope.type != "default" && c.rope.mscale_all_dim != 0 && c.rope.factor > 1.0) {
    const double m = 0.1 * c.rope.mscale_all_dim * std::log(c.rope.factor) + 1.0;
    scale *= m * m;
  }
  d.scale = float(scale);
  return d;
}

std::unique_ptr<MlaAttention> load_mla(const WeightLoader& w, const std::string& p, const MlaDims& d) {
  const ModelConfig& c = w.config();
  auto a = std::make_unique<MlaAttention>();
  a->dim = c.dim;
  a->n_heads = c.n_heads;
  a->q_lora_rank = d.q_lora_rank;
  a->kv_lora_rank = d.kv_lora_rank;
  a->qk_nope_dim = d.qk_nope;
  a->qk_rope_dim = d.qk_rope;
  a->v_dim = d.v_dim;
  a->rope_interleave = d.rope_interleave;
  a->scale = d.scale;
  const int64_t qk = d.qk_nope + d.qk_rope;
  if (d.q_lora_rank > 0) {
    a->wq_a = w.linear(p + ".q_a_proj", d.q_lora_rank, c.dim);
    a->q_a_norm = w.vec(p + ".q_a_layernorm.weight", d.q_lora_rank);
    a->wq_b = w.linear(p + ".q_b_proj", c.n_heads * qk, d.q_lora_rank);
  } else {
    a->wq = w.linear(p + ".q_proj", c.n_heads * qk, c.dim);
  }
  a->wkv_a = w.linear(p + ".kv_a_proj_with_mqa", d.kv_lora_rank + d.qk_rope, c.dim);
  a->kv_a_norm = w.vec(p + ".kv_a_layernorm.weight", d.kv_lora_rank);
  a->wkv_b = w.linear(p + ".kv_b_proj", c.n_heads * (d.qk_nope + d.v_dim), d.kv_lora_rank);
  a->wo = w.linear(p + ".o_proj", c.dim, c.n_heads * d.v_dim);
  a->rope = make_rope_table(c.rope, d.qk_rope);
  return a;
}

struct MoeDims {
  GroupedRouteParams route;
  int64_t moe_hidden, n_shared, first_dense;
};

MoeDims read_moe_dims(const ModelConfig& c) {
  ConfigReader r = c.reader();
  MoeDims m;
  GroupedRouteParams& g = m.route;
  g.n_experts = r.get_pos_int("n_routed_experts");
  g.k = r.get_pos_int("num_experts_per_tok");
  g.n_group = r.has("n_group") ? r.get_pos_int("n_group") : 1;
  g.topk_group = r.has("topk_group") ? r.get_pos_int("topk_group") : 1;
  g.renorm = r.get_bool("norm_topk_prob", true);
  g.scaling = float(r.get_float("routed_scaling_factor", 1.0));
  m.moe_hidden = r.get_pos_int("moe_intermediate_size");
  m.n_shared = r.get_int("n_shared_experts", 0);
  m.first_dense = r.get_int("first_k_dense_replace", 0);
  if (g.n_experts % g.n_group != 0)
    fail(c.path, ": n_routed_experts (", g.n_experts, ") is not divisible by n_group (", g.n_group, ")");
  const int64_t per_group = g.n_experts / g.n_group;
  if (per_group < 2)
    fail(c.path, ": n_routed_experts / n_group = ", per_group, "; groups are scored by their top-2 experts");
  if (g.topk_group > g.n_group) fail(c.path, ": topk_group (", g.topk_group, ") > n_group (", g.n_group, ")");
  if (g.k > g.topk_group * per_group)
    fail(c.path, ": num_experts_per_tok (", g.k, ") > experts in the topk_group kept groups (",
         g.topk_group * per_group, ")");
  if (!(g.scaling > 0.0f) || !std::isfinite(g.scaling))
    fail(c.path, ": routed_scaling_factor must be a positive number");
  if (m.n_shared < 0) fail(c.path, ": n_shared_experts must be >= 0");
  // The shared experts form one MLP of n_shared * moe_intermediate_size; keep that in range.
  if (m.n_shared > (int64_t(1) << 31) / m.moe_hidden)
    fail(c.path, ": n_shared_experts (", m.n_shared, ") x moe_intermediate_size (", m.moe_hidden,
         ") is out of range");
  if (m.first_dense < 0) fail(c.path, ": first_k_dense_replace must be >= 0");
  const std::string method = r.get_string("topk_method", "noaux_tc");
  if (method != "noaux_tc") fail(c.path, ": unsupported topk_method '", method, "' (noaux_tc)");
  const std::string scoring = r.get_string("scoring_func", "sigmoid");
  if (scoring != "sigmoid") fail(c.path, ": unsupported scoring_func '", scoring, "' (sigmoid)");
  const std::string act = r.get_string("hidden_act", "silu");
  if (act != "silu") fail(c.path, ": unsupported hidden_act '", act, "' (silu)");
  return m;
}

}  // namespace

void build_deepseek_v3(Model& m, const WeightLoader& w) {
  const ModelConfig& c = m.cfg;
  const MlaDims mla = read_mla_dims(c);
  const MoeDims moe_dims = read_moe_dims(c);
  const int64_t n_experts = moe_dims.route.n_experts;
  if (moe_dims.first_dense > 0 && c.hidden_dim <= 0)
    fail(c.path, ": intermediate_size must be positive for the first_k_dense_replace dense layers");
  load_embeddings_and_head(m, w);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    Layer layer;
    load_layer_norms(layer, w, p, c.dim);
    layer.mixer = load_mla(w, p + ".self_attn", mla);
    if (i < moe_dims.first_dense) {
      layer.ffn = load_dense_mlp(w, p + ".mlp", c.hidden_dim);
    } else {
      std::vector<float> bias = w.vec(p + ".mlp.gate.e_score_correction_bias", n_experts);
      RouterSpec router = make_router(RouteKind::SigmoidGrouped);
      router.grouped = moe_dims.route;
      router.bias = std::move(bias);
      auto moe = load_moe(w, p + ".mlp", "gate", n_experts, moe_dims.route.k, moe_dims.moe_hidden, std::move(router));
      if (moe_dims.n_shared > 0)
        moe->shared.push_back(
            load_swiglu(w, p + ".mlp.shared_experts", c.dim, moe_dims.moe_hidden * moe_dims.n_shared));
      layer.ffn = std::move(moe);
    }
    m.layers.push_back(std::move(layer));
  }
}

}  // namespace moeflux
