// Shared generation options.
#include "cli/gen_options.h"

#include <climits>
#include <filesystem>
#include <random>

#include "convert/side_files.h"
#include "core/error.h"

namespace moeflux::cli {

void add_gen_options(CLI::App* sub, GenArgs& a) {
  sub->add_option("-m,--model", a.model, "Model directory (checkpoint or pack)")->required();
  sub->add_option("--tokenizer", a.tokenizer, "Tokenizer directory (default: the model directory)");
  add_stream_options(sub, a.stream);
  add_compute_options(sub, a.compute);
  sub->add_option("-n,--n-predict", a.n_predict, "Maximum tokens to generate; -1 = until the context ends")
      ->check(CLI::Range(-1, 1 << 24));
  sub->add_option("-c,--ctx-size", a.ctx_size, "Context limit in tokens (prompt + answers); 0 = the model's")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  sub->add_option("--temperature,--temp", a.temperature, "Sampling temperature; 0 = greedy");
  sub->add_option("--top-k", a.top_k, "Keep the k most likely tokens; 0 = off");
  sub->add_option("--top-p", a.top_p, "Nucleus sampling mass in (0, 1]; 1 = off");
  sub->add_option("--min-p", a.min_p, "Drop tokens below min-p x the top probability; 0 = off");
  sub->add_option("--repeat-penalty", a.repeat_penalty, "Repetition penalty (1 = off)");
  sub->add_option("--presence-penalty", a.presence_penalty, "Presence penalty (0 = off)");
  sub->add_option("--frequency-penalty", a.frequency_penalty, "Frequency penalty (0 = off)");
  sub->add_option("--penalty-last-n", a.penalty_last_n, "Tokens the penalties look back over (-1 = all)");
  sub->add_option("-s,--seed", a.seed, "Random seed (-1 = random, printed with the statistics)");
  sub->add_option("-r,--stop,--reverse-prompt", a.stop, "Stop at this string (not printed); repeatable");
  sub->add_option("--system", a.system, "System prompt (chat template; llama.cpp's -sys)");
}

void GenArgs::check() const {
  if (n_predict == 0) fail("--n-predict must be >= 1, or -1 for until the context ends");
  options({});  // the sampling ranges, seed and stop strings
  compute.apply();
  check_stream_args(model, stream);
}

void require_model_tokenizer(const std::string& model, const std::string& tokenizer_option) {
  std::error_code ec;
  if (!tokenizer_option.empty() || !std::filesystem::is_directory(model, ec) || has_tokenizer(model)) return;
  fail(model, ": no tokenizer.json in the model directory: pass --tokenizer DIR or re-convert from a checkpoint "
       "that has tokenizer.json");
}

GenerateOptions GenArgs::options(const std::vector<int32_t>& eos_ids) const {
  GenerateOptions o;
  o.max_tokens = n_predict < 0 ? INT_MAX : n_predict;
  o.sampling.temperature = temperature;
  o.sampling.top_k = top_k;
  o.sampling.top_p = top_p;
  o.sampling.min_p = min_p;
  o.sampling.repeat_penalty = repeat_penalty;
  o.sampling.presence_penalty = presence_penalty;
  o.sampling.frequency_penalty = frequency_penalty;
  o.sampling.penalty_last_n = penalty_last_n;
  if (seed < -1) fail("--seed must be >= 0 or -1 (random), got ", seed);
  o.sampling.seed = seed >= 0 ? uint64_t(seed) : uint64_t(std::random_device{}()) & 0xffffffffu;
  o.sampling.validate();
  for (const auto& s : stop)
    if (s.empty()) fail("--stop: empty stop string");
  o.stop = stop;
  o.eos_ids = eos_ids;
  return o;
}

std::unique_ptr<Model> GenArgs::load(double* load_s) const {
  auto m = load_model_cli(model, stream, compute, load_s);
  if (ctx_size > m->cfg.max_seq_len)
    fail("--ctx-size ", ctx_size, " is more than the model's context of ", m->cfg.max_seq_len, " tokens");
  if (ctx_size > 0) m->cfg.max_seq_len = ctx_size;
  return m;
}

}  // namespace moeflux::cli
