// Bad input through the `moeflux logits` command: every case must exit 1 with a message
// naming the problem (never a crash, a signal or a hang).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "util/test_util.h"

namespace moeflux {
namespace {

namespace fs = std::filesystem;

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.file("m");
    fs::copy(test::fixture_dir("qwen3_moe"), model_, fs::copy_options::recursive);
    for (auto& e : fs::recursive_directory_iterator(model_))
      fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  }
  // Runs logits on the model dir; expects exit 1 and `needle` in the output.
  void expect_failure(const std::string& needle, const std::string& ids = "1,2,3", std::string dir = "") {
    if (dir.empty()) dir = model_;
    std::string out;
    int rc = test::run_command(test::moeflux_exe() + " logits --model " + dir + " --ids " + ids + " --out " +
                                   tmp_.file("o.safetensors"),
                               &out);
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << out;
  }
  std::string file() const { return model_ + "/model.safetensors"; }
  void edit_config(const std::string& from, const std::string& to) {
    std::string c = read(model_ + "/config.json");
    auto p = c.find(from);
    ASSERT_NE(p, std::string::npos);
    c.replace(p, from.size(), to);
    std::ofstream(model_ + "/config.json") << c;
  }
  static std::string read(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  test::TempDir tmp_;
  std::string model_;
};

TEST_F(BadInput, MissingDirectory) { expect_failure("none: no such directory", "1", tmp_.file("none")); }

TEST_F(BadInput, TruncatedWeights) {
  fs::resize_file(file(), fs::file_size(file()) / 2);
  expect_failure("file truncated?");
}

TEST_F(BadInput, TruncatedToHeaderLength) {
  fs::resize_file(file(), 5);
  expect_failure("too short");
}

TEST_F(BadInput, HeaderLiesAboutOffsets) {
  std::string b = read(file());
  const std::string key = "\"data_offsets\":[0,";
  auto p = b.find(key);
  ASSERT_NE(p, std::string::npos);
  b[p + key.size() - 2] = '9';  // begin 0 -> 9: begin/size disagree
  std::ofstream(file(), std::ios::binary) << b;
  expect_failure("bytes for shape");
}

TEST_F(BadInput, InvalidConfigJson) {
  std::ofstream(model_ + "/config.json") << "{\"model_type\": ";
  expect_failure("not valid JSON");
}

TEST_F(BadInput, UnknownArchitecture) {
  edit_config("\"qwen3_moe\"", "\"gpt_oss\"");
  expect_failure("unknown architecture model_type 'gpt_oss'");
}

TEST_F(BadInput, ShapesDisagreeWithConfig) {
  edit_config("\"moe_intermediate_size\": 64", "\"moe_intermediate_size\": 32");
  expect_failure("expected [32, 128] from config.json");
}

TEST_F(BadInput, MissingTensor) {
  edit_config("\"num_hidden_layers\": 3", "\"num_hidden_layers\": 4");
  expect_failure("missing tensor 'model.layers.3.input_layernorm.weight'");
}

TEST_F(BadInput, IdsOutsideVocabulary) {
  expect_failure("token id 512 at index 1 is outside the vocabulary", "5,512");
  expect_failure("token id -1", "-1");
  expect_failure("not an integer token id", "1,x");
  expect_failure("not an integer token id", "1,,2");
}

TEST_F(BadInput, BadArguments) {
  std::string out;
  EXPECT_NE(test::run_command(test::moeflux_exe() + " logits --ids 1", &out), 0);
  EXPECT_NE(out.find("--model"), std::string::npos) << out;
  EXPECT_NE(test::run_command(test::moeflux_exe() + " frobnicate", &out), 0);
}

}  // namespace
}  // namespace moeflux
