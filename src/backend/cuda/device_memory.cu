#include "backend/cuda/device_memory.cuh"

#include "backend/cuda/check.cuh"
#include "backend/cuda/launch.cuh"

namespace moeflux::cuda {

int64_t& launch_count() {
  static int64_t n = 0;
  return n;
}

bool& overlap_launches() {
  static bool on = false;
  return on;
}

DevicePool::~DevicePool() {
  for (auto& [p, n] : size_) cudaFree(p);
}

void* DevicePool::get(size_t bytes) {
  size_t n = 256;
  while (n < bytes) n *= 2;
  std::lock_guard<std::mutex> lock(mu_);
  auto& list = free_[n];
  if (!list.empty()) {
    void* p = list.back();
    list.pop_back();
    return p;
  }
  void* p = nullptr;
  MF_CUDA(cudaMalloc(&p, n));
  size_[p] = n;
  held_ += n;
  return p;
}

void DevicePool::put(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  free_[size_.at(p)].push_back(p);
}

PinnedBuffer::~PinnedBuffer() { cudaFreeHost(p_); }

void* PinnedBuffer::grow(size_t bytes) {
  if (bytes <= bytes_) return p_;
  MF_CUDA(cudaFreeHost(p_));
  p_ = nullptr, bytes_ = 0;
  MF_CUDA(cudaMallocHost(&p_, bytes));
  bytes_ = bytes;
  return p_;
}

Mirror::~Mirror() {
  for (auto& [p, e] : map_) cudaFree(e.dev);
}

const void* Mirror::get(const void* p, size_t bytes) {
  if (!p) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(p);
  if (it != map_.end() && it->second.bytes >= bytes) return it->second.dev;
  if (it != map_.end()) {  // the same address seen with fewer bytes: copy the longer extent
    MF_CUDA(cudaFree(it->second.dev));
    bytes_ -= it->second.bytes;
    map_.erase(it);
  }
  void* d = nullptr;
  MF_CUDA(cudaMalloc(&d, bytes));
  MF_CUDA(cudaMemcpy(d, p, bytes, cudaMemcpyHostToDevice));
  map_[p] = Entry{d, bytes};
  bytes_ += bytes;
  return d;
}

}  // namespace moeflux::cuda
