// Completeness check by building the model (see check_weights.h).
#include "model/check_weights.h"

#include "core/error.h"
#include "model/archs/archs.h"

namespace moeflux {

void check_model_weights(const TensorStore& store, const ModelConfig& cfg) {
  ArchBuilder build = find_arch(cfg.arch);
  if (!build) {
    std::string known;
    for (const auto& a : supported_architectures()) known += (known.empty() ? "" : ", ") + a;
    fail(cfg.path, ": unknown architecture model_type '", cfg.arch, "' (supported: ", known, ")");
  }
  Model m;
  m.cfg = cfg;
  WeightLoader w(store, m.cfg);
  build(m, w);
}

}  // namespace moeflux
