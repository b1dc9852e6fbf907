// PackWriter: writes a pack into a directory (the converter's temporary one): dense tensors
// appended to dense.bin at 64-byte alignment, expert records appended to
// experts/layer_{L:03d}.bin at 4096-byte alignment, the CRC-32C of every tensor / record, and
// manifest.json last (always the current version, kPackVersion) (docs/pack-format.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "convert/encode.h"
#include "format/pack_manifest.h"

namespace moeflux {

// One tensor of an expert record; `name` is relative to the expert ("gate_proj.weight").
struct RecordPart {
  std::string name;
  const OutPart* part;
};

class PackWriter {
 public:
  explicit PackWriter(const std::string& dir);
  ~PackWriter();
  PackWriter(const PackWriter&) = delete;
  PackWriter& operator=(const PackWriter&) = delete;

  // `drop_source`: data lies in a read-only file mapping whose pages may be released after use.
  void add_dense(const std::string& name, const OutPart& t, bool drop_source);
  // Experts of a layer are added in order 0, 1, ...; layers one after the other.
  void add_record(int64_t layer, const std::string& prefix, size_t expert, const std::vector<RecordPart>& parts);
  // Writes manifest.json; the manifest's header fields (architecture, config, source_layout) come from `m`.
  void finish(PackManifest m);

  uint64_t dense_bytes() const { return dense_size_; }

 private:
  void close_layer();
  std::string dir_;
  int dense_fd_ = -1, layer_fd_ = -1;
  uint64_t dense_size_ = 0;
  std::vector<PackTensor> dense_;
  std::vector<ExpertLayer> layers_;
  std::vector<uint8_t> record_;
};

}  // namespace moeflux
