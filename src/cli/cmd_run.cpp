// `moeflux run`: a prompt in, streamed text out (stdout), statistics at the end (stderr),
// or one JSON record with --json. --chat renders the prompt with the model's chat template.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/gen_options.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "engine/prompt_cache.h"
#include "engine/session.h"
#include "model/model.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace moeflux::cli {

namespace {
struct RunArgs : GenArgs {
  std::string prompt, file;
  bool chat = false, json = false;
  std::string prompt_cache;
  bool prompt_cache_ro = false;
};

// --prompt-cache: continues the state saved in `path` as far as it serves `ids` (returns how
// many tokens it kept), and unless read_only sets opt.on_prefilled to save the prompt's state
// there. A file that is not a prompt cache is an error (it is
// not overwritten); one made with another model is not used.
int64_t use_prompt_cache(const std::string& path, bool read_only, Session& s, const std::vector<int32_t>& ids,
                         GenerateOptions& opt) {
  const std::string identity = model_identity(s.model());
  Sequence& seq = s.sequence();
  int64_t kept = 0;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    const PromptCacheFile f = load_prompt_cache(path);
    if (f.identity != identity) {
      std::fprintf(stderr, "warning: %s was made with another model: not used%s\n", path.c_str(),
                   read_only ? "" : ", it will be replaced");
    } else {
      seq.restore(f.snapshot);
      std::vector<int64_t> marks;
      for (const auto& c : f.snapshot.checkpoints) marks.push_back(c.pos);
      kept = seq.rewind(reusable_prefix(f.snapshot.tokens, marks, seq.recurrent(), ids));
      std::fprintf(stderr, "prompt cache: %lld of %zu prompt tokens reused from %s\n", (long long)kept, ids.size(),
                   path.c_str());
    }
  }
  if (!read_only)
    opt.on_prefilled = [&seq, path, identity] {
      seq.checkpoint();  // a hybrid model's later prompts may part from this one here
      save_prompt_cache(path, seq.save(), identity);
    };
  return kept;
}

void print_stats(const GenerateStats& st, int64_t cached, uint64_t seed, double load_s) {
  const double pre = st.prefill_s > 0 ? double(st.prefilled_tokens) / st.prefill_s : 0;
  const double dec = st.decode_s > 0 && st.generated_tokens > 1 ? double(st.generated_tokens - 1) / st.decode_s : 0;
  std::fprintf(stderr,
               "\n\nprompt tokens: %lld (%lld cached) | generated: %lld (%s) | load %.2f s | TTFT %.3f s | prefill %.1f tok/s | decode %.1f tok/s | seed %llu\n",
               (long long)(st.prompt_tokens + cached), (long long)cached, (long long)st.generated_tokens, st.stop_reason.c_str(), load_s, st.ttft_s, pre,
               dec, (unsigned long long)seed);
}
}  // namespace

Runner register_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand("run", "Generate text from a prompt, streamed to stdout");
  add_gen_options(sub, *a);
  auto* src = sub->add_option_group("prompt");
  src->add_option("-p,--prompt", a->prompt, "Prompt text");
  src->add_option("-f,--file", a->file, "Read the prompt from a file");
  src->require_option(1);
  sub->add_flag("--chat", a->chat, "Render the prompt as a user message with the chat template");
  sub->add_flag("--json", a->json, "Print one JSON record (text, tokens, statistics) instead of streaming");
  sub->add_option("--prompt-cache", a->prompt_cache,
                  "Continue the prompt state saved in FILE as far as this prompt starts the same way, then save "
                  "this prompt's state there");
  sub->add_flag("--prompt-cache-ro", a->prompt_cache_ro, "Use --prompt-cache FILE without updating it");
  return [a]() {
    // Everything that needs no model is checked first: a mistake costs no load.
    if (!a->chat && !a->system.empty()) fail("--system needs --chat");
    std::string prompt = a->file.empty() ? a->prompt : read_text_file(a->file);
    const std::string source = a->file.empty() ? "--prompt" : a->file;
    if (prompt.empty()) fail(source, ": the prompt is empty");
    if (const size_t bad = utf8_first_invalid(prompt); bad != std::string::npos)
      fail(source, ": the prompt is not valid UTF-8 (byte ", bad, ")");
    if (a->prompt_cache_ro && a->prompt_cache.empty()) fail("--prompt-cache-ro needs --prompt-cache FILE");
    a->check();
    require_model_tokenizer(a->model, a->tokenizer);
    Tokenizer tok = Tokenizer::load(a->tokenizer_path());  // before the model: a missing one fails at once
    std::optional<ChatTemplates> templates;
    if (a->chat) templates = load_chat_templates(a->tokenizer_path());
    double load_s = 0;
    auto model = a->load(&load_s);
    GenerateOptions opt = a->options(model_eos_ids(a->model, model->cfg));
    if (a->chat) {
      nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
      if (!a->system.empty()) msgs.push_back({{"role", "system"}, {"content", a->system}});
      msgs.push_back({{"role", "user"}, {"content", prompt}});
      prompt = render_chat(*templates, msgs, nullptr, true);
    }
    auto ids = tok.encode(prompt);
    if (ids.empty()) fail("the prompt is empty after tokenisation");
    if (int64_t(ids.size()) >= model->cfg.max_seq_len)
      fail("prompt of ", ids.size(), " tokens is longer than ", a->ctx_size > 0 ? "--ctx-size" : "the model's context",
           " (", model->cfg.max_seq_len, ")");
    Session s(*model);
    const int64_t cached = a->prompt_cache.empty() ? 0 : use_prompt_cache(a->prompt_cache, a->prompt_cache_ro, s, ids, opt);
    auto st = generate_text(s, tok, std::span<const int32_t>(ids).subspan(size_t(cached)), opt, [&](const std::string& piece) {
      if (!a->json) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
    });
    if (a->json) {
      nlohmann::ordered_json j = {{"text", st.text}, {"tokens", st.tokens}, {"prompt_tokens", int64_t(ids.size())},
                                  {"cached_tokens", cached},
                                  {"generated_tokens", st.generated_tokens}, {"stop_reason", st.stop_reason},
                                  {"ttft_s", st.ttft_s}, {"prefill_s", st.prefill_s}, {"decode_s", st.decode_s},
                                  {"load_s", load_s}, {"threads", std::atoi(model->backend->fact("threads").c_str())}, {"backend", model->backend->describe()},
                                  {"seed", opt.sampling.seed}};
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      print_stats(st, cached, opt.sampling.seed, load_s);
    }
    finish_streaming(*model, a->stream, st.ttft_s + st.decode_s);
    return 0;
  };
}

}  // namespace moeflux::cli
