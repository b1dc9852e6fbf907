// Per-thread scratch of a layer's batch (a prompt's tokens): buffers written in full before they
// are read, kept from layer to layer instead of allocated per layer. Fresh vectors per layer cost
// the calling thread a fill and, in a VM, page faults while the workers waited: a prefill on
// a 2-vCPU VM spent 17 ms a layer faulting in its attention's 6 MB once the MoE buffers
// were kept and no longer freed space for them (a9dc2a6:docs/benchmarks.md).
#pragma once
#include <cstddef>
#include <vector>

namespace moeflux {

// Floats a batch buffer keeps between layers (64 MiB); a longer prompt's is freed after each layer.
constexpr size_t kKeptBatchFloats = size_t(16) << 20;

// v's data with room for at least n floats: grown when short, never shrunk or cleared.
inline float* grown(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Frees v when it holds more than kKeptBatchFloats.
inline void release_if_large(std::vector<float>& v) {
  if (v.size() > kKeptBatchFloats) std::vector<float>().swap(v);
}

}  // namespace moeflux
