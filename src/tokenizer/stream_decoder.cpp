// StreamDecoder: decode(anchor + window) minus decode(anchor + context), emitted when complete.
#include "tokenizer/stream_decoder.h"

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace moeflux {

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(tok), skip_special_(skip_special_tokens) {
  // The anchor: a plain token decoding to one letter, so it ends cleanly and never merges with
  // what follows (not special, not a fallback byte).
  for (const char* probe : {"a", "x", "0", "."}) {
    const auto ids = tok.encode(probe);
    if (ids.size() == 1 && !tok.is_special(ids[0]) && !tok.is_fallback_byte(ids[0]) && tok.decode(ids) == probe) {
      anchor_ = ids[0];
      break;
    }
  }
}

std::string StreamDecoder::decode_window() const {
  if (!started_ || !anchor_) return tok_.decode(ids_, skip_special_);
  std::vector<int32_t> v;
  v.reserve(ids_.size() + 1);
  v.push_back(*anchor_);
  v.insert(v.end(), ids_.begin(), ids_.end());
  return tok_.decode(v, skip_special_);
}

std::string StreamDecoder::step(int32_t id) {
  ids_.push_back(id);
  if (tok_.is_fallback_byte(id)) return {};
  const std::string text = decode_window();
  if (text.size() <= prefix_.size() || utf8_ends_with_replacement(text) || text.compare(0, prefix_.size(), prefix_) != 0)
    return {};
  std::string fresh = text.substr(prefix_.size());
  // The ids decoded since the last emission become the next context.
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<ptrdiff_t>(prefix_index_));
  prefix_index_ = ids_.size();
  started_ = true;
  prefix_ = decode_window();
  return fresh;
}

std::string StreamDecoder::finish() {
  const std::string text = decode_window();
  std::string rest = text.size() > prefix_.size() && text.compare(0, prefix_.size(), prefix_) == 0
                         ? text.substr(prefix_.size())
                         : std::string();
  ids_.clear();
  prefix_.clear();
  prefix_index_ = 0;
  started_ = false;
  return rest;
}

}  // namespace moeflux
