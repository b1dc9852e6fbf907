// ApiServer: the OpenAI-compatible HTTP server of `moeflux serve` (cpp-httplib). Requests
// become GenRequests of one Batcher, so that up to `slots` of them decode together (an expert
// that several route to is read once a step). Endpoints: POST /v1/chat/completions (messages
// through the model's chat template, tools passed to it), POST /v1/completions, both with SSE
// streaming (`stream`, `stream_options.include_usage`); GET /v1/models, /health, /metrics
// (Prometheus text), and GET / a chat page (chat_page.cpp). Errors in OpenAI's error JSON: 400 for bad bodies and context overflow,
// 401 for a missing or wrong key (--api-key), 413 for oversized bodies, 503 (Retry-After) when
// the queue is full.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/batcher.h"
#include "server/api_request.h"
#include "model/model.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
}

namespace moeflux {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;               // 0: any free port (start() returns it)
  std::string api_key;           // empty: no key asked
  std::string model_name;        // what /v1/models lists and responses name
  size_t max_body = 4u << 20;    // bytes
  int max_tokens = 0;            // for requests without max_tokens; 0: until the context ends
  std::vector<std::string> stop;  // stop strings of requests without `stop`
  std::string system;             // chat: the system message of requests that have none
  BatcherOptions batch;
  SamplingParams sampling = openai_sampling_defaults();  // for the fields a request leaves out
  bool seeded = false;  // sampling.seed for requests without a seed (else a random one each)
};

class ApiServer {
 public:
  // templates: none for a model without a chat template (then /v1/chat/completions is a 400).
  ApiServer(const Model& m, const Tokenizer& tok, std::optional<ChatTemplates> templates, std::vector<int32_t> eos_ids,
            const ServeOptions& opt);
  ~ApiServer();
  // Binds and serves on threads of its own; returns the port. Error when it cannot bind.
  int start();
  void stop();
  BatcherStats stats() const { return batcher_.stats(); }

 private:
  struct Call;
  void install_routes();

  const Model& model_;
  const Tokenizer& tok_;
  std::optional<ChatTemplates> templates_;
  std::vector<int32_t> eos_ids_;
  ServeOptions opt_;
  Engine engine_;
  Batcher batcher_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
};

}  // namespace moeflux
