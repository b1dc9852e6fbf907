// moeflux command line: dispatches to the subcommands in cli/cmd_*.cpp.
#include <cstdio>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <map>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/compute_options.h"
#include "core/error.h"

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // Blocks below 64 MiB come from the heap and freed heap memory is kept: by default glibc maps
  // every logits vector (vocab_size floats, ~0.6 MB) afresh and unmaps it when freed, so each
  // decode step paid page faults for its logits (8 sequences: ~1 ms a step).
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
  CLI::App app{"moeflux: Mixture-of-Experts inference for models larger than memory"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moeflux 0.1.0");
  app.option_defaults()->always_capture_default();  // --help shows each option's default
  std::map<CLI::App*, moeflux::cli::Runner> runners;
  auto add = [&](moeflux::cli::Runner (*reg)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    auto run = reg(app);
    runners[app.get_subcommands({})[before]] = run;
  };
  add(moeflux::cli::register_logits);
#ifndef MOEFLUX_MINIMAL  // MOEFLUX_MINIMAL builds have no tokenizer or chat template
  add(moeflux::cli::register_template);
  add(moeflux::cli::register_tokenize);
  add(moeflux::cli::register_run);
  add(moeflux::cli::register_chat);
  add(moeflux::cli::register_serve);
  add(moeflux::cli::register_perplexity);
#endif
  add(moeflux::cli::register_bench);
  add(moeflux::cli::register_convert);
  add(moeflux::cli::register_inspect);
  add(moeflux::cli::register_verify);
  add(moeflux::cli::register_synth);
  // llama.cpp's -sys / -ngl (several letters after one dash) in a form CLI11 parses
  const std::vector<std::string> args = moeflux::cli::rewrite_llama_flags(argc, argv);
  std::vector<const char*> arg_ptrs;
  for (const auto& s : args) arg_ptrs.push_back(s.c_str());
  try {
    app.parse(int(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto* sub : app.get_subcommands())
      if (runners.count(sub)) return runners[sub]();
  } catch (const moeflux::Error& e) {
    std::fprintf(stderr, "moeflux: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "moeflux: error: out of memory\n");
    return 1;
  }
  return 1;
}
