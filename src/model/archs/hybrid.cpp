// Hybrid (GatedDeltaNet + gated attention) layer schedule, norm convention and shared loaders.
#include "model/archs/hybrid.h"

#include <algorithm>

#include "core/error.h"
#include "backend/ref/ref.h"

namespace moeflux {

namespace {

void add_one(std::vector<float>& v) {
  for (auto& x : v) x += 1.0f;
}

// mlx-lm's conversion stacks the experts into switch_mlp, stores conv1d weights as [C, K, 1]
// and folds the 1 into the norms in one step, and writes `quantization` when it quantises; any
// of these marks a checkpoint whose norms already hold 1 + w.
// A pack records its source's layout (moeflux_source_layout), since converting quantises.
bool mlx_layout(const WeightLoader& w, const std::vector<bool>& linear) {
  const std::string layout = w.config().reader().get_string("moeflux_source_layout", "");
  if (!layout.empty()) return layout == "mlx";
  if (w.config().quant.kind == QuantConfig::Kind::Affine) return true;
  for (size_t i = 0; i < linear.size(); ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    if (w.has(p + ".mlp.switch_mlp.gate_proj.weight")) return true;
    const TensorInfo* conv = w.store().find(p + ".linear_attn.conv1d.weight");
    if (linear[i] && conv && conv->shape.size() == 3 && conv->shape[2] == 1 && conv->shape[1] > 1) return true;
  }
  return false;
}

std::unique_ptr<GatedDeltaNet> load_gdn(const WeightLoader& w, const HybridConfig& h, const std::string& prefix,
                                        GdnProjLoader proj) {
  const ModelConfig& c = w.config();
  auto g = std::make_unique<GatedDeltaNet>();
  g->dim = c.dim;
  g->n_k_heads = h.n_k_heads;
  g->n_v_heads = h.n_v_heads;
  g->k_dim = h.k_dim;
  g->v_dim = h.v_dim;
  g->conv_kernel = h.conv_kernel;
  g->norm_eps = float(c.norm_eps);
  g->in_proj = proj(w, h, prefix);
  std::vector<int> seen(static_cast<size_t>(g->proj_dim()), 0);
  for (const auto& p : g->in_proj) {
    MF_ASSERT(int64_t(p.dst.size()) == p.w.rows);
    for (int32_t d : p.dst) {
      MF_ASSERT(d >= 0 && d < g->proj_dim());
      ++seen[size_t(d)];
    }
  }
  for (int s : seen) MF_ASSERT(s == 1);
  // Depthwise conv weight: [C, 1, K] in Hugging Face checkpoints, [C, K, 1] from mlx-lm; both
  // hold element (c, k) at c * K + k.
  const std::string conv = prefix + ".conv1d.weight";
  const int64_t C = g->conv_dim(), K = h.conv_kernel;
  const TensorInfo& ct = w.store().get(conv);
  const bool mlx_shape = ct.shape == std::vector<int64_t>{C, K, 1};
  g->conv_w = w.tensor_f32(conv, mlx_shape ? std::vector<int64_t>{C, K, 1} : std::vector<int64_t>{C, 1, K});
  g->A_log = w.vec(prefix + ".A_log", h.n_v_heads);
  g->dt_bias = w.vec(prefix + ".dt_bias", h.n_v_heads);
  g->norm = w.vec(prefix + ".norm.weight", h.v_dim);
  g->out_proj = w.linear(prefix + ".out_proj", c.dim, g->value_dim());
  return g;
}

}  // namespace

HybridConfig read_hybrid_config(const WeightLoader& w) {
  const ModelConfig& c = w.config();
  ConfigReader r = c.reader();
  HybridConfig h;
  if (r.has("layer_types")) {
    const auto types = r.get_string_list("layer_types");
    if (int64_t(types.size()) != c.n_layers)
      fail(c.path, ": layer_types has ", types.size(), " entries but num_hidden_layers is ", c.n_layers);
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] != "linear_attention" && types[i] != "full_attention")
        fail(c.path, ": layer_types[", i, "] is '", types[i], "'; expected 'linear_attention' or 'full_attention'");
      h.linear.push_back(types[i] == "linear_attention");
    }
  } else {  // transformers' default schedule: full attention every full_attention_interval layers
    const int64_t interval = r.has("full_attention_interval") ? r.get_pos_int("full_attention_interval") : 4;
    for (int64_t i = 0; i < c.n_layers; ++i) h.linear.push_back((i + 1) % interval != 0);
  }
  if (r.get_string("hidden_act", "silu") != "silu")
    fail(c.path, ": hidden_act '", r.get_string("hidden_act", ""), "' is not supported (only silu)");
  if (r.get_bool("attention_bias", false)) fail(c.path, ": attention_bias = true is not supported");
  if (std::find(h.linear.begin(), h.linear.end(), true) != h.linear.end()) {
    h.n_k_heads = r.get_pos_int("linear_num_key_heads");
    h.n_v_heads = r.get_pos_int("linear_num_value_heads");
    h.k_dim = r.get_pos_int("linear_key_head_dim");
    h.v_dim = r.get_pos_int("linear_value_head_dim");
    h.conv_kernel = r.get_pos_int("linear_conv_kernel_dim");
    if (h.n_v_heads % h.n_k_heads != 0)
      fail(c.path, ": linear_num_value_heads (", h.n_v_heads, ") is not a multiple of linear_num_key_heads (",
           h.n_k_heads, ")");
  }
  h.norms_hold_one_plus_w = mlx_layout(w, h.linear);
  return h;
}

void build_hybrid(Model& m, const WeightLoader& w, GdnProjLoader proj, HybridFfnLoader ffn) {
  ModelConfig& c = m.cfg;
  // transformers defaults partial_rotary_factor to 0.25 for these architectures.
  auto sets_prf = [&](const char* key) {
    auto it = c.raw.find(key);
    return it != c.raw.end() && it->is_object() && it->contains("partial_rotary_factor");
  };
  if (!c.raw.contains("partial_rotary_factor") && !sets_prf("rope_parameters") && !sets_prf("rope_scaling"))
    c.rope.partial_rotary_factor = 0.25;
  const HybridConfig h = read_hybrid_config(w);
  auto norm = [&](std::vector<float>& v) {
    if (!h.norms_hold_one_plus_w) add_one(v);
  };
  load_embeddings_and_head(m, w);
  norm(m.final_norm);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    Layer layer;
    load_layer_norms(layer, w, p, c.dim);
    norm(layer.attn_norm);
    norm(layer.ffn_norm);
    if (h.linear[size_t(i)]) {
      layer.mixer = load_gdn(w, h, p + ".linear_attn", proj);
    } else {
      auto a = load_gqa_attention(w, p + ".self_attn", /*qk_norm=*/true, /*gated=*/true);
      norm(a->q_norm);
      norm(a->k_norm);
      layer.mixer = std::move(a);
    }
    layer.ffn = ffn(w, i, p + ".mlp");
    m.layers.push_back(std::move(layer));
  }
}

std::unique_ptr<MoeFfn> load_moe_gated_shared(const WeightLoader& w, const std::string& prefix, bool renorm) {
  const ModelConfig& c = w.config();
  ConfigReader r = c.reader();
  const int64_t n_experts = r.get_pos_int("num_experts");
  const int64_t k = r.get_pos_int("num_experts_per_tok");
  if (k > n_experts) fail(c.path, ": num_experts_per_tok (", k, ") > num_experts (", n_experts, ")");
  auto moe = load_moe(w, prefix, "gate", n_experts, k, r.get_pos_int("moe_intermediate_size"),
                      make_router(RouteKind::SoftmaxTopK, renorm));
  moe->shared.push_back(
      load_swiglu(w, prefix + ".shared_expert", c.dim, r.get_pos_int("shared_expert_intermediate_size")));
  moe->shared_gate = w.linear(prefix + ".shared_expert_gate", 1, c.dim);
  moe->has_shared_gate = true;
  return moe;
}

}  // namespace moeflux
