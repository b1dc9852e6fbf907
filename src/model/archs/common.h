// Building blocks shared by architecture files: embeddings / head / final norm, GQA
// attention, SwiGLU MLPs and expert sets, read through a WeightLoader.
#pragma once
#include <memory>
#include <string>

#include "model/blocks/attention.h"
#include "model/blocks/ffn.h"
#include "model/weight_loader.h"

namespace moeflux {

// model.embed_tokens, lm_head (or the tied embedding), model.norm.
void load_embeddings_and_head(Model& m, const WeightLoader& w);

// `prefix` e.g. "model.layers.3.self_attn"; q_norm / k_norm read when qk_norm; `gated`: q_proj
// carries the output gate too (GqaAttention::gated).
std::unique_ptr<GqaAttention> load_gqa_attention(const WeightLoader& w, const std::string& prefix,
                                                 bool qk_norm, bool gated = false);

struct SwiGluNames {
  const char* gate = "gate_proj";
  const char* up = "up_proj";
  const char* down = "down_proj";
};

// prefix e.g. "model.layers.1.mlp" -> {prefix}.gate_proj ...
SwiGlu load_swiglu(const WeightLoader& w, const std::string& prefix, int64_t dim, int64_t hidden,
                   SwiGluNames names = {});

// n experts under the MoE prefix (per-expert or switch_mlp stacks).
std::vector<SwiGlu> load_experts(const WeightLoader& w, const std::string& moe, int64_t n,
                                 int64_t dim, int64_t hidden, SwiGluNames names = {});

// A dense SwiGLU MLP block under `prefix` (e.g. "model.layers.0.mlp").
std::unique_ptr<DenseMlp> load_dense_mlp(const WeightLoader& w, const std::string& prefix, int64_t hidden);

// A mixture of experts under `moe` with its router `{moe}.{router}` (n_experts, dim) and
// n_experts SwiGLU experts of `hidden`; shared experts are added by the caller. The router's
// n_experts and k are set from these.
std::unique_ptr<MoeFfn> load_moe(const WeightLoader& w, const std::string& moe, const std::string& router,
                                 int64_t n_experts, int64_t k, int64_t hidden, RouterSpec route,
                                 SwiGluNames names = {});

// A router of `kind` (n_experts and k are set by load_moe); renorm: SoftmaxTopK's.
RouterSpec make_router(RouteKind kind, bool renorm = false);

// The layer's two RMSNorm weights (input_layernorm, post_attention_layernorm).
void load_layer_norms(Layer& layer, const WeightLoader& w, const std::string& prefix, int64_t dim);

}  // namespace moeflux
