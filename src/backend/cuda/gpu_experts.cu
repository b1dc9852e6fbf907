// GpuExperts: slots on the device, copies on a copy stream from page-locked host records.
#include "backend/cuda/gpu_experts.cuh"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backend/cuda/check.cuh"
#include "core/error.h"

namespace moeflux::cuda {

namespace {

struct CudaPinner final : HostPinner {
  bool pin(void* p, size_t bytes) override {
    // Mapped too: a GPU tier may read a record in place (cuda_backend_impl.cuh: DeviceTier).
    if (cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped) == cudaSuccess) return true;
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
    : map_(slots, 1, experts), extent_(extent), compute_(compute), slot_epoch_(size_t(slots), 0) {
  if (cudaMalloc(&arena_, size_t(slots) * extent) != cudaSuccess) {
    cudaGetLastError();
    fail("--gpu-expert-cache: cannot allocate ", slots, " expert slots of ", extent, " bytes on the GPU");
  }
  MF_CUDA(cudaMallocHost(&staging_, kStaging * extent));
  MF_CUDA(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  for (cudaEvent_t& e : staging_free_) MF_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (cudaEvent_t* e : {&compute_mark_, &copies_done_, &background_done_})
    MF_CUDA(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  MF_CUDA(cudaEventCreate(&timed_start_));
  MF_CUDA(cudaEventCreate(&timed_end_));
}

GpuExperts::~GpuExperts() {
  if (copy_) cudaStreamSynchronize(copy_);
  for (cudaEvent_t e : staging_free_) cudaEventDestroy(e);
  for (cudaEvent_t e : {compute_mark_, copies_done_, background_done_, timed_start_, timed_end_}) cudaEventDestroy(e);
  if (copy_) cudaStreamDestroy(copy_);
  cudaFreeHost(staging_);
  cudaFree(arena_);
}

bool GpuExperts::resident(int layer, int expert) {
  map_.grow(layer + 1);
  return map_.slot_of(layer, expert) >= 0;
}

const uint8_t* GpuExperts::slot_data(int layer, int expert) {
  map_.grow(layer + 1);
  const int64_t s = map_.slot_of(layer, expert);
  return s < 0 ? nullptr : arena_ + size_t(s) * extent_;
}

void GpuExperts::pin_source(ExpertSource& src) {
  if (&src != pinned_src_) src.pin_host_memory(std::make_shared<CudaPinner>()), pinned_src_ = &src;
}

bool GpuExperts::copies_idle() {
  for (cudaEvent_t e : {copies_done_, background_done_}) {
    const cudaError_t q = cudaEventQuery(e);
    if (q == cudaErrorNotReady) return cudaGetLastError(), false;
    MF_CUDA(q);
  }
  return true;
}

GpuExperts::Placed GpuExperts::place(ExpertSource& src, int layer, std::span<const int32_t> experts,
                                     std::span<const size_t> bytes, bool background, bool hold, bool scan) {
  MF_ASSERT(experts.size() == bytes.size());
  map_.grow(layer + 1);
  const auto where = map_.place(layer, experts, scan);
  if (!background_slots_.empty()) {
    const cudaError_t q = cudaEventQuery(background_done_);
    if (q == cudaSuccess) background_slots_.clear(), background_held_.clear();
    else if (q == cudaErrorNotReady) cudaGetLastError();
    else MF_CUDA(q);
  }
  Placed out;
  std::vector<int32_t> missing;
  std::vector<size_t> missing_at;
  bool wait_background = false, refills_read_slot = false;
  for (size_t i = 0; i < experts.size(); ++i) {
    MF_ASSERT(bytes[i] <= extent_);
    const size_t slot = size_t(where[i].slot);
    out.at.push_back(arena_ + slot * extent_);
    out.hit.push_back(where[i].hit);
    if (!where[i].hit) {
      missing.push_back(experts[i]), missing_at.push_back(i);
      refills_read_slot |= slot_epoch_[slot] == epoch_;
      if (evict_hook_ && where[i].evicted_layer >= 0) evict_hook_(where[i].evicted_layer, where[i].evicted_expert);
    } else if (std::find(background_slots_.begin(), background_slots_.end(), where[i].slot) != background_slots_.end()) {
      wait_background = true;
    }
    if (!background) slot_epoch_[slot] = epoch_;
  }
  if (wait_background && !background) MF_CUDA(cudaStreamWaitEvent(compute_, background_done_));
  if (missing.empty()) return out;
  pin_source(src);
  // A refilled slot may still be read by this step's kernels, queued on the compute stream.
  if (refills_read_slot) {
    MF_CUDA(cudaEventRecord(compute_mark_, compute_));
    MF_CUDA(cudaStreamWaitEvent(copy_, compute_mark_));
  }
  if (!background && !timing_) MF_CUDA(cudaEventRecord(timed_start_, copy_)), timing_ = true;
  using Clock = std::chrono::steady_clock;
  size_t done = 0;  // misses whose copy is issued
  const auto finish = [&] {
    if (background) {
      MF_CUDA(cudaEventRecord(background_done_, copy_));
      for (size_t j = 0; j < done; ++j) background_slots_.push_back(where[missing_at[j]].slot);
    } else {
      MF_CUDA(cudaEventRecord(copies_done_, copy_));
      MF_CUDA(cudaEventRecord(timed_end_, copy_));
      pending_ = true;
    }
  };
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
        st_.bytes_copied += bytes[i];
        if (!background) timed_bytes_ += bytes[i];
        if (page_locked(host)) {
          st_.copy_wait_s += std::chrono::duration<double>(Clock::now() - t0).count();
          MF_CUDA(cudaMemcpyAsync(dst, host, bytes[i], cudaMemcpyHostToDevice, copy_));
          if (hold) (background ? background_held_ : out.held).push_back(std::move(refs[j]));
          ++done;
          continue;
        }
        uint8_t* stage = staging_ + size_t(next_staging_) * extent_;
        MF_CUDA(cudaEventSynchronize(staging_free_[next_staging_]));  // its previous copy is done
        st_.copy_wait_s += std::chrono::duration<double>(Clock::now() - t0).count();
        std::memcpy(stage, host, bytes[i]);
        refs[j].release();
        MF_CUDA(cudaMemcpyAsync(dst, stage, bytes[i], cudaMemcpyHostToDevice, copy_));
        MF_CUDA(cudaEventRecord(staging_free_[next_staging_], copy_));
        next_staging_ = (next_staging_ + 1) % kStaging;
        st_.bytes_staged += bytes[i];
        ++done;
      }
    }
  } catch (...) {
    cudaStreamSynchronize(copy_);  // the held records must outlive their copies
    for (size_t j = done; j < missing.size(); ++j) map_.drop(layer, missing[j]);  // never filled
    finish();
    throw;
  }
  finish();
  return out;
}

void GpuExperts::settle() {
  if (background_held_.empty()) return;  // copies of records their callers hold are waited for by no one
  if (cudaEventSynchronize(background_done_) != cudaSuccess) cudaStreamSynchronize(copy_);  // no throwing: end of a step
  background_slots_.clear(), background_held_.clear();
}

void GpuExperts::wait_copies() {
  if (!pending_) return;
  MF_CUDA(cudaStreamWaitEvent(compute_, copies_done_));
  pending_ = false;
}

std::pair<double, uint64_t> GpuExperts::take_copy_time() {
  if (!timing_) return {0.0, 0};
  float ms = 0;
  MF_CUDA(cudaEventSynchronize(timed_end_));
  MF_CUDA(cudaEventElapsedTime(&ms, timed_start_, timed_end_));
  const std::pair<double, uint64_t> r{double(ms) / 1e3, timed_bytes_};
  st_.copy_s += r.first, st_.bytes_timed += r.second;
  timing_ = false, timed_bytes_ = 0;
  return r;
}

GpuExpertStats GpuExperts::stats() const {
  GpuExpertStats s = st_;
  s.slots = map_.stats();
  return s;
}

}  // namespace moeflux::cuda
