// `moeflux serve`: the OpenAI-compatible HTTP server (src/server/api_server.h) on one model,
// up to --slots requests decoding together; runs until SIGINT or SIGTERM. The sampling options
// and -n are the defaults of requests that leave those fields out.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "cli/gen_options.h"
#include "core/error.h"
#include "model/model.h"
#include "server/api_server.h"

namespace moeflux::cli {

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

struct ServeArgs : GenArgs {
  ServeOptions serve;
  size_t cache_mib = 4096;
};

}  // namespace

Runner register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  a->n_predict = -1;  // requests without max_tokens run to the context's end unless -n is given
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat and text completions, streaming); the "
                                          "sampling options and -n (max_tokens; default: until the context ends) "
                                          "are the defaults of requests that leave them out");
  add_gen_options(sub, *a);
  sub->add_option("--host", a->serve.host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", a->serve.port, "Port to listen on (0: any free port, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  sub->add_option("--slots", a->serve.batch.slots, "Requests decoded together (continuous batching)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  sub->add_option("--queue", a->serve.batch.max_queue, "Requests waiting beyond the slots before 503")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  sub->add_option("--cache-ram", a->cache_mib,
                  "MiB of host memory for the prefix cache: the states of earlier conversations that later "
                  "prompts continue (0: off)")
      ->check(CLI::Range(size_t(0), size_t(1) << 30))
      ->capture_default_str();
  sub->add_option("--api-key", a->serve.api_key, "Require Authorization: Bearer KEY on /v1/*");
  sub->add_option("--alias", a->serve.model_name, "Model name in /v1/models and responses (default: the directory's)");
  return [a]() {
    a->check();
    require_model_tokenizer(a->model, a->tokenizer);
    Tokenizer tok = Tokenizer::load(a->tokenizer_path());
    std::optional<ChatTemplates> templates;
    try {
      templates = load_chat_templates(a->tokenizer_path());
    } catch (const Error& e) {
      std::fprintf(stderr, "warning: no chat template (%s): /v1/chat/completions answers 400\n", e.what());
    }
    double load_s = 0;
    auto model = a->load(&load_s);
    ServeOptions o = a->serve;
    o.batch.cache_bytes = a->cache_mib << 20;
    o.sampling = a->options({}).sampling;  // the sampling options: defaults for what requests leave out
    o.seeded = a->seed >= 0;  // else a random seed per request
    o.max_tokens = a->n_predict > 0 ? a->n_predict : 0;  // -n: the default of max_tokens
    o.stop = a->stop, o.system = a->system;                 // --stop, --system: defaults too
    if (o.model_name.empty()) o.model_name = std::filesystem::path(a->model).lexically_normal().filename().string();
    if (o.model_name.empty()) o.model_name = "model";
    ApiServer server(*model, tok, std::move(templates), model_eos_ids(a->model, model->cfg), o);
    const int port = server.start();
    std::printf("moeflux serve: http://%s:%d  model %s  backend %s  slots %d  context %lld  prefix cache %zu MiB  (loaded in %.1f s)\n",
                o.host.c_str(), port, o.model_name.c_str(), model->backend->describe().c_str(), o.batch.slots,
                (long long)model->cfg.max_seq_len, a->cache_mib, load_s);
    std::fflush(stdout);
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::fprintf(stderr, "moeflux serve: stopping\n");
    server.stop();
    return 0;
  };
}

}  // namespace moeflux::cli
