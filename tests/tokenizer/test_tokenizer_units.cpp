// Pieces of the tokenizer on small hand-built tokenizer.json files: BPE against a naive
// quadratic reference on random merge tables (both merge formats), split behaviours (the
// example of the Hugging Face docs), added-token options, Metaspace, normalizers, lossy UTF-8.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace moeflux {
namespace {

using nlohmann::json;

// A BPE tokenizer.json with the given vocab / merges and optional pipeline parts.
json tiny(const std::vector<std::string>& vocab, const json& merges = json::array()) {
  json v = json::object();
  for (size_t k = 0; k < vocab.size(); ++k) v[vocab[k]] = k;
  return json{{"model", {{"type", "BPE"}, {"vocab", v}, {"merges", merges}}},
              {"added_tokens", json::array()}, {"normalizer", nullptr}, {"pre_tokenizer", nullptr},
              {"decoder", nullptr}};
}
Tokenizer load(const json& j) { return Tokenizer::from_json_text(j.dump(), "test"); }
// Token strings of the encoding, joined with '|'.
std::string pieces(const Tokenizer& t, const std::string& text) {
  std::string s;
  for (int32_t id : t.encode(text)) s += (s.empty() ? "" : "|") + *t.id_to_token(id);
  return s;
}

// Naive BPE: merge the lowest-ranked adjacent pair (leftmost on ties) until none is left.
std::vector<std::string> naive_bpe(const std::string& word, const std::map<std::pair<std::string, std::string>, int>& rank) {
  std::vector<std::string> s;
  for (char c : word) s.emplace_back(1, c);
  for (;;) {
    int best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      auto it = rank.find({s[i], s[i + 1]});
      if (it != rank.end() && it->second < best) best = it->second, at = i;
    }
    if (best == INT32_MAX) return s;
    s[at] += s[at + 1];
    s.erase(s.begin() + static_cast<ptrdiff_t>(at) + 1);
  }
}

TEST(TokenizerBpe, MatchesNaiveReferenceOnRandomMergeTables) {
  std::mt19937 rng(7);
  for (int table = 0; table < 20; ++table) {
    std::vector<std::string> vocab{"a", "b", "c", "d"};
    std::set<std::string> have(vocab.begin(), vocab.end());
    std::map<std::pair<std::string, std::string>, int> rank;
    json as_strings = json::array(), as_pairs = json::array();
    while (rank.size() < 60) {
      const std::string& x = vocab[rng() % vocab.size()];
      const std::string& y = vocab[rng() % vocab.size()];
      if (x.size() + y.size() > 7 || have.count(x + y)) continue;
      rank[{x, y}] = static_cast<int>(rank.size());
      as_strings.push_back(x + " " + y);
      as_pairs.push_back({x, y});
      have.insert(x + y);
      vocab.push_back(x + y);
    }
    const Tokenizer t1 = load(tiny(vocab, as_strings)), t2 = load(tiny(vocab, as_pairs));
    for (int w = 0; w < 100; ++w) {
      std::string word;
      const int len = 1 + static_cast<int>(rng() % 24);
      for (int k = 0; k < len; ++k) word += static_cast<char>('a' + rng() % 4);
      std::string want;
      for (const auto& p : naive_bpe(word, rank)) want += (want.empty() ? "" : "|") + p;
      ASSERT_EQ(pieces(t1, word), want) << "table " << table << " word " << word;
      ASSERT_EQ(pieces(t2, word), want) << "pair-format merges, table " << table;
    }
  }
}

TEST(TokenizerBpe, UnknownCharactersUseUnkFusedOrByteFallback) {
  json j = tiny({"<unk>", "a", "<0xC3>", "<0xA9>"});
  j["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(pieces(load(j), "a\xC3\xA9\xC3\xA9" "a"), "a|<unk>|<unk>|a");
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(pieces(load(j), "a\xC3\xA9\xC3\xA9" "a"), "a|<unk>|a");
  j["model"]["byte_fallback"] = true;
  EXPECT_EQ(pieces(load(j), "a\xC3\xA9" "a"), "a|<0xC3>|<0xA9>|a");
  EXPECT_EQ(pieces(load(j), "a\xC3\xA8"), "a|<unk>");  // <0xA8> is missing: unk instead
  // A pending unk is written after fallback bytes that follow it (Hugging Face's order).
  EXPECT_EQ(pieces(load(j), "\xC3\xA8\xC3\xA9" "a"), "<0xC3>|<0xA9>|<unk>|a");
}

// Hugging Face's documented example: "the-final--countdown" split on "-".
TEST(TokenizerPreTokenizer, SplitBehavioursFollowTheDocumentedExample) {
  std::vector<std::string> vocab{"t", "h", "e", "f", "i", "n", "a", "l", "c", "o", "u", "w", "d", "-"};
  for (const char* w : {"the", "final", "countdown", "the-", "final-", "-final", "--", "-countdown"}) vocab.push_back(w);
  json j = tiny(vocab);
  j["model"]["ignore_merges"] = true;  // a piece in the vocab becomes one token: pieces are visible
  const std::map<std::string, std::string> want{
      {"Removed", "the|final|countdown"},
      {"Isolated", "the|-|final|-|-|countdown"},
      {"MergedWithPrevious", "the-|final-|-|countdown"},
      {"MergedWithNext", "the|-final|-|-countdown"},
      {"Contiguous", "the|-|final|--|countdown"},
  };
  for (const auto& [behavior, expect] : want) {
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", false}};
    EXPECT_EQ(pieces(load(j), "the-final--countdown"), expect) << behavior;
  }
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "-+"}}}, {"behavior", "Removed"}, {"invert", true}};
  EXPECT_EQ(pieces(load(j), "the-final--countdown"), "-|--");
}

TEST(TokenizerPreTokenizer, MetaspaceAndDigits) {
  json j = tiny({"\xE2\x96\x81", "a", "b", "1", "2", "\xE2\x96\x81" "a", "12", "<s>"});
  j["model"]["ignore_merges"] = true;
  j["added_tokens"] = {{{"id", 7}, {"content", "<s>"}, {"special", true}, {"normalized", false}}};
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}};
  EXPECT_EQ(pieces(load(j), "a b<s>a"), "\xE2\x96\x81" "a|\xE2\x96\x81|b|<s>|a");  // no prepend after <s>
  j["pre_tokenizer"]["prepend_scheme"] = "always";
  EXPECT_EQ(pieces(load(j), "a b<s>a"), "\xE2\x96\x81" "a|\xE2\x96\x81|b|<s>|\xE2\x96\x81" "a");
  j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", true}};
  EXPECT_EQ(pieces(load(j), "a12b"), "a|1|2|b");
  j["pre_tokenizer"]["individual_digits"] = false;
  EXPECT_EQ(pieces(load(j), "a12b"), "a|12|b");
}

TEST(TokenizerAddedTokens, StripSingleWordNormalizedAndLongestMatch) {
  std::vector<std::string> vocab{" ", "a", "b", "w", "y", ">", "<", "x", "[", "]", "n"};
  json j = tiny(vocab);
  const auto tok = [](int id, const char* content, bool l, bool r, bool single, bool norm) {
    return json{{"id", id}, {"content", content}, {"lstrip", l}, {"rstrip", r}, {"single_word", single},
                {"normalized", norm}, {"special", false}};
  };
  j["added_tokens"] = {tok(20, "<x>", true, false, false, false), tok(21, "<y>", false, true, false, false),
                       tok(22, "ww", false, false, true, false), tok(23, "[n]", false, false, false, true),
                       tok(24, "<x>>", false, false, false, false)};
  j["normalizer"] = {{"type", "Lowercase"}};
  const Tokenizer t = load(j);
  EXPECT_EQ(pieces(t, "a  <x> b"), "a|<x>| |b");    // lstrip takes the spaces before
  EXPECT_EQ(pieces(t, "a <y>  b"), "a| |<y>|b");    // rstrip takes the spaces after
  EXPECT_EQ(pieces(t, "ww aww ww"), "ww| |a|w|w| |ww");  // not inside a word
  EXPECT_EQ(pieces(t, "A[N]b"), "a|[n]|b");          // matched after normalisation
  EXPECT_EQ(pieces(t, "<x>>"), "<x>>");              // longest match
  EXPECT_EQ(t.decode(t.encode("A[N]b")), "a [n] b");  // no decoder: tokens joined by spaces
}

TEST(TokenizerNormalizer, UnicodeFormsLowercaseStripReplacePrepend) {
  EXPECT_EQ(unicode_normalize("e\xCC\x81", NormalForm::NFC), "\xC3\xA9");
  EXPECT_EQ(unicode_normalize("\xC3\xA9", NormalForm::NFD), "e\xCC\x81");
  EXPECT_EQ(unicode_normalize("\xEF\xAC\x81", NormalForm::NFKC), "fi");  // the fi ligature
  EXPECT_EQ(unicode_normalize("\xE2\x91\xA0", NormalForm::NFKD), "1");
  EXPECT_EQ(unicode_lowercase("\xC3\x84" "BC\xC4\xB0"), "\xC3\xA4" "bci\xCC\x87");
  // A whole pipeline: the Sequence below maps "  Ｆｏｏ Bar " to "_foo_bar" before BPE.
  json p = tiny({"_", "f", "o", "b", "a", "r"});
  p["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "NFKC"}}, {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                       {{"type", "Lowercase"}}, {{"type", "Prepend"}, {"prepend", "_"}},
                       {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", "_"}}}}};
  EXPECT_EQ(pieces(load(p), "  \xEF\xBC\xA6\xEF\xBD\x8F\xEF\xBD\x8F \t Bar "), "_|f|o|o|_|b|a|r");
}

// Found by fuzz_tokenizer_json: a Strip decoder taking two leading spaces must strip them only
// at the start of the whole text, not at the start of each streaming window.
TEST(TokenizerStream, StripOfSeveralLeadingSpacesActsOnlyAtTheStart) {
  json j = tiny({"x", "\xE2\x96\x81", "b", "a"});
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                    {{"type", "Fuse"}}, {{"type", "Strip"}, {"content", " "}, {"start", 2}, {"stop", 0}}}}};
  const Tokenizer t = load(j);
  for (const std::vector<int32_t>& ids : {std::vector<int32_t>{0, 1, 1, 2}, {1, 1, 1, 2, 1}, {1, 0, 1, 1, 1, 2}}) {
    StreamDecoder st(t);
    std::string out;
    for (int32_t id : ids) out += st.step(id);
    out += st.finish();
    EXPECT_EQ(out, t.decode(ids));
  }
  EXPECT_EQ(t.decode(std::vector<int32_t>{1, 1, 1, 2}), " b");
}

// Oniguruma's \s is White_Space, which has U+0085 (NEL); PCRE2's lacks it unless rewritten.
TEST(TokenizerRegex, WhitespaceClassIncludesNelLikeOniguruma) {
  EXPECT_EQ(onig_to_pcre2(R"(\s+(?!\S)|[^\s\p{L}]|[]\s]|[[:alpha:]\s])"),
            R"([\s\x{85}]+(?![^\s\x{85}])|[^\s\x{85}\p{L}]|[]\s\x{85}]|[[:alpha:]\s\x{85}])");
  std::vector<std::pair<size_t, size_t>> m;
  Regex(R"(\s+)", false, "test").find_all("a\xC2\x85\xE3\x80\x80 b\tc", m);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], (std::pair<size_t, size_t>{1, 7}));  // NEL + ideographic space + space
  EXPECT_EQ(m[1], (std::pair<size_t, size_t>{8, 9}));
  m.clear();
  Regex(R"([^\s\p{L}]+)", false, "test").find_all("a\xC2\x85!", m);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], (std::pair<size_t, size_t>{3, 4}));
}

TEST(TokenizerUnicode, LossyDecodingReplacesMaximalSubparts) {
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("a\xF0\x9F\x98"), "a" + R);              // truncated 4-byte sequence: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xE0\x80"), R + R);                      // E0 80 is never valid: two
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), R + R + R);              // surrogate: three
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), R + R);                      // overlong
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), R + R + R + R);      // past U+10FFFF
  EXPECT_EQ(utf8_lossy("\xE2\x82\xAC\xE2\x82"), "\xE2\x82\xAC" + R);
  EXPECT_TRUE(utf8_is_valid("\xF0\x9F\x91\x8D"));
  EXPECT_FALSE(utf8_is_valid("\xF0\x9F\x91"));
}

}  // namespace
}  // namespace moeflux
