// Per-sequence, per-layer state of the mixers (KV cache, latent cache, recurrent state), as
// the host backends keep it: f32 vectors in host memory. A backend allocates the state of a
// layer (Backend::make_state) and is the only one to read or write it in its ops; a
// sequence is saved and restored through buffers().
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace moeflux {

// One named f32 buffer of a LayerState. `grows`: its length follows the sequence (a KV
// cache); otherwise it has a fixed size set by the Mixer (a recurrent or conv state).
struct StateBuffer {
  const char* name;
  std::vector<float>* data;
  bool grows;
};

class LayerState {
 public:
  virtual ~LayerState() = default;
  virtual void clear() = 0;
  virtual size_t bytes() const = 0;  // memory held for the sequence so far
  // The whole state as f32 buffers, so that a sequence can be saved and restored: restoring
  // resizes each growing buffer to the saved length and copies the values back.
  virtual std::vector<StateBuffer> buffers() = 0;
  // Called after the caller wrote into the vectors of buffers() (a restore), for a state that
  // keeps its values elsewhere (device memory) and must take them from those vectors.
  virtual void buffers_written() {}
  // Keeps the first `len` positions (len <= the positions held). False, with the state
  // unchanged, for a state that cannot go back (a recurrent state: its owner restores a
  // checkpoint instead).
  virtual bool truncate(int64_t len) { return false; }
};

// GQA: keys and values of every position so far.
class KvCache : public LayerState {
 public:
  KvCache(int64_t n_kv_heads, int64_t k_dim, int64_t v_dim) : n_kv_(n_kv_heads), kd_(k_dim), vd_(v_dim) {}
  void clear() override { k.clear(), v.clear(); }
  size_t bytes() const override { return (k.size() + v.size()) * sizeof(float); }
  std::vector<StateBuffer> buffers() override { return {{"k", &k, true}, {"v", &v, true}}; }
  bool truncate(int64_t len) override {
    k.resize(size_t(len * n_kv_ * kd_)), v.resize(size_t(len * n_kv_ * vd_));
    return true;
  }
  // Cached positions; derived from k so that a restored cache needs nothing else.
  int64_t len() const { return int64_t(k.size()) / (n_kv_ * kd_); }
  std::vector<float> k;  // (len, n_kv_heads, k_dim)
  std::vector<float> v;  // (len, n_kv_heads, v_dim)
  int64_t n_kv_, kd_, vd_;
};

// MLA: per position only kv_a_layernorm(c) and the roped shared k_pe.
class LatentCache : public LayerState {
 public:
  LatentCache(int64_t rank, int64_t rope_dim) : rank_(rank), rope_dim_(rope_dim) {}
  void clear() override { c.clear(), k_pe.clear(); }
  size_t bytes() const override { return (c.size() + k_pe.size()) * sizeof(float); }
  std::vector<StateBuffer> buffers() override { return {{"c", &c, true}, {"k_pe", &k_pe, true}}; }
  bool truncate(int64_t len) override {
    c.resize(size_t(len * rank_)), k_pe.resize(size_t(len * rope_dim_));
    return true;
  }
  // Cached positions; derived from c so that a restored cache needs nothing else.
  int64_t len() const { return int64_t(c.size()) / rank_; }
  std::vector<float> c;     // (len, kv_lora_rank), after kv_a_layernorm
  std::vector<float> k_pe;  // (len, qk_rope_head_dim), roped (de-interleaved when rope_interleave)
  int64_t rank_, rope_dim_;
};

// GatedDeltaNet: fixed size, independent of the sequence length.
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

}  // namespace moeflux
