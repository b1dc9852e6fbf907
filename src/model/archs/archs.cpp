// model_type dispatch and load_model (checkpoint directories and packs).
#include "model/archs/archs.h"

#include <utility>

#include "core/error.h"
#include "format/pack_check.h"
#include "format/pack_store.h"
#include "backend/registry.h"

namespace moeflux {

namespace {
const std::pair<const char*, ArchBuilder> kArchs[] = {
    {"qwen3_moe", build_qwen3_moe},
    {"mixtral", build_mixtral},
    {"qwen3_next", build_qwen3_next},
    {"qwen3_5_moe_text", build_qwen3_5_moe_text},
    {"deepseek_v3", build_deepseek_v3},
    {"kimi_k2", build_deepseek_v3},  // Kimi-K2: DeepseekV3ForCausalLM under its own model_type
};

}  // namespace

ArchBuilder find_arch(const std::string& model_type) {
  for (const auto& [name, fn] : kArchs)
    if (model_type == name) return fn;
  return nullptr;
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> v;
  for (const auto& a : kArchs) v.push_back(a.first);
  return v;
}

std::unique_ptr<Model> load_model(const std::string& dir, MapMode pack_mode, std::shared_ptr<Backend> backend,
                                  bool verify_experts) {
  auto m = std::make_unique<Model>();
  m->backend = backend ? std::move(backend) : make_backend();
  std::unique_ptr<PackStore> pack;
  if (is_pack_dir(dir)) {
    pack = PackStore::open(dir, pack_mode);
    check_dense_tensors(*pack);
    if (verify_experts && pack_mode == MapMode::Resident) check_expert_records(*pack);
    m->cfg = pack->model_config();
  } else {
    m->cfg = load_model_config(dir);
  }
  ArchBuilder build = find_arch(m->cfg.arch);
  if (!build) {
    std::string known;
    for (const auto& a : supported_architectures()) known += (known.empty() ? "" : ", ") + a;
    fail(m->cfg.path, ": unknown architecture model_type '", m->cfg.arch, "' (supported: ", known, ")");
  }
  const bool prepare = pack && pack_mode == MapMode::Resident && m->backend->rewrites_weights();
  if (prepare) {
    pack->dense_map().make_writable();
    for (size_t i = 0; i < pack->manifest().experts.size(); ++i) pack->layer_map(i).make_writable();
  }
  if (pack) m->store = std::move(pack);
  else m->store = TensorStore::open_dir(dir);
  WeightLoader w(*m->store, m->cfg);
  if (prepare) w.prepare_for(*m->backend);
  build(*m, w);
  m->prepared_tensors = w.prepared_tensors();
  return m;
}

}  // namespace moeflux
