// PackStore: a pack directory (docs/pack-format.md) seen as a TensorStore. Dense tensors keep
// their names; expert tensors appear under Hugging Face per-expert names
// `{prefix}.experts.{e}.{name}` pointing into the memory-mapped layer files, so model code
// reads a pack exactly as it reads a checkpoint. Opening validates the manifest and checks
// every file against it (present, large enough); it does not recompute checksums (verify does).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/mmap_file.h"
#include "format/config.h"
#include "format/pack_manifest.h"
#include "format/tensor_store.h"

namespace moeflux {

class PackStore : public TensorStore {
 public:
  // Resident: dense.bin and the expert files are copied into memory (MmapFile) instead of mapped.
  static std::unique_ptr<PackStore> open(const std::string& dir, MapMode mode = MapMode::Map);

  const PackManifest& manifest() const { return manifest_; }
  // The model configuration the engine runs: the source config.json with its quantisation
  // keys replaced by what the pack holds (see pack_model_config).
  ModelConfig model_config() const;
  // Mapped bytes of dense.bin / of the layer file of manifest().experts[i].
  const MmapFile& dense_map() const { return *dense_; }
  const MmapFile& layer_map(size_t i) const { return *layers_[i]; }

 private:
  PackManifest manifest_;
  std::unique_ptr<MmapFile> dense_;
  std::vector<std::unique_ptr<MmapFile>> layers_;
  std::vector<TensorInfo> infos_;  // dense tensors, then every expert tensor
};

// config.json of the source with `quantization` rebuilt from the tensor table: the most
// common affine spec as default and one override per module that differs, so WeightLoader
// reads per-tensor (and per-expert) bit widths; FP8 block sizes from the fp8 entries.
// Adds "moeflux_source_layout": "hf" | "mlx" (the manifest's source_layout).
ModelConfig pack_model_config(const PackManifest& m, const std::string& what);

// Expert tensor name as the engine sees it.
std::string expert_tensor_name(const std::string& prefix, size_t expert, const std::string& name);

}  // namespace moeflux
