// Command-line options shared by run and chat: model, sampling, stops, length, context,
// threads (llama.cpp's spellings where the meaning is the same: -n -1, -c, -r, -t, -sys).
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cli/compute_options.h"
#include "cli/stream_options.h"
#include "text/generation.h"

namespace moeflux::cli {

struct GenArgs {
  std::string model;
  std::string tokenizer;  // default: the model directory
  int n_predict = 256;    // -1: until the context ends
  int64_t ctx_size = 0;   // 0: the model's context
  float temperature = 0.8f, top_p = 0.95f, min_p = 0.05f;
  int top_k = 40;
  float repeat_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int penalty_last_n = 64;
  int64_t seed = -1;  // -1: random (printed)
  std::vector<std::string> stop;
  std::string system;
  ComputeArgs compute;
  StreamArgs stream;

  // Checks every option that needs no model (sampling ranges, seed, stops, length, the model
  // path, the cache budget) and sets the thread count: call before loading anything.
  void check() const;
  GenerateOptions options(const std::vector<int32_t>& eos_ids) const;  // validates
  // check_stream_args is done by check(); loads, then applies --ctx-size. *load_s: seconds.
  std::unique_ptr<Model> load(double* load_s = nullptr) const;
  const std::string& tokenizer_path() const { return tokenizer.empty() ? model : tokenizer; }
};

void add_gen_options(CLI::App* sub, GenArgs& a);

// Error with a hint when no --tokenizer was given and the model directory has no tokenizer.json.
void require_model_tokenizer(const std::string& model, const std::string& tokenizer_option);

}  // namespace moeflux::cli
