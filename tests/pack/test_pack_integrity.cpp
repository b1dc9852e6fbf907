// Integrity by default: packs of version 2 carry CRC-32C checksums; the dense weights are
// checked at every load and expert records as they are read (the resident copy at load, the
// expert cache per read), failing with the tensor or layer/expert named and exit 1;
// --no-verify-experts opts out for experts. Version 1 packs (zlib CRC-32) still load and verify.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "core/crc32.h"
#include "core/crc32c.h"
#include "format/pack_store.h"
#include "pack/pack_test_util.h"

namespace moeflux {
namespace {

TEST(Crc32c, StandardCheckValueAndEveryPathAgree) {
  const std::string check = "123456789";
  const auto* c = reinterpret_cast<const uint8_t*>(check.data());
  EXPECT_EQ(crc32c_of(c, check.size()), 0xE3069283u);  // the CRC-32C catalogue's check value
  EXPECT_EQ(crc32c_update_portable(0, c, check.size()), 0xE3069283u);
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(200000);
  for (auto& b : buf) b = uint8_t(rng());
  // Lengths around the three-stream block sizes (3 x 256, 3 x 8192) and odd alignments.
  for (size_t len : {0, 1, 7, 8, 9, 767, 768, 769, 1543, 24575, 24576, 24577, 49160, 199990})
    for (size_t off : {0, 1, 5}) {
      const uint8_t* p = buf.data() + off;
      const uint32_t whole = crc32c_of(p, len);
      EXPECT_EQ(whole, crc32c_update_portable(0, p, len)) << len << " at " << off;
      EXPECT_EQ(crc32c_update(crc32c_of(p, len / 3), p + len / 3, len - len / 3), whole) << len;
    }
  const uint32_t before = crc32c_of(buf.data(), buf.size());
  buf[123457] ^= 0x10;  // a single flipped bit always changes a CRC
  EXPECT_NE(crc32c_of(buf.data(), buf.size()), before);
}

class PackIntegrity : public ::testing::Test {
 protected:
  void SetUp() override {
    pack_ = tmp_.file("pack");
    test::convert_fixture("qwen3_moe/q4", pack_);
    man_ = PackStore::open(pack_)->manifest();
  }
  // An expert cache of one record (the largest): streamed, every request a read from disk.
  std::string one_record() const {
    uint64_t m = 0;
    for (const auto& l : man_.experts)
      for (const auto& r : l.records) m = std::max(m, r.size);
    return "--expert-cache " + std::to_string(m);
  }
  // Runs `moeflux logits` on `pack` with extra args; returns the exit code, output in *out.
  int logits(const std::string& pack, const std::string& args, std::string* out, const std::string& dst = "o") {
    return test::run_command(test::moeflux_exe() + " logits --model " + pack + " --ids 3,1,4,1,5 --out " +
                                 tmp_.file(dst + ".safetensors") + " " + args,
                             out);
  }
  void expect_fails(const std::string& pack, const std::string& args, const std::string& needle) {
    std::string out;
    EXPECT_EQ(logits(pack, args, &out), 1) << args << "\n" << out;
    EXPECT_NE(out.find(needle), std::string::npos) << args << ": wanted '" << needle << "' in: " << out;
  }
  // Flips one byte of every record of the last MoE layer (any routing needs one of them).
  int64_t damage_last_layer() {
    const ExpertLayer& l = man_.experts.back();
    for (const auto& r : l.records) test::flip_byte(pack_ + "/" + l.file, r.offset + 1000);
    return l.layer;
  }
  // Rewrites the pack as version 1: the manifest's checksums become zlib CRC-32s.
  void make_version_1() {
    PackManifest m = man_;
    m.version = 1;
    m.checksum = PackChecksum::Crc32;
    const std::string dense = test::read_file(pack_ + "/dense.bin");
    for (auto& t : m.dense) t.crc32 = crc32_of(reinterpret_cast<const uint8_t*>(dense.data()) + t.offset, t.nbytes);
    for (auto& l : m.experts) {
      const std::string bytes = test::read_file(pack_ + "/" + l.file);
      for (auto& r : l.records) r.crc32 = crc32_of(reinterpret_cast<const uint8_t*>(bytes.data()) + r.offset, r.size);
    }
    test::write_file(pack_ + "/manifest.json", pack_manifest_to_json(m));
    man_ = PackStore::open(pack_)->manifest();
  }
  test::TempDir tmp_;
  std::string pack_;
  PackManifest man_;
};

TEST_F(PackIntegrity, NewPacksCarryCrc32c) {
  EXPECT_EQ(man_.version, 2);
  EXPECT_EQ(man_.checksum, PackChecksum::Crc32c);
  EXPECT_NE(test::read_file(pack_ + "/manifest.json").find("\"checksum\": \"crc32c\""), std::string::npos);
  const std::string dense = test::read_file(pack_ + "/dense.bin");
  for (const auto& t : man_.dense)
    EXPECT_EQ(t.crc32, crc32c_update_portable(0, reinterpret_cast<const uint8_t*>(dense.data()) + t.offset, t.nbytes))
        << t.name;
}

TEST_F(PackIntegrity, FlippedDenseByteFailsTheLoadNamingTheTensor) {
  const PackTensor& t = man_.dense.at(man_.dense.size() / 2);
  test::flip_byte(pack_ + "/dense.bin", t.offset + t.nbytes / 2);
  const std::string needle = pack_ + ": dense weights damaged: dense tensor '" + t.name +
                             "': checksum mismatch in dense.bin at byte offset " + std::to_string(t.offset);
  for (const std::string& args : std::vector<std::string>{"", "--mmap", one_record(), "--io mmap", "--no-verify-experts"})
    expect_fails(pack_, args, needle);
}

TEST_F(PackIntegrity, FlippedExpertByteFailsTheRunNamingLayerAndExpert) {
  const std::string where = "layer " + std::to_string(damage_last_layer()) + " expert ";
  // Resident (auto): the copy is checked at load; the first damaged record is expert 0.
  expect_fails(pack_, "", pack_ + ": expert record damaged: " + where + "0: checksum mismatch in ");
  for (const std::string& args : std::vector<std::string>{one_record(), "--expert-cache 30% --io direct"})
    expect_fails(pack_, args, where);
  std::string out;
  EXPECT_EQ(logits(pack_, one_record() + " --no-verify-experts", &out), 0) << out;
  EXPECT_EQ(logits(pack_, "--no-verify-experts", &out), 0) << out;
  EXPECT_EQ(logits(pack_, "--verify-experts --no-verify-experts", &out), 1) << out;
  EXPECT_NE(out.find("contradict"), std::string::npos) << out;
}

TEST_F(PackIntegrity, Version1PacksStillLoadAndVerify) {
  const std::vector<std::string> modes = {"", one_record()};  // resident, streamed
  std::string out;
  for (size_t i = 0; i < modes.size(); ++i)
    ASSERT_EQ(logits(pack_, modes[i], &out, "v2_" + std::to_string(i)), 0) << out;
  make_version_1();
  EXPECT_EQ(man_.version, 1);
  EXPECT_EQ(man_.checksum, PackChecksum::Crc32);
  ASSERT_EQ(test::run_command(test::moeflux_exe() + " verify --quiet " + pack_, &out), 0) << out;
  for (size_t i = 0; i < modes.size(); ++i) {
    const std::string tag = std::to_string(i);
    ASSERT_EQ(logits(pack_, modes[i], &out, "v1_" + tag), 0) << modes[i] << "\n" << out;
    EXPECT_TRUE(test::read_file(tmp_.file("v1_" + tag + ".safetensors")) ==
                test::read_file(tmp_.file("v2_" + tag + ".safetensors")))
        << modes[i];
  }
  const std::string where = "layer " + std::to_string(damage_last_layer()) + " expert ";
  expect_fails(pack_, one_record(), "checksum mismatch (crc32 ");
  expect_fails(pack_, "", where + "0: checksum mismatch in ");
  const PackTensor& t = man_.dense.front();
  test::flip_byte(pack_ + "/dense.bin", t.offset);
  expect_fails(pack_, "", "dense tensor '" + t.name + "'");
  EXPECT_EQ(test::run_command(test::moeflux_exe() + " verify --quiet " + pack_, &out), 1) << out;
  EXPECT_NE(out.find("stored crc32 "), std::string::npos) << out;
}

// The shipped demo model is a version 1 pack.
TEST(PackIntegrityDemo, ShippedVersion1PackVerifies) {
  const std::string demo = std::string(MOEFLUX_SOURCE_DIR) + "/models/demo-qwen3-moe-q4";
  EXPECT_EQ(PackStore::open(demo)->manifest().version, 1);
  std::string out;
  EXPECT_EQ(test::run_command(test::moeflux_exe() + " verify --quiet " + demo, &out), 0) << out;
}

}  // namespace
}  // namespace moeflux
