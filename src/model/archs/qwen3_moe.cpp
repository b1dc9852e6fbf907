// qwen3_moe (Qwen3-30B-A3B, Qwen3-235B-A22B): GQA with per-head q/k RMSNorm; softmax top-k
// router with optional renormalisation; dense MLP on `mlp_only_layers` and off the
// `decoder_sparse_step`.
#include <algorithm>

#include "core/error.h"
#include "model/archs/archs.h"
#include "model/archs/common.h"

namespace moeflux {

void build_qwen3_moe(Model& m, const WeightLoader& w) {
  const ModelConfig& c = m.cfg;
  ConfigReader r = c.reader();
  const int64_t n_experts = r.has("num_experts") ? r.get_pos_int("num_experts") : r.get_pos_int("num_local_experts");
  const int64_t k = r.get_pos_int("num_experts_per_tok");
  const int64_t moe_hidden = r.get_pos_int("moe_intermediate_size");
  const int64_t sparse_step = r.get_int("decoder_sparse_step", 1);
  const bool renorm = r.get_bool("norm_topk_prob", false);
  const auto mlp_only = r.get_int_list("mlp_only_layers");
  if (k > n_experts) fail(c.path, ": num_experts_per_tok (", k, ") > number of experts (", n_experts, ")");
  load_embeddings_and_head(m, w);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    Layer layer;
    load_layer_norms(layer, w, p, c.dim);
    layer.mixer = load_gqa_attention(w, p + ".self_attn", /*qk_norm=*/true);
    const bool dense = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end() ||
                       sparse_step <= 0 || (i + 1) % sparse_step != 0;
    if (dense)
      layer.ffn = load_dense_mlp(w, p + ".mlp", r.get_pos_int("intermediate_size"));
    else
      layer.ffn = load_moe(w, p + ".mlp", "gate", n_experts, k, moe_hidden,
                           make_router(RouteKind::SoftmaxTopK, renorm));
    m.layers.push_back(std::move(layer));
  }
}

}  // namespace moeflux
