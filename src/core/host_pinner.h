// HostPinner: page-locks ranges of host memory so that a device copies from them directly, at
// the link's full rate and with no staging copy (the CUDA backend provides one). Long-lived
// host buffers, such as the expert cache's slots, are registered with it.
#pragma once
#include <cstddef>

namespace moeflux {

class HostPinner {
 public:
  virtual ~HostPinner() = default;
  virtual bool pin(void* p, size_t bytes) = 0;  // false: the range stays pageable
  virtual void unpin(void* p) = 0;              // a range pin() took
};

}  // namespace moeflux
