// A growing per-position cache in device memory: two f32 arrays (len, row_a) and (len, row_b),
// grown by doubling. GQA: keys and values (n_kv_heads * head_dim each); MLA: the latent c
// (kv_lora_rank) and the roped k_pe (qk_rope_dim). Saved and restored through host copies
// (LayerState::buffers).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "backend/state.h"

namespace moeflux::cuda {

class KvCacheDev final : public LayerState {
 public:
  KvCacheDev(int64_t row_a, int64_t row_b, cudaStream_t s, const char* name_a = "k", const char* name_b = "v")
      : row_(row_a), row_b_(row_b), names_{name_a, name_b}, stream_(s) {}
  ~KvCacheDev() override;
  void clear() override { len_ = 0; }
  size_t bytes() const override { return size_t(len_ * (row_ + row_b_)) * sizeof(float); }
  // Copies the cache to host vectors (after the stream's work so far) and returns them.
  std::vector<StateBuffer> buffers() override;
  // Copies the host vectors back (their length sets the cache's).
  void buffers_written() override;
  bool truncate(int64_t len) override {
    len_ = std::min(len_, len);
    return true;
  }

  int64_t len() const { return len_; }
  int64_t capacity() const { return cap_; }
  // Room for n positions (keeps the first len()).
  void reserve(int64_t n);
  // n more positions are now in the cache.
  void grew(int64_t n) { len_ += n; }
  float* k() const { return k_; }
  float* v() const { return v_; }

 private:
  int64_t row_, row_b_, len_ = 0, cap_ = 0;
  const char* names_[2];
  float *k_ = nullptr, *v_ = nullptr;
  cudaStream_t stream_;
  std::vector<float> hk_, hv_;
};

}  // namespace moeflux::cuda
