// Added-token matching: a byte trie probed at every position (a first-byte table skips most).
#include "tokenizer/added_vocab.h"

#include <algorithm>

#include "tokenizer/normalizer.h"
#include "tokenizer/unicode.h"

namespace moeflux {

int32_t AddedMatcher::child(int32_t node, uint8_t b) const {
  const auto& nx = nodes_[static_cast<size_t>(node)].next;
  auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(b, INT32_MIN));
  return it != nx.end() && it->first == b ? it->second : -1;
}

void AddedMatcher::add(const std::string& pattern, int32_t token_index) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (char c : pattern) {
    const auto b = static_cast<uint8_t>(c);
    int32_t nx = child(node, b);
    if (nx < 0) {
      nx = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& v = nodes_[static_cast<size_t>(node)].next;
      v.insert(std::lower_bound(v.begin(), v.end(), std::make_pair(b, INT32_MIN)), {b, nx});
    }
    node = nx;
  }
  // Several tokens with one content: the first one listed wins.
  if (nodes_[static_cast<size_t>(node)].token < 0) nodes_[static_cast<size_t>(node)].token = token_index;
  first_byte_[static_cast<uint8_t>(pattern[0])] = true;
}

std::pair<int32_t, size_t> AddedMatcher::longest_at(std::string_view s, size_t i) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t k = i; k < s.size(); ++k) {
    node = child(node, static_cast<uint8_t>(s[k]));
    if (node < 0) break;
    if (nodes_[static_cast<size_t>(node)].token >= 0) best = {nodes_[static_cast<size_t>(node)].token, k + 1 - i};
  }
  return best;
}

namespace {
// Last / first character of a string, or -1 when empty.
int32_t last_char(std::string_view s) {
  if (s.empty()) return -1;
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  return utf8_next(s, start);
}
int32_t first_char(std::string_view s) {
  if (s.empty()) return -1;
  size_t i = 0;
  return utf8_next(s, i);
}
}  // namespace

void AddedMatcher::split(std::string_view s, const std::vector<AddedToken>& tokens, std::vector<Segment>& out) const {
  size_t done = 0;  // end of the last emitted segment
  for (size_t i = 0; i < s.size();) {
    if (!first_byte_[static_cast<uint8_t>(s[i])]) {
      ++i;
      continue;
    }
    const auto [tok, len] = longest_at(s, i);
    if (tok < 0) {
      ++i;
      continue;
    }
    const AddedToken& t = tokens[static_cast<size_t>(tok)];
    size_t start = i, stop = i + len;
    if (t.single_word) {
      const int32_t before = last_char(s.substr(0, start)), after = first_char(s.substr(stop));
      if ((before >= 0 && unicode_is_alphanumeric(before)) || (after >= 0 && unicode_is_alphanumeric(after))) {
        i = stop;  // the match is consumed even when rejected, as with aho-corasick's find_iter
        continue;
      }
    }
    if (t.lstrip) {
      while (start > done) {
        size_t p = start - 1;
        while (p > done && (static_cast<uint8_t>(s[p]) & 0xC0) == 0x80) --p;
        size_t q = p;
        if (!unicode_is_whitespace(utf8_next(s, q))) break;
        start = p;
      }
    }
    if (t.rstrip) {
      while (stop < s.size()) {
        size_t q = stop;
        if (!unicode_is_whitespace(utf8_next(s, q))) break;
        stop = q;
      }
    }
    if (done < start) out.push_back({s.substr(done, start - done), -1, done});
    out.push_back({s.substr(start, stop - start), t.id, start});
    done = stop;
    i = stop;
  }
  if (done < s.size()) out.push_back({s.substr(done), -1, done});
}

void AddedVocab::build(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  tokens_ = std::move(tokens);
  for (size_t k = 0; k < tokens_.size(); ++k) {
    const AddedToken& t = tokens_[k];
    if (t.normalized && normalizer) normalized_.add(normalizer->normalize(t.content), static_cast<int32_t>(k));
    else if (t.normalized) normalized_.add(t.content, static_cast<int32_t>(k));
    else raw_.add(t.content, static_cast<int32_t>(k));
  }
}

}  // namespace moeflux
