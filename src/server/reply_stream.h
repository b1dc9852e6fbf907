// ReplyStream: a completion's generated tokens turned into what its client receives: text
// decoded token by token (whole UTF-8 characters), cut at the first stop string (which is not
// sent), and, when the request offered tools, the model's tool calls taken out of the text:
// from a tool-call opener on nothing is sent as content, and at the end the calls are parsed
// (malformed ones are sent as the text they are).
#pragma once
#include <string>
#include <vector>

#include "server/tool_calls.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace moeflux {

class ReplyStream {
 public:
  ReplyStream(const Tokenizer& tok, std::vector<std::string> stops, bool tools);
  // The text that became final with token t (often empty). False once a stop string ended the
  // reply (the text before it is in *out).
  bool step(int32_t t, std::string* out);
  // At the end of the reply: the text still held back.
  std::string finish();
  bool stopped() const { return stopped_; }
  const std::vector<ToolCall>& tool_calls() const { return calls_; }

 private:
  StreamDecoder dec_;
  std::vector<std::string> stops_, held_;  // held_: stops and tool-call openers
  bool tools_, stopped_ = false, in_calls_ = false;
  std::string pending_;  // decoded text held back (may start a stop string or an opener)
  std::string calls_text_;
  std::vector<ToolCall> calls_;
};

}  // namespace moeflux
