// Shared loaders for architecture files.
#include "model/archs/common.h"

namespace moeflux {

void load_embeddings_and_head(Model& m, const WeightLoader& w) {
  const ModelConfig& c = m.cfg;
  m.embed = w.linear("model.embed_tokens", c.vocab_size, c.dim);
  if (c.tie_embeddings && !w.has("lm_head.weight")) m.lm_head = m.embed;
  else m.lm_head = w.linear("lm_head", c.vocab_size, c.dim);
  m.final_norm = w.vec("model.norm.weight", c.dim);
}

std::unique_ptr<GqaAttention> load_gqa_attention(const WeightLoader& w, const std::string& prefix,
                                                 bool qk_norm, bool gated) {
  const ModelConfig& c = w.config();
  auto a = std::make_unique<GqaAttention>();
  a->dim = c.dim;
  a->n_heads = c.n_heads;
  a->n_kv_heads = c.n_kv_heads;
  a->head_dim = c.head_dim;
  a->norm_eps = float(c.norm_eps);
  a->gated = gated;
  a->wq = w.linear(prefix + ".q_proj", c.n_heads * c.head_dim * (gated ? 2 : 1), c.dim);
  a->wk = w.linear(prefix + ".k_proj", c.n_kv_heads * c.head_dim, c.dim);
  a->wv = w.linear(prefix + ".v_proj", c.n_kv_heads * c.head_dim, c.dim);
  a->wo = w.linear(prefix + ".o_proj", c.dim, c.n_heads * c.head_dim);
  if (qk_norm) {
    a->q_norm = w.vec(prefix + ".q_norm.weight", c.head_dim);
    a->k_norm = w.vec(prefix + ".k_norm.weight", c.head_dim);
  }
  a->rope = make_rope_table(c.rope, c.head_dim);
  return a;
}

SwiGlu load_swiglu(const WeightLoader& w, const std::string& prefix, int64_t dim, int64_t hidden,
                   SwiGluNames n) {
  SwiGlu s;
  s.gate = w.linear(prefix + "." + n.gate, hidden, dim);
  s.up = w.linear(prefix + "." + n.up, hidden, dim);
  s.down = w.linear(prefix + "." + n.down, dim, hidden);
  return s;
}

std::vector<SwiGlu> load_experts(const WeightLoader& w, const std::string& moe, int64_t n,
                                 int64_t dim, int64_t hidden, SwiGluNames names) {
  auto g = w.expert_linears(moe, names.gate, n, hidden, dim);
  auto u = w.expert_linears(moe, names.up, n, hidden, dim);
  auto d = w.expert_linears(moe, names.down, n, dim, hidden);
  std::vector<SwiGlu> out(static_cast<size_t>(n));
  for (size_t e = 0; e < size_t(n); ++e) out[e] = SwiGlu{g[e], u[e], d[e]};
  return out;
}

std::unique_ptr<DenseMlp> load_dense_mlp(const WeightLoader& w, const std::string& prefix, int64_t hidden) {
  auto d = std::make_unique<DenseMlp>();
  d->dim = w.config().dim;
  d->mlp = load_swiglu(w, prefix, d->dim, hidden);
  return d;
}

std::unique_ptr<MoeFfn> load_moe(const WeightLoader& w, const std::string& moe, const std::string& router,
                                 int64_t n_experts, int64_t k, int64_t hidden, RouterSpec route, SwiGluNames names) {
  auto f = std::make_unique<MoeFfn>();
  f->dim = w.config().dim;
  f->n_experts = n_experts;
  f->n_experts_active = k;
  f->router = w.linear(moe + "." + router, n_experts, f->dim);
  f->route = std::move(route);
  f->route.n_experts = n_experts;
  f->route.k = k;
  f->experts = load_experts(w, moe, n_experts, f->dim, hidden, names);
  f->prefix = moe;
  return f;
}

RouterSpec make_router(RouteKind kind, bool renorm) {
  RouterSpec r;
  r.kind = kind;
  r.renorm = renorm;
  return r;
}

void load_layer_norms(Layer& layer, const WeightLoader& w, const std::string& prefix, int64_t dim) {
  layer.attn_norm = w.vec(prefix + ".input_layernorm.weight", dim);
  layer.ffn_norm = w.vec(prefix + ".post_attention_layernorm.weight", dim);
}

}  // namespace moeflux
