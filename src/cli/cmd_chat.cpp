// `moeflux chat`: interactive terminal chat with line editing and history (libedit), the
// model's chat template, multi-turn without re-prefilling earlier turns, /reset, /exit,
// Ctrl-C stopping the current answer, <think> spans hidden or dimmed (--show-thinking).
#include <editline/readline.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>

#include "cli/commands.h"
#include "cli/gen_options.h"
#include "core/error.h"
#include "model/model.h"
#include "text/chat.h"

namespace moeflux::cli {

namespace {

std::atomic<bool> g_interrupt{false};
void on_sigint(int) { g_interrupt.store(true); }

struct ChatArgs : GenArgs {
  bool show_thinking = false;
};

// Filters <think>...</think> out of a stream (or wraps it in ANSI dim), across pieces.
class ThinkFilter {
 public:
  ThinkFilter(bool show, bool color) : show_(show), color_(color) {}
  std::string operator()(const std::string& piece) {
    buf_ += piece;
    std::string out;
    for (;;) {
      const std::string tag = in_ ? "</think>" : "<think>";
      size_t at = buf_.find(tag);
      if (at == std::string::npos) {
        size_t keep = 0;  // hold back a possible partial tag
        for (size_t n = std::min(tag.size() - 1, buf_.size()); n > 0; --n)
          if (buf_.compare(buf_.size() - n, n, tag, 0, n) == 0) {
            keep = n;
            break;
          }
        out += visible(buf_.substr(0, buf_.size() - keep));
        buf_.erase(0, buf_.size() - keep);
        return out;
      }
      out += visible(buf_.substr(0, at));
      if (show_) out += in_ ? std::string(tag) + (color_ ? "\x1b[0m" : "") : (color_ ? "\x1b[2m" : "") + tag;
      buf_.erase(0, at + tag.size());
      in_ = !in_;
    }
  }
  std::string finish() {
    std::string out = visible(buf_);
    buf_.clear();
    if (in_ && show_ && color_) out += "\x1b[0m";
    in_ = false;
    return out;
  }

 private:
  std::string visible(const std::string& s) const { return in_ && !show_ ? std::string() : s; }
  bool show_, color_, in_ = false;
  std::string buf_;
};

}  // namespace

Runner register_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  auto* sub = app.add_subcommand("chat", "Interactive chat in the terminal (/reset, /exit)");
  add_gen_options(sub, *a);
  sub->add_flag("--show-thinking", a->show_thinking, "Show <think> spans (dimmed) instead of hiding them");
  return [a]() {
    a->check();  // everything that needs no model, before the load
    require_model_tokenizer(a->model, a->tokenizer);
    Tokenizer tok = Tokenizer::load(a->tokenizer_path());  // before the model: a missing one fails at once
    auto templates = load_chat_templates(a->tokenizer_path());
    double load_s = 0;
    auto model = a->load(&load_s);
    GenerateOptions opt = a->options(model_eos_ids(a->model, model->cfg));
    opt.cancel = &g_interrupt;
    ChatSession chat(*model, tok, templates, a->system);
    const auto started = std::chrono::steady_clock::now();
    const bool color = isatty(STDOUT_FILENO);
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    std::fprintf(stderr,
                 "moeflux chat: %s (%s, loaded in %.2f s, context %lld tokens). /reset clears the conversation, /exit "
                 "or Ctrl-D quits, Ctrl-C stops an answer.\n",
                 a->model.c_str(), model->cfg.arch.c_str(), load_s, (long long)model->cfg.max_seq_len);
    for (;;) {
      g_interrupt.store(false);
      char* line = readline("> ");
      if (!line) break;  // Ctrl-D
      std::string text(line);
      std::free(line);
      if (text.empty()) continue;
      add_history(text.c_str());
      if (text == "/exit" || text == "/quit") break;
      if (text == "/reset") {
        chat.reset();
        std::fprintf(stderr, "(conversation cleared)\n");
        continue;
      }
      ThinkFilter think(a->show_thinking, color);
      g_interrupt.store(false);
      try {
        auto st = chat.turn(text, opt, [&](const std::string& piece) {
          std::string v = think(piece);
          std::fwrite(v.data(), 1, v.size(), stdout);
          std::fflush(stdout);
        });
        std::string rest = think.finish();
        std::fwrite(rest.data(), 1, rest.size(), stdout);
        const double dec = st.decode_s > 0 && st.generated_tokens > 1 ? double(st.generated_tokens - 1) / st.decode_s : 0;
        std::fprintf(stderr, "\n[prefilled %lld tokens | generated %lld (%s) | %.1f tok/s | context %lld]\n",
                     (long long)st.prefilled_tokens, (long long)st.generated_tokens, st.stop_reason.c_str(), dec,
                     (long long)chat.context_tokens());
        if (chat.dropped_turns() > 0)
          std::fprintf(stderr, "(context full: the %d oldest turn%s dropped to make room; /reset starts over)\n",
                       chat.dropped_turns(), chat.dropped_turns() == 1 ? " was" : "s were");
        if (st.stop_reason == "context")
          std::fprintf(stderr, "(the answer reached the end of the context: the next turn drops the oldest turns; "
                       "/reset starts over)\n");
      } catch (const Error& e) {
        std::fprintf(stderr, "\nerror: %s\n", e.what());
      }
    }
    std::fprintf(stderr, "\n");
    finish_streaming(*model, a->stream, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    return 0;
  };
}

}  // namespace moeflux::cli
