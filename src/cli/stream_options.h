// Command-line options for expert streaming, shared by run, chat, bench, perplexity, logits.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "stream/streaming.h"

namespace moeflux::cli {

struct StreamArgs {
  std::string expert_cache = "auto", io = "buffered", engine = "pread", policy = "lru";
  std::string pin_profile, save_profile;
  int io_threads = 8;
  double pin_share = 0.5;
  bool no_prefetch = false, verify = false, no_verify = false, mlock = false, mmap = false, no_repack = false, stats = false;
  bool cache_policy_given = false;

  StreamOptions options() const;  // validates
};

void add_stream_options(CLI::App* sub, StreamArgs& a, bool with_stats = true);
std::unique_ptr<Model> load_model_cli(const std::string& dir, const StreamArgs& a);
// After a run: --save-profile, and --stats to stderr (elapsed_s: the run's wall time).
void finish_streaming(const Model& m, const StreamArgs& a, double elapsed_s);

}  // namespace moeflux::cli
