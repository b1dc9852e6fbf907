// GatedDeltaNet's per-sequence state in device memory: the conv window (conv_kernel - 1,
// conv_dim) and the recurrent state (n_v_heads, k_dim, v_dim), f32, fixed sizes. Saved and
// restored through host copies (LayerState::buffers).
#pragma once
#include <cuda_runtime.h>

#include <vector>

#include "backend/state.h"

namespace moeflux::cuda {

class GdnStateDev final : public LayerState {
 public:
  GdnStateDev(int64_t conv_floats, int64_t recurrent_floats, cudaStream_t s);
  ~GdnStateDev() override;
  void clear() override;  // zeros, queued on the stream
  size_t bytes() const override { return size_t(conv_n_ + rec_n_) * sizeof(float); }
  std::vector<StateBuffer> buffers() override;
  void buffers_written() override;
  float* conv() const { return conv_; }
  float* recurrent() const { return rec_; }

 private:
  int64_t conv_n_, rec_n_;
  float *conv_ = nullptr, *rec_ = nullptr;
  cudaStream_t stream_;
  std::vector<float> hconv_, hrec_;
};

}  // namespace moeflux::cuda
