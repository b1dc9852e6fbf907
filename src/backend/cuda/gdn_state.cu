#include "backend/cuda/gdn_state.cuh"

#include "backend/cuda/check.cuh"

namespace moeflux::cuda {

GdnStateDev::GdnStateDev(int64_t conv_floats, int64_t recurrent_floats, cudaStream_t s)
    : conv_n_(conv_floats), rec_n_(recurrent_floats), stream_(s) {
  MF_CUDA(cudaMalloc(&conv_, size_t(std::max<int64_t>(conv_n_, 1)) * sizeof(float)));
  MF_CUDA(cudaMalloc(&rec_, size_t(rec_n_) * sizeof(float)));
  clear();
}

GdnStateDev::~GdnStateDev() {
  cudaFree(conv_);
  cudaFree(rec_);
}

void GdnStateDev::clear() {
  MF_CUDA(cudaMemsetAsync(conv_, 0, size_t(conv_n_) * sizeof(float), stream_));
  MF_CUDA(cudaMemsetAsync(rec_, 0, size_t(rec_n_) * sizeof(float), stream_));
}

std::vector<StateBuffer> GdnStateDev::buffers() {
  hconv_.resize(size_t(conv_n_));
  hrec_.resize(size_t(rec_n_));
  MF_CUDA(cudaMemcpyAsync(hconv_.data(), conv_, hconv_.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  MF_CUDA(cudaMemcpyAsync(hrec_.data(), rec_, hrec_.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  MF_CUDA(cudaStreamSynchronize(stream_));
  return {{"conv", &hconv_, false}, {"recurrent", &hrec_, false}};
}

void GdnStateDev::buffers_written() {
  MF_ASSERT(int64_t(hconv_.size()) == conv_n_ && int64_t(hrec_.size()) == rec_n_);
  MF_CUDA(cudaMemcpyAsync(conv_, hconv_.data(), hconv_.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  MF_CUDA(cudaMemcpyAsync(rec_, hrec_.data(), hrec_.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  MF_CUDA(cudaStreamSynchronize(stream_));
}

}  // namespace moeflux::cuda
