// Synthetic weights (see synth.h): a counter-based generator per tensor, the on-demand
// ConvertSource for packs, and the streaming sharded safetensors writer.
#include "convert/synth.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
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

// The routing-skew feature (SynthOptions::routing_skew): column 0 of the embedding holds 1 for
// every token, no layer writes to it (row 0 of every output projection is 0) and only the
// routers read it (column 0 of every other matrix over the hidden state is 0), so that each
// router sees 1 / rms(x) there, a constant of the layer, and nothing else changes. Its other columns add noise of
// standard deviation about sqrt(1/3) (normed inputs of RMS 1, entries of variance 1 / (3 D)).
// rms(x) grows with depth as the sublayers add to the residual: about sqrt(kGrowth (l + 1))
// in layer l, measured on these random weights (--save-profile over a prefill of random
// tokens), which the router's weight of column 0 makes up for.
constexpr double kGrowth = 0.01;

bool ends_with(const std::string& n, const std::string& s) {
  return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
}

bool is_router(const SrcTensor& t) { return t.shape.size() == 2 && t.shape[0] > 1 && ends_with(t.name, ".gate.weight"); }

bool is_output_projection(const SrcTensor& t) {
  if (t.shape.size() != 2) return false;
  for (const char* s : {".o_proj.weight", ".out_proj.weight", ".down_proj.weight", ".w2.weight"})
    if (ends_with(t.name, s)) return true;
  return false;
}

// The layer number in "model.layers.N...." (0 if none).
int64_t layer_of(const std::string& name) {
  const std::string p = "model.layers.";
  return name.rfind(p, 0) == 0 ? std::atoll(name.c_str() + p.size()) : 0;
}

// Router weights of column 0 for skew a: the expert of rank r (a random order of the experts per
// tensor) gets a logit offset of a * noise * ln(1 / (r + 1)).
std::vector<float> skew_column(const SrcTensor& t, uint64_t h, double a) {
  const int64_t E = t.shape[0];
  std::vector<std::pair<uint64_t, int64_t>> order;
  for (int64_t e = 0; e < E; ++e) order.emplace_back(mix64(h ^ (0x5bd1e995ull * uint64_t(e + 1))), e);
  std::sort(order.begin(), order.end());
  const double rms = std::sqrt(kGrowth * double(layer_of(t.name) + 1)), noise = std::sqrt(1.0 / 3);
  std::vector<float> w(static_cast<size_t>(E));
  for (int64_t r = 0; r < E; ++r) w[size_t(order[size_t(r)].second)] = float(a * noise * std::log(1.0 / double(r + 1)) * rms);
  return w;
}

// Elements [i0, i0 + n) of tensor `t`: uniform in [-a, a] around a centre; 1-D norm weights
// near 1, linears scaled by 1/sqrt(fan_in) so activations stay O(1); with a routing skew, the
// feature of column 0 as above.
struct Skew {
  double a = 0;     // SynthOptions::routing_skew
  int64_t dim = 0;  // hidden_size
};

void fill(const SrcTensor& t, uint64_t seed, Skew skew, uint64_t i0, uint64_t n, uint8_t* out) {
  const uint64_t h = name_hash(t.name, seed);
  const bool vec = t.shape.size() == 1;
  const bool norm = vec && t.name.find("norm") != std::string::npos;
  const float centre = norm ? 1.0f : 0.0f;
  const float a = vec ? 0.1f : 1.0f / std::sqrt(float(std::max<int64_t>(t.shape.back(), 1)));
  const uint64_t cols = uint64_t(std::max<int64_t>(t.shape.back(), 1));
  const bool on = skew.a > 0, embed = on && t.name == "model.embed_tokens.weight";
  const bool quiet_row0 = on && is_output_projection(t);
  const std::vector<float> router = on && is_router(t) ? skew_column(t, h, skew.a) : std::vector<float>();
  const bool quiet_col0 = on && !embed && router.empty() && t.shape.size() == 2 && t.shape[1] == skew.dim;
  for (uint64_t k = 0; k < n; ++k) {
    const uint64_t r = mix64(h + (i0 + k) * 0x9e3779b97f4a7c15ull);
    const float u = float(r >> 40) * (1.0f / float(1u << 24)) * 2.0f - 1.0f;
    float v = centre + a * u;
    const uint64_t i = i0 + k;
    if (quiet_row0 && i < cols) v = 0;
    if (i % cols == 0) {
      if (embed) v = 1;
      else if (!router.empty()) v = router[i / cols];
      else if (quiet_col0) v = 0;
    }
    if (t.dtype == DType::F32) std::memcpy(out + 4 * k, &v, 4);
    else {
      const uint16_t b = f32_to_bf16(v);
      std::memcpy(out + 2 * k, &b, 2);
    }
  }
}

// fill over the CPU threads: the elements are independent, so the bytes are the same.
void fill_parallel(const SrcTensor& t, uint64_t seed, Skew skew, uint64_t i0, uint64_t n, uint8_t* out) {
  const uint64_t es = dtype_size(t.dtype);
  parallel_rows(int64_t(n), 1, [&](int64_t a, int64_t b) {
    fill(t, seed, skew, i0 + uint64_t(a), uint64_t(b - a), out + uint64_t(a) * es);
  });
}

class SynthSource : public ConvertSource {
 public:
  explicit SynthSource(const SynthOptions& o) : seed_(o.seed) {
    const auto cfg = synth_config(o);
    cfg_ = parse_model_config(cfg.dump(), "synth preset " + o.preset);
    skew_ = Skew{o.routing_skew, cfg_.dim};
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
      fill_parallel(t, seed_, skew_, 0, t.nbytes / dtype_size(t.dtype), buf.get());
    }
    return buf.get();
  }
  void release(const std::string& name) override { live_.erase(name); }
  bool file_backed() const override { return false; }

 private:
  uint64_t seed_;
  Skew skew_;
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
        fill_parallel(*t, o.seed, Skew{o.routing_skew, cfg.at("hidden_size").get<int64_t>()}, i, k, buf.data());
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
