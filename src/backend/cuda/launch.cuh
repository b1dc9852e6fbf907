// Kernel launches that may begin while the kernel before them on the stream drains
// (programmatic dependent launch, sm_90): a kernel launched through launch() reads only its
// weights and parameters before await_previous(), and every one of its blocks calls it before
// it touches memory that earlier work writes or reads. The next kernel may then start once
// each block has passed that point, so at most one kernel runs ahead.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/check.cuh"

namespace moeflux::cuda {

// Whether launch() lets kernels overlap their predecessor: the backend turns it on while it
// records a step as a graph and off after (an eager step's copies and events cross streams).
bool& overlap_launches();

// Waits until the kernels before this one have finished and their writes are visible, then
// lets the kernel after this one start. A no-op for a kernel launched without overlap.
__device__ __forceinline__ void await_previous() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks L2 for the 128-byte line at p (weights a kernel reads after await_previous()).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Lane `lane` of 32 asks L2 for its share of the lines of [p, p + bytes).
__device__ __forceinline__ void prefetch_l2_span(const uint8_t* p, int64_t bytes, int lane) {
  for (int64_t o = int64_t(lane) * 128; o < bytes; o += 32 * 128) prefetch_l2(p + o);
}

// Lets Kernel take up to `bytes` of dynamic shared memory (beyond the default 48 KB): raised
// when a launch needs more than the kernel was allowed so far (the process's current device).
template <auto Kernel>
void allow_smem(size_t bytes) {
  static size_t allowed = 48 * 1024;
  if (bytes > allowed) {
    MF_CUDA(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    allowed = bytes;
  }
}

// launch() with `smem` bytes of dynamic shared memory.
template <typename... Params, typename... Args>
void launch_smem(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                 Args&&... args) {
  cudaLaunchAttribute at[1] = {};
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = s;
  cfg.attrs = at, cfg.numAttrs = overlap_launches() ? 1 : 0;
  ++launch_count();
  check(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), name, __FILE__, __LINE__);
}

template <typename... Params, typename... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t s, Args&&... args) {
  launch_smem(name, kernel, grid, block, 0, s, std::forward<Args>(args)...);
}

}  // namespace moeflux::cuda
