// The options of commands that run the model: threads, backend, the GPU offload refusal.
#include "cli/compute_options.h"

#include <utility>

#include "core/byte_budget.h"
#include "core/error.h"

namespace moeflux::cli {

void add_compute_options(CLI::App* sub, ComputeArgs& a) {
  std::string names;
  for (const auto& n : backend_names()) names += (names.empty() ? "" : ", ") + n;
  sub->add_option("--backend", a.backend, "Compute backend: " + names)->check(CLI::IsMember(backend_names()));
  sub->add_option("-t,--threads", a.threads, "CPU threads (0: one per physical core)")->check(CLI::Range(0, 1024));
  sub->add_option("--cpu-isa", a.cpu_isa,
                  "Instruction set of the CPU kernels (default: the best this CPU has; lower ones for comparisons)")
      ->check(CLI::IsMember({"scalar", "avx2", "avx512", "avx512vnni"}));
  sub->add_flag("--cpu-fast-prefill", a.cpu_fast_prefill,
                "Prompts on AVX512-VNNI CPUs about 1.25x faster: their matmuls take each activation to about 2^-16 "
                "of its group's largest (two int8 digits) instead of float precision; decode keeps it");
  sub->add_option("--n-gpu-layers", a.gpu_layers,
                  "llama.cpp's -ngl: GPU offload is chosen with --backend cuda (the whole model on the GPU)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--gpu-expert-cache", a.gpu_expert_cache,
                  "GPU memory for the experts a pack streams (--backend cuda): SIZE (24G), P% of the experts, or auto "
                  "(the free GPU memory less a reserve); default none: each step's experts are staged");
  sub->add_option("--moe-misses", a.moe_misses,
                  "Where a streamed expert missing from the GPU expert cache computes: copy (into the cache, then the "
                  "GPU), cpu (the CPU, while the GPU computes the hits), auto (decode and small batches: copy or each "
                  "step's misses split between the two, whichever the steps measure faster; prefills: copy)")
      ->check(CLI::IsMember({"copy", "cpu", "auto"}));
  sub->add_option("--cpu-moe-layers,--n-cpu-moe", a.cpu_moe_layers,
                  "(llama.cpp's --n-cpu-moe) the streamed experts of the first N MoE layers always compute on the CPU "
                  "(--backend cuda)")
      ->check(CLI::Range(0, 1 << 20));
}

void ComputeArgs::apply() const {
  if (!gpu_expert_cache.empty()) {
    if (backend != "cuda" && backend != "auto") fail("--gpu-expert-cache needs --backend cuda (or auto)");
    parse_byte_budget("--gpu-expert-cache", gpu_expert_cache, 1, 1);  // the syntax, before loading anything
  }
  if (moe_misses != "copy" && gpu_expert_cache.empty())
    fail("--moe-misses ", moe_misses, " needs a GPU expert cache (--gpu-expert-cache)");
  if (cpu_moe_layers > 0 && backend != "cuda" && backend != "auto")
    fail("--cpu-moe-layers needs --backend cuda (or auto)");
  if (gpu_layers > 0)
    fail("-ngl / --n-gpu-layers ", gpu_layers, ": GPU offload is chosen with --backend cuda (the whole model runs on "
         "the GPU; --backend auto: the GPU when there is one); drop -ngl");
}

BackendOptions ComputeArgs::backend_options(Repack repack) const {
  BackendOptions o;
  o.name = backend;
  o.cpu.threads = threads;
  o.cpu.isa = cpu_isa;
  o.cpu.repack = repack;
  o.cpu.fast_prefill = cpu_fast_prefill;
  o.cuda.expert_cache = gpu_expert_cache;
  o.cuda.moe_misses = moe_misses == "cpu" ? MoeMisses::Cpu : moe_misses == "auto" ? MoeMisses::Auto : MoeMisses::Copy;
  o.cuda.cpu_moe_layers = cpu_moe_layers;
  return o;
}

std::vector<std::string> rewrite_llama_flags(int argc, const char* const* argv) {
  static const std::pair<std::string, std::string> kFlags[] = {{"-sys", "--system"}, {"-ngl", "--n-gpu-layers"}};
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    for (const auto& [llama, ours] : kFlags)
      if (arg == llama) arg = ours;
      else if (arg.starts_with(llama + "=")) arg = ours + arg.substr(llama.size());
    out.push_back(std::move(arg));
    if (out.back() == "--") {  // what follows is positional
      for (++i; i < argc; ++i) out.emplace_back(argv[i]);
    }
  }
  return out;
}

}  // namespace moeflux::cli
