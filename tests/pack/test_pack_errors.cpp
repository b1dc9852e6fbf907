// Damaged and inconsistent packs: `moeflux verify` names the flipped byte's tensor or
// layer/expert and offset; opening refuses truncated files, wrong versions and bad offsets
// with a clear message; convert refuses to overwrite and leaves nothing behind on failure.
#include <gtest/gtest.h>

#include <filesystem>

#include "format/pack_store.h"
#include "pack/pack_test_util.h"

namespace moeflux {
namespace {

namespace fs = std::filesystem;

class PackErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    pack_ = tmp_.file("pack");
    test::convert_fixture("qwen3_moe/q4", pack_);
  }
  // Runs a command expecting exit 1 and `needle` in its output.
  void expect_fail(const std::string& args, const std::string& needle) {
    std::string out;
    EXPECT_EQ(test::run_command(test::moeflux_exe() + " " + args, &out), 1) << out;
    EXPECT_NE(out.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << out;
  }
  void expect_open_fails(const std::string& needle) {
    expect_fail("logits --model " + pack_ + " --ids 1,2 --out " + tmp_.file("o.safetensors"), needle);
  }
  void edit_manifest(const std::string& from, const std::string& to) {
    std::string m = test::read_file(pack_ + "/manifest.json");
    const size_t p = m.find(from);
    ASSERT_NE(p, std::string::npos) << from;
    m.replace(p, from.size(), to);
    test::write_file(pack_ + "/manifest.json", m);
  }
  test::TempDir tmp_;
  std::string pack_;
};

TEST_F(PackErrors, VerifyAcceptsIntactPack) {
  std::string out;
  EXPECT_EQ(test::run_command(test::moeflux_exe() + " verify --quiet " + pack_, &out), 0) << out;
  EXPECT_NE(out.find("OK"), std::string::npos) << out;
}

TEST_F(PackErrors, VerifyNamesFlippedExpertByte) {
  const auto m = PackStore::open(pack_)->manifest();
  const ExpertLayer& l = m.experts.back();
  const PackRecord& r = l.records.at(5);
  test::flip_byte(pack_ + "/" + l.file, r.offset + 777);
  expect_fail("verify --quiet " + pack_, "first bad: layer " + std::to_string(l.layer) + " expert 5: checksum mismatch in " +
                                             l.file + " at byte offset " + std::to_string(r.offset));
}

TEST_F(PackErrors, VerifyNamesFlippedDenseByte) {
  const auto m = PackStore::open(pack_)->manifest();
  const PackTensor& t = m.dense.at(m.dense.size() / 2);
  test::flip_byte(pack_ + "/dense.bin", t.offset + t.nbytes - 1);
  expect_fail("verify --quiet " + pack_, "first bad: dense tensor '" + t.name + "': checksum mismatch in dense.bin at byte offset " +
                                             std::to_string(t.offset));
}

TEST_F(PackErrors, TruncatedExpertFile) {
  const std::string f = pack_ + "/experts/layer_002.bin";
  fs::resize_file(f, fs::file_size(f) - 4096);
  expect_open_fails("layer_002.bin: file has");
  expect_open_fails("file truncated?");
  expect_fail("verify " + pack_, "file truncated?");
}

TEST_F(PackErrors, TruncatedDenseFile) {
  fs::resize_file(pack_ + "/dense.bin", 1000);
  expect_open_fails("dense.bin: file has 1000 bytes");
}

TEST_F(PackErrors, MissingExpertFile) {
  fs::remove(pack_ + "/experts/layer_000.bin");
  expect_open_fails("pack file 'experts/layer_000.bin' is missing");
}

TEST_F(PackErrors, WrongVersion) {
  edit_manifest("\"version\": 2", "\"version\": 3");
  expect_open_fails("unsupported pack version 3");
  expect_fail("inspect " + pack_, "unsupported pack version 3");
}

TEST_F(PackErrors, WrongFormatName) {
  edit_manifest("\"moeflux-pack\"", "\"gguf\"");
  expect_open_fails("format is 'gguf'");
}

TEST_F(PackErrors, MisalignedDenseOffset) {
  const std::string off = std::to_string(PackStore::open(pack_)->manifest().dense.at(1).offset);
  edit_manifest("\"offset\": " + off + ",", "\"offset\": " + off + "1,");
  expect_open_fails("offset " + off + "1 is not a multiple of 64");
}

TEST_F(PackErrors, DenseOffsetPastEnd) {
  const auto m = PackStore::open(pack_)->manifest();
  const std::string off = std::to_string(m.dense.at(1).offset);
  edit_manifest("\"offset\": " + off + ",", "\"offset\": " + std::to_string(m.dense_size) + ",");
  expect_open_fails("runs past the end of the dense file");
}

TEST_F(PackErrors, RecordOffsetPastEnd) {
  const auto m = PackStore::open(pack_)->manifest();
  const PackRecord& r = m.experts[0].records.back();
  edit_manifest("[\n     " + std::to_string(r.offset) + ",", "[\n     " + std::to_string(m.experts[0].size) + ",");
  expect_open_fails("runs past the end of experts/layer_000.bin");
}

TEST_F(PackErrors, NotJson) {
  test::write_file(pack_ + "/manifest.json", "{\"format\": ");
  expect_open_fails("manifest.json: not valid JSON");
}

TEST_F(PackErrors, ConvertRefusesToOverwrite) {
  expect_fail("convert --quiet " + test::fixture_dir("mixtral/q4") + " " + pack_, "already exists (use --force");
  std::string out;
  ASSERT_EQ(test::run_command(test::moeflux_exe() + " convert --quiet --force " + test::fixture_dir("mixtral/q4") + " " + pack_, &out), 0) << out;
  EXPECT_EQ(PackStore::open(pack_)->manifest().architecture, "mixtral");
}

TEST_F(PackErrors, FailedConversionLeavesNothing) {
  const std::string src = tmp_.file("src");
  fs::copy(test::fixture_dir("qwen3_moe"), src);
  fs::permissions(src + "/model.safetensors", fs::perms::owner_write, fs::perm_options::add);
  test::write_file(src + "/config.json", test::read_file(src + "/config.json") + " ");
  // Make the last expert's down_proj inconsistent with the others: scales without biases.
  const std::string dst = tmp_.file("out");
  fs::resize_file(src + "/model.safetensors", fs::file_size(src + "/model.safetensors") / 2);
  expect_fail("convert --quiet " + src + " " + dst, "file truncated?");
  EXPECT_FALSE(fs::exists(dst));
  for (const auto& e : fs::directory_iterator(tmp_.path()))
    EXPECT_EQ(e.path().filename().string().find("out.tmp"), std::string::npos) << e.path();
}

TEST_F(PackErrors, BadBitsArgument) {
  expect_fail("convert " + test::fixture_dir("mixtral") + " " + tmp_.file("x") + " --bits 7", "--bits: '7' is not one of");
  expect_fail("convert " + test::fixture_dir("mixtral") + " " + tmp_.file("x") + " --group-size 48", "--group-size: 48");
  expect_fail("convert " + pack_ + " " + tmp_.file("x"), "is already a pack");
}

}  // namespace
}  // namespace moeflux
