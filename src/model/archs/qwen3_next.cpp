// qwen3_next (Qwen3-Next-80B-A3B): hybrid of GatedDeltaNet and gated full attention (see
// hybrid.h). GatedDeltaNet inputs come packed per key head: in_proj_qkvz rows are, for each
// key head, [q (k_dim) | k (k_dim) | v (r * v_dim) | z (r * v_dim)] with r = n_v_heads /
// n_k_heads value heads of that key head; in_proj_ba rows are, per key head, [b (r) | a (r)]
// (transformers' fix_query_key_value_ordering). FFN: MoE with a gated shared expert, or a
// dense MLP on `mlp_only_layers` and off the `decoder_sparse_step`.
#include <algorithm>

#include "model/archs/archs.h"
#include "model/archs/hybrid.h"

namespace moeflux {

namespace {

std::vector<GdnProjection> packed_in_proj(const WeightLoader& w, const HybridConfig& h, const std::string& prefix) {
  const int64_t r = h.n_v_heads / h.n_k_heads, kd = h.n_k_heads * h.k_dim, vd = h.n_v_heads * h.v_dim;
  const int64_t z0 = 2 * kd + vd, b0 = z0 + vd, a0 = b0 + h.n_v_heads;
  GdnProjection qkvz, ba;
  auto run = [](std::vector<int32_t>& dst, int64_t start, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst.push_back(int32_t(start + i));
  };
  for (int64_t g = 0; g < h.n_k_heads; ++g) {
    run(qkvz.dst, g * h.k_dim, h.k_dim);                // q of key head g
    run(qkvz.dst, kd + g * h.k_dim, h.k_dim);           // k of key head g
    run(qkvz.dst, 2 * kd + g * r * h.v_dim, r * h.v_dim);  // v of value heads g*r .. g*r+r-1
    run(qkvz.dst, z0 + g * r * h.v_dim, r * h.v_dim);   // z of the same value heads
    run(ba.dst, b0 + g * r, r);
    run(ba.dst, a0 + g * r, r);
  }
  const int64_t dim = w.config().dim;
  qkvz.w = w.linear(prefix + ".in_proj_qkvz", int64_t(qkvz.dst.size()), dim);
  ba.w = w.linear(prefix + ".in_proj_ba", int64_t(ba.dst.size()), dim);
  std::vector<GdnProjection> out;
  out.push_back(std::move(qkvz));
  out.push_back(std::move(ba));
  return out;
}

std::unique_ptr<FeedForward> ffn(const WeightLoader& w, int64_t layer, const std::string& prefix) {
  const ModelConfig& c = w.config();
  ConfigReader r = c.reader();
  const auto mlp_only = r.get_int_list("mlp_only_layers");
  const int64_t sparse_step = r.get_int("decoder_sparse_step", 1);
  const bool moe = std::find(mlp_only.begin(), mlp_only.end(), layer) == mlp_only.end() &&
                   r.get_int("num_experts", 0) > 0 && sparse_step > 0 && (layer + 1) % sparse_step == 0;
  if (moe) return load_moe_gated_shared(w, prefix, r.get_bool("norm_topk_prob", true));
  return load_dense_mlp(w, prefix, r.get_pos_int("intermediate_size"));
}

}  // namespace

void build_qwen3_next(Model& m, const WeightLoader& w) { build_hybrid(m, w, packed_in_proj, ffn); }

}  // namespace moeflux
