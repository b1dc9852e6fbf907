// Malformed tokenizer.json files and bad command-line input: every case raises moeflux::Error
// (or exits 1) with a message naming the field, never a crash. Also the `moeflux tokenize`
// command on good input, checked against the library.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

using nlohmann::json;

json base() {
  return json{{"model",
               {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}},
              {"added_tokens", json::array()}};
}

// Expects from_json_text to throw moeflux::Error whose message contains `needle`.
void expect_text_error(const std::string& text, const std::string& needle) {
  try {
    Tokenizer::from_json_text(text, "tok.json");
    ADD_FAILURE() << "no error for: " << text.substr(0, 200);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "wanted '" << needle << "' in: " << e.what();
  }
}
void expect_error(const json& j, const std::string& needle) { expect_text_error(j.dump(), needle); }

TEST(TokenizerBadInput, MalformedJsonNamesTheField) {
  expect_text_error("", "invalid JSON");
  expect_text_error("{\"model\": ", "invalid JSON");
  expect_text_error("[1, 2]", "expected a JSON object");
  expect_text_error("{\"model\": 1e99999}", "invalid JSON");  // found by fuzz_tokenizer_json: number overflow
  expect_error(json::object(), "missing field 'model'");
  json j = base();
  j["model"]["type"] = "Unigram";
  expect_error(j, "unsupported model 'Unigram'");
  j = base();
  j["model"]["vocab"] = json::array();
  expect_error(j, "model.vocab: expected an object");
  j = base();
  j["model"]["vocab"]["a"] = "zero";
  expect_error(j, "expected an integer");
  j = base();
  j["model"]["vocab"]["a"] = -1;
  expect_error(j, "out of range");
  j = base();
  j["model"]["vocab"]["a"] = 2000000000;
  expect_error(j, "out of range");
  j = base();
  j["model"]["merges"] = {"a b c"};
  expect_error(j, "merges[0]");
  j["model"]["merges"] = {"a z"};
  expect_error(j, "'z' is not in the vocab");
  j["model"]["merges"] = json::array({json::array({"b", "a"})});
  expect_error(j, "merged token 'ba'");
  j["model"]["merges"] = json::array({json::array({"a", 1})});
  expect_error(j, "merges[0][1]: expected a string");
  j = base();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error(j, "pre_tokenizer.pattern: cannot compile regex");
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}};
  expect_error(j, "unknown split behavior 'Sideways'");
  j["pre_tokenizer"] = {{"type", "Nope"}};
  expect_error(j, "unsupported pre-tokenizer type 'Nope'");
  j = base();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Replace"}, {"pattern", {{"Bad", 1}}}}}}};
  expect_error(j, "normalizer.normalizers[0].pattern");
  j = base();
  j["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}};
  expect_error(j, "decoder.start");
  j = base();
  j["added_tokens"] = {{{"id", 5}}};
  expect_error(j, "added_tokens[0]: missing field 'content'");
  j["added_tokens"] = {{{"id", -5}, {"content", "x"}}};
  expect_error(j, "added_tokens[0].id");
  j["added_tokens"] = {{{"id", 5}, {"content", "x"}, {"lstrip", "yes"}}};
  expect_error(j, "lstrip: expected a boolean");
}

TEST(TokenizerBadInput, FilesAndText) {
  test::TempDir tmp;
  EXPECT_THROW(Tokenizer::load(tmp.path()), Error);  // a directory without tokenizer.json
  EXPECT_THROW(Tokenizer::load(tmp.file("missing.json")), Error);
  // A truncated gzip stream.
  std::ifstream in(test::data_dir() + "/tokenizers/llama2/tokenizer.json.gz", std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(tmp.file("tokenizer.json.gz"), std::ios::binary) << gz.substr(0, gz.size() / 2);
  try {
    Tokenizer::load(tmp.path());
    ADD_FAILURE() << "truncated gzip accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gzip"), std::string::npos) << e.what();
  }
  const Tokenizer t = Tokenizer::from_json_text(base().dump(), "tok.json");
  EXPECT_THROW(t.encode("ab\xFF"), Error);
  EXPECT_EQ(t.encode("ab"), (std::vector<int32_t>{2}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{2, 99, -1, 0}), "ab a");  // unknown ids are skipped
}

TEST(TokenizerCli, EncodeDecodeAndTextsJsonAgreeWithTheLibrary) {
  const std::string dir = test::data_dir() + "/tokenizers/qwen3";
  const Tokenizer& tok = test::real_tokenizer("qwen3");
  test::TempDir tmp;
  const std::vector<std::string> texts{"Hello, world!", "  two  spaces", "<|im_start|>x", "\xE6\x97\xA5\xE6\x9C\xAC"};
  std::ofstream(tmp.file("in.json")) << json(texts).dump();
  std::string out;
  ASSERT_EQ(test::run_command(test::moeflux_exe() + " tokenize --tokenizer " + dir + " --texts-json " +
                                  tmp.file("in.json") + " --out " + tmp.file("out.json"),
                              &out),
            0)
      << out;
  std::ifstream f(tmp.file("out.json"));
  const json got = json::parse(f);
  ASSERT_EQ(got.size(), texts.size());
  for (size_t k = 0; k < texts.size(); ++k) EXPECT_EQ(got[k].get<std::vector<int32_t>>(), tok.encode(texts[k]));

  const auto ids = tok.encode("Hello, world!");
  std::string list;
  for (int32_t id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  ASSERT_EQ(test::run_command(test::moeflux_exe() + " tokenize --tokenizer " + dir + " --text 'Hello, world!'", &out), 0);
  EXPECT_EQ(out, list + "\n");
  ASSERT_EQ(test::run_command(test::moeflux_exe() + " tokenize --tokenizer " + dir + " --decode --text " + list, &out), 0);
  EXPECT_EQ(out, "Hello, world!\n");
}

TEST(TokenizerCli, BadArgumentsExitOneWithAMessage) {
  const std::string dir = test::data_dir() + "/tokenizers/qwen3";
  test::TempDir tmp;
  std::ofstream(tmp.file("bad.json")) << "{\"not\": \"an array\"}";
  std::ofstream(tmp.file("nums.json")) << "[\"ok\", 5]";
  const std::vector<std::pair<std::string, std::string>> cases{
      {"--tokenizer " + tmp.path() + " --text hi", "no tokenizer.json"},
      {"--tokenizer " + dir + " --decode --text 1,x", "--text"},
      {"--tokenizer " + dir + " --decode --text 999999999", "not in the vocabulary"},
      {"--tokenizer " + dir + " --texts-json " + tmp.file("bad.json"), "expected a JSON array"},
      {"--tokenizer " + dir + " --texts-json " + tmp.file("nums.json"), "[1]: expected a string"},
      {"--tokenizer " + dir, "give --text or --texts-json"},
  };
  for (const auto& [args, needle] : cases) {
    std::string out;
    EXPECT_EQ(test::run_command(test::moeflux_exe() + " tokenize " + args, &out), 1) << args << "\n" << out;
    EXPECT_NE(out.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << out;
  }
}

}  // namespace
}  // namespace moeflux
