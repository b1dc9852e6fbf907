// StreamDecoder: decode(anchor + window) minus decode(anchor + context), emitted when complete.
#include "tokenizer/stream_decoder.h"

#include <algorithm>
#include <cctype>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace moeflux {

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(tok), skip_special_(skip_special_tokens) {
  // The anchor: a plain token decoding to one ASCII letter or digit that does not interact
  // with its neighbours (not special, not a fallback byte). Tried: the encodings of a few
  // probes, then the first ids of the vocabulary.
  const auto usable = [&](int32_t id) {
    if (tok.is_special(id) || tok.is_fallback_byte(id) || !tok.id_to_token(id)) return false;
    const std::string one = tok.decode(std::vector<int32_t>{id});
    return one.size() == 1 && std::isalnum(static_cast<unsigned char>(one[0])) &&
           tok.decode(std::vector<int32_t>{id, id}) == one + one;
  };
  for (const char* probe : {"a", "x", "0"}) {
    const auto ids = tok.encode(probe);
    if (ids.size() == 1 && usable(ids[0])) {
      anchor_ = ids[0];
      return;
    }
  }
  for (int32_t id = 0; id < std::min(tok.vocab_size(), 1 << 16); ++id)
    if (usable(id)) {
      anchor_ = id;
      return;
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
