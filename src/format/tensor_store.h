// TensorStore: every tensor of a model directory by name, memory-mapped for the store's
// lifetime. open_dir dispatches: a pack (manifest.json, format/pack_store.h) or a safetensors
// checkpoint (sharded through model.safetensors.index.json, else model.safetensors, else every
// *.safetensors file in the directory, as older MLX layouts).
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "format/safetensors.h"

namespace moeflux {

class TensorStore {
 public:
  virtual ~TensorStore() = default;
  static std::unique_ptr<TensorStore> open_dir(const std::string& dir);

  const TensorInfo* find(const std::string& name) const;  // nullptr when absent
  const TensorInfo& get(const std::string& name) const;   // Error naming the tensor when absent
  bool has(const std::string& name) const { return find(name) != nullptr; }
  std::vector<std::string> names() const;
  const std::string& dir() const { return dir_; }

 protected:
  // Implementations own the TensorInfos and the mappings; the index points into them.
  std::string dir_;
  std::unordered_map<std::string, const TensorInfo*> by_name_;
};

// True when `dir` holds a pack (manifest.json).
bool is_pack_dir(const std::string& dir);

}  // namespace moeflux
