// Round trips on a few hundred generated lines (scripts, emoji, code, whitespace runs, special
// tokens): decode(encode(x)) gives x back (byte-level) or its normalised form (NFC for qwen3,
// the SentencePiece space rule for llama2), and streaming decode equals batch decode, also on
// random id streams.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/unicode.h"

namespace moeflux {
namespace {

std::vector<std::string> specials_of(const Tokenizer& tok) {
  std::vector<std::string> s;
  for (const auto& a : tok.added_tokens())
    if (a.special && s.size() < 8) s.push_back(a.content);
  return s;
}

std::string stream_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  StreamDecoder st(tok, skip);
  std::string out;
  for (int32_t id : ids) out += st.step(id);
  return out + st.finish();
}

// What decode(encode(x)) must give for llama2: every text segment between special tokens got
// a "▁" prepended (shown as a space), and the decoder strips one leading space of the whole.
std::string llama2_expected(const std::string& x, const std::vector<std::string>& specials) {
  std::string out;
  for (size_t i = 0; i < x.size();) {
    size_t next = x.size(), len = 0;
    for (const auto& s : specials) {
      const size_t p = x.find(s, i);
      if (p < next || (p == next && p != std::string::npos && s.size() > len)) next = p, len = s.size();
    }
    if (next > i) out += " " + x.substr(i, next - i);
    if (next < x.size()) out += x.substr(next, len);
    i = next + len;
  }
  if (!out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

class TokenizerRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerRoundTrip, DecodeOfEncodeGivesTheNormalisedText) {
  const Tokenizer& tok = test::real_tokenizer(GetParam());
  const auto specials = specials_of(tok);
  ASSERT_FALSE(specials.empty());
  const auto lines = test::varied_lines(400, specials, 1234);
  size_t with_special = 0;
  for (const auto& x : lines) {
    const auto ids = tok.encode(x);
    std::string want = x;
    if (GetParam() == "qwen3") want = unicode_normalize(x, NormalForm::NFC);
    if (GetParam() == "llama2") want = llama2_expected(x, specials);
    EXPECT_EQ(tok.decode(ids), want) << "line: " << x;
    EXPECT_EQ(stream_decode(tok, ids, false), want) << "streamed, line: " << x;
    for (const auto& s : specials) with_special += x.find(s) != std::string::npos;
  }
  EXPECT_GT(with_special, 50u);  // the special-token paths were exercised
}

TEST_P(TokenizerRoundTrip, SpecialTokensAreSingleIdsAndSkippable) {
  const Tokenizer& tok = test::real_tokenizer(GetParam());
  for (const auto& s : specials_of(tok)) {
    const auto ids = tok.encode("a" + s + "b");
    const auto id = tok.token_to_id(s);
    ASSERT_TRUE(id.has_value()) << s;
    EXPECT_NE(std::find(ids.begin(), ids.end(), *id), ids.end()) << s;
    EXPECT_EQ(tok.decode(ids, true).find(s), std::string::npos) << s;
  }
}

// add_special_tokens=true applies the post-processor: llama2's template puts <s> first; the
// byte-level post-processors of qwen3 and deepseek_v3 leave the ids alone.
TEST_P(TokenizerRoundTrip, AddSpecialTokensAppliesThePostProcessor) {
  const Tokenizer& tok = test::real_tokenizer(GetParam());
  for (const std::string x : {"Hello world", "", " two  spaces"}) {
    auto want = tok.encode(x, false);
    if (GetParam() == "llama2") want.insert(want.begin(), *tok.token_to_id("<s>"));
    EXPECT_EQ(tok.encode(x, true), want) << x;
  }
}

TEST_P(TokenizerRoundTrip, StreamingEqualsBatchOnRandomIds) {
  const Tokenizer& tok = test::real_tokenizer(GetParam());
  std::mt19937 rng(99);
  // Byte tokens and special tokens are over-represented: they are the hard cases.
  std::vector<int32_t> interesting;
  for (const auto& a : tok.added_tokens()) interesting.push_back(a.id);
  for (int b = 0x80; b < 0x100; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    if (auto id = tok.token_to_id(name)) interesting.push_back(*id);
  }
  for (const char* t : {"\xC3\xA2", "\xC4\xA0", "\xE2\x96\x81", "\xC3\xA6", "\xC4\x8A"})  // partial-byte pieces
    if (auto id = tok.token_to_id(t)) interesting.push_back(*id);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids(std::uniform_int_distribution<size_t>(1, 40)(rng));
    for (auto& id : ids)
      id = rng() % 3 == 0 ? interesting[rng() % interesting.size()]
                          : static_cast<int32_t>(rng() % static_cast<uint32_t>(tok.vocab_size()));
    for (bool skip : {false, true})
      ASSERT_EQ(stream_decode(tok, ids, skip), tok.decode(ids, skip)) << "trial " << trial << " skip " << skip;
  }
}

INSTANTIATE_TEST_SUITE_P(Real, TokenizerRoundTrip, ::testing::ValuesIn(test::real_tokenizer_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace moeflux
