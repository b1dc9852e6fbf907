// Command-line options for expert streaming, shared by run, chat, bench, perplexity, logits.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "cli/compute_options.h"
#include "stream/streaming.h"

namespace moeflux::cli {

struct StreamArgs {
  std::string expert_cache = "auto", io = "buffered", engine = "pread", policy = "lru";
  std::string pin_profile, save_profile;
  int io_threads = 8;
  double pin_share = 0.5;
  bool no_prefetch = false, verify = false, no_verify = false, mlock = false, mmap = false, no_repack = false, stats = false;
  bool cache_policy_given = false;
  mutable bool checked = false;  // check_stream_args ran (it warns once)

  StreamOptions options() const;  // validates
};

void add_stream_options(CLI::App* sub, StreamArgs& a);
// Checks before loading: the model path (model_path.h), the option syntax, the cache budget
// against the pack and the machine (an --expert-cache on a checkpoint: a warning).
void check_stream_args(const std::string& dir, const StreamArgs& a);
// check_stream_args, then the backend of `c` (and --no-repack), then load_model for it with a
// progress line on a terminal; *load_s: seconds.
std::unique_ptr<Model> load_model_cli(const std::string& dir, const StreamArgs& a, const ComputeArgs& c,
                                      double* load_s = nullptr);
// After a run: --save-profile, and --stats to stderr (elapsed_s: the run's wall time).
void finish_streaming(const Model& m, const StreamArgs& a, double elapsed_s);

}  // namespace moeflux::cli
