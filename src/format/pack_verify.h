// Whole-pack integrity check and size summary: recomputes the checksum (the manifest's kind:
// CRC-32 or CRC-32C) of every dense tensor
// and every expert record (streaming, pages released as it goes) and reports each mismatch
// with the tensor or layer/expert, the file and the byte offset.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/pack_store.h"

namespace moeflux {

struct PackProblem {
  std::string what;  // "dense tensor 'model.norm.weight'" / "layer 1 expert 5"
  std::string file;
  uint64_t offset = 0, nbytes = 0;
  uint32_t stored = 0, computed = 0;
  PackChecksum checksum = PackChecksum::Crc32c;
  std::string message() const;
};

// One checksummed part of a pack, in manifest order: a dense tensor or an expert record, its
// bytes in `map` and its name and stored checksum in `where` (computed still 0).
struct PackPart {
  const MmapFile* map;
  const uint8_t* data;
  PackProblem where;
};
std::vector<PackPart> dense_parts(const PackStore& pack);
std::vector<PackPart> record_parts(const PackStore& pack);

// on_bytes(n) is called as data is checked (for progress).
std::vector<PackProblem> verify_pack(const PackStore& pack, const std::function<void(uint64_t)>& on_bytes = {});

struct PackSummary {
  uint64_t dense_bytes = 0, embed_bytes = 0, embed_row_bytes = 0;
  uint64_t expert_bytes = 0, record_min = 0, record_max = 0, n_records = 0;
  int64_t moe_layers = 0, n_experts_active = 0;
  uint64_t bytes_per_token = 0;  // dense touched + n_experts_active * mean record * moe layers
  std::vector<std::pair<std::string, uint64_t>> quant_counts;  // "q4 g64" -> linears
};
PackSummary summarize_pack(const PackStore& pack);

}  // namespace moeflux
