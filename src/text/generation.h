// Text generation on top of a Session: feed prompt tokens (only the ones the session has not
// seen), then sample until max tokens, an end-of-sequence id or a stop string, streaming
// complete UTF-8 text through a callback. Stop strings are never emitted: text that could be
// the start of one is held back until it is known not to be.
#pragma once
#include <atomic>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/session.h"
#include "tokenizer/tokenizer.h"

namespace moeflux {

struct GenerateOptions {
  int max_tokens = 256;
  SamplingParams sampling;
  std::vector<std::string> stop;     // stop strings (not emitted)
  std::vector<int32_t> eos_ids;      // end-of-sequence token ids (not emitted)
  const std::atomic<bool>* cancel = nullptr;  // set (e.g. by Ctrl-C) to stop after this token
  std::function<void()> on_prefilled;         // after the prompt's prefill, before sampling
};

struct GenerateStats {
  int64_t prompt_tokens = 0;     // tokens given this call
  int64_t prefilled_tokens = 0;  // tokens actually run through prefill this call
  int64_t generated_tokens = 0;
  double ttft_s = 0;             // call start -> first generated token
  double prefill_s = 0, decode_s = 0;
  std::string stop_reason;       // "length" | "eos" | "stop" | "cancelled" | "context"
  std::string text;              // everything emitted
  std::vector<int32_t> tokens;   // generated ids (including an eos id, if one ended it)
};

// Generates after `prompt` (the new tokens to append to the session). on_text receives each
// piece of text as soon as it is final.
GenerateStats generate_text(Session& s, const Tokenizer& tok, std::span<const int32_t> prompt,
                            const GenerateOptions& opt, const std::function<void(const std::string&)>& on_text);

// Length of the longest suffix of `text` that is a proper prefix of some stop string: the text
// a stream holds back until it is known not to start a stop string.
size_t held_suffix(const std::string& text, const std::vector<std::string>& stops);

// End-of-sequence ids of a model directory: config.json and generation_config.json
// `eos_token_id` (an int or a list).
std::vector<int32_t> model_eos_ids(const std::string& model_dir, const ModelConfig& cfg);

}  // namespace moeflux
