// A multi-turn chat over one Session: messages are rendered with the model's chat template,
// and each turn feeds only the tokens of text the session has not seen (the rendering of the
// whole conversation must extend the previous rendering plus the answer; otherwise, e.g. for
// templates that rewrite history, the turn re-prefills the whole conversation).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "template/chat_template.h"
#include "text/generation.h"

namespace moeflux {

class ChatSession {
 public:
  ChatSession(const Model& m, const Tokenizer& tok, ChatTemplates templates, std::string system_prompt);
  // One user turn; streams the answer through on_text. stats.prefilled_tokens says how many
  // tokens this turn ran through prefill. When the conversation would leave the answer less
  // than min(max_tokens, context / 2) tokens of context, the oldest turns are dropped (the
  // system message stays; dropped_turns() says how many); Error when the new message alone
  // does not fit.
  GenerateStats turn(const std::string& user_text, const GenerateOptions& opt,
                     const std::function<void(const std::string&)>& on_text);
  void reset();
  const nlohmann::ordered_json& messages() const { return messages_; }
  int64_t context_tokens() const { return session_.pos(); }
  int dropped_turns() const { return dropped_; }  // by the last turn()

 private:
  const Tokenizer& tok_;
  ChatTemplates templates_;
  std::string system_;
  Session session_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  std::string seen_;  // the text the session holds (rendered prompt + answers)
  int dropped_ = 0;

  bool drop_oldest_turn();  // false when only the new user message is left to drop
};

}  // namespace moeflux
