// Multi-turn chat with incremental prefill.
#include "text/chat.h"

#include <algorithm>

#include "core/error.h"

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

bool ChatSession::drop_oldest_turn() {
  // The oldest turn: its user message up to the next user message (the answer, tool calls).
  const size_t last = messages_.size() - 1;  // the new user message stays
  size_t first = 0;
  while (first < last && messages_[first]["role"] != "user") ++first;
  if (first >= last) return false;
  size_t end = first + 1;
  while (end < last && messages_[end]["role"] != "user") ++end;
  messages_.erase(messages_.begin() + std::ptrdiff_t(first), messages_.begin() + std::ptrdiff_t(end));
  return true;
}

GenerateStats ChatSession::turn(const std::string& user_text, const GenerateOptions& opt,
                                const std::function<void(const std::string&)>& on_text) {
  dropped_ = 0;
  messages_.push_back({{"role", "user"}, {"content", user_text}});
  const int64_t ctx = session_.model().cfg.max_seq_len;
  // Room left for the answer; the oldest turns go until the prompt leaves it.
  const int64_t room = std::max<int64_t>(1, std::min<int64_t>(opt.max_tokens, ctx / 2));
  std::string prompt;
  std::vector<int32_t> ids;
  bool whole = false;  // ids are the whole conversation (the session starts over)
  for (;;) {
    prompt = render_chat(templates_, messages_, nullptr, /*add_generation_prompt=*/true);
    whole = seen_.empty() || prompt.compare(0, seen_.size(), seen_) != 0;
    ids = tok_.encode(whole ? std::string_view(prompt) : std::string_view(prompt).substr(seen_.size()));
    if (!whole && ids.empty()) ids = tok_.encode(prompt), whole = true;  // nothing new to feed: should not happen
    const int64_t needed = (whole ? 0 : session_.pos()) + int64_t(ids.size());
    if (needed + room <= ctx) break;
    if (!drop_oldest_turn()) {
      if (needed < ctx) break;  // alone, it fits, with less room for the answer
      messages_.erase(messages_.end() - 1);
      fail("this message (", needed, " tokens with the system prompt and template) does not fit the context of ", ctx,
           " tokens");
    }
    ++dropped_;
    seen_.clear();  // the rendering changed at its start: the session prefills it again
  }
  if (whole) session_.reset();
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
