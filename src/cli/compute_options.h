// Options every command that runs the model shares: --backend, -t/--threads, --cpu-isa, and the
// llama.cpp flags moeflux refuses with a pointer to its own (-ngl / --n-gpu-layers). Also the
// rewriting of llama.cpp's multi-letter single-dash flags (-sys, -ngl), which CLI11 cannot name.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "backend/registry.h"

namespace moeflux::cli {

struct ComputeArgs {
  int threads = 0;  // 0: physical cores
  std::string backend = "cpu";
  std::string cpu_isa;  // empty: the best the CPU has
  bool cpu_fast_prefill = false;  // --cpu-fast-prefill (CpuOptions::fast_prefill)
  int gpu_layers = 0;   // -ngl: accepted only as 0 (no offload)
  std::string gpu_expert_cache;  // --gpu-expert-cache (CudaOptions::expert_cache)
  std::string moe_misses = "copy";  // --moe-misses (CudaOptions::moe_misses)
  int cpu_moe_layers = 0;           // --cpu-moe-layers

  // Refuses -ngl > 0, --gpu-expert-cache malformed or without a GPU backend, and --moe-misses /
  // --cpu-moe-layers without what they need. Call before loading the model.
  void apply() const;
  // The backend these options ask for; repack: the CPU's weight layout (--no-repack: Off).
  BackendOptions backend_options(Repack repack = Repack::Auto) const;
};

void add_compute_options(CLI::App* sub, ComputeArgs& a);

// argv with llama.cpp's `-sys` and `-ngl` spelled as --system / --n-gpu-layers (also in their
// `-ngl=N` form); everything else unchanged.
std::vector<std::string> rewrite_llama_flags(int argc, const char* const* argv);

}  // namespace moeflux::cli
