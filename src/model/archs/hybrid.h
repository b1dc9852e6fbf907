// Shared by the hybrid architectures qwen3_next and qwen3_5_moe_text: the per-layer schedule
// of GatedDeltaNet and gated full attention (`layer_types`), the zero-centred norm convention,
// the GatedDeltaNet loader and the MoE with a sigmoid-gated shared expert. Each architecture
// file supplies only what differs: its GatedDeltaNet input projections and its FFN choice.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/archs/common.h"
#include "model/blocks/gated_delta_net.h"

namespace moeflux {

struct HybridConfig {
  std::vector<bool> linear;  // (n_layers): GatedDeltaNet layer, else gated full attention
  int64_t n_k_heads = 0, n_v_heads = 0, k_dim = 0, v_dim = 0, conv_kernel = 0;
  // Hugging Face checkpoints store the input / post-attention / final / q / k norms
  // zero-centred (the model multiplies by 1 + w); mlx-lm folds the 1 in when it converts.
  bool norms_hold_one_plus_w = false;
};

// Reads and validates the hybrid fields of config.json (Error naming the field) and decides
// the norm convention from the checkpoint (see hybrid.cpp).
HybridConfig read_hybrid_config(const WeightLoader& w);

// Input projections of the GatedDeltaNet at `prefix` ("model.layers.0.linear_attn").
using GdnProjLoader = std::vector<GdnProjection> (*)(const WeightLoader& w, const HybridConfig& h,
                                                     const std::string& prefix);
// Feed-forward of layer `layer` at `prefix` ("model.layers.0.mlp").
using HybridFfnLoader = std::unique_ptr<FeedForward> (*)(const WeightLoader& w, int64_t layer,
                                                         const std::string& prefix);

void build_hybrid(Model& m, const WeightLoader& w, GdnProjLoader proj, HybridFfnLoader ffn);

// Routed experts behind a softmax top-k router plus one shared expert scaled by
// sigmoid(shared_expert_gate x).
std::unique_ptr<MoeFfn> load_moe_gated_shared(const WeightLoader& w, const std::string& prefix, bool renorm);

}  // namespace moeflux
