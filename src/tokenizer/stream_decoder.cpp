// StreamDecoder: the prefix-window scheme (decode(window) minus decode(context)).
#include "tokenizer/stream_decoder.h"

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace moeflux {

std::string StreamDecoder::step(int32_t id) {
  ids_.push_back(id);
  if (tok_.is_fallback_byte(id)) return {};
  std::string text = tok_.decode(ids_, skip_special_);
  if (text.size() <= prefix_.size() || utf8_ends_with_replacement(text) || text.compare(0, prefix_.size(), prefix_) != 0)
    return {};
  std::string fresh = text.substr(prefix_.size());
  // The ids decoded since the last emission become the next context.
  const size_t next_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<ptrdiff_t>(prefix_index_));
  prefix_ = tok_.decode(ids_, skip_special_);
  prefix_index_ = next_prefix_index;
  return fresh;
}

std::string StreamDecoder::finish() {
  std::string text = tok_.decode(ids_, skip_special_);
  std::string rest = text.size() > prefix_.size() && text.compare(0, prefix_.size(), prefix_) == 0
                         ? text.substr(prefix_.size())
                         : std::string();
  ids_.clear();
  prefix_.clear();
  prefix_index_ = 0;
  return rest;
}

}  // namespace moeflux
