// Options every command that runs the model shares: -t/--threads, --backend, and the
// llama.cpp flags moeflux refuses with a pointer to its own (-ngl / --n-gpu-layers). Also the
// rewriting of llama.cpp's multi-letter single-dash flags (-sys, -ngl), which CLI11 cannot name.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace moeflux::cli {

struct ComputeArgs {
  int threads = 0;  // 0: physical cores
  std::string backend = "cpu";
  int gpu_layers = 0;  // -ngl: accepted only as 0 (no offload)

  // Refuses -ngl > 0, then sets the CPU thread count. Call before loading the model.
  void apply() const;
};

void add_compute_options(CLI::App* sub, ComputeArgs& a);

// argv with llama.cpp's `-sys` and `-ngl` spelled as --system / --n-gpu-layers (also in their
// `-ngl=N` form); everything else unchanged.
std::vector<std::string> rewrite_llama_flags(int argc, const char* const* argv);

}  // namespace moeflux::cli
