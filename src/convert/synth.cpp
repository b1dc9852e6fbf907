// Synthetic weights (see synth.h): a counter-based generator per tensor, the on-demand
// ConvertSource for packs, and the streaming sharded safetensors writer.
#include "convert/synth.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "convert/encode.h"
#include "convert/progress.h"
#include "core/error.h"
#include "format/config.h"

namespace moeflux {

namespace fs = std::filesystem;

namespace {

uint64_t mix64(uint64_t z) {  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t name_hash(const std::string& s, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ull ^ mix64(seed);
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return mix64(h);
}

// Elements [i0, i0 + n) of tensor `t`: uniform in [-a, a] around a centre; 1-D norm weights
// near 1, linears scaled by 1/sqrt(fan_in) so activations stay O(1).
void fill(const SrcTensor& t, uint64_t seed, uint64_t i0, uint64_t n, uint8_t* out) {
  const uint64_t h = name_hash(t.name, seed);
  const bool vec = t.shape.size() == 1;
  const bool norm = vec && t.name.find("norm") != std::string::npos;
  const float centre = norm ? 1.0f : 0.0f;
  const float a = vec ? 0.1f : 1.0f / std::sqrt(float(std::max<int64_t>(t.shape.back(), 1)));
  for (uint64_t k = 0; k < n; ++k) {
    const uint64_t r = mix64(h + (i0 + k) * 0x9e3779b97f4a7c15ull);
    const float u = float(r >> 40) * (1.0f / float(1u << 24)) * 2.0f - 1.0f;
    const float v = centre + a * u;
    if (t.dtype == DType::F32) std::memcpy(out + 4 * k, &v, 4);
    else {
      const uint16_t b = f32_to_bf16(v);
      std::memcpy(out + 2 * k, &b, 2);
    }
  }
}

// fill over the CPU threads: the elements are independent, so the bytes are the same.
void fill_parallel(const SrcTensor& t, uint64_t seed, uint64_t i0, uint64_t n, uint8_t* out) {
  const uint64_t es = dtype_size(t.dtype);
  parallel_rows(int64_t(n), 1, [&](int64_t a, int64_t b) { fill(t, seed, i0 + uint64_t(a), uint64_t(b - a), out + uint64_t(a) * es); });
}

class SynthSource : public ConvertSource {
 public:
  explicit SynthSource(const SynthOptions& o) : seed_(o.seed) {
    const auto cfg = synth_config(o);
    cfg_ = parse_model_config(cfg.dump(), "synth preset " + o.preset);
    tensors_ = synth_tensors(cfg);
    for (const auto& t : tensors_) by_name_[t.name] = &t;
  }
  const ModelConfig& config() const override { return cfg_; }
  std::string layout() const override { return "hf"; }
  const std::vector<SrcTensor>& tensors() const override { return tensors_; }
  const uint8_t* acquire(const std::string& name) override {
    auto& buf = live_[name];
    if (!buf) {
      const SrcTensor& t = *by_name_.at(name);
      buf = std::make_unique_for_overwrite<uint8_t[]>(t.nbytes);  // every byte is filled
      fill_parallel(t, seed_, 0, t.nbytes / dtype_size(t.dtype), buf.get());
    }
    return buf.get();
  }
  void release(const std::string& name) override { live_.erase(name); }
  bool file_backed() const override { return false; }

 private:
  uint64_t seed_;
  ModelConfig cfg_;
  std::vector<SrcTensor> tensors_;
  std::map<std::string, const SrcTensor*> by_name_;
  std::map<std::string, std::unique_ptr<uint8_t[]>> live_;
};

void write_all(int fd, const void* p, size_t n, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(path, ": write failed: ", std::strerror(errno));
    c += w, n -= size_t(w);
  }
}

}  // namespace

std::unique_ptr<ConvertSource> synth_source(const SynthOptions& o) { return std::make_unique<SynthSource>(o); }

uint64_t write_synth_hf(const SynthOptions& o, const std::string& dir, bool quiet) {
  std::error_code ec;
  if (fs::exists(dir, ec)) fail(dir, ": already exists");
  const auto cfg = synth_config(o);
  const auto tensors = synth_tensors(cfg);
  std::vector<std::vector<const SrcTensor*>> shards(1);
  uint64_t cur = 0, total = 0;
  for (const auto& t : tensors) {
    if (cur > 0 && cur + t.nbytes > o.shard_bytes) shards.emplace_back(), cur = 0;
    shards.back().push_back(&t);
    cur += t.nbytes;
    total += t.nbytes;
  }
  fs::create_directories(dir);
  {
    std::ofstream f(dir + "/config.json");
    f << cfg.dump(2) << "\n";
  }
  Progress progress("synth", total, quiet);
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  std::vector<uint8_t> buf;
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    const std::string path = dir + "/" + name;
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    uint64_t off = 0;
    for (auto* t : shards[s]) {
      h[t->name] = {{"dtype", std::string(dtype_name(t->dtype))}, {"shape", t->shape},
                    {"data_offsets", {off, off + t->nbytes}}};
      off += t->nbytes;
      weight_map[t->name] = name;
    }
    std::string hs = h.dump();
    while (hs.size() % 8) hs += ' ';
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail(path, ": cannot create: ", std::strerror(errno));
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(hs.size()) >> (8 * i));
    write_all(fd, len, 8, path);
    write_all(fd, hs.data(), hs.size(), path);
    for (auto* t : shards[s]) {
      const uint64_t es = dtype_size(t->dtype), n = t->nbytes / es;
      constexpr uint64_t kChunk = 1 << 22;
      for (uint64_t i = 0; i < n; i += kChunk) {
        const uint64_t k = std::min(kChunk, n - i);
        buf.resize(k * es);
        fill_parallel(*t, o.seed, i, k, buf.data());
        write_all(fd, buf.data(), buf.size(), path);
        progress.add(buf.size());
      }
    }
    if (::close(fd) != 0) fail(path, ": close failed: ", std::strerror(errno));
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2) << "\n";
  progress.finish();
  return total;
}

}  // namespace moeflux
