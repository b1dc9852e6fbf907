// The OpenAI-compatible request bodies of `moeflux serve`: POST /v1/chat/completions and
// POST /v1/completions parsed and checked into a CompletionRequest, every mistake an ApiError
// with the HTTP status and OpenAI's error fields (message, type, param). Untrusted bytes: the
// parser has a fuzz target (fuzz/fuzz_api_request.cpp).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"

namespace moeflux {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = {}, std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)) {}
  int status;
  std::string param, type;
  // {"error": {"message", "type", "param", "code"}}.
  std::string json() const;
};

struct CompletionRequest {
  bool chat = true;
  std::string model;                                             // as given (informational)
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // chat: role / content (text)
  nlohmann::ordered_json tools;                                  // chat: passed to the template, or null
  // chat: "auto" (also for "required" and a named function: nothing forces a call), or "none"
  // (the tools are not passed to the template; the answer is all text).
  std::string tool_choice = "auto";
  std::string prompt;                                            // completions
  std::optional<int> max_tokens;                                 // max_tokens / max_completion_tokens
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  bool seeded = false;  // the request gave a seed
  int logprobs = -1;    // >= 0: report each token's logprob with this many alternatives
};

// OpenAI's sampling defaults: temperature 1, top_p 1, no top-k, min-p or penalties.
SamplingParams openai_sampling_defaults();

// Parses a request body; ApiError (400) naming the field for anything malformed or out of range,
// and for what this server does not do (n > 1). Chat: logprobs (bool) + top_logprobs (0-20);
// completions: logprobs (0-5). Fields not given keep `defaults`.
CompletionRequest parse_completion_request(std::string_view body, bool chat,
                                           const SamplingParams& defaults = openai_sampling_defaults());

}  // namespace moeflux
