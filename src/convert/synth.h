// Synthetic checkpoints at the dimensions of real models (config.json values of the Hub
// checkpoints), with random weights, for measuring conversion and streaming at real sizes
// without downloading. Values are a pure function of (seed, tensor name, element index), so
// a pack synthesised directly equals the Hugging Face synthesis converted with the same bits.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "convert/convert.h"

namespace moeflux {

struct SynthOptions {
  std::string preset;     // qwen3-30b-a3b | qwen3-next-80b-a3b | qwen3.5-397b-a17b | deepseek-v3 | mixtral-8x7b
  int64_t layers = 0;     // 0: the model's own
  int64_t experts = 0;    // routed experts per layer; 0: the model's own
  int64_t vocab = 0;      // 0: the model's own
  uint64_t seed = 0;
  // Expert popularity: 0 routes nearly uniformly (random weights); a > 0 gives each MoE layer
  // a Zipf-like popularity, expert of rank r (a per-layer random order) chosen ~ (r + 1)^-a:
  // the embedding carries a constant feature (column 0) that every router reads with a
  // per-expert weight a * ln(1 / (r + 1)), scaled to the router's noise. Measure the result
  // with --save-profile; deeper layers drift flatter.
  double routing_skew = 0;
  uint64_t shard_bytes = 2ull << 30;  // Hugging Face layout: bytes per safetensors shard
};

std::vector<std::string> synth_presets();
// The preset's config.json with the overrides applied.
nlohmann::ordered_json synth_config(const SynthOptions& o);
// Tensor names and shapes (all BF16) for a config made by synth_config.
std::vector<SrcTensor> synth_tensors(const nlohmann::ordered_json& cfg);

// A ConvertSource generating the tensors on demand (for `synth --format pack`).
std::unique_ptr<ConvertSource> synth_source(const SynthOptions& o);
// Writes config.json, sharded model-XXXXX-of-YYYYY.safetensors and the index into `dir`
// (created; must not exist), streaming; returns bytes of tensor data written.
uint64_t write_synth_hf(const SynthOptions& o, const std::string& dir, bool quiet);

}  // namespace moeflux
