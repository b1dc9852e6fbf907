// GatedDeltaNet linear attention (the "linear_attention" layers of qwen3_next / qwen3_5_moe).
// Per token: input projections to q|k|v (conv channels), z (output gate), b (beta logits),
// a (decay input); causal depthwise conv1d + SiLU over q|k|v; L2-normalised q, k per key head
// (q also scaled by 1/sqrt(k_dim)); the gated delta rule per value head (value heads
// n_v_heads / n_k_heads at a time share one key head); gated RMSNorm; out_proj.
#pragma once
#include <vector>

#include "model/model.h"

namespace moeflux {

// Recurrent state of one GatedDeltaNet layer: fixed size, independent of the sequence length.
class GdnState : public LayerState {
 public:
  GdnState(int64_t conv_rows, int64_t conv_dim, int64_t n_v_heads, int64_t k_dim, int64_t v_dim)
      : conv(static_cast<size_t>(conv_rows * conv_dim)), recurrent(static_cast<size_t>(n_v_heads * k_dim * v_dim)) {}
  void clear() override;
  size_t bytes() const override { return (conv.size() + recurrent.size()) * sizeof(float); }
  std::vector<StateBuffer> buffers() override { return {{"conv", &conv, false}, {"recurrent", &recurrent, false}}; }
  std::vector<float> conv;       // (conv_kernel - 1, conv_dim): the previous conv inputs, oldest first
  std::vector<float> recurrent;  // (n_v_heads, k_dim, v_dim): S of each value head
};

// One input projection; its output row r lands at dst[r] of the per-token vector
// [q (n_k_heads * k_dim) | k (same) | v (n_v_heads * v_dim) | z (same) | b (n_v_heads) | a (same)],
// so packed checkpoint layouts (qwen3_next's grouped in_proj_qkvz / in_proj_ba) and separate
// ones (qwen3_5_moe) run the same code. The projections cover that vector exactly once.
struct GdnProjection {
  QWeight w;                 // (rows, dim)
  std::vector<int32_t> dst;  // (rows)
};

struct GatedDeltaNet : Mixer {
  int64_t dim = 0, n_k_heads = 0, n_v_heads = 0, k_dim = 0, v_dim = 0, conv_kernel = 0;
  float norm_eps = 1e-6f;  // of the gated RMSNorm
  std::vector<GdnProjection> in_proj;
  std::vector<float> conv_w;   // (conv_dim, conv_kernel)
  std::vector<float> A_log;    // (n_v_heads)
  std::vector<float> dt_bias;  // (n_v_heads)
  std::vector<float> norm;     // (v_dim): gated RMSNorm weight (plain, not zero-centred)
  QWeight out_proj;            // (dim, n_v_heads * v_dim)

  int64_t key_dim() const { return n_k_heads * k_dim; }
  int64_t value_dim() const { return n_v_heads * v_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  int64_t proj_dim() const { return conv_dim() + value_dim() + 2 * n_v_heads; }

  std::unique_ptr<LayerState> make_state() const override {
    return std::make_unique<GdnState>(conv_kernel - 1, conv_dim(), n_v_heads, k_dim, v_dim);
  }
  // Recurrent over the T tokens (prefill is sequential in the reference path).
  void forward(const float* x, int64_t T, int64_t pos0, LayerState& st, float* out) const override;
};

}  // namespace moeflux
