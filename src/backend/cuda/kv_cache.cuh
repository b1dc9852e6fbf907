// The KV cache of a GQA layer in device memory: keys and values (len, n_kv_heads, head_dim),
// f32, grown by doubling. Saved and restored through host copies (LayerState::buffers).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "backend/state.h"

namespace moeflux::cuda {

class KvCacheDev final : public LayerState {
 public:
  KvCacheDev(int64_t n_kv_heads, int64_t head_dim, cudaStream_t s) : row_(n_kv_heads * head_dim), stream_(s) {}
  ~KvCacheDev() override;
  void clear() override { len_ = 0; }
  size_t bytes() const override { return size_t(2 * len_ * row_) * sizeof(float); }
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
  int64_t row_, len_ = 0, cap_ = 0;
  float *k_ = nullptr, *v_ = nullptr;
  cudaStream_t stream_;
  std::vector<float> hk_, hv_;
};

}  // namespace moeflux::cuda
