// `moeflux run` / `chat` / `perplexity` as a user runs them: bad arguments exit 1 with a
// message; same seed gives byte-identical output; --prompt-cache reuses the common prefix and
// gives the text a run without it gives, --prompt-cache-ro leaves the file as it was, a file
// that is not a cache is refused untouched, one of another model is replaced; chat in a real pseudo-terminal: two turns,
// the second prefilling only its new tokens, then /exit.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "engine/prompt_cache.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

const std::string kDemo = std::string(MOEFLUX_SOURCE_DIR) + "/models/demo-qwen3-moe-q4";

std::string run(const std::string& args, int* rc = nullptr) {
  std::string out;
  int r = test::run_command(test::moeflux_exe() + " " + args, &out);
  if (rc) *rc = r;
  return out;
}

TEST(RunCli, BadArguments) {
  struct Case {
    std::string args, needle;
  } cases[] = {
      {"run -m " + kDemo + " -p hi --top-p 1.5", "top-p must be in (0, 1]"},
      {"run -m " + kDemo + " -p hi --top-p 0", "top-p must be in (0, 1]"},
      {"run -m " + kDemo + " -p hi --temperature -1", "temperature must be >= 0"},
      {"run -m /nonexistent/model -p hi", "/nonexistent/model"},
      {"run -m " + kDemo + " -f " + test::data_dir() + "/demo/heldout.txt", "longer than the model's context"},
      {"run -m " + kDemo + " -p hi --system x", "--system needs --chat"},
      {"perplexity -m " + kDemo + " -f " + test::data_dir() + "/demo/heldout.txt --ctx 1", "--ctx must be at least 2"},
      {"chat -m " + kDemo + " --min-p 2", "min-p must be in [0, 1]"},
  };
  for (const auto& c : cases) {
    int rc = 0;
    std::string out = run(c.args, &rc);
    EXPECT_EQ(rc, 1) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.needle), std::string::npos) << c.args << "\n" << out;
  }
  int rc = 0;
  run("run -m " + kDemo, &rc);  // no prompt
  EXPECT_NE(rc, 0);
  // A pack without its tokenizer is refused before its weights are loaded.
  test::TempDir tmp;
  for (const char* f : {"dense.bin", "experts", "manifest.json", "generation_config.json"})
    std::filesystem::create_symlink(kDemo + "/" + f, tmp.path() + "/" + f);
  for (const char* cmd : {"run -p hi", "chat"}) {
    const std::string out = run(std::string(cmd) + " -m " + tmp.path() + " 2>&1 </dev/null", &rc);
    EXPECT_EQ(rc, 1) << cmd << "\n" << out;
    EXPECT_NE(out.find("no tokenizer.json"), std::string::npos) << cmd << "\n" << out;
  }
}

TEST(RunCli, PromptCache) {
  test::TempDir tmp;
  const std::string cache = tmp.path() + "/prompt.cache";
  auto json_run = [&](const std::string& prompt, const std::string& extra, int* rc) {
    const std::string out = run("run -m " + kDemo + " -p '" + prompt + "' -n 8 --temperature 0 --json " + extra +
                                " 2>/dev/null", rc);
    return out.empty() ? nlohmann::json::object() : nlohmann::json::parse(out.substr(out.find('{')), nullptr, false);
  };
  auto file_bytes = [&] {
    std::ifstream in(cache, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string first = "The jury said that the city of Atlanta had", second = first + " no evidence that any";
  int rc = 0;
  const auto plain = json_run(second, "", &rc);
  ASSERT_EQ(rc, 0);
  const auto a = json_run(first, "--prompt-cache " + cache, &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(a["cached_tokens"], 0);
  ASSERT_TRUE(std::filesystem::exists(cache));
  const auto b = json_run(second, "--prompt-cache " + cache, &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(b["cached_tokens"], a["prompt_tokens"]) << "the first prompt's tokens start the second's";
  EXPECT_EQ(b["text"], plain["text"]);
  EXPECT_EQ(b["prompt_tokens"], plain["prompt_tokens"]);
  const std::string saved = file_bytes();
  const auto c = json_run(second, "--prompt-cache " + cache + " --prompt-cache-ro", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(c["cached_tokens"], plain["prompt_tokens"].get<int>() - 1);
  EXPECT_EQ(c["text"], plain["text"]);
  EXPECT_EQ(file_bytes(), saved) << "--prompt-cache-ro wrote the file";
  // Not a prompt cache: refused, left as it was.
  const std::string other = tmp.path() + "/notes.txt";
  std::ofstream(other) << "my notes";
  const std::string out = run("run -m " + kDemo + " -p hi -n 2 --prompt-cache " + other + " 2>&1", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find(other), std::string::npos) << out;
  std::ifstream notes(other);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(notes), {}), "my notes");
  EXPECT_NE(run("run -m " + kDemo + " -p hi --prompt-cache-ro 2>&1", &rc).find("--prompt-cache-ro needs"), std::string::npos);
  EXPECT_EQ(rc, 1);
  // Made with another model: not used, replaced.
  PromptCacheFile f = load_prompt_cache(cache);
  save_prompt_cache(cache, f.snapshot, "another model");
  const std::string replaced = run("run -m " + kDemo + " -p '" + second + "' -n 2 --temperature 0 --prompt-cache " +
                                   cache + " 2>&1", &rc);
  EXPECT_EQ(rc, 0) << replaced;
  EXPECT_NE(replaced.find("made with another model"), std::string::npos) << replaced;
  EXPECT_NE(replaced.find("(0 cached)"), std::string::npos) << replaced;
  EXPECT_NE(load_prompt_cache(cache).identity, "another model");
}

TEST(RunCli, SameSeedByteIdenticalAndStats) {
  const std::string args = "run -m " + kDemo + " -p 'The house was' -n 24 --seed 7 --temperature 1.0";
  int rc1 = 0, rc2 = 0;
  // stdout (the text) only: the statistics on stderr carry timings
  auto text_of = [](std::string out) { return out.substr(0, out.find("\n\nprompt tokens:")); };
  std::string a = text_of(run(args, &rc1)), b = text_of(run(args, &rc2));
  EXPECT_EQ(rc1, 0);
  EXPECT_EQ(rc2, 0);
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  std::string with_stats = run(args);
  EXPECT_NE(with_stats.find("prompt tokens: 3"), std::string::npos) << with_stats;
  EXPECT_NE(with_stats.find("decode"), std::string::npos);
  std::string json = run(args + " --json");
  EXPECT_NE(json.find("\"generated_tokens\":24"), std::string::npos) << json;
}

TEST(BenchCli, TableAndJson) {
  int rc = 0;
  std::string table = run("bench -m " + kDemo + " -p 16 -n 4 -r 2 2>/dev/null", &rc);
  EXPECT_EQ(rc, 0) << table;
  EXPECT_NE(table.find("| qwen3_moe |"), std::string::npos) << table;
  EXPECT_NE(table.find("pp16"), std::string::npos);
  EXPECT_NE(table.find("tg4"), std::string::npos);
  std::string json = run("bench -m " + kDemo + " -p 16 -n 4 -r 2 --backend cpu --json 2>/dev/null", &rc);
  auto j = nlohmann::json::parse(json.substr(std::min(json.find('{'), json.size())), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json;
  ASSERT_EQ(j["tests"].size(), 2u);
  EXPECT_GT(j["tests"][0]["tps_mean"].get<double>(), 0);
  // One sample per measured run (the warm-up excluded), and their mean is tps_mean.
  for (const auto& t : j["tests"]) {
    const auto samples = t["samples_ts"].get<std::vector<double>>();
    ASSERT_EQ(samples.size(), 2u) << t;
    EXPECT_NEAR((samples[0] + samples[1]) / 2, t["tps_mean"].get<double>(), 1e-9 * t["tps_mean"].get<double>());
  }
  EXPECT_GT(j["read_bw_gbs"].get<double>(), 0);
  // 15.5 M parameters, of which one embedding row and 4 of 16 experts are used per token
  EXPECT_NEAR(j["params"].get<double>(), 15.49e6, 0.02e6);
  EXPECT_LT(j["params_per_token"].get<double>(), j["params"].get<double>() * 0.5);
  run("bench -m " + kDemo + " -p 100000 2>/dev/null", &rc);
  EXPECT_EQ(rc, 1);
  const std::string bad = run("bench -m " + kDemo + " --backend cuda 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(bad.find("--backend"), std::string::npos) << bad;
  // -d: each run after that many tokens of context (the model's context bounds depth + test)
  const std::string deep = run("bench -m " + kDemo + " -p 4 -n 2 -r 1 -d 20 --json 2>/dev/null", &rc);
  EXPECT_EQ(rc, 0) << deep;
  auto dj = nlohmann::json::parse(deep.substr(std::min(deep.find('{'), deep.size())), nullptr, false);
  ASSERT_FALSE(dj.is_discarded()) << deep;
  EXPECT_EQ(dj["depth"].get<int>(), 20);
  ASSERT_EQ(dj["tests"].size(), 2u);
  EXPECT_EQ(dj["tests"][0]["test"].get<std::string>(), "pp4 @ d20");
  EXPECT_EQ(dj["tests"][1]["test"].get<std::string>(), "tg2 @ d20");
  const std::string too_deep = run("bench -m " + kDemo + " -p 4 -n 2 -d 100000 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(too_deep.find("depth plus test length"), std::string::npos) << too_deep;
  // --profile adds the thread pool's table
  const std::string prof = run("bench -m " + kDemo + " -p 8 -n 2 -r 1 --profile 2>/dev/null", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(prof.find("parallel regions / token"), std::string::npos) << prof;
  EXPECT_NE(prof.find("regions the caller slept in"), std::string::npos) << prof;
}

// --alternate: each test also with a tuning switch flipped, prefill run for run and decode token
// for token; the flipped row carries the paired ratios and their median.
TEST(BenchCli, AlternateMeasuresBothSidesOfASwitch) {
  int rc = 0;
  const std::string json = run("bench -m " + kDemo + " -p 8 -n 4 -r 3 --alternate MOEFLUX_MERGED_ROUTE --json 2>/dev/null", &rc);
  EXPECT_EQ(rc, 0) << json;
  auto j = nlohmann::json::parse(json.substr(std::min(json.find('{'), json.size())), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json;
  ASSERT_EQ(j["tests"].size(), 4u) << json;
  EXPECT_EQ(j["tests"][0]["test"].get<std::string>(), "pp8");
  EXPECT_EQ(j["tests"][1]["test"].get<std::string>(), "pp8 MOEFLUX_MERGED_ROUTE=0");
  EXPECT_EQ(j["tests"][3]["test"].get<std::string>(), "tg4 MOEFLUX_MERGED_ROUTE=0");
  for (int i : {1, 3}) {
    EXPECT_EQ(j["tests"][i - 1]["samples_ts"].size(), 3u);  // a run's t/s per repetition and side
    EXPECT_EQ(j["tests"][i]["samples_ts"].size(), 3u);
    EXPECT_FALSE(j["tests"][i - 1].contains("paired_ratios"));
    auto ratio = j["tests"][i]["paired_ratios"].get<std::vector<double>>();
    // Prefill: a pair per repetition, the runs' t/s in turn; decode: a pair per two tokens.
    ASSERT_EQ(ratio.size(), i == 1 ? 3u : 6u) << json;
    if (i == 1) {
      for (size_t r = 0; r < 3; ++r)
        EXPECT_DOUBLE_EQ(ratio[r], j["tests"][1]["samples_ts"][r].get<double>() / j["tests"][0]["samples_ts"][r].get<double>());
    }
    for (double x : ratio) EXPECT_GT(x, 0.0);
    std::sort(ratio.begin(), ratio.end());
    const double med = ratio.size() % 2 ? ratio[ratio.size() / 2] : 0.5 * (ratio[ratio.size() / 2 - 1] + ratio[ratio.size() / 2]);
    EXPECT_DOUBLE_EQ(j["tests"][i]["paired_ratio_median"].get<double>(), med) << json;
  }
  const std::string table = run("bench -m " + kDemo + " -p 0 -n 2 -r 1 --alternate MOEFLUX_GUIDED 2>/dev/null", &rc);
  EXPECT_EQ(rc, 0) << table;
  EXPECT_NE(table.find("| tg2 MOEFLUX_GUIDED=0 |"), std::string::npos) << table;
  EXPECT_NE(table.find("median ratio"), std::string::npos) << table;
  // An unknown switch is refused before the model loads, naming the ones there are.
  const std::string bad = run("bench -m " + kDemo + " --alternate MOEFLUX_NO_SUCH 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(bad.find("no A/B switch named MOEFLUX_NO_SUCH"), std::string::npos) << bad;
  EXPECT_NE(bad.find("MOEFLUX_MERGED_ATTN_O"), std::string::npos) << bad;
}

// A child in a pseudo-terminal, read until a pattern shows up.
class Pty {
 public:
  explicit Pty(const std::vector<std::string>& argv) {
    pid_ = forkpty(&fd_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      std::vector<char*> a;
      for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      setenv("TERM", "dumb", 1);
      execv(a[0], a.data());
      _exit(127);
    }
  }
  ~Pty() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  void send(const std::string& s) { ASSERT_EQ(write(fd_, s.data(), s.size()), ssize_t(s.size())); }
  // Reads until `re` matches the text seen since the last wait (or 60 s pass).
  std::smatch wait_for(const std::regex& re) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::smatch m;
    while (std::chrono::steady_clock::now() < deadline) {
      if (std::regex_search(seen_, m, re)) {
        last_ = seen_;
        seen_ = m.suffix();
        return m;
      }
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 200) > 0) {
        char buf[4096];
        ssize_t n = read(fd_, buf, sizeof buf);
        if (n <= 0) break;
        seen_.append(buf, size_t(n));
      }
    }
    ADD_FAILURE() << "timed out; output so far:\n" << seen_;
    return m;
  }
  int wait_exit() {
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

 private:
  int fd_ = -1;
  pid_t pid_ = -1;
  std::string seen_, last_;
};

TEST(ChatPty, TwoTurnsSecondPrefillsOnlyNewTokens) {
  Pty p({test::moeflux_exe(), "chat", "-m", kDemo, "-n", "12", "--temperature", "0"});
  const std::regex stats(R"(\[prefilled (\d+) tokens \| generated (\d+) \((\w+)\)[^\]]*context (\d+)\])");
  p.wait_for(std::regex("> "));
  p.send("Tell me about the jury.\r");
  auto m1 = p.wait_for(stats);
  ASSERT_FALSE(m1.empty());
  const int pre1 = std::stoi(m1[1]), ctx1 = std::stoi(m1[4]);
  p.wait_for(std::regex("> "));
  p.send("And then?\r");
  auto m2 = p.wait_for(stats);
  ASSERT_FALSE(m2.empty());
  const int pre2 = std::stoi(m2[1]), gen2 = std::stoi(m2[2]), ctx2 = std::stoi(m2[4]);
  EXPECT_GT(pre1, 5);
  // Turn 2 feeds only the end of turn 1 and the new user message: far fewer tokens than the
  // whole conversation, and the context grows by exactly what was fed and generated.
  EXPECT_GT(pre2, 0);
  EXPECT_LT(pre2, ctx1);
  EXPECT_EQ(ctx2, ctx1 + pre2 + gen2);
  p.wait_for(std::regex("> "));
  p.send("/exit\r");
  EXPECT_EQ(p.wait_exit(), 0);
}

// A chat that fills its context (-c) keeps answering: the oldest turns go, and it says so.
TEST(ChatPty, FullContextDropsTheOldestTurns) {
  Pty p({test::moeflux_exe(), "chat", "-m", kDemo, "-n", "16", "-c", "100", "--temp", "0", "-sys", "Be brief."});
  const std::regex stats(R"(\[prefilled (\d+) tokens \| generated (\d+) \((\w+)\)[^\]]*context (\d+)\])");
  const std::regex until_prompt(R"(([^>]*)> )");  // what comes after the statistics, up to the next prompt
  int dropped = 0;
  p.wait_for(std::regex("> "));
  for (int turn = 0; turn < 6; ++turn) {
    p.send("Tell me about the jury and the house.\r");
    auto m = p.wait_for(stats);
    ASSERT_FALSE(m.empty()) << "turn " << turn;
    EXPECT_LE(std::stoi(m[4]), 100);
    auto after = p.wait_for(until_prompt);
    ASSERT_FALSE(after.empty());
    EXPECT_EQ(after[1].str().find("error"), std::string::npos) << after[1];
    if (std::regex_search(after[1].str(), std::regex(R"(\(context full: the \d+ oldest turns? (was|were) dropped)")))
      ++dropped;
  }
  EXPECT_GT(dropped, 0);
  p.send("/exit\r");
  EXPECT_EQ(p.wait_exit(), 0);
}

}  // namespace
}  // namespace moeflux
