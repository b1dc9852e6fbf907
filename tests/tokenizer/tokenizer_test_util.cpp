// Tokenizer test helpers: cached real tokenizers and a generator of varied lines.
#include "tokenizer/tokenizer_test_util.h"

#include <map>
#include <memory>
#include <mutex>

#include "util/test_util.h"

namespace moeflux::test {

const Tokenizer& real_tokenizer(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard lock(mu);
  auto& slot = cache[name];
  if (!slot) slot = std::make_unique<Tokenizer>(Tokenizer::load(data_dir() + "/tokenizers/" + name));
  return *slot;
}

std::vector<std::string> varied_lines(size_t n, const std::vector<std::string>& specials, uint32_t seed) {
  // Fragments from many scripts and styles; lines are random concatenations with random
  // separators, so word boundaries fall in unusual places.
  static const std::vector<std::string> frags{
      "Hello", "world", "the", "The", "quick", "brown", "fox", "don't", "I'll", "we've", "it's", "NASA's",
      "Ünïcödé", "naïve", "café", "Straße", "ﬁnance", "Ａｂｃ", "①②", "x²", "½", "Ωmega",
      "日本語", "テキスト", "ひらがな", "中文文本", "한국어", "Привет", "мир", "Ελληνικά", "עברית",
      "مرحبا", "हिन्दी", "தமிழ்", "ไทย", "ქართული", "Հայերեն", "e\xCC\x81", "a\xCC\x8A\xCC\x81",
      "👍", "👍🏽", "🤖", "✨", "🇺🇸", "👨‍👩‍👧", "🏳️‍🌈", "😀😃", "\xE2\x80\x8B", "\xC2\xA0", "\xE3\x80\x80",
      "def f(x):", "return x**2", "int main() {", "}", "std::vector<int>", "#include <x.h>", "a->b", "i++",
      "0x1F", "3.14159", "1e-10", "-42", "1234567890", "2024-01-01", "$100", "50%", "a@b.com",
      "https://example.com/a?b=c&d=e#f", "{\"k\": [1, 2]}", "'single'", "\"double\"", "(paren)",
      "...", "!!!", "??", "--", "__init__", "snake_case", "CamelCase", "ALLCAPS", "x", "a", "I",
  };
  static const std::vector<std::string> seps{" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "", "",
                                             "    ", "\t\t", " \t", "\n   ", ", ", ". ", "\xE3\x80\x82"};
  std::mt19937 rng(seed);
  const auto pick = [&](const std::vector<std::string>& v) -> const std::string& {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
  };
  std::vector<std::string> lines;
  for (size_t k = 0; k < n; ++k) {
    std::string line;
    const int words = std::uniform_int_distribution<int>(1, 14)(rng);
    if (rng() % 6 == 0) line += pick(seps);  // leading whitespace
    for (int w = 0; w < words; ++w) {
      if (!specials.empty() && rng() % 9 == 0) line += pick(specials);
      else line += pick(frags);
      if (w + 1 < words || rng() % 5 == 0) line += pick(seps);
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace moeflux::test
