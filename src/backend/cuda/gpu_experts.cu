// GpuExperts: slots on the device, copies on a copy stream from page-locked host records.
#include "backend/cuda/gpu_experts.cuh"

#include <chrono>
#include <cstring>

#include "backend/cuda/check.cuh"
#include "core/error.h"

namespace moeflux::cuda {

namespace {

struct CudaPinner final : HostPinner {
  bool pin(void* p, size_t bytes) override {
    if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) == cudaSuccess) return true;
    cudaGetLastError();
    return false;
  }
  void unpin(void* p) override {
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();  // the runtime may be gone at exit
  }
};

bool page_locked(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) return cudaGetLastError(), false;
  return a.type == cudaMemoryTypeHost;
}

}  // namespace

GpuExperts::GpuExperts(int64_t slots, size_t extent, int experts, cudaStream_t compute)
    : map_(slots, 1, experts), extent_(extent), compute_(compute) {
  if (cudaMalloc(&arena_, size_t(slots) * extent) != cudaSuccess) {
    cudaGetLastError();
    fail("--gpu-expert-cache: cannot allocate ", slots, " expert slots of ", extent, " bytes on the GPU");
  }
  MF_CUDA(cudaMallocHost(&staging_, kStaging * extent));
  MF_CUDA(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  for (cudaEvent_t& e : staging_free_) MF_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  MF_CUDA(cudaEventCreateWithFlags(&compute_mark_, cudaEventDisableTiming));
  MF_CUDA(cudaEventCreateWithFlags(&copies_done_, cudaEventDisableTiming));
}

GpuExperts::~GpuExperts() {
  if (copy_) cudaStreamSynchronize(copy_);
  for (cudaEvent_t e : staging_free_) cudaEventDestroy(e);
  cudaEventDestroy(compute_mark_);
  cudaEventDestroy(copies_done_);
  if (copy_) cudaStreamDestroy(copy_);
  cudaFreeHost(staging_);
  cudaFree(arena_);
}

GpuExperts::Placed GpuExperts::place(ExpertSource& src, int layer, std::span<const int32_t> experts,
                                     std::span<const size_t> bytes) {
  MF_ASSERT(experts.size() == bytes.size());
  map_.grow(layer + 1);
  const auto where = map_.place(layer, experts);
  Placed out;
  std::vector<int32_t> missing;
  std::vector<size_t> missing_at;
  for (size_t i = 0; i < experts.size(); ++i) {
    MF_ASSERT(bytes[i] <= extent_);
    out.at.push_back(arena_ + size_t(where[i].slot) * extent_);
    out.hit.push_back(where[i].hit);
    if (!where[i].hit) missing.push_back(experts[i]), missing_at.push_back(i);
  }
  if (missing.empty()) return out;
  if (&src != pinned_src_) src.pin_host_memory(std::make_shared<CudaPinner>()), pinned_src_ = &src;
  // A refilled slot may still be read by kernels queued earlier on the compute stream.
  MF_CUDA(cudaEventRecord(compute_mark_, compute_));
  MF_CUDA(cudaStreamWaitEvent(copy_, compute_mark_));
  using Clock = std::chrono::steady_clock;
  size_t done = 0;  // misses whose copy is issued
  try {
    const size_t win = std::max<size_t>(1, src.window(layer));
    for (size_t i0 = 0; i0 < missing.size(); i0 += win) {
      const std::span<const int32_t> part(missing.data() + i0, std::min(win, missing.size() - i0));
      std::vector<ExpertRef> refs = src.acquire(layer, part);
      for (size_t j = 0; j < part.size(); ++j) {
        const size_t i = missing_at[i0 + j];
        const auto t0 = Clock::now();
        const uint8_t* host = refs[j].wait();
        uint8_t* dst = const_cast<uint8_t*>(out.at[i]);
        if (page_locked(host)) {
          MF_CUDA(cudaMemcpyAsync(dst, host, bytes[i], cudaMemcpyHostToDevice, copy_));
          out.held.push_back(std::move(refs[j]));
          bytes_copied_ += bytes[i];
          ++done;
          continue;
        }
        uint8_t* stage = staging_ + size_t(next_staging_) * extent_;
        MF_CUDA(cudaEventSynchronize(staging_free_[next_staging_]));  // its previous copy is done
        copy_wait_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
        std::memcpy(stage, host, bytes[i]);
        refs[j].release();
        MF_CUDA(cudaMemcpyAsync(dst, stage, bytes[i], cudaMemcpyHostToDevice, copy_));
        MF_CUDA(cudaEventRecord(staging_free_[next_staging_], copy_));
        next_staging_ = (next_staging_ + 1) % kStaging;
        bytes_copied_ += bytes[i], bytes_staged_ += bytes[i];
        ++done;
      }
    }
  } catch (...) {
    cudaStreamSynchronize(copy_);  // the held records must outlive their copies
    for (size_t j = done; j < missing.size(); ++j) map_.drop(layer, missing[j]);  // never filled
    MF_CUDA(cudaEventRecord(copies_done_, copy_));
    pending_ = true;
    throw;
  }
  MF_CUDA(cudaEventRecord(copies_done_, copy_));
  pending_ = true;
  return out;
}

void GpuExperts::wait_copies() {
  if (!pending_) return;
  MF_CUDA(cudaStreamWaitEvent(compute_, copies_done_));
  pending_ = false;
}

GpuExpertStats GpuExperts::stats() const {
  return {map_.stats(), bytes_copied_, bytes_staged_, copy_wait_s_};
}

}  // namespace moeflux::cuda
