// The cuda backend (src/backend/cuda): the Backend's ops as CUDA kernels on one NVIDIA GPU,
// activations and attention state in device memory, weights copied to the device on first use
// (keyed by their host bytes, which stay the model's). Built when the CUDA toolkit is found
// (MOEFLUX_HAVE_CUDA); this header needs no CUDA headers.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/cuda_options.h"

namespace moeflux {

// Whether a CUDA device can be used here; why not in *why.
bool cuda_device_present(std::string* why = nullptr);

// Error naming the reason when no device can be used.
std::shared_ptr<Backend> make_cuda_backend(const CudaOptions& opt);

}  // namespace moeflux
