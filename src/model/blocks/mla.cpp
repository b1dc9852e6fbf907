// The MLA path's names and the model-wide switch between them.
#include "model/blocks/mla.h"

#include "core/error.h"

namespace moeflux {

MlaPath parse_mla_path(const std::string& s, const std::string& what) {
  if (s == "naive") return MlaPath::Naive;
  if (s == "absorbed") return MlaPath::Absorbed;
  fail(what, ": unknown MLA path '", s, "' (naive or absorbed)");
}

const char* mla_path_name(MlaPath p) { return p == MlaPath::Naive ? "naive" : "absorbed"; }

int set_mla_path(Model& m, MlaPath path) {
  int n = 0;
  for (auto& l : m.layers)
    if (auto* a = dynamic_cast<MlaAttention*>(l.mixer.get())) a->path = path, ++n;
  return n;
}

}  // namespace moeflux
