// mixtral (Mixtral-8x7B / 8x22B): GQA without q/k norms; router takes the top-k logits, then a
// softmax over those k; experts w1 (gate) / w3 (up) / w2 (down) under block_sparse_moe.
#include "core/error.h"
#include "model/archs/archs.h"
#include "model/archs/common.h"

namespace moeflux {

void build_mixtral(Model& m, const WeightLoader& w) {
  const ModelConfig& c = m.cfg;
  ConfigReader r = c.reader();
  const int64_t n_experts = r.get_pos_int("num_local_experts");
  const int64_t k = r.get_pos_int("num_experts_per_tok");
  const int64_t hidden = r.get_pos_int("intermediate_size");
  if (k > n_experts) fail(c.path, ": num_experts_per_tok (", k, ") > num_local_experts (", n_experts, ")");
  const int64_t window = r.get_int("sliding_window", 0);
  if (window < 0) fail(c.path, ": sliding_window must be positive or null");
  load_embeddings_and_head(m, w);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    Layer layer;
    load_layer_norms(layer, w, p, c.dim);
    auto attn = load_gqa_attention(w, p + ".self_attn", /*qk_norm=*/false);
    attn->window = window;
    layer.mixer = std::move(attn);
    layer.ffn = load_moe(
        w, p + ".block_sparse_moe", "gate", n_experts, k, hidden,
        make_router(RouteKind::TopKSoftmax),
        {"w1", "w3", "w2"});
    m.layers.push_back(std::move(layer));
  }
}

}  // namespace moeflux
