// TensorStore: every tensor of a checkpoint directory by name. Reads a sharded checkpoint
// through model.safetensors.index.json, else model.safetensors, else every *.safetensors
// file in the directory (older MLX layouts). Files stay memory-mapped for the store's lifetime.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "format/safetensors.h"

namespace moeflux {

class TensorStore {
 public:
  static std::unique_ptr<TensorStore> open_dir(const std::string& dir);

  const TensorInfo* find(const std::string& name) const;  // nullptr when absent
  const TensorInfo& get(const std::string& name) const;   // Error naming the tensor when absent
  bool has(const std::string& name) const { return find(name) != nullptr; }
  std::vector<std::string> names() const;
  const std::string& dir() const { return dir_; }

 private:
  void add_file(const std::string& path);
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, const TensorInfo*> by_name_;
};

}  // namespace moeflux
