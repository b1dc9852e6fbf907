// ReplyStream: stop strings and tool-call capture over the decoded text.
#include "server/reply_stream.h"

#include "text/generation.h"

namespace moeflux {

ReplyStream::ReplyStream(const Tokenizer& tok, std::vector<std::string> stops, bool tools)
    : dec_(tok), stops_(std::move(stops)), held_(stops_), tools_(tools) {
  if (tools_) held_.insert(held_.end(), tool_call_openers().begin(), tool_call_openers().end());
}

bool ReplyStream::step(int32_t t, std::string* out) {
  out->clear();
  const std::string piece = dec_.step(t);
  if (in_calls_) {
    calls_text_ += piece;
    for (const auto& s : stops_)
      if (const size_t at = calls_text_.find(s); at != std::string::npos) {
        calls_text_.resize(at);
        stopped_ = true;
        return false;
      }
    return true;
  }
  pending_ += piece;
  // The earliest stop string or opener in the text so far.
  size_t first = std::string::npos;
  bool is_stop = false;
  for (size_t i = 0; i < held_.size(); ++i)
    if (const size_t at = pending_.find(held_[i]); at < first) first = at, is_stop = i < stops_.size();
  if (first != std::string::npos) {
    *out = pending_.substr(0, first);
    if (is_stop) {
      pending_.clear();
      stopped_ = true;
      return false;
    }
    in_calls_ = true;
    calls_text_ = pending_.substr(first);
    pending_.clear();
    return true;
  }
  const size_t n = pending_.size() - held_suffix(pending_, held_);
  *out = pending_.substr(0, n);
  pending_.erase(0, n);
  return true;
}

std::string ReplyStream::finish() {
  std::string rest;
  if (!stopped_) {
    const std::string tail = dec_.finish();
    if (in_calls_) calls_text_ += tail;
    else rest = pending_ + tail;
  }
  pending_.clear();
  if (in_calls_) {
    if (auto calls = parse_tool_calls(calls_text_)) calls_ = std::move(*calls);
    else rest += calls_text_;  // not calls after all: the text as the model wrote it
    calls_text_.clear();
  }
  return rest;
}

}  // namespace moeflux
