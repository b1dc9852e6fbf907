// Opening a pack: manifest validation, file checks, the by-name index, the runtime config.
#include "format/pack_store.h"

#include <filesystem>
#include <map>

#include "core/error.h"

namespace moeflux {

namespace fs = std::filesystem;

std::string expert_tensor_name(const std::string& prefix, size_t expert, const std::string& name) {
  return prefix + ".experts." + std::to_string(expert) + "." + name;
}

namespace {

std::unique_ptr<MmapFile> map_checked(const std::string& dir, const std::string& file, uint64_t want, MapMode mode) {
  const std::string path = (fs::path(dir) / file).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(dir, ": pack file '", file, "' is missing");
  auto m = std::make_unique<MmapFile>(path, mode);
  if (m->size() < want)
    fail(path, ": file has ", m->size(), " bytes but the manifest needs ", want, "; file truncated?");
  return m;
}

TensorInfo info_of(const PackTensor& t, std::string name, const uint8_t* base, const std::string& file) {
  TensorInfo i;
  i.name = std::move(name);
  i.dtype = t.dtype;
  i.shape = t.shape;
  i.offset = t.offset;
  i.nbytes = t.nbytes;
  i.data = base + t.offset;
  i.file = file;
  return i;
}

// Module name of a `.weight` entry (quant lives there).
std::string module_of(const std::string& weight_name) {
  return weight_name.substr(0, weight_name.size() - 7);
}

}  // namespace

std::unique_ptr<PackStore> PackStore::open(const std::string& dir, MapMode mode) {
  const std::string mpath = (fs::path(dir) / "manifest.json").string();
  auto s = std::unique_ptr<PackStore>(new PackStore());
  s->dir_ = dir;
  s->manifest_ = parse_pack_manifest(read_text_file(mpath), mpath);
  const PackManifest& m = s->manifest_;
  s->dense_ = map_checked(dir, m.dense_file, m.dense_size, mode);
  for (const auto& l : m.experts) s->layers_.push_back(map_checked(dir, l.file, l.size, mode));
  size_t n = m.dense.size();
  for (const auto& l : m.experts)
    for (const auto& r : l.records) n += l.layouts[r.layout].size();
  s->infos_.reserve(n);  // TensorInfo pointers in by_name_ must stay valid
  const std::string dense_path = (fs::path(dir) / m.dense_file).string();
  for (const auto& t : m.dense) s->infos_.push_back(info_of(t, t.name, s->dense_->data(), dense_path));
  for (size_t li = 0; li < m.experts.size(); ++li) {
    const ExpertLayer& l = m.experts[li];
    const std::string path = (fs::path(dir) / l.file).string();
    for (size_t e = 0; e < l.records.size(); ++e) {
      const uint8_t* base = s->layers_[li]->data() + l.records[e].offset;
      for (const auto& t : l.layouts[l.records[e].layout])
        s->infos_.push_back(info_of(t, expert_tensor_name(l.prefix, e, t.name), base, path));
    }
  }
  for (const auto& i : s->infos_)
    if (!s->by_name_.emplace(i.name, &i).second) fail(mpath, ": tensor '", i.name, "' is defined twice");
  return s;
}

ModelConfig PackStore::model_config() const {
  return pack_model_config(manifest_, (fs::path(dir_) / "manifest.json").string());
}

ModelConfig pack_model_config(const PackManifest& m, const std::string& what) {
  std::map<std::string, PackQuant> affine;  // module -> spec
  const PackQuant* fp8 = nullptr;
  auto visit = [&](const PackTensor& t, const std::string& name) {
    if (!t.quant || name.size() < 7 || name.compare(name.size() - 7, 7, ".weight") != 0) return;
    if (t.quant->format == PackQuant::Format::Affine) affine[module_of(name)] = *t.quant;
    else if (!fp8) fp8 = &*t.quant;
    else if (fp8->block_rows != t.quant->block_rows || fp8->block_cols != t.quant->block_cols)
      fail(what, ": fp8 tensors with different block sizes are not supported");
  };
  for (const auto& t : m.dense) visit(t, t.name);
  for (const auto& l : m.experts)
    for (size_t e = 0; e < l.records.size(); ++e)
      for (const auto& t : l.layouts[l.records[e].layout]) visit(t, expert_tensor_name(l.prefix, e, t.name));
  nlohmann::json cfg = m.config;
  cfg.erase("quantization");
  cfg.erase("quantization_config");
  // The source's conventions (MLX folds 1 + w into zero-centred norms, stores conv1d as
  // [C, K, 1]): architecture code must not infer them from `quantization`, which a converted
  // Hugging Face checkpoint now has too.
  cfg["moeflux_source_layout"] = m.source_layout;
  if (!affine.empty()) {
    std::map<std::pair<int, int>, size_t> count;
    for (const auto& [mod, q] : affine) ++count[{q.bits, q.group_size}];
    auto best = count.begin();
    for (auto it = count.begin(); it != count.end(); ++it)
      if (it->second > best->second) best = it;
    nlohmann::json q = {{"bits", best->first.first}, {"group_size", best->first.second}};
    for (const auto& [mod, spec] : affine)
      if (std::make_pair(spec.bits, spec.group_size) != best->first)
        q[mod] = {{"bits", spec.bits}, {"group_size", spec.group_size}};
    cfg["quantization"] = std::move(q);
  } else if (fp8) {
    cfg["quantization_config"] = {{"quant_method", "fp8"},
                                  {"weight_block_size", {fp8->block_rows, fp8->block_cols}}};
  }
  ModelConfig c = parse_model_config(cfg.dump(), what + " (config)");
  if (fp8) c.quant.fp8_block_rows = fp8->block_rows, c.quant.fp8_block_cols = fp8->block_cols;
  return c;
}

}  // namespace moeflux
