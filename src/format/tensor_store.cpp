// Checkpoint directory -> tensors by name (single file, index.json shards, or all files).
#include "format/tensor_store.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "format/pack_store.h"

namespace moeflux {

namespace fs = std::filesystem;

namespace {
class SafetensorsStore : public TensorStore {
 public:
  static std::unique_ptr<TensorStore> open(const std::string& dir);

 private:
  void add_file(const std::string& path);
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
};
}  // namespace

bool is_pack_dir(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / "manifest.json", ec);
}

std::unique_ptr<TensorStore> TensorStore::open_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir, ": not a directory");
  if (is_pack_dir(dir)) return PackStore::open(dir);
  return SafetensorsStore::open(dir);
}

std::unique_ptr<TensorStore> SafetensorsStore::open(const std::string& dir) {
  std::error_code ec;
  auto s = std::unique_ptr<SafetensorsStore>(new SafetensorsStore());
  s->dir_ = dir;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::set<std::string> files;
  if (fs::exists(index, ec)) {
    auto j = nlohmann::json::parse(read_text_file(index.string()), nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail(index.string(), ": not valid JSON");
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object()) fail(index.string(), ": missing object 'weight_map'");
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) fail(index.string(), ": weight_map['", it.key(), "'] is not a string");
      const std::string f = it.value().get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        fail(index.string(), ": weight_map['", it.key(), "'] names an invalid file '", f, "'");
      files.insert(f);
    }
    for (const auto& f : files) s->add_file((fs::path(dir) / f).string());
    for (auto it = wm->begin(); it != wm->end(); ++it)
      if (!s->find(it.key()))
        fail(index.string(), ": tensor '", it.key(), "' is listed but not in '", it.value().get<std::string>(), "'");
  } else if (fs::exists(fs::path(dir) / "model.safetensors", ec)) {
    s->add_file((fs::path(dir) / "model.safetensors").string());
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors") files.insert(e.path().filename().string());
    if (ec) fail(dir, ": cannot list: ", ec.message());
    if (files.empty()) fail(dir, ": no *.safetensors files and no model.safetensors.index.json");
    for (const auto& f : files) s->add_file((fs::path(dir) / f).string());
  }
  return s;
}

void SafetensorsStore::add_file(const std::string& path) {
  files_.push_back(std::make_unique<SafetensorsFile>(path));
  for (const auto& t : files_.back()->tensors()) {
    auto [it, inserted] = by_name_.emplace(t.name, &t);
    if (!inserted) fail(path, ": tensor '", t.name, "' also appears in ", it->second->file);
  }
}

const TensorInfo* TensorStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorInfo& TensorStore::get(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) fail(dir_, ": missing tensor '", name, "'");
  return *t;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> n;
  for (const auto& [k, v] : by_name_) n.push_back(k);
  std::sort(n.begin(), n.end());
  return n;
}

}  // namespace moeflux
