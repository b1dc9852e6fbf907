// Shared by the tokenizer tests: the real tokenizers of tests/data/tokenizers (loaded once per
// test binary) and generators of varied text.
#pragma once
#include <random>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace moeflux::test {

// "qwen3", "deepseek_v3" or "llama2"; loaded on first use and kept.
const Tokenizer& real_tokenizer(const std::string& name);
inline const std::vector<std::string>& real_tokenizer_names() {
  static const std::vector<std::string> names{"qwen3", "deepseek_v3", "llama2"};
  return names;
}
// `n` lines mixing scripts, emoji, code, whitespace runs, digits and the given special tokens.
std::vector<std::string> varied_lines(size_t n, const std::vector<std::string>& specials, uint32_t seed);

}  // namespace moeflux::test
