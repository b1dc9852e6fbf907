// The real qwen3 / deepseek_v3 / llama2 tokenizers against the Hugging Face `tokenizers`
// library: ids (add_special_tokens=False) and decoded strings from
// fixtures/tokenizer_goldens.json, and the extra texts when their goldens exist.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer_test_util.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

// Checks every (text, ids, decoded) triple of one tokenizer; returns the number of texts.
size_t check_goldens(const std::string& name, const nlohmann::json& g) {
  const Tokenizer& tok = test::real_tokenizer(name);
  const auto& texts = g.at("texts");
  const auto& ids = g.at("ids");
  EXPECT_EQ(texts.size(), ids.size());
  for (size_t k = 0; k < texts.size() && k < ids.size(); ++k) {
    const std::string text = texts[k].get<std::string>();
    const auto want = ids[k].get<std::vector<int32_t>>();
    const auto got = tok.encode(text, false);
    EXPECT_EQ(got, want) << name << " text " << k << ": " << text << "\n got:  " << show(got)
                         << "\n want: " << show(want);
    if (g.contains("decoded")) {
      const std::string decoded = g.at("decoded")[k].get<std::string>();
      EXPECT_EQ(tok.decode(want), decoded) << name << " decode of text " << k;
      StreamDecoder stream(tok);
      std::string streamed;
      for (int32_t id : want) streamed += stream.step(id);
      streamed += stream.finish();
      EXPECT_EQ(streamed, decoded) << name << " streamed decode of text " << k;
    }
  }
  return texts.size();
}

class TokenizerGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerGoldens, EncodeAndDecodeMatchHuggingFace) {
  const auto all = read_json(test::fixture_dir("tokenizer_goldens.json"));
  ASSERT_TRUE(all.contains(GetParam()));
  EXPECT_GT(check_goldens(GetParam(), all.at(GetParam())), 10u);
}

TEST_P(TokenizerGoldens, ExtraTextsMatchHuggingFace) {
  const std::string path = test::fixture_dir("tokenizer_extra_goldens.json");
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " does not exist yet: run scripts/tokenizer_golden_extra.py on a machine with the "
                 << "`tokenizers` package to create it from tests/data/tokenizer_extra_texts.json";
  const auto all = read_json(path);
  ASSERT_TRUE(all.contains(GetParam())) << path << " lacks " << GetParam();
  const auto texts = read_json(test::data_dir() + "/tokenizer_extra_texts.json");
  ASSERT_EQ(all.at(GetParam()).at("texts"), texts) << "goldens made from another version of the texts";
  EXPECT_GT(check_goldens(GetParam(), all.at(GetParam())), 50u);
}

INSTANTIATE_TEST_SUITE_P(Real, TokenizerGoldens, ::testing::ValuesIn(test::real_tokenizer_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace moeflux
