// The CPU backend's block ops (backend/blocks.h) on host memory: one file each
// (gqa_attention.cpp, mla_attention.cpp, gated_delta_net.cpp, moe.cpp), built from the
// optimised ops of cpu_ops.h.
#pragma once
#include <cstdint>

#include <span>

#include "backend/backend.h"
#include "backend/blocks.h"
#include "backend/expert_source.h"
#include "backend/state.h"

namespace moeflux::cpu {

// Decisions of the MoE op that depend on the machine (CpuBackend's options).
struct MoePolicy {
  bool fused_experts = true;  // one token's experts and combine in one parallel region
};

void gqa_attention(const GqaSpec& a, const float* x, int64_t T, int64_t pos0, KvCache& kv, float* out);
// Several sequences' rows of x (seqs: rows and KvCache states): the projections over all rows
// at once, then each sequence's norms, RoPE, cache append and attention.
void gqa_attention_seqs(const GqaSpec& a, const float* x, std::span<const SeqRows> seqs, float* out);
void mla_attention(const MlaSpec& a, const float* x, int64_t T, int64_t pos0, LatentCache& lc, float* out);
void gated_delta_net(const GdnSpec& a, const float* x, int64_t T, GdnState& s, float* out);
// out (T, dim) = the SwiGLU MLP of each row of x.
void swiglu(const SwiGlu& s, const float* x, int64_t T, float* out);
void moe(const MoeSpec& m, const float* x, int64_t T, float* out, const MoePolicy& policy);
// Routes x (T, dim): ids and weights (T, k).
void route_tokens(const MoeSpec& m, const float* x, int64_t T, int32_t* ids, float* weights);
// Rewrites expert e's eligible weights in `record` (a copy of its record, file order) into the
// group-lane layout, on the calling thread.
void expert_to_lanes(const MoeSpec& m, int expert, uint8_t* record);

}  // namespace moeflux::cpu
