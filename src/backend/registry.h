// Backends by name: what --backend picks from.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_options.h"

namespace moeflux {

struct BackendOptions {
  std::string name = "cpu";  // one of backend_names()
  CpuOptions cpu;            // for "cpu"
};

// Error naming the backend when it is unknown or cannot start here.
std::shared_ptr<Backend> make_backend(const BackendOptions& opt = {});
std::vector<std::string> backend_names();

}  // namespace moeflux
