// LoadProgress: silent for loads shorter than its delay, a rewritten line with the time for
// longer ones, closed by a "loaded ... in" line.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <thread>

#include "cli/load_progress.h"

namespace moeflux::cli {
namespace {

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

TEST(LoadProgress, SilentForAQuickLoad) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    LoadProgress p(f, "quick", /*after_s=*/5.0);
    EXPECT_GE(p.finish(), 0.0);
  }
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}

TEST(LoadProgress, UpdatesASlowLoad) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  LoadProgress p(f, "slow-model", /*after_s=*/0.05, /*every_s=*/0.05);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double s = p.finish();
  EXPECT_GE(s, 0.3);
  const std::string out = contents(f);
  EXPECT_NE(out.find("\r\x1b[Kloading slow-model: 0."), std::string::npos) << out;
  EXPECT_NE(out.find("GiB in memory"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\x1b\\[Kloaded slow-model in \\d+\\.\\d s\n$"))) << out;
  EXPECT_EQ(p.finish(), s);  // finish twice: the same time, nothing more printed
  EXPECT_EQ(contents(f), out);
  std::fclose(f);
}

TEST(LoadProgress, NoOutputWithoutATerminal) {
  LoadProgress p(nullptr, "x", 0.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(p.finish(), 0.02);
}

}  // namespace
}  // namespace moeflux::cli
