// The CUDA backend's options (plain data: no CUDA headers, so that the registry and the
// command line build without the CUDA toolkit).
#pragma once
#include <string>

namespace moeflux {

struct CudaOptions {
  int device = 0;  // CUDA device ordinal
  // --gpu-expert-cache: GPU memory for the experts a pack streams, "SIZE" (N[KMGT]), "P%" of
  // all expert bytes or "auto" (the free GPU memory less a reserve); "" keeps none (each
  // step's experts are staged through a window).
  std::string expert_cache;
};

}  // namespace moeflux
