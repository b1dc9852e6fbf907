// Command-line options shared by run and chat: model, sampling, stops, length.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cli/stream_options.h"
#include "text/generation.h"

namespace moeflux::cli {

struct GenArgs {
  std::string model;
  std::string tokenizer;  // default: the model directory
  int n_predict = 256;
  float temperature = 0.8f, top_p = 0.95f, min_p = 0.05f;
  int top_k = 40;
  float repeat_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int penalty_last_n = 64;
  int64_t seed = -1;  // -1: random (printed)
  std::vector<std::string> stop;
  std::string system;
  StreamArgs stream;

  GenerateOptions options(const std::vector<int32_t>& eos_ids) const;  // validates
  const std::string& tokenizer_path() const { return tokenizer.empty() ? model : tokenizer; }
};

void add_gen_options(CLI::App* sub, GenArgs& a);

// Error with a hint when no --tokenizer was given and the model directory has no tokenizer.json.
void require_model_tokenizer(const std::string& model, const std::string& tokenizer_option);

}  // namespace moeflux::cli
