// The pack manifest (manifest.json of an expert-streaming pack, docs/pack-format.md): the
// tensor table of dense.bin and, per MoE layer, the expert record table of its layer file.
// parse_pack_manifest validates everything that can be checked without the data files
// (fuzzed by fuzz/fuzz_pack_manifest.cpp); PackStore checks the files against it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace moeflux {

constexpr const char* kPackFormatName = "moeflux-pack";
constexpr int kPackVersion = 2;        // what the writer makes: CRC-32C checksums
constexpr int kPackVersionOldest = 1;  // still read: version 1 has zlib's CRC-32
constexpr uint64_t kDenseAlign = 64;     // every tensor in dense.bin and inside a record
constexpr uint64_t kRecordAlign = 4096;  // every expert record offset and size

// The checksum of a pack's tensors and records, named by the manifest's `checksum`:
// version 1 packs use zlib's CRC-32, version 2 packs CRC-32C (core/crc32c.h).
enum class PackChecksum : uint8_t { Crc32, Crc32c };
const char* checksum_name(PackChecksum k);  // "crc32", "crc32c"
// crc: a previous result or 0, as crc32_update / crc32c_update.
uint32_t checksum_update(PackChecksum k, uint32_t crc, const uint8_t* p, uint64_t n);
inline uint32_t checksum_of(PackChecksum k, const uint8_t* p, uint64_t n) { return checksum_update(k, 0, p, n); }

// How a weight is stored. Dense: plain float tensor. Affine: `.weight` u32-packed with
// `.scales` / `.biases` companions. Fp8: `.weight` F8_E4M3 with `.weight_scale_inv`.
struct PackQuant {
  enum class Format { Dense, Affine, Fp8 };
  Format format = Format::Dense;
  int bits = 0, group_size = 0;         // Affine
  int block_rows = 0, block_cols = 0;   // Fp8
  DType scale_dtype = DType::BF16;
  bool operator==(const PackQuant&) const = default;
};

struct PackTensor {
  std::string name;  // dense: full name; in a layout: the name inside the expert ("w1.weight")
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // dense: in dense.bin; layout: from the start of the record
  uint64_t nbytes = 0;
  uint32_t crc32 = 0;   // dense tensors only (records carry one checksum for all); of the
                        // manifest's checksum kind (CRC-32 or CRC-32C)
  std::optional<PackQuant> quant;  // on `.weight` entries of quantised linears
  bool operator==(const PackTensor&) const = default;
};

struct PackRecord {
  uint64_t offset = 0, size = 0;  // in the layer file; both multiples of kRecordAlign
  int bits = 0;                   // widest weight of the expert (16 = bf16, 8 = fp8 or q8)
  uint32_t crc32 = 0;             // over all `size` bytes (padding included); manifest's kind
  uint32_t layout = 0;            // index into ExpertLayer::layouts
};

struct ExpertLayer {
  int64_t layer = 0;
  std::string prefix;  // MoE module, e.g. "model.layers.3.mlp"; tensors are {prefix}.experts.{e}.{name}
  std::string file;    // "experts/layer_003.bin"
  uint64_t size = 0;   // bytes of the file
  std::vector<std::vector<PackTensor>> layouts;
  std::vector<PackRecord> records;  // index = expert id
};

struct PackManifest {
  int version = kPackVersion;
  PackChecksum checksum = PackChecksum::Crc32c;  // Crc32 exactly when version is 1
  std::string architecture;
  nlohmann::json config;        // the source's config.json, verbatim
  std::string source_layout;    // "hf" or "mlx": the source's conventions (zero-centred norms...)
  std::string dense_file = "dense.bin";
  uint64_t dense_size = 0;
  std::vector<PackTensor> dense;
  std::vector<ExpertLayer> experts;
};

// Parses and validates manifest text; `what` names the file in messages. Raises Error.
PackManifest parse_pack_manifest(const std::string& text, const std::string& what);
std::string pack_manifest_to_json(const PackManifest& m);

// Byte size of a tensor of this dtype and shape; Error (naming `where`) on overflow.
uint64_t tensor_nbytes(DType t, const std::vector<int64_t>& shape, const std::string& where);

inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace moeflux
