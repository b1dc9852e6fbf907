#include "backend/cuda/kv_cache.cuh"

#include <algorithm>

#include "backend/cuda/check.cuh"

namespace moeflux::cuda {

KvCacheDev::~KvCacheDev() {
  cudaFree(k_);
  cudaFree(v_);
}

void KvCacheDev::reserve(int64_t n) {
  if (n <= cap_) return;
  const int64_t cap = std::max<int64_t>({n, 2 * cap_, 256});
  float *k = nullptr, *v = nullptr;
  MF_CUDA(cudaMalloc(&k, size_t(cap * row_) * sizeof(float)));
  MF_CUDA(cudaMalloc(&v, size_t(cap * row_b_) * sizeof(float)));
  if (len_ > 0) {
    MF_CUDA(cudaMemcpyAsync(k, k_, size_t(len_ * row_) * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
    MF_CUDA(cudaMemcpyAsync(v, v_, size_t(len_ * row_b_) * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
  }
  MF_CUDA(cudaStreamSynchronize(stream_));  // the old buffers are free once the copies are done
  cudaFree(k_);
  cudaFree(v_);
  k_ = k, v_ = v, cap_ = cap;
}

std::vector<StateBuffer> KvCacheDev::buffers() {
  hk_.resize(size_t(len_ * row_));
  hv_.resize(size_t(len_ * row_b_));
  if (len_ > 0) {
    MF_CUDA(cudaMemcpyAsync(hk_.data(), k_, hk_.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    MF_CUDA(cudaMemcpyAsync(hv_.data(), v_, hv_.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  }
  MF_CUDA(cudaStreamSynchronize(stream_));
  return {{names_[0], &hk_, true}, {names_[1], &hv_, true}};
}

void KvCacheDev::buffers_written() {
  const int64_t n = int64_t(hk_.size()) / row_;
  if (hk_.size() % size_t(row_) || hv_.size() != size_t(n * row_b_))
    fail("restore: the cache's buffers hold ", hk_.size(), " and ", hv_.size(), " values, not whole positions");
  len_ = 0;
  reserve(n);
  if (n > 0) {
    MF_CUDA(cudaMemcpyAsync(k_, hk_.data(), hk_.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
    MF_CUDA(cudaMemcpyAsync(v_, hv_.data(), hv_.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  }
  MF_CUDA(cudaStreamSynchronize(stream_));
  len_ = n;
}

}  // namespace moeflux::cuda
