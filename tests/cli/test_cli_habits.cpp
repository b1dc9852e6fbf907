// llama.cpp habits and common path mistakes: -c / -n -1 / -r / -sys / -t mean what they mean
// there, -ngl says why it is refused, a GGUF or .safetensors file or a checkpoint where a
// pack is needed is named as such, a pack without manifest.json says so, --help shows
// defaults, bench accepts --stats as the README says, and names --cpu-fast-prefill where it acts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "backend/cpu/cpu_features.h"
#include "cli/cli_test_util.h"

namespace moeflux {
namespace {

using test::kDemoPack;
using test::moeflux;

nlohmann::json json_of(const std::string& out) {
  return nlohmann::json::parse(out.substr(std::min(out.find('{'), out.size())), nullptr, false);
}

const std::string kRun = "run -m " + kDemoPack + " -p 'The house was' --temp 0 ";

TEST(CliHabits, ContextLimitAndUntilTheContextEnds) {
  int rc = 0;
  const auto j = json_of(moeflux(kRun + "-n -1 -c 24 --json", &rc));
  ASSERT_EQ(rc, 0);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["stop_reason"].get<std::string>(), "context") << j;
  EXPECT_EQ(j["prompt_tokens"].get<int>() + j["generated_tokens"].get<int>(), 24) << j;
  const std::string big = moeflux(kRun + "-c 100000", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(big.find("--ctx-size 100000 is more than the model's context of 2048"), std::string::npos) << big;
}

TEST(CliHabits, ReversePromptIsAStopString) {
  int rc = 0;
  const auto full = json_of(moeflux(kRun + "-n 24 --json", &rc));
  ASSERT_EQ(rc, 0);
  const std::string text = full["text"].get<std::string>();
  // a word from the middle of the greedy text: -r stops right before it
  const size_t sp = text.find(' ', text.size() / 2);
  ASSERT_NE(sp, std::string::npos) << text;
  const std::string word = text.substr(sp, text.find(' ', sp + 1) - sp);
  const auto stopped = json_of(moeflux(kRun + "-n 24 --json -r '" + word + "'", &rc));
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(stopped["stop_reason"].get<std::string>(), "stop");
  EXPECT_EQ(stopped["text"].get<std::string>(), text.substr(0, text.find(word))) << word;
}

TEST(CliHabits, SysIsTheSystemPrompt) {
  int rc = 0;
  std::string out = moeflux(kRun + "-n 2 -sys 'Be brief.'", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("--system needs --chat"), std::string::npos) << out;
  out = moeflux(kRun + "-n 2 --chat -sys 'Be brief.' --json", &rc);
  EXPECT_EQ(rc, 0) << out;
  // the system prompt is in the rendered prompt: more prompt tokens than without it
  const auto with = json_of(out), without = json_of(moeflux(kRun + "-n 2 --chat --json", &rc));
  EXPECT_GT(with["prompt_tokens"].get<int>(), without["prompt_tokens"].get<int>());
}

TEST(CliHabits, GpuLayersPointToTheBackend) {
  int rc = 0;
  for (const char* flag : {"-ngl 99", "--n-gpu-layers 99", "-ngl=99"}) {
    const std::string out = moeflux(kRun + "-n 2 " + flag, &rc);
    EXPECT_EQ(rc, 1) << flag << "\n" << out;
    EXPECT_NE(out.find("GPU offload is chosen with --backend cuda"), std::string::npos) << flag << "\n" << out;
  }
  moeflux(kRun + "-n 2 -ngl 0", &rc);  // no offload asked: runs
  EXPECT_EQ(rc, 0);
  const std::string bench = moeflux("bench -m " + kDemoPack + " -p 4 -n 2 -r 1 -ngl 99", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(bench.find("GPU offload"), std::string::npos) << bench;
}

TEST(CliHabits, FilesWhereADirectoryIsExpected) {
  test::TempDir tmp;
  std::ofstream(tmp.file("model.gguf")) << "GGUF\x03\x00\x00\x00 binary";
  std::ofstream(tmp.file("model.safetensors")) << "\x08\x00\x00\x00\x00\x00\x00\x00{}      ";
  std::ofstream(tmp.file("notes.txt")) << "hello";
  struct Case {
    std::string path, needle;
  } cases[] = {
      {tmp.file("model.gguf"), "is a GGUF file; moeflux does not read GGUF"},
      {tmp.file("model.safetensors"), "pass the checkpoint directory that holds it (with config.json), then convert it"},
      {tmp.file("notes.txt"), "is a file; expected a model directory"},
  };
  int rc = 0;
  for (const auto& c : cases)
    for (const std::string& cmd : std::vector<std::string>{"run -p hi -m ", "chat -m ", "bench -m ", "logits --ids 1 --out x -m ",
                                                          "perplexity -f " + tmp.file("notes.txt") + " -m ", "inspect ",
                                                          "verify "}) {
      const std::string out = moeflux(cmd + c.path, &rc);
      EXPECT_EQ(rc, 1) << cmd << c.path << "\n" << out;
      EXPECT_NE(out.find(c.needle), std::string::npos) << cmd << c.path << "\n" << out;
      EXPECT_EQ(out.find("invalid JSON"), std::string::npos) << out;
    }
}

TEST(CliHabits, CheckpointOrIncompletePackGivenToInspectAndVerify) {
  const std::string ckpt = test::fixture_dir("qwen3_moe");
  int rc = 0;
  for (const char* cmd : {"inspect ", "verify "}) {
    const std::string out = moeflux(cmd + ckpt, &rc);
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find("is a checkpoint directory (config.json), not a pack; convert it first"), std::string::npos)
        << out;
  }
  // A pack that lost its manifest.json: named as such, not as a missing config.json.
  test::TempDir tmp;
  for (const char* f : {"dense.bin", "experts", "tokenizer.json", "tokenizer_config.json"})
    std::filesystem::create_symlink(kDemoPack + "/" + f, tmp.path() + "/" + f);
  for (const std::string cmd : {"inspect ", "verify ", "run -p hi -m ", "bench -m "}) {
    const std::string out = moeflux(cmd + tmp.path(), &rc);
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find("manifest.json is missing: this pack is incomplete"), std::string::npos) << cmd << "\n" << out;
    EXPECT_EQ(out.find("config.json"), std::string::npos) << cmd << "\n" << out;
  }
}

TEST(CliHabits, HelpShowsDefaults) {
  int rc = 0;
  const std::string run = moeflux("run --help", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(std::regex_search(run, std::regex(R"(--n-predict INT[^=\n]*=256\s)"))) << run;
  EXPECT_TRUE(std::regex_search(run, std::regex(R"(--top-k INT=40\s)"))) << run;
  EXPECT_TRUE(std::regex_search(run, std::regex(R"(--expert-cache TEXT=auto\s)"))) << run;
  const std::string bench = moeflux("bench --help", &rc);
  EXPECT_TRUE(std::regex_search(bench, std::regex(R"(--n-prompt INT[^=\n]*=512\s)"))) << bench;
}

TEST(CliHabits, BenchAcceptsStats) {
  int rc = 0;
  const std::string out = moeflux("bench -m " + kDemoPack + " -p 4 -n 2 -r 1 --expert-cache 50% --stats", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("expert cache: host budget"), std::string::npos) << out;
  EXPECT_NE(out.find("host tier:"), std::string::npos) << out;
}

// --cpu-fast-prefill acts on AVX512-VNNI CPUs only, and the table's backend says when it does.
TEST(CliHabits, BenchNamesFastPrefillWhereItActs) {
  int rc = 0;
  const std::string out = moeflux("bench -m " + kDemoPack + " -p 8 -n 2 -r 1 --cpu-fast-prefill", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find(", fast prefill)") != std::string::npos, cpu_isa_detected() >= CpuIsa::Avx512Vnni) << out;
  const std::string plain = moeflux("bench -m " + kDemoPack + " -p 8 -n 2 -r 1", &rc);
  EXPECT_EQ(rc, 0) << plain;
  EXPECT_EQ(plain.find("fast prefill"), std::string::npos) << plain;
}

}  // namespace
}  // namespace moeflux
