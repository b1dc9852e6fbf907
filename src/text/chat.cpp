// Multi-turn chat with incremental prefill.
#include "text/chat.h"

namespace moeflux {

ChatSession::ChatSession(const Model& m, const Tokenizer& tok, ChatTemplates templates, std::string system_prompt)
    : tok_(tok), templates_(std::move(templates)), system_(std::move(system_prompt)), session_(m) {
  reset();
}

void ChatSession::reset() {
  session_.reset();
  seen_.clear();
  messages_ = nlohmann::ordered_json::array();
  if (!system_.empty()) messages_.push_back({{"role", "system"}, {"content", system_}});
}

GenerateStats ChatSession::turn(const std::string& user_text, const GenerateOptions& opt,
                                const std::function<void(const std::string&)>& on_text) {
  messages_.push_back({{"role", "user"}, {"content", user_text}});
  const std::string prompt = render_chat(templates_, messages_, nullptr, /*add_generation_prompt=*/true);
  std::vector<int32_t> ids;
  if (!seen_.empty() && prompt.compare(0, seen_.size(), seen_) == 0) {
    ids = tok_.encode(std::string_view(prompt).substr(seen_.size()));
  } else {
    session_.reset();
    ids = tok_.encode(prompt);
  }
  if (ids.empty()) ids = tok_.encode(prompt);  // nothing new to feed: should not happen
  GenerateStats st;
  try {
    st = generate_text(session_, tok_, ids, opt, on_text);
  } catch (...) {
    messages_.erase(messages_.end() - 1);
    throw;
  }
  // The session now holds the prompt and every generated token but the last one sampled.
  seen_ = prompt + st.text;
  if (!st.tokens.empty()) {
    const int32_t last = st.tokens.back();
    if (st.stop_reason == "eos") seen_ = prompt + st.text + tok_.decode(std::span<const int32_t>(&last, 1));
    session_.forward(std::span<const int32_t>(&last, 1), {.all_logits = false});
  }
  if (st.stop_reason == "stop") {
    // the session saw tokens past the stop string: re-sync on the next turn
    seen_.clear();
  }
  messages_.push_back({{"role", "assistant"}, {"content", st.text}});
  return st;
}

}  // namespace moeflux
