// Added tokens of tokenizer.json ("added_tokens"): found in the text before pre-tokenisation,
// leftmost-longest, honouring lstrip / rstrip / single_word; "normalized" ones are matched in
// the normalised text (their content normalised too), the others in the raw text.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moeflux {

class Normalizer;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false, special = false;
};

// A segment of the input: an added token (id >= 0) or text still to be tokenised (id -1).
struct Segment {
  std::string_view text;
  int32_t id = -1;
  size_t offset = 0;  // byte offset in the string that was split
};

// A byte trie over token contents; finds the leftmost-longest match.
class AddedMatcher {
 public:
  void add(const std::string& pattern, int32_t token_index);
  bool empty() const { return nodes_.size() <= 1; }
  // Splits `s` into segments (added-token ids come from `tokens`).
  void split(std::string_view s, const std::vector<AddedToken>& tokens, std::vector<Segment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // (byte, child), sorted by byte
    int32_t token = -1;                              // index into tokens, -1 when none ends here
  };
  int32_t child(int32_t node, uint8_t b) const;
  // Longest pattern starting at s[i]: (token index, length) or (-1, 0).
  std::pair<int32_t, size_t> longest_at(std::string_view s, size_t i) const;

  std::vector<Node> nodes_{Node{}};
  bool first_byte_[256] = {};
};

class AddedVocab {
 public:
  void build(std::vector<AddedToken> tokens, const Normalizer* normalizer);
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedMatcher& raw_matcher() const { return raw_; }
  const AddedMatcher& normalized_matcher() const { return normalized_; }

 private:
  std::vector<AddedToken> tokens_;
  AddedMatcher raw_, normalized_;
};

}  // namespace moeflux
