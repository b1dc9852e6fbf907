// qwen3_5_moe_text (Qwen3.5-397B-A17B, Qwen3.6-35B-A3B, text model): hybrid of GatedDeltaNet
// and gated full attention (see hybrid.h) with separate GatedDeltaNet input projections
// in_proj_qkv / in_proj_z / in_proj_b / in_proj_a; every layer is a MoE with a gated shared
// expert whose router always renormalises its top-k weights.
#include <numeric>

#include "model/archs/archs.h"
#include "model/archs/hybrid.h"

namespace moeflux {

namespace {

std::vector<GdnProjection> separate_in_proj(const WeightLoader& w, const HybridConfig& h, const std::string& prefix) {
  const int64_t kd = h.n_k_heads * h.k_dim, vd = h.n_v_heads * h.v_dim, dim = w.config().dim;
  std::vector<GdnProjection> out;
  int64_t start = 0;
  for (auto [name, rows] : {std::pair<const char*, int64_t>{".in_proj_qkv", 2 * kd + vd},
                            {".in_proj_z", vd}, {".in_proj_b", h.n_v_heads}, {".in_proj_a", h.n_v_heads}}) {
    GdnProjection p;
    p.w = w.linear(prefix + name, rows, dim);
    p.dst.resize(static_cast<size_t>(rows));
    std::iota(p.dst.begin(), p.dst.end(), int32_t(start));
    start += rows;
    out.push_back(std::move(p));
  }
  return out;
}

std::unique_ptr<FeedForward> ffn(const WeightLoader& w, int64_t /*layer*/, const std::string& prefix) {
  return load_moe_gated_shared(w, prefix, /*renorm=*/true);
}

}  // namespace

void build_qwen3_5_moe_text(Model& m, const WeightLoader& w) { build_hybrid(m, w, separate_in_proj, ffn); }

}  // namespace moeflux
