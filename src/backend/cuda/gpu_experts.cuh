// GpuExperts: the GPU tier of expert streaming (--gpu-expert-cache): expert records that a pack
// streams, kept in a device arena of equal slots, the least recently used out (ExpertSlotMap),
// filled from the host expert cache on a copy stream of their own: directly from the cache's
// buffers, which it page-locks (HostPinner), or through pinned staging buffers where that fails. The op computes a step's hits at once and its misses once wait_copies() has made the
// compute stream wait for their copies.
#pragma once
#include <cuda_runtime.h>

#include <span>
#include <vector>

#include "backend/expert_slot_map.h"
#include "backend/expert_source.h"

namespace moeflux::cuda {

struct GpuExpertStats {
  SlotStats slots;
  uint64_t bytes_copied = 0;
  uint64_t bytes_staged = 0;  // ... of them through the staging buffers
  double copy_wait_s = 0;  // host time waiting for the host cache's reads and free staging
};

class GpuExperts {
 public:
  // `slots` slots of `extent` bytes (a multiple of 256) for experts numbered [0, experts).
  // Error when the device memory cannot be had.
  GpuExperts(int64_t slots, size_t extent, int experts, cudaStream_t compute);
  ~GpuExperts();
  GpuExperts(const GpuExperts&) = delete;
  GpuExperts& operator=(const GpuExperts&) = delete;

  int64_t slots() const { return map_.slots(); }
  size_t extent() const { return extent_; }

  struct Placed {
    std::vector<const uint8_t*> at;  // each expert's record on the device
    std::vector<bool> hit;           // false: its copy was issued now
    std::vector<ExpertRef> held;     // host records being copied: keep until the copies are done
  };
  // The records of `experts` (distinct, of source layer `layer`, at most slots()), `bytes[i]`
  // long each: hits where they are, misses read through `src` and copied into their slots on
  // the copy stream. An error reading one leaves it out of the cache and is raised.
  Placed place(ExpertSource& src, int layer, std::span<const int32_t> experts, std::span<const size_t> bytes);
  // The compute stream waits (on the device) for the copies place() issued.
  void wait_copies();

  GpuExpertStats stats() const;

 private:
  static constexpr int kStaging = 4;  // pinned staging buffers in flight
  ExpertSlotMap map_;
  size_t extent_;
  uint8_t* arena_ = nullptr;
  uint8_t* staging_ = nullptr;  // kStaging x extent, pinned
  cudaStream_t compute_, copy_ = nullptr;
  cudaEvent_t staging_free_[kStaging] = {};
  cudaEvent_t compute_mark_ = nullptr, copies_done_ = nullptr;
  int next_staging_ = 0;
  bool pending_ = false;
  uint64_t bytes_copied_ = 0, bytes_staged_ = 0;
  ExpertSource* pinned_src_ = nullptr;
  double copy_wait_s_ = 0;
};

}  // namespace moeflux::cuda
