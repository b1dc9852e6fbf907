// The CUDA backend's options (plain data: no CUDA headers, so that the registry and the
// command line build without the CUDA toolkit).
#pragma once

namespace moeflux {

struct CudaOptions {
  int device = 0;  // CUDA device ordinal
};

}  // namespace moeflux
