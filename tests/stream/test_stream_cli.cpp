// Expert streaming from the command line: the demo pack gives the same text through a
// one-expert cache, direct I/O and io_uring as through the memory map; --stats reports the
// cache; routing profiles save and pin; bad options and files exit 1 naming the problem;
// moeflux bench prints the streaming table.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "stream/expert_cache.h"
#include "stream/streaming.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

const std::string kDemo = std::string(MOEFLUX_SOURCE_DIR) + "/models/demo-qwen3-moe-q4";
const std::string kGen = " run -m " + kDemo + " -p 'The jury said that the' -n 24 --temperature 0 ";

// The generated text: the output up to the statistics line.
std::string stdout_of(const std::string& args, int* rc) {
  std::string out;
  *rc = test::run_command(test::moeflux_exe() + args, &out);
  return out.substr(0, out.find("\n\nprompt tokens:"));
}

std::string all_of(const std::string& args, int* rc) {
  std::string out;
  *rc = test::run_command(test::moeflux_exe() + args, &out);
  return out;
}

TEST(StreamCli, SameTextWhateverTheCache) {
  int rc = 0;
  const std::string ref = stdout_of(kGen + "--io mmap", &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_GT(ref.size(), 40u);
  std::vector<std::string> variants = {"", "--expert-cache 108K", "--expert-cache 10% --no-prefetch",
                                       "--expert-cache 108K --io direct", "--cache-policy lfu --expert-cache 20%",
                                       "--verify-experts"};
  if (uring_available()) variants.push_back("--io-engine uring --io direct --expert-cache 5%");
  for (const auto& v : variants) {
    EXPECT_EQ(stdout_of(kGen + v, &rc), ref) << v;
    EXPECT_EQ(rc, 0) << v;
  }
}

TEST(StreamCli, StatsReportTheHostTier) {
  int rc = 0;
  const std::string out = all_of(kGen + "--expert-cache 108K --stats", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("expert cache: host budget"), std::string::npos) << out;
  EXPECT_NE(out.find("host tier:"), std::string::npos) << out;
  EXPECT_NE(out.find("prediction precision"), std::string::npos) << out;
  EXPECT_NE(out.find("stalled"), std::string::npos) << out;
}

TEST(StreamCli, ProfileSavedAndPinned) {
  test::TempDir dir;
  int rc = 0;
  const std::string prof = dir.file("profile.json");
  std::string out = all_of(kGen + "--save-profile " + prof, &rc);
  ASSERT_EQ(rc, 0) << out;
  std::ifstream f(prof);
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(text.find("moeflux-routing-profile"), std::string::npos);
  int ref_rc = 0;
  const std::string ref = stdout_of(kGen + "--io mmap", &ref_rc);
  EXPECT_EQ(stdout_of(kGen + "--expert-cache 30% --pin-profile " + prof, &rc), ref);
  EXPECT_EQ(rc, 0);
  std::ofstream(dir.file("bad.json")) << "{\"format\": \"moeflux-routing-profile\", \"version\": 1, \"layers\": 3}";
  out = all_of(kGen + "--pin-profile " + dir.file("bad.json"), &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("\"layers\" must be an array"), std::string::npos) << out;
}

TEST(StreamCli, BadOptionsExitOneWithAMessage) {
  int rc = 0;
  std::string out = all_of(kGen + "--expert-cache 12X", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("--expert-cache '12X'"), std::string::npos) << out;
  out = all_of(kGen + "--io sideways", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--io"), std::string::npos) << out;
  out = all_of(kGen + "--io mmap --verify-experts", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("need the expert cache"), std::string::npos) << out;
  out = all_of(kGen + "--io-threads 0", &rc);
  EXPECT_NE(rc, 0);
}

// A budget that could hold no expert, or more than the machine has, is refused before the
// load; --expert-cache on a checkpoint directory warns that it applies only to packs.
TEST(StreamCli, BudgetCheckedAgainstThePackAndTheMachine) {
  int rc = 0;
  std::string out = all_of(kGen + "--expert-cache 1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("--expert-cache 1 (1 bytes) is below one expert record of this pack (110592 bytes"),
            std::string::npos) << out;
  EXPECT_NE(out.find("give at least 108K"), std::string::npos) << out;
  out = all_of(kGen + "--expert-cache 1%", &rc);  // 0.64 of a record
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("below one expert record"), std::string::npos) << out;
  out = all_of(kGen + "--expert-cache 1000T", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("is more than this machine's memory"), std::string::npos) << out;
  const std::string ckpt = test::fixture_dir("qwen3_moe");
  test::TempDir dir;
  out = all_of(" logits -m " + ckpt + " --ids 1,2 --out " + dir.file("l.safetensors") + " --expert-cache 1G", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("warning: --expert-cache applies only to packs"), std::string::npos) << out;
  out = all_of(" logits -m " + ckpt + " --ids 1,2 --out " + dir.file("l.safetensors"), &rc);
  EXPECT_EQ(out.find("warning"), std::string::npos) << out;
}

TEST(StreamBudget, AgainstRecordPhysicalAndAvailableMemory) {
  const uint64_t gib = uint64_t(1) << 30;
  // total 100 GiB of experts, records of 3 MiB, 64 GiB of RAM of which 16 GiB available
  auto check = [&](const std::string& spec) { return check_cache_budget(spec, 100 * gib, 3 << 20, 64 * gib, 16 * gib); };
  EXPECT_EQ(check("auto"), "");
  EXPECT_EQ(check("3M"), "");
  EXPECT_EQ(check("8G"), "");
  EXPECT_THROW(check("2M"), Error);
  EXPECT_THROW(check("65G"), Error);
  EXPECT_THROW(check("70%"), Error);  // 70 GiB
  const std::string w = check("20G");
  EXPECT_NE(w.find("warning: --expert-cache 20G (20.00 GiB) is more than the memory available now (16.00 GiB)"),
            std::string::npos) << w;
  EXPECT_NE(check("20%"), "");  // 20 GiB
  EXPECT_THROW(check("12X"), Error);
}

TEST(StreamCli, BenchPrintsTheStreamingTable) {
  int rc = 0;
  test::TempDir dir;
  const std::string prof = dir.file("bench_profile.json");
  const std::string out = all_of(" bench -m " + kDemo + " -p 8 -n 4 -r 1 --expert-cache 25% --save-profile " + prof, &rc);
  ASSERT_EQ(rc, 0) << out;
  std::ifstream f(prof);  // bench writes the profile too (it used to ignore --save-profile)
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(text.find("moeflux-routing-profile"), std::string::npos) << out;
  EXPECT_NE(out.find("disk sequential read"), std::string::npos) << out;
  EXPECT_NE(out.find("| tg4 |"), std::string::npos) << out;
  EXPECT_NE(out.find("stall %"), std::string::npos) << out;
}

}  // namespace
}  // namespace moeflux
