// safetensors header validation, mapping and writing.
#include "format/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moeflux {

namespace {
constexpr uint64_t kMaxHeader = 256ull << 20;  // far above any real header; bounds the JSON parse

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t len, uint64_t file_size,
                                           const std::string& what) {
  using nlohmann::json;
  if (len < 8 || file_size < 8) fail(what, ": too short to be a safetensors file (", file_size, " bytes)");
  uint64_t n = read_u64_le(bytes);
  if (n > kMaxHeader) fail(what, ": header length ", n, " is implausibly large");
  if (n > file_size - 8 || n > len - 8)
    fail(what, ": header length ", n, " runs past the end of the file (", file_size, " bytes)");
  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;
  json j = json::parse(bytes + 8, bytes + 8 + n, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(what, ": header is not valid JSON");
  if (!j.is_object()) fail(what, ": header is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(what, ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string()) h.metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    const std::string where = what + ": tensor '" + name + "'";
    if (!v.is_object()) fail(where, ": entry is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) fail(where, ": missing or non-string 'dtype'");
    if (sh == v.end() || !sh->is_array()) fail(where, ": missing or non-array 'shape'");
    if (off == v.end() || !off->is_array() || off->size() != 2)
      fail(where, ": 'data_offsets' must be [begin, end]");
    TensorInfo t;
    t.name = name;
    t.file = what;
    auto d = dtype_from_name(dt->get<std::string>());
    if (!d) fail(where, ": unsupported dtype '", dt->get<std::string>(), "'");
    t.dtype = *d;
    uint64_t count = 1;
    for (const auto& e : *sh) {
      if (!e.is_number_unsigned()) fail(where, ": shape entries must be non-negative integers");
      uint64_t dim = e.get<uint64_t>();
      if (dim > (1ull << 40) || (dim && count > (1ull << 50) / dim))
        fail(where, ": shape ", sh->dump(), " is too large");
      count *= dim;
      t.shape.push_back(int64_t(dim));
    }
    for (const auto& e : *off)
      if (!e.is_number_unsigned()) fail(where, ": data_offsets must be non-negative integers");
    uint64_t b = (*off)[0].get<uint64_t>(), en = (*off)[1].get<uint64_t>();
    if (b > en) fail(where, ": data_offsets begin ", b, " > end ", en);
    if (en > data_size)
      fail(where, ": data_offsets end ", en, " is past the data section (", data_size, " bytes); file truncated?");
    t.offset = b;
    t.nbytes = en - b;
    if (t.nbytes != count * dtype_size(t.dtype))
      fail(where, ": ", t.nbytes, " bytes for shape ", t.shape_str(), " of ", dtype_name(t.dtype),
           " (expected ", count * dtype_size(t.dtype), ")");
    h.tensors.push_back(std::move(t));
  }
  std::vector<const TensorInfo*> byoff;
  for (const auto& t : h.tensors) byoff.push_back(&t);
  std::sort(byoff.begin(), byoff.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < byoff.size(); ++i)
    if (byoff[i]->offset < byoff[i - 1]->offset + byoff[i - 1]->nbytes)
      fail(what, ": tensors '", byoff[i - 1]->name, "' and '", byoff[i]->name, "' overlap");
  return h;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(path) {
  header_ = parse_safetensors_header(map_.data(), map_.size(), map_.size(), path);
  for (auto& t : header_.tensors) t.data = map_.data() + header_.data_start + t.offset;
}

OutTensor out_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  OutTensor t{name, DType::F32, std::move(shape), {}};
  t.bytes.resize(v.size() * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

OutTensor out_i32(const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& v) {
  OutTensor t{name, DType::I32, std::move(shape), {}};
  t.bytes.resize(v.size() * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

void write_safetensors(const std::string& path, const std::vector<OutTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape},
                 {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string hs = h.dump();
  while (hs.size() % 8) hs += ' ';
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(path, ": cannot create: ", std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(hs.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(hs.data(), 1, hs.size(), f) == hs.size();
  for (const auto& t : tensors)
    ok = ok && std::fwrite(t.bytes.data(), 1, t.bytes.size(), f) == t.bytes.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail(path, ": write failed: ", std::strerror(errno));
  }
}

}  // namespace moeflux
