// Expert streaming from the command line: the demo pack gives the same text through a
// one-expert cache, direct I/O and io_uring as through the memory map; --stats reports the
// cache; routing profiles save and pin; bad options and files exit 1 naming the problem;
// moeflux bench prints the streaming table.
#include <gtest/gtest.h>

#include <fstream>

#include "stream/expert_cache.h"
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
  std::vector<std::string> variants = {"", "--expert-cache 1", "--expert-cache 10% --no-prefetch",
                                       "--expert-cache 1 --io direct", "--cache-policy lfu --expert-cache 20%",
                                       "--verify-experts"};
  if (uring_available()) variants.push_back("--io-engine uring --io direct --expert-cache 5%");
  for (const auto& v : variants) {
    EXPECT_EQ(stdout_of(kGen + v, &rc), ref) << v;
    EXPECT_EQ(rc, 0) << v;
  }
}

TEST(StreamCli, StatsReportTheHostTier) {
  int rc = 0;
  const std::string out = all_of(kGen + "--expert-cache 1 --stats", &rc);
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
