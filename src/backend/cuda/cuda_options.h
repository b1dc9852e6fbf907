// The CUDA backend's options (plain data: no CUDA headers, so that the registry and the
// command line build without the CUDA toolkit).
#pragma once
#include <cstdint>
#include <string>

namespace moeflux {

// Where a streamed expert that the GPU expert cache lacks computes (--moe-misses).
enum class MoeMisses : uint8_t {
  Copy,  // copied into a slot; the GPU computes it once the copy is in
  Cpu,   // the CPU, from the host cache's record, while the GPU computes the hits; the record
         // is copied into a slot meanwhile for later steps
  Auto,  // each step's misses split between the two so that both finish early (measured rates)
};

struct CudaOptions {
  int device = 0;  // CUDA device ordinal
  // --gpu-expert-cache: GPU memory for the experts a pack streams, "SIZE" (N[KMGT]), "P%" of
  // all expert bytes or "auto" (the free GPU memory less a reserve); "" keeps none (each
  // step's experts are staged through a window).
  std::string expert_cache;
  MoeMisses moe_misses = MoeMisses::Copy;
  // --cpu-moe-layers: the first N MoE layers' streamed experts compute on the CPU, always.
  int cpu_moe_layers = 0;
};

}  // namespace moeflux
