// Prompt cache files: a Snapshot to and from safetensors.
#include "engine/prompt_cache.h"

#include <charconv>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "format/safetensors.h"

namespace moeflux {

namespace {

constexpr const char* kFormat = "moeflux-prompt-cache";
constexpr const char* kVersion = "1";

// Non-negative decimal numbers separated by `sep`, the whole of `s`; false if anything else.
bool parse_numbers(const std::string& s, char sep, std::vector<int64_t>& out) {
  out.clear();
  if (s.empty()) return true;
  const char* p = s.data();
  const char* end = p + s.size();
  for (;;) {
    int64_t v = 0;
    const auto [q, ec] = std::from_chars(p, end, v);
    if (ec != std::errc() || q == p || v < 0) return false;
    out.push_back(v);
    if (q == end) return true;
    if (*q != sep) return false;
    p = q + 1;
  }
}

std::vector<float> floats(const TensorInfo& t, const uint8_t* base) {
  std::vector<float> v(size_t(t.numel()));
  if (!v.empty()) std::memcpy(v.data(), base + t.offset, v.size() * sizeof(float));
  return v;
}

}  // namespace

std::string model_identity(const Model& m) {
  const ModelConfig& c = m.cfg;
  uint32_t crc = 0;
  if (m.embed.data) crc = crc32c_update(crc, m.embed.data, std::min<uint64_t>(m.embed.data_bytes(), 64u << 10));
  crc = crc32c_update(crc, reinterpret_cast<const uint8_t*>(m.final_norm.data()), m.final_norm.size() * sizeof(float));
  const nlohmann::ordered_json j = {{"arch", c.arch}, {"layers", int64_t(m.layers.size())}, {"dim", c.dim},
                                    {"vocab", c.vocab_size}, {"weights_crc32c", crc}};
  return j.dump();
}

void save_prompt_cache(const std::string& path, const Sequence::Snapshot& s, const std::string& identity) {
  std::vector<OutTensor> t;
  t.push_back(out_i32("tokens", {int64_t(s.tokens.size())}, s.tokens));
  for (size_t l = 0; l < s.layers.size(); ++l)
    for (size_t i = 0; i < s.layers[l].size(); ++i)
      t.push_back(out_f32("state." + std::to_string(l) + "." + std::to_string(i), {int64_t(s.layers[l][i].size())},
                          s.layers[l][i]));
  std::string marks;
  for (size_t c = 0; c < s.checkpoints.size(); ++c) {
    marks += (c ? "," : "") + std::to_string(s.checkpoints[c].pos);
    for (size_t l = 0; l < s.checkpoints[c].layers.size(); ++l)
      for (size_t i = 0; i < s.checkpoints[c].layers[l].size(); ++i)
        t.push_back(out_f32("checkpoint." + std::to_string(c) + "." + std::to_string(l) + "." + std::to_string(i),
                            {int64_t(s.checkpoints[c].layers[l][i].size())}, s.checkpoints[c].layers[l][i]));
  }
  write_safetensors(path, t, {{"format", kFormat}, {"version", kVersion}, {"model", identity}, {"checkpoints", marks}});
}

PromptCacheFile parse_prompt_cache(const uint8_t* bytes, size_t size, const std::string& what) {
  const SafetensorsHeader h = parse_safetensors_header(bytes, size, size, what);
  auto meta = [&](const char* key) {
    const auto it = h.metadata.find(key);
    return it == h.metadata.end() ? std::string() : it->second;
  };
  if (meta("format") != kFormat) fail(what, ": not a moeflux prompt cache (a safetensors file without its metadata)");
  if (meta("version") != kVersion) fail(what, ": prompt cache version '", meta("version"), "', this build reads ", kVersion);
  PromptCacheFile f;
  f.identity = meta("model");
  std::vector<int64_t> marks;
  if (!parse_numbers(meta("checkpoints"), ',', marks)) fail(what, ": malformed checkpoint positions '", meta("checkpoints"), "'");
  f.snapshot.checkpoints.resize(marks.size());
  for (size_t c = 0; c < marks.size(); ++c) f.snapshot.checkpoints[c].pos = marks[c];
  const uint8_t* base = bytes + h.data_start;
  // Buffers by (checkpoint + 1 or 0 for the state, layer, index), in order.
  std::map<std::vector<int64_t>, const TensorInfo*> bufs;
  bool have_tokens = false;
  for (const TensorInfo& t : h.tensors) {
    if (t.shape.size() != 1) fail(what, ": tensor '", t.name, "' is not one-dimensional");
    if (t.name == "tokens") {
      if (t.dtype != DType::I32) fail(what, ": 'tokens' is not I32");
      f.snapshot.tokens.resize(size_t(t.numel()));
      if (t.numel() > 0) std::memcpy(f.snapshot.tokens.data(), base + t.offset, size_t(t.numel()) * sizeof(int32_t));
      have_tokens = true;
      continue;
    }
    if (t.dtype != DType::F32) fail(what, ": tensor '", t.name, "' is not F32");
    std::vector<int64_t> key;
    if (t.name.rfind("state.", 0) == 0 && parse_numbers(t.name.substr(6), '.', key) && key.size() == 2) {
      key.insert(key.begin(), 0);
    } else if (t.name.rfind("checkpoint.", 0) == 0 && parse_numbers(t.name.substr(11), '.', key) && key.size() == 3 &&
               key[0] < int64_t(marks.size())) {
      key[0] += 1;
    } else {
      fail(what, ": unexpected tensor '", t.name, "'");
    }
    bufs[key] = &t;
  }
  if (!have_tokens) fail(what, ": no 'tokens' tensor");
  // The state's layers and each layer's buffers numbered 0, 1, ... without gaps (the map holds
  // the state's first); a checkpoint has buffers only for the layers of fixed-size state.
  for (auto& c : f.snapshot.checkpoints) c.layers.resize(f.snapshot.layers.size());
  for (const auto& [key, t] : bufs) {
    std::vector<std::vector<float>>* layer = nullptr;
    if (key[0] == 0) {
      auto& layers = f.snapshot.layers;
      if (key[1] > int64_t(layers.size())) fail(what, ": tensor '", t->name, "' skips a layer");
      if (key[1] == int64_t(layers.size())) layers.emplace_back();
      for (auto& c : f.snapshot.checkpoints) c.layers.resize(layers.size());
      layer = &layers[size_t(key[1])];
    } else {
      auto& layers = f.snapshot.checkpoints[size_t(key[0] - 1)].layers;
      if (key[1] >= int64_t(layers.size())) fail(what, ": tensor '", t->name, "' names a layer the state lacks");
      layer = &layers[size_t(key[1])];
    }
    if (key[2] != int64_t(layer->size())) fail(what, ": tensor '", t->name, "' skips a buffer");
    layer->push_back(floats(*t, base));
  }
  return f;
}

PromptCacheFile load_prompt_cache(const std::string& path) {
  const std::string bytes = read_text_file(path);
  return parse_prompt_cache(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

}  // namespace moeflux
