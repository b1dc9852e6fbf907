// ExpertSource: where the MoE op gets the bytes of experts that are not resident in the
// model's own weights (the host expert cache today, a GPU tier later). The op asks for the
// experts a step routes to, in windows the source can hold at once, and computes with each as
// it becomes ready; results do not depend on the order in which the bytes arrive.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/host_pinner.h"

namespace moeflux {

// One expert record pinned for the op's use; released (unpinned) when destroyed or release()d.
class ExpertRef {
 public:
  struct Impl {
    virtual ~Impl() = default;
    virtual bool ready() const = 0;
    virtual const uint8_t* wait() = 0;  // the record's bytes, or raises the read's Error
  };
  ExpertRef() = default;
  explicit ExpertRef(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  bool ready() const { return impl_->ready(); }
  const uint8_t* wait() { return impl_->wait(); }
  void release() { impl_.reset(); }

 private:
  std::unique_ptr<Impl> impl_;
};

class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  // Pins the given experts of source layer `layer` and starts reading those not in memory.
  virtual std::vector<ExpertRef> acquire(int layer, std::span<const int32_t> experts) = 0;
  // Starts reading experts likely needed soon (advisory).
  virtual void prefetch(int layer, std::span<const int32_t> experts) = 0;
  // Whether the op should predict and prefetch the next layer's experts.
  virtual bool wants_prefetch() const = 0;
  // How many experts of `layer` one fetch should pin at once (>= 1).
  virtual size_t window(int layer) const = 0;
  // The bytes of all expert records it serves (0: unknown), for budgets given as a share.
  virtual uint64_t total_bytes() const { return 0; }
  // Whether its memory holds every record at once: nothing is ever evicted, and a record,
  // once read, stays at its address until the source is destroyed (a GPU tier then reads
  // misses from host memory directly).
  virtual bool holds_all() const { return false; }
  // Page-locks the buffers its records are in, now and from now on, with `p` (nullptr: undo),
  // so that a device copies them directly. Returns the bytes pinned now; advisory.
  virtual uint64_t pin_host_memory(std::shared_ptr<HostPinner>) { return 0; }
};

// A backend's rewrite of one expert record, in place, after its read and before any use
// (the CPU's group-lane code layout; a GPU tier's upload layout).
using RecordTransform = std::function<void(int expert, uint8_t* record)>;

}  // namespace moeflux
