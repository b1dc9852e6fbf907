// GpuExperts: the GPU tier of expert streaming (--gpu-expert-cache): expert records that a pack
// streams, kept in a device arena of equal slots, the least recently used out (ExpertSlotMap),
// filled from the host expert cache on a copy stream of their own: directly from the cache's
// buffers, which it page-locks (HostPinner), or through pinned staging buffers where that fails.
// The op computes a step's hits at once and its misses once wait_copies() has made the
// compute stream wait for their copies. Copies placed in the background (a miss the CPU
// computes, kept for later steps; the next layer's experts in prefill) are waited for only by
// a later hit on their slot, and wait themselves for the compute stream only where they
// refill a slot that the current step's kernels read.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <span>
#include <vector>

#include "backend/expert_slot_map.h"
#include "backend/expert_source.h"

namespace moeflux::cuda {

struct GpuExpertStats {
  SlotStats slots;
  uint64_t bytes_copied = 0;
  uint64_t bytes_staged = 0;  // ... of them through the staging buffers
  double copy_wait_s = 0;     // host time waiting for the host cache's reads and free staging
  double copy_s = 0;          // device time of the waited copies (first issued to last done)
  uint64_t bytes_timed = 0;   // ... and their bytes
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
  // Whether (layer, expert) has a slot (no use is recorded).
  bool resident(int layer, int expert);
  // Its slot's bytes on the device, or null. The copy into it may still be in flight
  // (copies_idle).
  const uint8_t* slot_data(int layer, int expert);
  // Called for each record a miss evicts, before the copy that overwrites its slot is issued.
  // The copy does not wait for what the hook queues on the compute stream: the hook's caller
  // makes sure no kernel reads the slot in between (slots read by the layer in flight wait
  // through their epoch; a step's end has none in flight).
  void set_evict_hook(std::function<void(int layer, int expert)> hook) { evict_hook_ = std::move(hook); }
  // Page-locks (and maps) the host memory of src's records, once.
  void pin_source(ExpertSource& src);
  // Whether every copy issued so far is done (asks the device; does not wait).
  bool copies_idle();
  // A new layer's step: the kernels of earlier steps are done (the op waited for them), so
  // their slots can be refilled without waiting for the compute stream.
  void begin_step() { ++epoch_; }

  struct Placed {
    std::vector<const uint8_t*> at;  // each expert's record on the device
    std::vector<bool> hit;           // false: its copy was issued now
    std::vector<ExpertRef> held;     // host records being copied: keep until the copies are done
  };
  // The records of `experts` (distinct, of source layer `layer`, at most slots()), `bytes[i]`
  // long each: hits where they are, misses read through `src` and copied into their slots on
  // the copy stream. The compute stream waits here for earlier background copies that a hit
  // needs. background: no one waits for these copies now (wait_copies() does not cover them;
  // their host records are held here until settle()). hold = false: the caller keeps the
  // records in host memory until the copies are done (it holds them for good), and none are
  // held here. scan: a prefill's (ExpertSlotMap::place).
  // An error reading one leaves it out of the cache and is raised.
  Placed place(ExpertSource& src, int layer, std::span<const int32_t> experts, std::span<const size_t> bytes,
               bool background = false, bool hold = true, bool scan = false);
  // The compute stream waits (on the device) for the copies place() issued, background ones
  // excepted.
  void wait_copies();
  // Waits for the background copies of held records and lets those go (the end of a step:
  // the host cache may not outlive the step).
  void settle();
  // After the host has seen the compute stream pass wait_copies(): the device time of the
  // waited copies since the last call, and their bytes (0, 0: none).
  std::pair<double, uint64_t> take_copy_time();

  GpuExpertStats stats() const;

 private:
  static constexpr int kStaging = 4;  // pinned staging buffers in flight
  ExpertSlotMap map_;
  size_t extent_;
  uint8_t* arena_ = nullptr;
  uint8_t* staging_ = nullptr;  // kStaging x extent, pinned
  cudaStream_t compute_, copy_ = nullptr;
  cudaEvent_t staging_free_[kStaging] = {};
  cudaEvent_t compute_mark_ = nullptr, copies_done_ = nullptr, background_done_ = nullptr;
  cudaEvent_t timed_start_ = nullptr, timed_end_ = nullptr;
  std::vector<int64_t> background_slots_;  // slots whose background copy may be in flight
  std::vector<ExpertRef> background_held_;  // their host records
  std::vector<uint64_t> slot_epoch_;       // the step whose kernels last read each slot
  uint64_t epoch_ = 1;
  int next_staging_ = 0;
  bool pending_ = false, timing_ = false;
  uint64_t timed_bytes_ = 0;
  GpuExpertStats st_;
  ExpertSource* pinned_src_ = nullptr;
  std::function<void(int, int)> evict_hook_;
};

}  // namespace moeflux::cuda
