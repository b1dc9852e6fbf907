// `moeflux logits`: dump f32 logits (and optionally greedy tokens) for a list of token ids,
// for verifying a model against a reference. --decode feeds the ids one at a time through
// the cache instead of one prefill; --mla picks the attention path of MLA models (DeepSeek-V3).
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/compute_options.h"
#include "cli/parse.h"
#include "cli/stream_options.h"
#include "core/error.h"
#include "engine/generate.h"
#include "engine/session.h"
#include "format/safetensors.h"
#include "model/blocks/mla.h"
#include "model/model.h"

namespace moeflux::cli {

namespace {
struct LogitsArgs {
  std::string model, ids, out, mla = "absorbed";
  bool decode = false;
  int generate = 0;
  ComputeArgs compute;
  StreamArgs stream;
};
}  // namespace

Runner register_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  auto* sub = app.add_subcommand("logits", "Write the logits of a token sequence to a safetensors file");
  sub->add_option("-m,--model", a->model, "Model directory (a checkpoint: config.json + safetensors, or a pack)")->required();
  sub->add_option("--ids", a->ids, "Comma-separated token ids, e.g. 1,2,3")->required();
  sub->add_option("--out", a->out, "Output .safetensors (f32 'logits' [T, vocab], int32 'generated' [N])")->required();
  sub->add_flag("--decode", a->decode, "Feed the ids one by one through the cache instead of one prefill");
  sub->add_option("--mla", a->mla, "MLA attention path: absorbed (latent-space, default) or naive (expanded k/v)")
      ->check(CLI::IsMember({"naive", "absorbed"}));
  sub->add_option("--generate", a->generate, "Also greedily generate N tokens after the ids")
      ->check(CLI::Range(0, 1 << 20));
  add_stream_options(sub, a->stream);
  add_compute_options(sub, a->compute);
  return [a]() {
    const auto ids = parse_id_list(a->ids, "--ids");
    a->compute.apply();
    auto t0 = std::chrono::steady_clock::now();
    auto model = load_model_cli(a->model, a->stream, a->compute);
    set_mla_path(*model, parse_mla_path(a->mla, "--mla"));
    Session s(*model);
    const int64_t V = model->cfg.vocab_size;
    std::vector<float> logits;
    if (a->decode) {
      for (int32_t id : ids) {
        auto l = s.forward(std::span<const int32_t>(&id, 1));
        logits.insert(logits.end(), l.begin(), l.end());
      }
    } else {
      logits = s.forward(ids);
    }
    std::vector<OutTensor> out{out_f32("logits", {int64_t(ids.size()), V}, logits)};
    std::vector<int32_t> gen;
    if (a->generate > 0) {
      gen = greedy_continue(s, std::span<const float>(logits).subspan(logits.size() - size_t(V)), a->generate);
      out.push_back(out_i32("generated", {int64_t(gen.size())}, gen));
    }
    write_safetensors(a->out, out);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!gen.empty()) {
      std::string g;
      for (int32_t t : gen) g += (g.empty() ? "" : ",") + std::to_string(t);
      std::printf("generated: %s\n", g.c_str());
      std::fflush(stdout);
    }
    std::fprintf(stderr, "moeflux logits: %zu tokens%s -> %s (%.2f s)\n", ids.size(),
                 a->decode ? " (decode)" : "", a->out.c_str(), secs);
    finish_streaming(*model, a->stream, secs);
    return 0;
  };
}

}  // namespace moeflux::cli
