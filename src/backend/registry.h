// Backends by name: what --backend picks from.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_options.h"
#include "backend/cuda/cuda_options.h"

namespace moeflux {

struct BackendOptions {
  std::string name = "cpu";  // one of backend_names(); "auto": cuda when a GPU is usable, else cpu
  CpuOptions cpu;            // for "cpu"
  CudaOptions cuda;          // for "cuda"
};

// Error naming the backend when it is unknown or cannot start here.
std::shared_ptr<Backend> make_backend(const BackendOptions& opt = {});
// Every name --backend takes ("cuda" also in builds without it: make_backend then says so).
std::vector<std::string> backend_names();
// Whether backend `name` can run here (cuda: this build has it and a GPU is usable); why not in *why.
bool backend_usable(const std::string& name, std::string* why = nullptr);

}  // namespace moeflux
