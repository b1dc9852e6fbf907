// make_backend: the table of backends this build has.
#include "backend/registry.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_backend.h"
#include "core/error.h"

namespace moeflux {

std::shared_ptr<Backend> make_backend(const BackendOptions& opt) {
  if (opt.name == "cpu") return std::make_shared<CpuBackend>(opt.cpu);
  if (opt.name == "ref") return std::make_shared<RefBackend>();
  std::string known;
  for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  fail("--backend ", opt.name, ": unknown backend (this build has: ", known, ")");
}

std::vector<std::string> backend_names() { return {"cpu", "ref"}; }

}  // namespace moeflux
