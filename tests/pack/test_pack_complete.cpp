// Completeness: convert refuses, before writing anything, a checkpoint missing a tensor the
// architecture reads or whose config.json disagrees with it (absurd expert counts, top-k above
// the experts); verify flags a pack missing a dense tensor or an expert record. Self-contained
// packs: the tokenizer and generation files travel with the pack, so `run -m PACK` works alone
// and honours generation_config.json's eos ids; without a tokenizer convert warns and run hints.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "pack/pack_test_util.h"

namespace moeflux {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class PackComplete : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = tmp_.file("src");
    fs::create_directory(src_);
    for (const char* f : {"config.json", "model.safetensors"})
      fs::copy_file(test::fixture_dir("qwen3_moe") + "/" + f, src_ + "/" + f);
    fs::permissions(src_ + "/model.safetensors", fs::perms::owner_write, fs::perm_options::add);
    dst_ = tmp_.file("pack");
  }
  int mf(const std::string& args, std::string* out) {
    return test::run_command(test::moeflux_exe() + " " + args, out);
  }
  void set_config(const std::string& key, const json& value) {
    json c = json::parse(test::read_file(src_ + "/config.json"));
    c[key] = value;
    test::write_file(src_ + "/config.json", c.dump(1));
  }
  // convert must fail naming `needle` and leave no DST and no temporary directory.
  void expect_refused_before_writing(const std::string& needle) {
    std::string out;
    EXPECT_EQ(mf("convert --quiet " + src_ + " " + dst_, &out), 1) << out;
    EXPECT_NE(out.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << out;
    EXPECT_NE(out.find("nothing written"), std::string::npos) << out;
    for (const auto& e : fs::directory_iterator(tmp_.path()))
      EXPECT_EQ(e.path().filename().string().rfind("pack", 0), std::string::npos) << e.path();
  }
  void edit_manifest(const std::function<void(json&)>& edit) {
    json m = json::parse(test::read_file(dst_ + "/manifest.json"));
    edit(m);
    test::write_file(dst_ + "/manifest.json", m.dump(1));
  }
  test::TempDir tmp_;
  std::string src_, dst_;
};

TEST_F(PackComplete, MissingTensorRefusedBeforeWriting) {
  // Rename model.norm.weight inside the safetensors header (same length: offsets stay valid).
  std::string st = test::read_file(src_ + "/model.safetensors");
  const size_t p = st.find("\"model.norm.weight\"");
  ASSERT_NE(p, std::string::npos);
  st.replace(p, 19, "\"model.nrom.weight\"");
  test::write_file(src_ + "/model.safetensors", st);
  expect_refused_before_writing("model.norm.weight");
}

TEST_F(PackComplete, AbsurdExpertCountRefusedBeforeWriting) {
  set_config("num_local_experts", 1000000000);
  expect_refused_before_writing("1000000000");
}

TEST_F(PackComplete, TopKAboveExpertsRefusedBeforeWriting) {
  set_config("num_experts_per_tok", 17);
  expect_refused_before_writing("num_experts_per_tok (17) > number of experts (16)");
}

TEST_F(PackComplete, OversizedDimensionRefusedBeforeWriting) {
  set_config("moe_intermediate_size", int64_t(1) << 40);
  expect_refused_before_writing("moe_intermediate_size");
}

TEST_F(PackComplete, OverflowingSizeRefusedBeforeWriting) {
  // DeepSeek's shared experts are one MLP of n_shared_experts x moe_intermediate_size.
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(test::fixture_dir("deepseek_v3") + "/" + f, src_ + "/" + f, fs::copy_options::overwrite_existing);
  set_config("n_shared_experts", int64_t(1) << 60);
  expect_refused_before_writing("n_shared_experts (1152921504606846976) x moe_intermediate_size (64) is out of range");
}

TEST_F(PackComplete, VerifyFlagsMissingDenseTensor) {
  test::convert_fixture("qwen3_moe", dst_);
  std::string out;
  ASSERT_EQ(mf("verify --quiet " + dst_, &out), 0) << out;
  edit_manifest([](json& m) {
    auto& d = m["dense"]["tensors"];
    for (auto it = d.begin(); it != d.end(); ++it)
      if ((*it)["name"] == "model.norm.weight") {
        d.erase(it);
        return;
      }
    FAIL() << "no model.norm.weight in the manifest";
  });
  EXPECT_EQ(mf("verify --quiet " + dst_, &out), 1) << out;
  EXPECT_NE(out.find("incomplete pack"), std::string::npos) << out;
  EXPECT_NE(out.find("model.norm.weight"), std::string::npos) << out;
}

TEST_F(PackComplete, VerifyFlagsMissingExpertRecord) {
  test::convert_fixture("qwen3_moe", dst_);
  std::string out;
  edit_manifest([](json& m) { m["experts"].back()["records"].erase(m["experts"].back()["records"].size() - 1); });
  EXPECT_EQ(mf("verify --quiet " + dst_, &out), 1) << out;
  EXPECT_NE(out.find("incomplete pack"), std::string::npos) << out;
  EXPECT_NE(out.find(".experts.15."), std::string::npos) << out;
}

TEST_F(PackComplete, PackCarriesTokenizerAndEosIds) {
  ASSERT_EQ(test::run_command("gunzip -c " + test::data_dir() + "/tokenizers/qwen3/tokenizer.json.gz > " + src_ +
                              "/tokenizer.json"),
            0);
  fs::copy_file(test::data_dir() + "/tokenizers/qwen3/tokenizer_config.json", src_ + "/tokenizer_config.json");
  test::write_file(src_ + "/chat_template.jinja", "{{ messages[0]['content'] }}");
  std::string out;
  ASSERT_EQ(mf("convert --quiet " + src_ + " " + dst_, &out), 0) << out;
  EXPECT_EQ(out.find("no tokenizer.json"), std::string::npos) << out;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
    EXPECT_TRUE(test::read_file(src_ + "/" + f) == test::read_file(dst_ + "/" + f)) << f;
  // "h": one byte-level token, inside the fixture's 512-token vocabulary.
  // JSON on stdout only (the statistics go to stderr).
  const std::string run =
      "(" + test::moeflux_exe() + " run -m " + dst_ + " -p h -n 4 --temperature 0 --json 2>/dev/null)";
  ASSERT_EQ(test::run_command(run, &out), 0) << out;
  const json first = json::parse(out);
  ASSERT_EQ(first["generated_tokens"], 4) << out;
  const int first_token = first["tokens"][0];
  // The same greedy run stops at once when that token is an eos id of generation_config.json.
  test::write_file(src_ + "/generation_config.json", json{{"eos_token_id", {first_token}}}.dump());
  ASSERT_EQ(mf("convert --quiet --force " + src_ + " " + dst_, &out), 0) << out;
  EXPECT_TRUE(fs::exists(dst_ + "/generation_config.json"));
  ASSERT_EQ(test::run_command(run, &out), 0) << out;
  const json second = json::parse(out);
  EXPECT_EQ(second["generated_tokens"], 1) << out;
  EXPECT_EQ(second["stop_reason"], "eos") << out;
}

TEST_F(PackComplete, NoTokenizerWarnsAndRunHints) {
  std::string out;
  ASSERT_EQ(mf("convert --quiet " + src_ + " " + dst_, &out), 0) << out;
  EXPECT_NE(out.find("warning: " + src_ + " has no tokenizer.json"), std::string::npos) << out;
  EXPECT_EQ(mf("run -m " + dst_ + " -p hi", &out), 1) << out;
  EXPECT_NE(out.find("pass --tokenizer DIR or re-convert from a checkpoint that has tokenizer.json"),
            std::string::npos)
      << out;
  // --tokenizer still works for such a pack.
  const std::string tok = tmp_.file("tok");
  fs::create_directory(tok);
  ASSERT_EQ(test::run_command("gunzip -c " + test::data_dir() + "/tokenizers/qwen3/tokenizer.json.gz > " + tok +
                              "/tokenizer.json"),
            0);
  EXPECT_EQ(mf("run -m " + dst_ + " --tokenizer " + tok + " -p h -n 2 --temperature 0", &out), 0) << out;
}

}  // namespace
}  // namespace moeflux
