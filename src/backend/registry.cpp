// make_backend: the table of backends this build has.
#include "backend/registry.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_backend.h"
#include "core/error.h"
#ifdef MOEFLUX_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace moeflux {

std::shared_ptr<Backend> make_backend(const BackendOptions& opt) {
  if (opt.name == "cpu") return std::make_shared<CpuBackend>(opt.cpu);
  if (opt.name == "ref") return std::make_shared<RefBackend>();
#ifdef MOEFLUX_HAVE_CUDA
  if (opt.name == "cuda") return make_cuda_backend(opt.cuda);
  if (opt.name == "auto") return cuda_device_present() ? make_cuda_backend(opt.cuda) : std::make_shared<CpuBackend>(opt.cpu);
#else
  if (opt.name == "auto") return std::make_shared<CpuBackend>(opt.cpu);
  if (opt.name == "cuda") fail("--backend cuda: this build has no CUDA backend (build with the CUDA toolkit installed)");
#endif
  std::string known;
  for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  fail("--backend ", opt.name, ": unknown backend (this build has: ", known, ")");
}

std::vector<std::string> backend_names() { return {"cpu", "ref", "cuda", "auto"}; }

bool backend_usable(const std::string& name, std::string* why) {
#ifdef MOEFLUX_HAVE_CUDA
  if (name == "cuda") return cuda_device_present(why);
#else
  if (name == "cuda") {
    if (why) *why = "this build has no CUDA backend";
    return false;
  }
#endif
  return name == "cpu" || name == "ref" || name == "auto";
}

}  // namespace moeflux
