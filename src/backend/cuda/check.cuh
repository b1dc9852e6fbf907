// CUDA error checks: every runtime call and every launch, as moeflux::Error naming the call.
#pragma once
#include <cuda_runtime.h>

#include "core/error.h"

namespace moeflux::cuda {

// Kernel launches so far (MF_CUDA_LAUNCHED counts them), for bench --profile.
int64_t& launch_count();

inline void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) fail("CUDA error: ", cudaGetErrorString(e), " in ", what, " (", file, ":", line, ")");
}

}  // namespace moeflux::cuda

#define MF_CUDA(call) ::moeflux::cuda::check((call), #call, __FILE__, __LINE__)
// After a kernel launch: the launch's own error (bad configuration); faults surface at the next sync.
#define MF_CUDA_LAUNCHED(name) \
  (++::moeflux::cuda::launch_count(), ::moeflux::cuda::check(cudaGetLastError(), name, __FILE__, __LINE__))
