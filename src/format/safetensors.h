// safetensors: header parsing (untrusted bytes, fuzzed by fuzz/fuzz_safetensors.cpp),
// memory-mapped files, and a small writer for f32 / i32 outputs.
// Layout: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section; offsets are relative to the data section.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mmap_file.h"

namespace moeflux {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // set once the file is mapped
  std::string file;               // path of the file holding it (for messages)

  int64_t numel() const;
  std::string shape_str() const;  // "[512, 128]"
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length
};

// Parses and validates the header of a safetensors file of `file_size` bytes whose first
// bytes are `bytes[0..len)`. Checks: length field, JSON syntax, known dtypes, non-negative
// shapes, offsets inside the file, byte counts equal to shape x dtype size, no overlaps.
// `what` names the file in messages.
SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t len, uint64_t file_size,
                                           const std::string& what);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const std::string& path() const { return map_.path(); }

 private:
  MmapFile map_;
  SafetensorsHeader header_;
};

// Writes tensors (f32 or i32 data given as raw bytes) to a safetensors file.
struct OutTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
OutTensor out_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v);
OutTensor out_i32(const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& v);
// Written to path + ".tmp", then renamed over `path`: an existing file is replaced whole or not
// at all. `metadata` becomes the header's __metadata__.
void write_safetensors(const std::string& path, const std::vector<OutTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace moeflux
