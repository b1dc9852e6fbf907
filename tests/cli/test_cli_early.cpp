// Arguments are checked before the model loads: each bad value is reported even when the
// model path does not exist (a load would fail there first). Also -t on every computing
// command, and the load time in run's statistics.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli/cli_test_util.h"

namespace moeflux {
namespace {

using test::kDemoPack;
using test::moeflux;

TEST(CliEarly, BadArgumentsBeforeTheModel) {
  test::TempDir tmp;
  const std::string bad_utf8 = tmp.file("bad.txt");
  std::ofstream(bad_utf8) << "caf\xc3 au lait";
  const std::string none = " -m " + tmp.file("no-such-model");
  struct Case {
    std::string args, needle;
  } cases[] = {
      {"run" + none + " -p hi --temp -1", "temperature must be >= 0"},
      {"run" + none + " -p hi --top-p 7", "top-p must be in (0, 1]"},
      {"run" + none + " -p hi --min-p 2", "min-p must be in [0, 1]"},
      {"run" + none + " -p hi --seed -5", "--seed must be >= 0"},
      {"run" + none + " -p hi --stop ''", "empty stop string"},
      {"run" + none + " -p hi -n 0", "--n-predict must be >= 1, or -1"},
      {"run" + none + " -p ''", "--prompt: the prompt is empty"},
      {"run" + none + " -f " + bad_utf8, "not valid UTF-8 (byte 3)"},
      {"run" + none + " -f " + tmp.file("missing.txt"), "missing.txt: cannot open"},
      {"run" + none + " -p hi --system x", "--system needs --chat"},
      {"run" + none + " -p hi -ngl 99", "GPU offload"},
      {"run" + none + " -p hi --gpu-expert-cache 10%", "--gpu-expert-cache needs --backend cuda"},
      {"run" + none + " -p hi --backend cuda --gpu-expert-cache 10x", "--gpu-expert-cache '10x': expected auto"},
      {"bench" + none + " --backend auto --gpu-expert-cache 120%", "a share above 100%"},
      {"run" + none + " -p hi --backend cuda --moe-misses cpu", "--moe-misses cpu needs a GPU expert cache"},
      {"run" + none + " -p hi --n-cpu-moe 2", "--cpu-moe-layers needs --backend cuda"},
      {"chat" + none + " --temp -1", "temperature must be >= 0"},
      {"chat" + none + " --top-p 7", "top-p must be in (0, 1]"},
      {"perplexity" + none + " -f " + bad_utf8, "not valid UTF-8"},
      {"perplexity" + none + " -f " + bad_utf8 + " --ctx 1", "--ctx must be at least 2"},
      {"perplexity" + none + " -f " + bad_utf8 + " --ctx 8 --stride 9", "--stride must be in [1, ctx]"},
      {"perplexity" + none + " -f " + bad_utf8 + " --max-tokens -1", "--max-tokens must be >= 0"},
  };
  for (const auto& c : cases) {
    int rc = 0;
    const std::string out = moeflux(c.args, &rc);
    EXPECT_EQ(rc, 1) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.needle), std::string::npos) << c.args << "\n" << out;
    EXPECT_EQ(out.find("no-such-model"), std::string::npos) << "the model was opened first: " << c.args << "\n" << out;
  }
  // Past the argument checks, the missing model is named.
  int rc = 0;
  const std::string out = moeflux("run" + none + " -p hi", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("no-such-model: no such directory"), std::string::npos) << out;
}

TEST(CliEarly, ThreadsOnEveryComputingCommand) {
  int rc = 0;
  for (int t : {1, 3}) {
    const std::string out = moeflux("run -m " + kDemoPack + " -p hi -n 2 --json -t " + std::to_string(t), &rc);
    ASSERT_EQ(rc, 0) << out;
    auto j = nlohmann::json::parse(out.substr(std::min(out.find('{'), out.size())), nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << out;
    EXPECT_EQ(j["threads"].get<int>(), t) << out;
  }
  test::TempDir tmp;
  const std::string cases[] = {
      "perplexity -m " + kDemoPack + " -f " + test::data_dir() + "/demo/heldout.txt --max-tokens 40 -c 16 -t 2",
      "logits -m " + kDemoPack + " --ids 1,2,3 --out " + tmp.file("l.safetensors") + " --threads 2",
      "bench -m " + kDemoPack + " -p 4 -n 2 -r 1 -t 2",
  };
  for (const auto& c : cases) {
    const std::string out = moeflux(c, &rc);
    EXPECT_EQ(rc, 0) << c << "\n" << out;
  }
  EXPECT_NE(moeflux("chat --help", &rc).find("-t,--threads"), std::string::npos);
  const std::string bad = moeflux("run -m " + kDemoPack + " -p hi -t -2", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(bad.find("--threads"), std::string::npos) << bad;
}

TEST(CliEarly, StatisticsIncludeTheLoadTime) {
  int rc = 0;
  const std::string out = moeflux("run -m " + kDemoPack + " -p hi -n 2", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\| load \d+\.\d\d s \|)"))) << out;
  const std::string json = moeflux("run -m " + kDemoPack + " -p hi -n 2 --json", &rc);
  auto j = nlohmann::json::parse(json.substr(std::min(json.find('{'), json.size())), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json;
  EXPECT_GT(j["load_s"].get<double>(), 0.0) << json;
}

}  // namespace
}  // namespace moeflux
